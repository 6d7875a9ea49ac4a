//! Starting and watching a program, written once for every stage that does it.
//!
//! `measure`, `profile`, `timeline` and `launch` each start a program and watch what it does;
//! the pieces they share live here, with one behaviour each:
//!
//! - [`find_program`]: a command's name to the file `execvp` would run, or a typed reason
//!   ([`LookupError`]) why nothing would run;
//! - [`mountinfo`]: the mounts of `/proc/self/mountinfo`, every octal escape undone;
//! - [`memory_file_system`]: whether a file lives in memory rather than on storage, so that
//!   nothing evicts, copies or reads it ahead ([`shared_memory_device`]: where `memfd`s live);
//! - [`maps`]: the files a process maps (`/proc/PID/maps`) and holds open (`/proc/PID/fd`),
//!   and the processes of a group;
//! - [`fanotify`]: being told of every open on the file systems with a page cache, as it
//!   happens, with the file opened;
//! - [`cancel`]: the one way a command ends on `SIGINT`, `SIGTERM` or `SIGHUP`: the signal is
//!   noted, the work returns through its guards, and the binary exits with 128 plus it;
//! - [`forward`]: passing the other signals on to a command, and starting one with no signal
//!   blocked or in a session of its own;
//! - [`held`]: starting a program held before its `execve` ([`Spawner`], [`Held`]): hooks in
//!   the child (a cgroup, a mount namespace, `PTRACE_TRACEME`), a process group of its own,
//!   the go and exec-error pipes, a pidfd, and kill-and-reap on drop.
//!
//! Nothing here prints or exits: errors carry their [`coldstart_error::Category`] and the
//! binary says what to do.
//!
//! ```
//! let sh = coldstart_process::find_program("sh").unwrap();
//! assert!(sh.ends_with("sh"));
//! assert_eq!(
//!     coldstart_process::find_program("/nonexistent/tool").unwrap_err().reason(),
//!     "does not exist"
//! );
//!
//! let mounts = coldstart_process::mountinfo::parse(
//!     r"36 25 7:3 / /mnt/my\040disk rw,noatime shared:1 - ext4 /dev/loop3 rw",
//! );
//! assert_eq!(mounts[0].point, std::path::Path::new("/mnt/my disk"));
//! ```

pub mod cancel;
pub mod fanotify;
pub mod forward;
pub mod held;
pub mod maps;
mod memory;
pub mod mountinfo;
mod path;

pub use held::{BeforeExec, Held, Hold, SpawnError, Spawner};
pub use memory::{memory_file_system, shared_memory_device};
pub use path::{find_program, search_path, LookupError};

/// A file as the kernel names it in page events and `/proc/PID/maps`: (major, minor, inode).
pub type FileKey = (u32, u32, u64);
