//! The kernel's tracepoints for one run: tracefs instances of the timeline's own, uprobes at
//! the program's entry point and `main`, and the parser of what they record.
//!
//! Two instances: one filtered to the program's process tree (`set_event_pid` with
//! `event-fork`) for its page events, system calls, scheduling and uprobe hits; one unfiltered
//! for the block layer's request issue and completion, which the kernel records in whatever
//! context submits or completes a request (a worker thread, an interrupt), and which are
//! matched to the program afterwards by the sectors of the bios it queued. Both are removed
//! on drop, then the uprobes; what a killed coldstart left is removed by the next timeline.
//! Each holds tracefs ([`Tracefs`]): mounted where it is missing, unmounted after the last.

use std::io::Write;
use std::path::Path;

use crate::TimelineError;

use coldstart_sys::tracefs::{Instance, Mount, Tracefs};

/// Ring buffer of each instance, per CPU.
const BUFFER_KB: u32 = 32768;
/// Prefix of this crate's instances and uprobe groups, followed by the owner's pid.
const PREFIX: &str = "coldstart-timeline-";
const GROUP_PREFIX: &str = "coldstart_tl_";

/// Events of the program's own instance.
const PROGRAM_EVENTS: &[&str] = &[
    "filemap/mm_filemap_fault",
    "filemap/mm_filemap_map_pages",
    "filemap/mm_filemap_add_to_page_cache",
    "block/block_bio_queue",
    "sched/sched_switch",
    "sched/sched_wakeup",
    "sched/sched_process_exec",
    "sched/sched_process_fork",
    "sched/sched_process_exit",
    "syscalls/sys_enter_execve",
    "syscalls/sys_exit_execve",
    "syscalls/sys_enter_mmap",
    "syscalls/sys_exit_mmap",
    "syscalls/sys_enter_mprotect",
];

/// Events of the unfiltered instance.
const BLOCK_EVENTS: &[&str] = &["block/block_rq_issue", "block/block_rq_complete"];

/// Uprobes at file offsets of the program, in a group of their own; removed on drop.
pub(crate) struct Uprobes {
    group: String,
    names: Vec<String>,
    tracefs: Tracefs,
}

fn uprobe_events(tracefs: &Tracefs, line: &str) -> std::io::Result<()> {
    // Appending: writing without O_APPEND would remove every other user's uprobes.
    let mut f = std::fs::OpenOptions::new().append(true).open(tracefs.path("uprobe_events"))?;
    f.write_all(line.as_bytes())
}

impl Uprobes {
    /// Define `name` at `offset` of `path` for each given; those the kernel refuses are left
    /// out and named in the result's second part.
    fn define(tracefs: Tracefs, path: &Path, probes: &[(&str, u64)]) -> (Uprobes, Vec<String>) {
        let group = format!("{GROUP_PREFIX}{}", std::process::id());
        let mut u = Uprobes { group, names: Vec::new(), tracefs };
        let mut refused = Vec::new();
        for (name, offset) in probes {
            let line = format!("p:{}/{name} {}:{offset:#x}\n", u.group, path.display());
            match uprobe_events(&u.tracefs, &line) {
                Ok(()) => u.names.push((*name).to_owned()),
                Err(e) => refused.push(format!("{name} at {offset:#x} of {}: {e}", path.display())),
            }
        }
        (u, refused)
    }

    /// Enable them in `instance`.
    fn enable(&self, instance: &Instance) -> Result<(), TimelineError> {
        for n in &self.names {
            instance.write(&format!("events/{}/{n}/enable", self.group), "1")?;
        }
        Ok(())
    }
}

impl Drop for Uprobes {
    /// Once no instance uses them (the kernel refuses to remove an enabled uprobe).
    fn drop(&mut self) {
        for n in &self.names {
            let _ = uprobe_events(&self.tracefs, &format!("-:{}/{n}\n", self.group));
        }
    }
}

/// The instances of one run, and its uprobes. Dropped in this order: the instances (which
/// disable every event of theirs, the uprobes too), then the uprobes, whatever path the run
/// ends on; the last of them lets tracefs go.
pub(crate) struct Tracing {
    pub(crate) program: Instance,
    pub(crate) block: Instance,
    uprobes: Option<Uprobes>,
}

impl Tracing {
    /// Create both instances (tracing off), after removing what killed timelines left;
    /// tracefs is mounted where it is missing.
    pub(crate) fn create() -> Result<Tracing, TimelineError> {
        let tracefs = Tracefs::hold(Mount::IfMissing)?;
        remove_stale(&tracefs);
        let me = std::process::id();
        let program =
            Instance::create(&format!("{PREFIX}{me}"), PROGRAM_EVENTS, BUFFER_KB, Mount::Never)?;
        program.write("options/event-fork", "1")?;
        let block = Instance::create(
            &format!("{PREFIX}{me}-block"),
            BLOCK_EVENTS,
            BUFFER_KB,
            Mount::Never,
        )?;
        Ok(Tracing { program, block, uprobes: None })
    }

