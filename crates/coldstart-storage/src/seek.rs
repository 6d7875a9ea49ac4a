//! A hard disk's service time: seek by distance, rotation, transfer, and the drive's own
//! read-ahead into its buffer.
//!
//! blk-throttle charges every request one IOPS slot wherever it lies, so a prefetcher's sorted
//! sweep over many small adjacent files costs it as much as the same reads scattered. A disk
//! does not work that way: a request that starts where the last one ended (or in what the drive
//! went on reading into its buffer after it) costs only its transfer; one a little further on
//! the same track costs the time the platter takes to pass the gap; anything else pays a seek
//! that grows with the distance and, on average, half a revolution. [`DiskHead`] keeps the
//! state that decides which case a request is and returns its service time, so the disk served
//! by the `hdd-seek` profile's FUSE server can be tested without a device.
//!
//! The figures are a 7200 rpm desktop disk's published ones (see `docs/storage.md`): 1 ms from
//! one track to the next, 8.5 ms average seek, 120 MB/s. The seek curve is the classic
//! `settle + k * sqrt(distance)`; its full stroke follows from the average (over uniformly
//! random pairs of positions the mean of `sqrt(distance / stroke)` is 8/15). The emulated device
//! stands for the whole disk: a seek across it is a full stroke.

use std::time::Duration;

use coldstart_formats::measure::SeekModel;

/// How a request was served (for the log and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// It started in what the drive had read or was reading: transfer only.
    Buffer,
    /// It started a little ahead on the same track: the platter passed the gap.
    Track,
    /// A seek and half a revolution before the transfer.
    Seek,
}

/// The drive's state between requests: where the head is and what its buffer holds.
#[derive(Debug, Clone)]
pub struct DiskHead {
    model: SeekModel,
    size: u64,
    /// Start of the contiguous range read since the last seek (the buffer keeps its last
    /// track).
    buffer_start: u64,
    /// How far the head had read when the last request was done.
    media_pos: u64,
    /// End of the last request: the drive reads ahead at most a track past it.
    last_end: u64,
    /// When the last request was done (time since the disk started).
    free_at: Duration,
}

impl DiskHead {
    /// A drive with `size` bytes, its head at the start, idle.
    pub fn new(model: SeekModel, size: u64) -> Self {
        Self { model, size, buffer_start: 0, media_pos: 0, last_end: 0, free_at: Duration::ZERO }
    }

    /// When the drive is done with what it was given (time since the disk started).
    pub fn free_at(&self) -> Duration {
        self.free_at
    }

    /// Serve a read of `len` bytes at `offset` that arrives at `now` (time since the disk
    /// started): when it is done, and how. Requests are served one at a time, in the order
    /// they are given (the disk's queue chooses which: `disk.rs`); one given while the drive is
    /// busy starts when it is free.
    pub fn read(&mut self, offset: u64, len: u64, now: Duration) -> (Duration, Served) {
        let start = now.max(self.free_at);
        // After the last request the drive went on reading, up to a track past its end.
        let idle = start - self.free_at;
        let ahead_limit =
            self.last_end.saturating_add(self.model.track_bytes()).max(self.media_pos);
        let streamed = (self.model.media_bps as u128 * idle.as_nanos() / 1_000_000_000) as u64;
        let pos = self.media_pos.saturating_add(streamed).min(ahead_limit);
        let end = offset.saturating_add(len);
        // The buffer keeps the last track read, not everything since the last seek.
        let kept = self.buffer_start.max(pos.saturating_sub(self.model.track_bytes()));
        let (cost, served) = if offset >= kept && offset <= pos {
            (self.model.transfer(end.saturating_sub(pos)), Served::Buffer)
        } else if offset > pos && offset - pos < self.model.track_bytes() {
            (self.model.transfer(end - pos), Served::Track)
        } else {
            let seek = self.model.seek(offset.abs_diff(pos), self.size);
            self.buffer_start = offset;
            (seek + self.model.revolution() / 2 + self.model.transfer(len), Served::Seek)
        };
        self.media_pos = match served {
            Served::Seek => end,
            _ => end.max(pos),
        };
        self.last_end = end;
        self.free_at = start + cost;
        (self.free_at, served)
    }

    /// A write of `len` bytes at `offset`: not timed (the emulation measures reads), but the
    /// head is no longer where the last read left it.
    pub fn wrote(&mut self, offset: u64, len: u64) {
        self.buffer_start = offset;
        self.media_pos = offset.saturating_add(len);
        self.last_end = self.media_pos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }

