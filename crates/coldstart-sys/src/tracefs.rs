//! A tracefs instance of one coldstart process: a ring buffer and event switches of its own,
//! so that its tracing never changes what other tracers (or other coldstarts) see.
//!
//! An instance is off from the moment it exists: the kernel turns a new instance's
//! `tracing_on` on, so until the caller has set its filters (`set_event_pid`) it would record
//! every process's events. [`Instance::create`] turns it off before enabling any event; the
//! caller turns it on when it is ready. On drop it is turned off, its events disabled and its
//! directory removed. An instance left by a killed coldstart is named after that process and
//! removed by the next one ([`remove_stale`]).
//!
//! Each instance holds tracefs mounted ([`Tracefs`]), as does any other user of it (a
//! timeline's uprobes): tracefs is mounted where it is missing by the first user, and
//! unmounted after the last one of the process is done.

use std::path::{Path, PathBuf};

mod mount;

pub use mount::{Tracefs, SOURCE};

/// Where tracefs is mounted.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// A tracefs file that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// The file or directory.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for TraceError {}

fn err(path: &Path, e: impl std::fmt::Display) -> TraceError {
    TraceError { path: path.to_owned(), message: e.to_string() }
}

/// Whether tracefs may be mounted where it is missing ([`Tracefs::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mount {
    /// Mount it at [`TRACEFS`] (unmounted again after its last user: [`Tracefs`]).
    IfMissing,
    /// Fail, saying how to mount it.
    Never,
}

/// A tracefs instance: off until turned on, removed on drop.
#[derive(Debug)]
pub struct Instance {
    dir: PathBuf,
    events: Vec<String>,
    /// Dropped after the instance is removed: tracefs stays mounted until then.
    _tracefs: Tracefs,
}

impl Instance {
    /// Create the instance `name` with a ring buffer of `buffer_kb` per CPU, the monotonic
    /// clock (that of [`crate::monotonic_ns`]) and `events` (`group/event`) enabled, tracing
    /// off; tracefs is held ([`Tracefs::hold`] with `mount`) while it lives.
    pub fn create(
        name: &str,
        events: &[&str],
        buffer_kb: u32,
        mount: Mount,
    ) -> Result<Instance, TraceError> {
        let tracefs = Tracefs::hold(mount)?;
        let dir = tracefs.path("instances").join(name);
        std::fs::create_dir(&dir).map_err(|e| err(&dir, e))?;
        let mut instance = Instance { dir, events: Vec::new(), _tracefs: tracefs };
        instance.write("tracing_on", "0")?;
        instance.write("buffer_size_kb", &buffer_kb.to_string())?;
        instance.write("trace_clock", "mono")?;
        for e in events {
            instance.write(&format!("events/{e}/enable"), "1")?;
            instance.events.push((*e).to_owned());
        }
        Ok(instance)
    }

    /// The instance's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write `value` to the instance's `file` (`tracing_on`, `set_event_pid`, ...).
    pub fn write(&self, file: &str, value: &str) -> Result<(), TraceError> {
        let path = self.dir.join(file);
        std::fs::write(&path, value).map_err(|e| err(&path, e))
    }

    /// The recorded text (`trace`).
    pub fn read(&self) -> Result<String, TraceError> {
        let path = self.dir.join("trace");
        std::fs::read_to_string(&path).map_err(|e| err(&path, e))
    }

