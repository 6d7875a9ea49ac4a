//! `perf_event_open(2)`: the attribute struct and the call.
//!
//! `measure` counts instructions with it and the unprivileged page profiler samples page
//! faults; both fill a [`Attr`] with the flags below and get an owned file descriptor back.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// `PERF_TYPE_HARDWARE`.
pub const TYPE_HARDWARE: u32 = 0;
/// `PERF_TYPE_SOFTWARE`.
pub const TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_HW_INSTRUCTIONS`.
pub const COUNT_HW_INSTRUCTIONS: u64 = 1;
/// `PERF_COUNT_SW_PAGE_FAULTS`.
pub const COUNT_SW_PAGE_FAULTS: u64 = 2;

/// Bits of [`Attr::flags`] (the kernel's bitfield after `read_format`): `disabled`.
pub const FLAG_DISABLED: u64 = 1 << 0;
/// `inherit`: children count too.
pub const FLAG_INHERIT: u64 = 1 << 1;
/// `exclude_kernel`.
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
/// `exclude_hv`.
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
/// `mmap`: record executable mappings.
pub const FLAG_MMAP: u64 = 1 << 8;
/// `enable_on_exec`.
pub const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;
/// `mmap_data`: record data mappings too.
pub const FLAG_MMAP_DATA: u64 = 1 << 17;
/// `sample_id_all`.
pub const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
/// `mmap2`: mapping records with inode and device.
pub const FLAG_MMAP2: u64 = 1 << 23;
/// `use_clockid`: time samples with [`Attr::clockid`].
pub const FLAG_USE_CLOCKID: u64 = 1 << 25;

/// Bits of [`Attr::sample_type`]: `PERF_SAMPLE_TID`.
pub const SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`.
pub const SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ADDR`: the faulting address.
pub const SAMPLE_ADDR: u64 = 1 << 3;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// `struct perf_event_attr` up to `aux_watermark` (`PERF_ATTR_SIZE_VER5`, 112 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone)]
pub struct Attr {
    /// `type`: [`TYPE_HARDWARE`] or [`TYPE_SOFTWARE`].
    pub kind: u32,
    /// The size of this struct, for the kernel to tell versions apart.
    pub size: u32,
    /// Which event of `kind` ([`COUNT_HW_INSTRUCTIONS`], [`COUNT_SW_PAGE_FAULTS`]).
    pub config: u64,
    /// Sample every this many events (0: count only).
    pub sample_period: u64,
    /// What a sample records: the `SAMPLE_*` bits.
    pub sample_type: u64,
    /// What `read(2)` of the counter returns.
    pub read_format: u64,
    /// The kernel's bitfield: the `FLAG_*` bits.
    pub flags: u64,
    /// Wake a poller after this many samples.
    pub wakeup_events: u32,
    /// Breakpoint type (unused here).
    pub bp_type: u32,
    /// Extension of `config` (unused here).
    pub config1: u64,
    /// Further extension of `config` (unused here).
    pub config2: u64,
    /// Which branches to sample (unused here).
    pub branch_sample_type: u64,
    /// User registers to record with a sample (unused here).
    pub sample_regs_user: u64,
    /// Bytes of user stack to record with a sample (unused here).
    pub sample_stack_user: u32,
    /// The clock of sample times, with [`FLAG_USE_CLOCKID`].
    pub clockid: i32,
    /// Registers at the interrupt to record (unused here).
    pub sample_regs_intr: u64,
    /// AUX area wake-up mark (unused here).
    pub aux_watermark: u32,
    /// Most frames of a call chain (unused here).
    pub sample_max_stack: u16,
    /// Padding, zero.
    pub reserved: u16,
}

impl Attr {
    /// An attribute of `kind` and `config`, with its size filled in.
    pub fn new(kind: u32, config: u64) -> Attr {
        Attr { kind, config, size: std::mem::size_of::<Attr>() as u32, ..Attr::default() }
    }
}

/// Open a close-on-exec event on `pid` (0: this process) and `cpu` (-1: any), in no group.
pub fn open(attr: &Attr, pid: libc::pid_t, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: perf_event_open reads `attr.size` bytes of a fully initialised struct.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const Attr,
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_has_the_kernels_ver5_size() {
        assert_eq!(std::mem::size_of::<Attr>(), 112);
        assert_eq!(Attr::new(TYPE_SOFTWARE, COUNT_SW_PAGE_FAULTS).size, 112);
    }

    #[test]
    fn a_software_counter_opens_on_this_process_where_perf_is_allowed() {
        let mut attr = Attr::new(TYPE_SOFTWARE, COUNT_SW_PAGE_FAULTS);
        attr.flags = FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV;
        match open(&attr, 0, -1) {
            Ok(_) => {}
            // perf_event_paranoid may forbid it; the error must then be the kernel's.
            Err(e) => assert!(matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))),
        }
    }
}
