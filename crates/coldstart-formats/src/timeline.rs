//! The result of `coldstart timeline`: format `coldstart-timeline`, version 1.

use serde::{Deserialize, Serialize};

use crate::Document;

/// Where the time of one start-up went, on one time axis: seconds from just before `execve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Always `coldstart-timeline`.
    pub format: String,
    /// The format's version: 1.
    pub version: u32,
    /// When the run started, seconds since the Unix epoch.
    pub created_unix: u64,
    /// The command traced.
    pub command: Vec<String>,
    /// The cache state the run started in: `cold` (page cache dropped) or `hot`.
    pub cache: String,
    /// The readiness signal, as `measure --ready` takes it.
    pub ready: String,
    /// The emulated device the program's files were read from (`--storage`: `hdd`, `emmc`,
    /// ...); `None` for this machine's own storage. Absent in older files.
    #[serde(default)]
    pub storage: Option<String>,
    /// From just before `execve` to readiness.
    pub wall_s: f64,
    /// Consecutive phases from 0 (`exec`, `loader`, `relocation`, `constructors`, `main`,
    /// ...), each ending where the next begins; time no phase names is the gap to
    /// `wall_s`.
    pub phases: Vec<Phase>,
    /// Time the program's threads spent blocked in uninterruptible sleep (waiting for
    /// storage, mostly), summed over its threads, until readiness.
    pub io_wait_s: f64,
    /// The same as wall time: the union of the blocked intervals of every thread (the time
    /// in which at least one of them waited).
    pub io_wait_wall_s: f64,
    /// Each blocked interval.
    pub waits: Vec<Wait>,
    /// The files the events name (`events[].file` indexes this).
    pub files: Vec<TimelineFile>,
    /// Every page the program faulted, mapped by fault-around, or that was read into the page
    /// cache for it, in time order.
    pub events: Vec<PageEvent>,
    /// Block-layer read and write requests issued during the run, with their completion.
    pub block: Vec<BlockRequest>,
    /// What each file cost, most first.
    pub costs: Vec<FileCost>,
    /// Each module's first and last function touch, from a function profile of the same
    /// command (another run: see `modules_note`).
    pub modules: Vec<ModuleSpan>,
    /// How the module touches were put on this run's axis.
    pub modules_note: Option<String>,
    /// Warnings that name a remedy.
    pub warnings: Vec<String>,
}

/// A named span of the start-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// `exec`, `loader`, `relocation`, `constructors`, `main`, ...
    pub name: String,
    /// Its start, seconds.
    pub start_s: f64,
    /// Its end, seconds.
    pub end_s: f64,
}

/// An interval a thread spent blocked in uninterruptible sleep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// The thread.
    pub pid: i32,
    /// When it blocked, seconds.
    pub start_s: f64,
    /// When it woke, seconds.
    pub end_s: f64,
    /// The file whose page the thread faulted or read last before blocking, if any.
    pub file: Option<usize>,
}

/// A file named by the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineFile {
    /// Empty when no open or mapping named it.
    pub path: String,
    /// `major:minor` of its device, as the kernel named it.
    pub dev: String,
    /// Its inode.
    pub ino: u64,
}

/// A page event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageEvent {
    /// When, seconds.
    pub t_s: f64,
    /// The file (an index into [`Timeline::files`]).
    pub file: usize,
    /// Offset / 4096.
    pub page: u64,
    /// Consecutive pages.
    pub count: u64,
    /// `fault`, `map` (fault-around of cached pages) or `read` (added to the page cache).
    pub kind: String,
    /// The thread it happened in.
    pub pid: i32,
}

/// A block-layer request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockRequest {
    /// The device, `major:minor`.
    pub dev: String,
    /// The first sector (512 bytes).
    pub sector: u64,
    /// Its size.
    pub bytes: u64,
    /// A write (else a read).
    pub write: bool,
    /// When it was issued to the device, seconds.
    pub issue_s: f64,
    /// `None`: not completed before the trace ended.
    pub complete_s: Option<f64>,
}

/// What one file cost the start-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileCost {
    /// The file (an index into [`Timeline::files`]).
    pub file: usize,
    /// Pages read into the page cache for the program.
    pub pages_read: u64,
    /// Page faults on the file.
    pub faults: u64,
    /// Blocked time attributed to the file (the last page event before each wait).
    pub wait_s: f64,
}

/// A module's first and last function touch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleSpan {
    /// The module (executable or library).
    pub path: String,
    /// Its first function touch, seconds.
    pub first_s: f64,
    /// The last of its functions' first touches, seconds.
    pub last_s: f64,
    /// The functions it touched.
    pub functions: u64,
}

impl Timeline {
    /// An empty timeline of `command`.
    pub fn new(command: Vec<String>) -> Timeline {
        Timeline {
            format: Self::FORMAT.into(),
            version: Self::VERSION,
            created_unix: 0,
            command,
            cache: "cold".into(),
            ready: "exit".into(),
            storage: None,
            wall_s: 0.0,
            phases: Vec::new(),
            io_wait_s: 0.0,
            io_wait_wall_s: 0.0,
            waits: Vec::new(),
            files: Vec::new(),
            events: Vec::new(),
            block: Vec::new(),
            costs: Vec::new(),
            modules: Vec::new(),
            modules_note: None,
            warnings: Vec::new(),
        }
    }

    /// The share of the wall time the named phases cover (0 to 1).
    pub fn named_share(&self) -> f64 {
        if self.wall_s <= 0.0 {
            return 0.0;
        }
        let named: f64 = self.phases.iter().map(|p| (p.end_s - p.start_s).max(0.0)).sum();
        (named / self.wall_s).min(1.0)
    }
}

impl Document for Timeline {
    const FORMAT: &'static str = "coldstart-timeline";
    const VERSION: u32 = 1;
}