    /// Define uprobes at `probes` (name, file offset) of `path` and enable them in the
    /// program's instance; the kernel's refusals are returned, one line each.
    pub(crate) fn probe(
        &mut self,
        path: &Path,
        probes: &[(&str, u64)],
    ) -> Result<Vec<String>, TimelineError> {
        let tracefs = Tracefs::hold(Mount::Never)?;
        let (uprobes, refused) = Uprobes::define(tracefs, path, probes);
        let uprobes = self.uprobes.insert(uprobes);
        uprobes.enable(&self.program)?;
        Ok(refused)
    }
}

use coldstart_sys::pid_alive as alive;

/// Remove the instances and uprobes of timelines whose process is gone.
fn remove_stale(tracefs: &Tracefs) {
    coldstart_sys::tracefs::remove_stale(PREFIX);
    let Ok(defined) = std::fs::read_to_string(tracefs.path("uprobe_events")) else {
        return;
    };
    for line in defined.lines() {
        // p:coldstart_tl_123/cs_main /path:0x...
        let Some(event) =
            line.split_whitespace().next().and_then(|e| e.split_once(':')).map(|e| e.1)
        else {
            continue;
        };
        let Some(pid) = event.strip_prefix(GROUP_PREFIX).and_then(|e| e.split('/').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok_and(|p| !alive(p)) {
            let _ = uprobe_events(tracefs, &format!("-:{event}\n"));
        }
    }
}

/// One traced event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    pub pid: i32,
    pub ts_ns: u64,
    pub kind: Kind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// A page event: `fault`, `map` or `read`.
    Page {
        kind: &'static str,
        dev: (u32, u32),
        ino: u64,
        page: u64,
        count: u64,
    },
    /// A bio queued by the program (its sectors).
    Bio {
        dev: (u32, u32),
        sector: u64,
        sectors: u64,
    },
    /// A block request issued to a device, or completed.
    Issue {
        dev: (u32, u32),
        sector: u64,
        sectors: u64,
        write: bool,
    },
    Complete {
        dev: (u32, u32),
        sector: u64,
    },
    Switch {
        prev_pid: i32,
        prev_blocked: bool,
        next_pid: i32,
    },
    Wakeup {
        pid: i32,
    },
    ExecEnter,
    ExecExit {
        ok: bool,
    },
    Exit,
    /// `mmap` called with this descriptor (-1: anonymous), and its return.
    Mmap {
        fd: i64,
    },
    MmapReturn,
    Mprotect {
        prot: u64,
    },
    /// A uprobe hit (its event name).
    Probe(String),
}

/// Split a trace line into task-pid, timestamp (ns) and the rest after the timestamp.
fn split(line: &str) -> Option<(i32, u64, &str)> {
    // `TASK-PID [CPU] FLAGS SECONDS: rest`; a task name may hold spaces, so find the CPU.
    let b = line.as_bytes();
    let mut i = 0;
    let open = loop {
        let at = line[i..].find(" [")? + i;
        if b.len() > at + 6 && b[at + 2..at + 5].iter().all(u8::is_ascii_digit) && b[at + 5] == b']'
        {
            break at;
        }
        i = at + 2;
    };
    let pid = line[..open].trim().rsplit_once('-')?.1.parse().ok()?;
    let mut rest = line[open + 6..].split_whitespace();
    let _flags = rest.next()?;
    let ts = rest.next()?.strip_suffix(':')?;
    let (secs, frac) = ts.split_once('.')?;
    let frac_ns: u64 = format!("{frac:0<9}")[..9].parse().ok()?;
    let ts_ns = secs.parse::<u64>().ok()? * 1_000_000_000 + frac_ns;
    let after = line.find(ts)? + ts.len() + 1;
    Some((pid, ts_ns, line[after..].trim_start()))
}

fn field<'a>(tokens: &[&'a str], key: &str) -> Option<&'a str> {
    tokens.iter().position(|t| *t == key).and_then(|i| tokens.get(i + 1)).copied()
}

