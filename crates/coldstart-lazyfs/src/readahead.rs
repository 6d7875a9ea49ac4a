//! What the kernel's read-ahead asks a mount for beyond the hot set, for the model.
//!
//! The hot set holds the pages a workload touched. With a read-ahead larger than a page, the
//! kernel does not ask for a touched page alone: a page fault reads the window of `readahead`
//! bytes around it (read-around: half before, half after), a `read` the window after it. The
//! chunks in that window that are neither hot nor cached are fetched on demand, and the page
//! that was touched waits for them: one more round trip for that read, and their bytes on the
//! link. A read whose window the kernel has read already asks for nothing. So a larger
//! read-ahead, which saves round trips where every chunk is a miss (`paged` without a hot set),
//! costs round trips and bytes where the hot set would have sufficed (Node.js with
//! `--readahead 128k`: 1,532 reads outside its hot set and 32.5 MB).

use std::collections::HashSet;

use coldstart_bundle::{Manifest, Sha256Hex};

use crate::model::ReadAhead;

/// Bytes of a page: a read-ahead of this or less reads only the touched page.
const PAGE: u64 = 4096;

/// The kernel reads that ask for chunks outside the hot set when a program reads every hot
/// piece of `manifest` with `readahead` bytes of read-ahead, and those chunks (neither hot nor
/// `cached`, each counted once).
pub(crate) fn beyond_hot_set(
    manifest: &Manifest,
    readahead: u32,
    cached: impl Fn(&Sha256Hex) -> bool,
) -> ReadAhead {
    let r = u64::from(readahead);
    let mut out = ReadAhead::default();
    if r <= PAGE {
        return out;
    }
    let hot: HashSet<(&str, usize)> =
        manifest.hot.chunks.iter().map(|c| (c.path.as_str(), c.index)).collect();
    let mut counted = HashSet::new();
    for e in &manifest.files {
        let is_hot = |i: usize| hot.contains(&(e.path.as_str(), i));
        // The file offset up to which the kernel has read.
        let mut covered = 0;
        for c in (0..e.chunks.len()).filter(|&i| is_hot(i)).map(|i| &e.chunks[i]) {
            if c.offset + c.length <= covered {
                continue;
            }
            let start = c.offset.saturating_sub(r / 2).max(covered);
            let end = (c.offset.saturating_sub(r / 2) + r).max(c.offset + c.length).min(e.size);
            let first = e.chunks.partition_point(|d| d.offset + d.length <= start);
            let mut fetched = 0;
            for (j, d) in e.chunks.iter().enumerate().skip(first) {
                if d.offset >= end {
                    break;
                }
                if !is_hot(j) && !cached(&d.sha256) && counted.insert(&d.sha256) {
                    fetched += 1;
                    out.bytes += d.stored_len();
                }
            }
            if fetched > 0 {
                out.reads += 1;
                out.chunks += fetched;
            }
            covered = end;
        }
    }
    out
}

