//! The ring buffer of a perf event, one per CPU: opened and mapped as the perf ABI describes,
//! and drained record by record. The page-fault sampler (`perf`) and the CPU sampler (`cpu`)
//! read their samples through it.

use std::os::fd::IntoRawFd;
use std::sync::atomic::{fence, Ordering};

use coldstart_sys::perf;

use crate::page_files::PagesError;

/// Data pages per CPU ring (a power of two; unprivileged users may lock ~516 KiB in all).
const DATA_PAGES: usize = 32;
pub(crate) const PAGE: usize = 4096;
pub(crate) const PERF_RECORD_MMAP2: u32 = 10;
pub(crate) const PERF_RECORD_SAMPLE: u32 = 9;
pub(crate) const PERF_RECORD_LOST: u32 = 2;
pub(crate) struct Ring {
    fd: i32,
    base: *mut u8,
    len: usize,
}

// SAFETY: the ring's mapping and descriptor belong to the Ring alone; it is drained by one
// thread at a time (the CPU sampler moves its rings into its draining thread).
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping and closing what `open` created.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

impl Ring {
    /// One ring per CPU: the kernel refuses to map an inherited per-task event, and
    /// inheritance is what covers the threads and children of the program.
    pub(crate) fn open(pid: i32, cpu: i32) -> Result<Ring, PagesError> {
        let mut attr = perf::Attr::new(perf::TYPE_SOFTWARE, perf::COUNT_SW_PAGE_FAULTS);
        attr.sample_period = 1;
        attr.sample_type = perf::SAMPLE_TID | perf::SAMPLE_TIME | perf::SAMPLE_ADDR;
        attr.flags = perf::FLAG_DISABLED
            | perf::FLAG_INHERIT
            | perf::FLAG_EXCLUDE_KERNEL
            | perf::FLAG_EXCLUDE_HV
            | perf::FLAG_MMAP
            | perf::FLAG_ENABLE_ON_EXEC
            | perf::FLAG_MMAP_DATA
            | perf::FLAG_SAMPLE_ID_ALL
            | perf::FLAG_MMAP2
            | perf::FLAG_USE_CLOCKID;
        attr.clockid = libc::CLOCK_MONOTONIC;
        Ring::open_with(&attr, pid, cpu)
    }

    /// A ring for the event `attr` of `pid` on `cpu`.
    pub(crate) fn open_with(attr: &perf::Attr, pid: i32, cpu: i32) -> Result<Ring, PagesError> {
        let fd = perf::open(attr, pid, cpu).map(IntoRawFd::into_raw_fd).map_err(|e| {
            PagesError::Perf(format!(
                "perf_event_open: {e} (check /proc/sys/kernel/perf_event_paranoid <= 2, or run as root for tracefs)"
            ))
        })?;
        let len = (1 + DATA_PAGES) * PAGE;
        // SAFETY: mapping the event's ring buffer as the perf ABI describes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing the descriptor we opened.
            unsafe { libc::close(fd) };
            return Err(PagesError::Perf(format!("mmap of the perf ring buffer: {e}")));
        }
        Ok(Ring { fd, base: base.cast(), len })
    }

    /// Copy out every complete record written so far and free their space.
    pub(crate) fn drain(&self, out: &mut Vec<Vec<u8>>) {
        let size = DATA_PAGES * PAGE;
        // SAFETY: data_head (offset 1024) and data_tail (1032) of perf_event_mmap_page; the
        // data area starts one page in. Reads of head are followed by an acquire fence and
        // the tail is written after the records are copied, as the perf ABI requires.
        unsafe {
            let head_ptr = self.base.add(1024) as *const u64;
            let tail_ptr = self.base.add(1032) as *mut u64;
            let head = std::ptr::read_volatile(head_ptr);
            fence(Ordering::Acquire);
            let mut tail = std::ptr::read_volatile(tail_ptr);
            let data = self.base.add(PAGE);
            while tail + 8 <= head {
                let at = |off: u64| *data.add(((tail + off) as usize) % size);
                let rec_size = u16::from_ne_bytes([at(6), at(7)]) as u64;
                if rec_size < 8 || tail + rec_size > head {
                    break;
                }
                let rec: Vec<u8> = (0..rec_size).map(at).collect();
                out.push(rec);
                tail += rec_size;
            }
            fence(Ordering::Release);
            std::ptr::write_volatile(tail_ptr, tail);
        }
    }
}