fn dev(s: &str, sep: char) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(sep)?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn hex(s: &str) -> Option<u64> {
    let s = s.trim_end_matches(',').trim_end_matches(')');
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// Parse one line of a `trace` file.
/// The task and the file of a `sched_process_exec` line: the program a task now runs, as
/// given to `execve`.
pub(crate) fn exec_filename(line: &str) -> Option<(i32, String)> {
    let (pid, _, rest) = split(line)?;
    let fields = rest.strip_prefix("sched_process_exec: ")?;
    let file = fields.strip_prefix("filename=")?;
    let end = file.rfind(" pid=")?;
    Some((pid, file[..end].to_owned()))
}

pub(crate) fn parse(line: &str, probes: &[String]) -> Option<Event> {
    let (pid, ts_ns, rest) = split(line)?;
    let (name, fields) = match rest.split_once(": ") {
        Some((n, f)) if !n.contains('(') && !n.contains(' ') => (n, f),
        // `sys_mmap(addr: ...)` and `sys_mmap -> 0x...` have no `NAME: ` head.
        _ => match rest.find(['(', ' ']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest.trim_end_matches(':'), ""),
        },
    };
    let norm = fields.replace('=', " ");
    let tokens: Vec<&str> = norm.split_whitespace().collect();
    let kind = match name {
        "mm_filemap_fault" | "mm_filemap_map_pages" | "mm_filemap_add_to_page_cache" => {
            let d = dev(field(&tokens, "dev")?, ':')?;
            let ino = u64::from_str_radix(field(&tokens, "ino")?, 16).ok()?;
            let ofs = field(&tokens, "ofs")?;
            let (first, last) = match ofs.split_once('-') {
                Some((a, b)) => (a.parse::<u64>().ok()?, b.parse::<u64>().ok()?),
                None => {
                    let a = ofs.parse::<u64>().ok()?;
                    let order =
                        field(&tokens, "order").and_then(|o| o.parse::<u32>().ok()).unwrap_or(0);
                    (a, a + (4096u64 << order) - 1)
                }
            };
            let kind = match name {
                "mm_filemap_fault" => "fault",
                "mm_filemap_map_pages" => "map",
                _ => "read",
            };
            Kind::Page {
                kind,
                dev: d,
                ino,
                page: first / 4096,
                count: (last + 1).saturating_sub(first).div_ceil(4096).max(1),
            }
        }
        // `254,0 RA 40905216 + 32 [sample]`
        "block_bio_queue" => Kind::Bio {
            dev: dev(tokens.first()?, ',')?,
            sector: tokens.get(2)?.parse().ok()?,
            sectors: tokens.get(4)?.parse().ok()?,
        },
        // `254,0 RA 16384 () 40905216 + 32 be,0,4 [sample]`
        "block_rq_issue" => {
            let plus = tokens.iter().position(|t| *t == "+")?;
            Kind::Issue {
                dev: dev(tokens.first()?, ',')?,
                sector: tokens.get(plus - 1)?.parse().ok()?,
                sectors: tokens.get(plus + 1)?.parse().ok()?,
                write: tokens.get(1)?.contains('W'),
            }
        }
        // `254,0 RA () 40905216 + 32 be,0,4 [0]`
        "block_rq_complete" => {
            let plus = tokens.iter().position(|t| *t == "+")?;
            Kind::Complete {
                dev: dev(tokens.first()?, ',')?,
                sector: tokens.get(plus - 1)?.parse().ok()?,
            }
        }
        "sched_switch" => Kind::Switch {
            prev_pid: field(&tokens, "prev_pid")?.parse().ok()?,
            prev_blocked: field(&tokens, "prev_state")?.starts_with('D'),
            next_pid: field(&tokens, "next_pid")?.parse().ok()?,
        },
        "sched_wakeup" => Kind::Wakeup { pid: field(&tokens, "pid")?.parse().ok()? },
        "sched_process_exit" => Kind::Exit,
        "sys_execve" if fields.trim_start().starts_with("->") => {
            Kind::ExecExit { ok: hex(tokens.get(1)?) == Some(0) }
        }
        "sys_execve" => Kind::ExecEnter,
        "sys_mmap" if fields.trim_start().starts_with("->") => Kind::MmapReturn,
        "sys_mmap" => {
            let fd = hex(field(&tokens, "fd:")?)?;
            Kind::Mmap {
                fd: if fd == 0xffff_ffff || fd > i32::MAX as u64 { -1 } else { fd as i64 },
            }
        }
        "sys_mprotect" => {
            Kind::Mprotect { prot: field(&tokens, "prot:")?.trim_end_matches(')').parse().ok()? }
        }
        n if probes.iter().any(|p| p == n) => Kind::Probe(n.to_owned()),
        _ => return None,
    };
    Some(Event { pid, ts_ns, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Kind {
        parse(line, &["cs_main".into()]).unwrap_or_else(|| panic!("not parsed: {line}")).kind
    }

    #[test]
    fn each_event_the_timeline_uses_is_parsed() {
        assert_eq!(
            p("          sample-22653   [001] ..... 11115.895212: mm_filemap_fault: dev=254:0 ino=138097 ofs=16384"),
            Kind::Page { kind: "fault", dev: (254, 0), ino: 0x138097, page: 4, count: 1 }
        );
        assert_eq!(
            p(" sample-22653   [000] ..... 11115.894838: mm_filemap_add_to_page_cache: dev 254:0 ino 138097 pfn=0x278d4b ofs=8192 order=2"),
            Kind::Page { kind: "read", dev: (254, 0), ino: 0x138097, page: 2, count: 4 }
        );
        assert_eq!(
            p(" sample-22653   [001] ..... 11115.895513: mm_filemap_map_pages: dev=254:0 ino=4f8cb ofs=45056-110591"),
            Kind::Page { kind: "map", dev: (254, 0), ino: 0x4f8cb, page: 11, count: 16 }
        );
        assert_eq!(
            p(" sample-22653   [000] ..... 11115.894845: block_bio_queue: 254,0 RA 40905216 + 32 [sh]"),
            Kind::Bio { dev: (254, 0), sector: 40905216, sectors: 32 }
        );
        assert_eq!(
            p(" kworker/1:1H-90 [001] ..... 1.5: block_rq_issue: 254,0 RA 16384 () 40905216 + 32 be,0,4 [kworker/1:1H]"),
            Kind::Issue { dev: (254, 0), sector: 40905216, sectors: 32, write: false }
        );
        assert_eq!(
            p(" <idle>-0 [001] d.h1. 1.6: block_rq_complete: 254,0 RA () 40905216 + 32 be,0,4 [0]"),
            Kind::Complete { dev: (254, 0), sector: 40905216 }
        );
        assert_eq!(
            p(" sample-22653 [001] d..2. 1.7: sched_switch: prev_comm=sample prev_pid=22653 prev_prio=120 prev_state=D ==> next_comm=swapper/1 next_pid=0 next_prio=120"),
            Kind::Switch { prev_pid: 22653, prev_blocked: true, next_pid: 0 }
        );
        assert_eq!(
            p(" <idle>-0 [001] dNs5. 1.8: sched_wakeup: comm=sample pid=22653 prio=120 target_cpu=001"),
            Kind::Wakeup { pid: 22653 }
        );
        assert_eq!(p(" sample-1 [001] ..... 1.9: sys_execve(filename: 0x559409c84bf8, argv: 0x5594, envp: 0x5594)"), Kind::ExecEnter);
        assert_eq!(p(" sample-1 [001] ..... 1.9: sys_execve -> 0x0"), Kind::ExecExit { ok: true });
        assert_eq!(
            exec_filename(
                " python3.11-4242 [000] ..... 2.5: sched_process_exec: filename=/root/.pyenv/versions/3.11.7/bin/python3 pid=4242 old_pid=4242"
            ),
            Some((4242, "/root/.pyenv/versions/3.11.7/bin/python3".into()))
        );
        assert_eq!(
            p(" sample-1 [001] ..... 1.9: sys_execve -> 0xfffffffffffffffe"),
            Kind::ExecExit { ok: false }
        );
        assert_eq!(
            p(" sample-1 [001] ..... 1.9: sys_mmap(addr: 0, len: 0x9070, prot: 1, flags: 0x802, fd: 3, off: 0)"),
            Kind::Mmap { fd: 3 }
        );
        assert_eq!(
            p(" sample-1 [001] ..... 1.9: sys_mmap(addr: 0, len: 0x2000, prot: 3, flags: 0x22, fd: 0xffffffff, off: 0)"),
            Kind::Mmap { fd: -1 }
        );
        assert_eq!(p(" sample-1 [001] ..... 1.9: sys_mmap -> 0x7f5acfaf1000"), Kind::MmapReturn);
        assert_eq!(
            p(" sample-1 [001] ..... 1.9: sys_mprotect(start: 0x7f5acfacb000, len: 0x4000, prot: 1)"),
            Kind::Mprotect { prot: 1 }
        );
        assert_eq!(
            p(" sample-1 [001] DBZff 11115.897198: cs_main: (0x563cc08d9e80)"),
            Kind::Probe("cs_main".into())
        );
        assert_eq!(p(" sample-1 [001] ..... 1.9: sched_process_exit: comm=sample pid=1 prio=120 group_dead=true"), Kind::Exit);
    }

    #[test]
    fn a_task_name_with_spaces_and_the_timestamp_are_read() {
        let e = parse(" Web Content-4242 [003] ..... 12.000345: sched_wakeup: comm=x pid=7 prio=1 target_cpu=000", &[]).unwrap();
        assert_eq!((e.pid, e.ts_ns), (4242, 12_000_345_000));
        assert!(parse("# tracer: nop", &[]).is_none());
    }
}