impl ReadAhead {
    /// In words, for `predict`.
    pub fn summary(&self) -> String {
        if self.reads == 0 {
            return "the read-ahead asks for nothing beyond the hot set".into();
        }
        format!(
            "the read-ahead asks for {} ({}) beyond the hot set, in {} that wait a round trip \
             each",
            coldstart_units::count(self.chunks, "chunk"),
            coldstart_units::bytes(self.bytes),
            coldstart_units::count(self.reads, "read"),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use coldstart_bundle::{Chunk, ChunkRef, Entry, EntryKind, HotSet};

    use super::*;
    use crate::model::{predict, LinkEstimate, Params, Shape};
    use crate::strategy::Strategy;

    fn h(n: usize) -> Sha256Hex {
        Sha256Hex::new(format!("{n:064x}")).unwrap()
    }

    /// One file of 64 chunks of 4 KiB; the hot pieces are chunks 8, 9 and 40.
    fn manifest() -> Manifest {
        let chunks: Vec<Chunk> = (0..64)
            .map(|i| Chunk {
                offset: i as u64 * 4096,
                length: 4096,
                sha256: h(i),
                stored: None,
                object: Some(0),
                at: i as u64 * 4096,
            })
            .collect();
        let entry = Entry {
            path: "bin/app".into(),
            kind: EntryKind::File,
            mode: 0o755,
            size: 64 * 4096,
            target: None,
            chunks,
            sha256: Some(h(999)),
            mtime: 0,
            mtime_nsec: 0,
        };
        Manifest {
            format: coldstart_bundle::FORMAT.into(),
            version: coldstart_bundle::VERSION,
            chunk_size: 4096,
            compression: Default::default(),
            files: vec![entry],
            objects: Vec::new(),
            hot: HotSet {
                offset: 0,
                size: 3 * 4096,
                chunks: [8, 9, 40].map(|index| ChunkRef { path: "bin/app".into(), index }).to_vec(),
            },
        }
    }

    #[test]
    fn a_page_of_read_ahead_asks_for_nothing_beyond_the_hot_set() {
        let m = manifest();
        assert_eq!(beyond_hot_set(&m, 4096, |_| false), ReadAhead::default());
    }

    #[test]
    fn a_window_around_each_hot_piece_brings_its_neighbours_once() {
        let m = manifest();
        // 32 KiB around chunk 8: chunks 4 to 11, of which 8 and 9 are hot and 9 is in the
        // window already; around chunk 40: chunks 36 to 43.
        let got = beyond_hot_set(&m, 32 * 1024, |_| false);
        assert_eq!(got, ReadAhead { reads: 2, chunks: 6 + 7, bytes: 13 * 4096 });
        // A larger read-ahead: more chunks, the same two reads.
        let big = beyond_hot_set(&m, 128 * 1024, |_| false);
        assert_eq!((big.reads, big.chunks), (2, 30 + 23), "{big:?}");
        // Cached chunks are not fetched; a read that finds all its window cached waits for
        // nothing.
        let cached = beyond_hot_set(&m, 32 * 1024, |c| *c != h(4));
        assert_eq!(cached, ReadAhead { reads: 1, chunks: 1, bytes: 4096 });
    }

    /// Each strategy's prediction for `m` with nothing cached, 4 connections, on 8 Mbit/s and
    /// 50 ms, with `readahead`: what `predict --readahead` and `auto` compute.
    fn predicted(m: &Manifest, readahead: u32) -> Vec<(Strategy, f64)> {
        let mut shape = Shape::of(m, |_| false);
        shape.ahead = beyond_hot_set(m, readahead, |_| false);
        let link = LinkEstimate::given(8e6, Duration::from_millis(50));
        let p = Params { connections: 4, readahead, local: Some(Duration::from_millis(20)) };
        predict(&shape, &link, &p).into_iter().map(|p| (p.strategy, p.ms)).collect()
    }

    fn ms(p: &[(Strategy, f64)], s: Strategy) -> f64 {
        p.iter().find(|x| x.0 == s).unwrap().1
    }

    #[test]
    fn the_prediction_follows_the_mounts_read_ahead() {
        // With a hot set, a smaller read-ahead asks for less beyond it: fewer fetches, less
        // time, for every strategy that starts before all is fetched.
        let m = manifest();
        let (small, large) = (predicted(&m, 4096), predicted(&m, 128 * 1024));
        for s in [Strategy::Paged, Strategy::Reordered, Strategy::ReorderedPaged, Strategy::Stream]
        {
            assert!(ms(&small, s) < ms(&large, s), "{s}: {small:?} {large:?}");
        }
        // Two reads of 53 chunks beyond the hot set: two round trips and 217 KB at 1 MB/s.
        let extra = ms(&large, Strategy::Reordered) - ms(&small, Strategy::Reordered);
        assert!((extra - (2.0 * 50.0 + 53.0 * 4096.0 / 1e6 * 1e3)).abs() < 1e-6, "{extra}");
        assert_eq!(ms(&small, Strategy::Original), ms(&large, Strategy::Original));
        // Without a hot set every chunk is a miss: a smaller read-ahead asks for fewer of
        // them in one read, and makes more round trips.
        let mut bare = manifest();
        bare.hot = HotSet::default();
        let (small, large) = (predicted(&bare, 4096), predicted(&bare, 128 * 1024));
        assert!(ms(&small, Strategy::Paged) > ms(&large, Strategy::Paged), "{small:?} {large:?}");
    }
}