    /// Serve `reads` back to back (each arriving when the last is done); the total time.
    fn serve(head: &mut DiskHead, reads: &[(u64, u64)]) -> Duration {
        let mut now = Duration::ZERO;
        for &(o, l) in reads {
            now = head.read(o, l, now).0;
        }
        now
    }

    #[test]
    fn a_random_read_pays_seek_rotation_and_transfer() {
        let m = SeekModel::desktop_7200();
        let mut head = DiskHead::new(m, 1 << 30);
        let (done, how) = head.read(512 * MIB, 4096, Duration::ZERO);
        assert_eq!(how, Served::Seek);
        let want = m.seek(512 * MIB, 1 << 30) + m.revolution() / 2 + m.transfer(4096);
        assert_eq!(done, want);
        // Half the device away from the start: t2t + 14.06 * sqrt(1/2) + 4.17 + 0.03 ms.
        assert!((ms(done) - 15.14).abs() < 0.05, "{done:?}");
    }

    #[test]
    fn the_next_read_in_line_costs_only_its_transfer() {
        let m = SeekModel::desktop_7200();
        let mut head = DiskHead::new(m, 1 << 30);
        let first = head.read(100 * MIB, 4096, Duration::ZERO).0;
        let (done, how) = head.read(100 * MIB + 4096, 8192, first);
        assert_eq!(how, Served::Buffer);
        assert_eq!(done - first, m.transfer(8192));
        // After a pause the drive has read ahead: the next page is already in its buffer.
        let (later, how) = head.read(100 * MIB + 12288, 4096, done + Duration::from_millis(5));
        assert_eq!((later, how), (done + Duration::from_millis(5), Served::Buffer));
    }

    #[test]
    fn a_small_gap_ahead_costs_the_platter_passing_it_and_a_far_one_a_seek() {
        let m = SeekModel::desktop_7200();
        let mut head = DiskHead::new(m, 1 << 30);
        let t = head.read(0, 4096, Duration::ZERO).0;
        let (done, how) = head.read(4096 + 65536, 4096, t);
        assert_eq!(how, Served::Track);
        assert_eq!(done - t, m.transfer(65536 + 4096));
        let (far, how) = head.read(300 * MIB, 4096, done);
        assert_eq!(how, Served::Seek);
        assert!(far - done > m.revolution() / 2 + Duration::from_millis(1));
        // Going back before the buffer's start seeks too.
        assert_eq!(head.read(0, 4096, far).1, Served::Seek);
    }

    #[test]
    fn the_drive_reads_ahead_at_most_a_track() {
        let m = SeekModel::desktop_7200();
        let mut head = DiskHead::new(m, 1 << 30);
        let t = head.read(0, 4096, Duration::ZERO).0;
        // A long pause: the buffer holds a track past the request, not more.
        let idle = t + Duration::from_secs(1);
        let track = m.track_bytes();
        let mut inside = head.clone();
        assert_eq!(inside.read(4096 + track - 8192, 4096, idle), (idle, Served::Buffer));
        let (done, how) = head.read(4096 + track + 65536, 4096, idle);
        assert_eq!(how, Served::Track);
        assert_eq!(done - idle, m.transfer(65536 + 4096));
    }

    #[test]
    fn a_sorted_sweep_costs_less_than_the_same_reads_shuffled() {
        // 66 small files one after another, with a few pages between them (a prefetcher's
        // sweep over a package's .pyc files), then the same reads in a scattered order.
        let mut reads = Vec::new();
        let mut at = 64 * MIB;
        for i in 0..66u64 {
            let len = 4096 * (1 + i * 7 % 16);
            reads.push((at, len));
            at += len + 4096 * (i % 3);
        }
        let m = SeekModel::desktop_7200();
        let sorted = serve(&mut DiskHead::new(m, 1 << 30), &reads);
        let mut shuffled = reads.clone();
        let n = shuffled.len();
        for i in 0..n {
            shuffled.swap(i, (i * 37 + 11) % n);
        }
        let scattered = serve(&mut DiskHead::new(m, 1 << 30), &shuffled);
        // Sorted: one seek and the transfer of 2.6 MB; shuffled: a seek for every step
        // further than the drive's buffer and track reach.
        assert!(sorted < Duration::from_millis(35), "{sorted:?}");
        assert!(scattered > sorted * 4, "{scattered:?} against {sorted:?}");
    }

    #[test]
    fn a_request_arriving_while_the_drive_is_busy_waits() {
        let m = SeekModel::desktop_7200();
        let mut head = DiskHead::new(m, 1 << 30);
        let first = head.read(10 * MIB, 4096, Duration::ZERO).0;
        let (done, _) = head.read(10 * MIB + 4096, 4096, Duration::ZERO);
        assert_eq!(done, first + m.transfer(4096));
    }
}