    /// Events the ring buffer dropped (0: the trace is complete).
    pub fn lost(&self) -> u64 {
        let Ok(cpus) = std::fs::read_dir(self.dir.join("per_cpu")) else { return 0 };
        cpus.flatten()
            .filter_map(|c| std::fs::read_to_string(c.path().join("stats")).ok())
            .map(|s| {
                s.lines()
                    .filter_map(|l| l.strip_prefix("overrun: "))
                    .filter_map(|v| v.trim().parse::<u64>().ok())
                    .sum::<u64>()
            })
            .sum()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("tracing_on"), "0");
        for e in &self.events {
            let _ = std::fs::write(self.dir.join("events").join(e).join("enable"), "0");
        }
        let _ = std::fs::write(self.dir.join("events/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Remove the instances whose name is `prefix`, an owner's pid and optionally `-suffix`,
/// when the owner is gone. An instance removed while it traces stops tracing with it. Call it
/// holding [`Tracefs`]: instances outlive an unmount, and are seen only where it is mounted.
pub fn remove_stale(prefix: &str) {
    let Ok(dir) = std::fs::read_dir(Path::new(TRACEFS).join("instances")) else { return };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix) else { continue };
        let pid = rest.split('-').next().unwrap_or("");
        if pid.parse::<u32>().is_ok_and(|p| !crate::pid_alive(p)) {
            let _ = std::fs::write(entry.path().join("tracing_on"), "0");
            let _ = std::fs::write(entry.path().join("events/enable"), "0");
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mount::tests::{in_fresh_namespace, source};
    use super::*;

    #[test]
    fn a_new_instance_is_off_and_goes_with_its_events() {
        in_fresh_namespace(
            "tracefs::tests::a_new_instance_is_off_and_goes_with_its_events",
            || {
                let held = Tracefs::hold(Mount::IfMissing).unwrap();
                let name = format!("coldstart-sys-test-{}", std::process::id());
                let instance =
                    Instance::create(&name, &["sched/sched_process_fork"], 64, Mount::Never)
                        .unwrap();
                let read = |f: &str| std::fs::read_to_string(instance.dir().join(f)).unwrap();
                assert_eq!(read("tracing_on").trim(), "0", "off until the caller turns it on");
                assert_eq!(read("events/sched/sched_process_fork/enable").trim(), "1");
                assert_eq!(
                    read("trace_clock").split('[').nth(1).and_then(|c| c.split(']').next()),
                    Some("mono")
                );
                // Nothing is recorded while it is off.
                std::process::Command::new("true").status().unwrap();
                assert!(!instance.read().unwrap().contains("sched_process_fork:"));
                let dir = instance.dir().to_owned();
                drop(instance);
                assert!(held.path("instances").is_dir() && !dir.exists());
            },
        );
    }

    #[test]
    fn an_instance_where_tracefs_is_missing_mounts_it_and_leaves_nothing() {
        in_fresh_namespace(
            "tracefs::tests::an_instance_where_tracefs_is_missing_mounts_it_and_leaves_nothing",
            || {
                let name = format!("coldstart-sys-test-{}", std::process::id());
                let program = Instance::create(&name, &[], 64, Mount::IfMissing).unwrap();
                let block =
                    Instance::create(&format!("{name}-block"), &[], 64, Mount::IfMissing).unwrap();
                assert_eq!(source().as_deref(), Some(SOURCE));
                drop(program);
                assert!(block.dir().is_dir(), "the other instance's tracefs stays mounted");
                drop(block);
                assert_eq!(source(), None, "unmounted with the last instance");
                // Instances outlive an unmount: none of ours is left in the kernel.
                let held = Tracefs::hold(Mount::IfMissing).unwrap();
                assert!(!held.path("instances").join(&name).exists());
                assert!(!held.path("instances").join(format!("{name}-block")).exists());
            },
        );
    }

    #[test]
    fn only_instances_of_gone_owners_are_stale() {
        in_fresh_namespace("tracefs::tests::only_instances_of_gone_owners_are_stale", || {
            let prefix = "coldstart-sys-stale-";
            let mine = Instance::create(
                &format!("{prefix}{}-block", std::process::id()),
                &[],
                64,
                Mount::IfMissing,
            )
            .unwrap();
            // A pid above the kernel's pid_max limit (4,194,304) is never alive.
            let gone = Path::new(TRACEFS).join("instances").join(format!("{prefix}4194305"));
            std::fs::create_dir(&gone).unwrap();
            remove_stale(prefix);
            assert!(!gone.exists(), "the instance of a gone owner is removed");
            assert!(mine.dir().exists(), "a live owner's instance is kept");
        });
    }
}
