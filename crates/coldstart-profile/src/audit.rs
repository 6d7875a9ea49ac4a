//! The in-process first-touch tracer: an rtld-audit agent (`LD_AUDIT`) in the program itself.
//!
//! The ptrace tracer ([`crate::trace`]) stops the program at every first call: a ptrace stop
//! and two context switches per function, 8-10x the start-up time of a program with a few
//! thousand functions. Here the breakpoints are the same one-shot `int3` at every function
//! entry, but the program handles its own traps: the agent (`agent/agent.c`, built by
//! `build.rs` and embedded in the binary) plants them as the loader maps each object
//! (`la_objopen`, before its constructors run) and its `SIGTRAP` handler records the touch in
//! a shared buffer, puts the byte back and resumes; no other process runs.
//!
//! coldstart writes the agent into a private temporary directory (removed when the run ends)
//! and the buffer is a memory file (`memfd`); it starts the program with `LD_AUDIT` and
//! `COLDSTART_AUDIT_BUFFER` (the memory file as `/proc/PID/fd/N`), waits
//! for readiness or exit, then turns the buffer into the same profile the ptrace tracer gives:
//! each module read with [`coldstart_elf::ElfInfo`] (with debug files), each touch mapped to
//! the function that starts at its address, in first-touch order.
//!
//! Differences from the ptrace tracer, all documented in `docs/formats/profile.md`: the
//! dynamic loader is not profiled (it runs the agent), nor objects of other link-map
//! namespaces (`dlmopen`); the agent keeps `SIGTRAP` to itself (a program's own handler is
//! recorded and run for traps that are not breakpoints, and `SIGTRAP` is never blocked), which
//! raw system calls can get around. Programs the loader does not audit
//! (static executables, setuid/setgid programs) are detected up front: see [`unsupported`].

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use coldstart_elf::{ElfInfo, SymbolOptions};

use crate::format::{Fault, Module, Stop};
use crate::format::{Image, Via};
use crate::modules::{
    location, profile_modules, stripped_warning, unsymbolized, ModuleTouches, Traced, Unsymbolized,
};
use crate::tree::{signal_name, ChildWake, TreeGuard};
use crate::{Follow, Launched, ProfileError, ProfileOptions};

/// The agent, compiled by `build.rs` from `agent/*.c`.
static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/coldstart-audit-agent.so"));

/// Buffer layout, shared with `agent/agent.c` (header words).
mod layout {
    pub const MAGIC: u64 = 0x3154_5541_444c_4f43; // "COLDAUT1"
    pub const VERSION: u64 = 2;
    pub const H_MAGIC: usize = 0;
    pub const H_VERSION: usize = 1;
    pub const H_TOUCH_OFFSET: usize = 2;
    pub const H_TOUCH_CAPACITY: usize = 3;
    pub const H_MODULE_OFFSET: usize = 4;
    pub const H_MODULE_CAPACITY: usize = 5;
    pub const H_ROOT_PID: usize = 6;
    pub const H_FLAGS: usize = 7;
    pub const H_TOUCH_NEXT: usize = 8;
    pub const H_MODULE_NEXT: usize = 9;
    pub const H_STOP: usize = 10;
    // 11: images that loaded the agent (the agent's own count).
    pub const H_TOUCH_DROPPED: usize = 12;
    pub const H_MODULES_DROPPED: usize = 14;
    pub const H_ACTIVE: usize = 15;
    pub const H_FAULT_IP: usize = 16;
    pub const H_FAULT_TID: usize = 17;
    pub const H_FAULT_SIGNAL: usize = 18;
    pub const HEADER_BYTES: u64 = 4096;
    pub const TOUCH_BYTES: u64 = 32;
    pub const FLAG_FOLLOW_FORKS: u64 = 1;
    pub const FLAG_FOLLOW_EXEC: u64 = 2;
    pub const FLAG_FOLLOW_SAME: u64 = 4;
    pub const M_WORDS: usize = 6;
    pub const KIND_MODULE: u64 = 1;
    pub const KIND_IMAGE: u64 = 2;
    pub const VIA_START: u64 = 0;
    pub const VIA_EXEC: u64 = 1;
}
use layout::*;

/// Touch records the buffer holds (32 bytes each; the memory file is sparse, only what is
/// written takes memory): far more than the functions of any start-up.
const TOUCH_CAPACITY: u64 = 1 << 21;
/// Bytes for module records (48 bytes and the path each).
const MODULE_CAPACITY: u64 = 4 << 20;

/// Why the loader would not run the agent in `path` (the ptrace tracer is needed), or `None`.
pub(crate) fn unsupported(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    if meta.mode() & 0o6000 != 0 {
        return Some(format!(
            "{} is setuid or setgid: the loader ignores LD_AUDIT for it",
            path.display()
        ));
    }
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)).unwrap_or(0);
    if head[..n].starts_with(b"#!") {
        // A script: what matters is its interpreter (`env` and the like are dynamic, and so is
        // what they run, as far as can be told here).
        let line = head[2..n].split(|&b| b == b'\n').next().unwrap_or_default();
        let interpreter = line.split(|b| b.is_ascii_whitespace()).find(|w| !w.is_empty())?;
        let interpreter = PathBuf::from(std::ffi::OsStr::from_bytes(interpreter));
        return if interpreter.is_file() && interpreter != path {
            unsupported(&interpreter)
        } else {
            None
        };
    }
    (!has_interpreter(path)?).then(|| {
        format!(
            "{} is statically linked: there is no dynamic loader to load the audit agent",
            path.display()
        )
    })
}

/// Whether the ELF file at `path` names a program interpreter (`PT_INTERP`). `None` if it
/// cannot be read as ELF64.
fn has_interpreter(path: &Path) -> Option<bool> {
    interpreter(path).map(|i| i.is_some())
}

/// The program interpreter (`PT_INTERP`) the ELF file at `path` names, read from the program
/// headers alone, not the symbol tables: `Some(None)` for a file without one (static), `None`
/// if it cannot be read as ELF64.
pub(crate) fn interpreter(path: &Path) -> Option<Option<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileExt;
    const PT_INTERP: u32 = 3;
    let file = std::fs::File::open(path).ok()?;
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0).ok()?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 {
        return None;
    }
    let phoff = u64::from_le_bytes(header[0x20..0x28].try_into().ok()?);
    let phentsize = u64::from(u16::from_le_bytes(header[0x36..0x38].try_into().ok()?));
    let phnum = usize::from(u16::from_le_bytes(header[0x38..0x3a].try_into().ok()?));
    if phentsize < 4 {
        return None;
    }
    let mut table = vec![0u8; phentsize as usize * phnum];
    file.read_exact_at(&mut table, phoff).ok()?;
    let Some(ph) = table
        .chunks_exact(phentsize as usize)
        .find(|ph| u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == PT_INTERP)
    else {
        return Some(None);
    };
    // p_offset and p_filesz of an Elf64_Phdr; the name ends with its NUL. A header too short
    // to hold them still names an interpreter, just not one this can read.
    let field = |at: usize| ph.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let name = field(8).zip(field(32)).filter(|&(_, len)| len <= 4096).and_then(|(off, len)| {
        let mut name = vec![0u8; len as usize];
        file.read_exact_at(&mut name, off).ok()?;
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(&name[..end])))
    });
    Some(Some(name.unwrap_or_default()))
}

/// A private directory for the agent, removed when dropped. Its name holds coldstart's
/// process id (`coldstart-audit-PID-XXXXXX`), so that a directory a killed coldstart left is
/// recognised and removed at the next start ([`remove_stale_workspaces`]).
struct Workspace {
    dir: PathBuf,
}

/// The prefix of the agent's temporary directories.
const WORKSPACE_PREFIX: &str = "coldstart-audit-";

impl Workspace {
    fn create() -> Result<Workspace, ProfileError> {
        let template =
            std::env::temp_dir().join(format!("{WORKSPACE_PREFIX}{}-XXXXXX", std::process::id()));
        let mut bytes = template.as_os_str().as_bytes().to_vec();
        bytes.push(0);
        // SAFETY: mkdtemp rewrites the NUL-terminated template in place.
        let r = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
        if r.is_null() {
            return Err(ProfileError::os("mkdtemp", std::io::Error::last_os_error()));
        }
        bytes.pop();
        Ok(Workspace { dir: PathBuf::from(OsString::from_vec(bytes)) })
    }
}

/// Remove the agent directories under `tmp` whose coldstart is gone (killed with `SIGKILL`,
/// or by a power cut) and that belong to this user.
pub(crate) fn remove_stale_workspaces(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(WORKSPACE_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours && !coldstart_sys::pid_alive(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The buffer file, mapped shared: the agent writes into it while the program runs.
struct Buffer {
    ptr: *mut u64,
    len: usize,
    file: std::fs::File,
}

impl Buffer {
    /// A memory file (`memfd`: no disk behind the agent's writes, nothing to clean up),
    /// which the agent opens as `/proc/COLDSTART-PID/fd/FD`.
    fn create(options: &ProfileOptions) -> Result<Buffer, ProfileError> {
        let touch_offset = HEADER_BYTES;
        let module_offset = touch_offset + TOUCH_CAPACITY * TOUCH_BYTES;
        let len = module_offset + MODULE_CAPACITY;
        // SAFETY: memfd_create with a NUL-terminated name; the descriptor is owned below.
        let fd = unsafe { libc::memfd_create(c"coldstart-audit".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(ProfileError::os("memfd_create", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor we own.
        let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        file.set_len(len).map_err(|e| ProfileError::os("size the audit buffer", e))?;
        // SAFETY: mapping the whole file we just sized; unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(ProfileError::os("mmap the audit buffer", std::io::Error::last_os_error()));
        }
        let buffer = Buffer { ptr: ptr.cast(), len: len as usize, file };
        let mut flags = match options.follow_forks {
            Follow::None => 0,
            Follow::Same => FLAG_FOLLOW_SAME,
            Follow::All => FLAG_FOLLOW_FORKS,
        };
        if options.follow_exec {
            flags |= FLAG_FOLLOW_EXEC;
        }
        buffer.set(H_TOUCH_OFFSET, touch_offset);
        buffer.set(H_TOUCH_CAPACITY, TOUCH_CAPACITY);
        buffer.set(H_MODULE_OFFSET, module_offset);
        buffer.set(H_MODULE_CAPACITY, MODULE_CAPACITY);
        buffer.set(H_FLAGS, flags);
        buffer.set(H_VERSION, VERSION);
        buffer.set(H_MAGIC, MAGIC);
        Ok(buffer)
    }

    /// The path under which the program opens the buffer.
    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), self.file.as_raw_fd()))
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!((index + 1) * 8 <= self.len);
        // SAFETY: in bounds, 8-byte aligned (page-aligned mapping), shared with the agent,
        // which uses atomic operations on the words it shares.
        unsafe { &*(self.ptr.add(index) as *const AtomicU64) }
    }

    fn get(&self, index: usize) -> u64 {
        self.word(index).load(Ordering::Acquire)
    }

    fn set(&self, index: usize, value: u64) {
        self.word(index).store(value, Ordering::Release)
    }

    /// A copy of what the agents wrote (header, claimed touch records, module area).
    fn snapshot(&self) -> Snapshot {
        let header: Vec<u64> = (0..(HEADER_BYTES as usize / 8)).map(|i| self.get(i)).collect();
        let touches = (header[H_TOUCH_NEXT].min(header[H_TOUCH_CAPACITY])) as usize;
        let first = header[H_TOUCH_OFFSET] as usize / 8;
        let touch_words: Vec<u64> = (first..first + touches * 4).map(|i| self.get(i)).collect();
        let used = header[H_MODULE_NEXT].min(header[H_MODULE_CAPACITY]) as usize;
        let start = header[H_MODULE_OFFSET] as usize;
        // SAFETY: the module area lies inside the mapping (set up by `create`).
        let modules = unsafe {
            std::slice::from_raw_parts(
                (self.ptr as *const u8).add(start),
                used.min(self.len - start),
            )
        }
        .to_vec();
        Snapshot { header, touch_words, modules }
    }
}

// SAFETY: the mapping is only read and written through atomic words (and copied in
// `snapshot` once the writers are stopped); it lives as long as the Buffer.
unsafe impl Sync for Buffer {}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The buffer's contents after the run.
struct Snapshot {
    header: Vec<u64>,
    touch_words: Vec<u64>,
    modules: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq)]
struct RawModule {
    id: u64,
    bias: u64,
    pid: i32,
    kind: u64,
    /// Entries armed (a module), how the image came to run (an image).
    patched: u64,
    path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct RawTouch {
    offset: u64,
    time_ns: u64,
    module: u64,
    pid: i32,
    tid: i32,
}

impl Snapshot {
    fn modules(&self) -> Vec<RawModule> {
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(self.modules.get(at..at + 8)?.try_into().ok()?))
        };
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(len) = word(at).filter(|&l| l as usize >= M_WORDS * 8) {
            let len = len as usize;
            let Some(record) = self.modules.get(at..at + len) else { break };
            let w = |i: usize| u64::from_ne_bytes(record[i * 8..i * 8 + 8].try_into().unwrap());
            let name = &record[M_WORDS * 8..];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            out.push(RawModule {
                id: w(1),
                bias: w(2),
                pid: w(3) as i32,
                kind: w(4),
                patched: w(5),
                path: PathBuf::from(std::ffi::OsStr::from_bytes(name)),
            });
            at += len;
        }
        out
    }

    /// Completed touch records in claim order (a record still being written is skipped).
    fn touches(&self) -> Vec<RawTouch> {
        self.touch_words
            .chunks_exact(4)
            .filter(|w| w[3] >> 32 == 1)
            .map(|w| RawTouch {
                offset: w[0],
                time_ns: w[1],
                module: w[2] & 0xffff_ffff,
                pid: (w[2] >> 32) as i32,
                tid: (w[3] & 0xffff_ffff) as i32,
            })
            .collect()
    }
}

/// Symbols of module files, read once each (an error says why a file is not profiled).
type Infos = HashMap<PathBuf, Result<Arc<ElfInfo>, String>>;

/// Turn the buffer's records into profile modules: each touch is mapped to the function
/// starting at its address (entries the agent armed but coldstart does not count as
/// functions are dropped); a module loaded twice (dlclose, dlopen) keeps its first touches.
fn assemble(
    snapshot: &Snapshot,
    t0_ns: u64,
    symbols: &SymbolOptions,
    mut infos: Infos,
    warnings: &mut Vec<String>,
    bare: &mut Vec<Unsymbolized>,
) -> Vec<Module> {
    let mut recs: Vec<ModuleTouches> = Vec::new();
    let mut by_key: HashMap<(PathBuf, Option<Vec<u8>>), usize> = HashMap::new();
    let mut by_id: HashMap<u64, usize> = HashMap::new();
    let mut warned: Vec<PathBuf> = Vec::new();
    for m in snapshot.modules() {
        if m.kind != KIND_MODULE {
            continue;
        }
        let info = infos
            .entry(m.path.clone())
            .or_insert_with(|| {
                ElfInfo::open(&m.path, symbols).map(Arc::new).map_err(|e| e.to_string())
            })
            .clone();
        let info = match info {
            Ok(info) => info,
            Err(e) => {
                if !warned.contains(&m.path) {
                    warnings.push(format!("{} is not profiled: {e}", m.path.display()));
                    warned.push(m.path.clone());
                }
                continue;
            }
        };
        let key = (m.path.clone(), info.build_id.clone());
        let index = *by_key.entry(key).or_insert_with(|| {
            warnings.extend(stripped_warning(&info, &m.path));
            bare.extend(unsymbolized(&info, &m.path));
            recs.push(ModuleTouches::new(info.clone(), &m.path, m.bias));
            recs.len() - 1
        });
        by_id.insert(m.id, index);
    }
    let mut ordinal = 0u64;
    let mut unknown = 0usize;
    for t in snapshot.touches() {
        let Some(&index) = by_id.get(&t.module) else {
            unknown += 1;
            continue;
        };
        let rec = &mut recs[index];
        let Ok(f) = rec.info.functions.binary_search_by_key(&t.offset, |f| f.address) else {
            continue;
        };
        if rec.touched(f) {
            continue;
        }
        rec.record(f, ordinal, t.time_ns.saturating_sub(t0_ns), t.pid, t.tid);
        ordinal += 1;
    }
    if unknown > 0 {
        warnings.push(format!(
            "{unknown} touches name modules whose records were lost (module area full): they are not in the profile"
        ));
    }
    let dropped = snapshot.header[H_TOUCH_DROPPED];
    if dropped > 0 {
        warnings.push(format!(
            "the audit buffer was full: {dropped} touches were lost; use --tracer ptrace for this program"
        ));
    }
    if snapshot.header[H_MODULES_DROPPED] > 0 {
        warnings.push(format!(
            "the audit buffer's module area was full: {} modules were lost",
            snapshot.header[H_MODULES_DROPPED]
        ));
    }
    let modules = profile_modules(&mut recs);
    // Freeing the symbol tables (a large program's take milliseconds) need not delay the
    // profile: another thread does it.
    std::thread::spawn(move || drop((recs, infos)));
    modules
}

/// What the processes ran, from the image records of the agents (a child that ran the fork
/// handlers by hand after its first trap is recorded once).
fn images(snapshot: &Snapshot) -> Vec<Image> {
    let mut out: Vec<Image> = Vec::new();
    let records = snapshot.modules().into_iter().filter(|m| m.kind == KIND_IMAGE).map(|m| Image {
        pid: m.pid,
        parent: m.bias as i32,
        path: m.path,
        via: match m.patched {
            VIA_START => Via::Start,
            VIA_EXEC => Via::Exec,
            _ => Via::Fork,
        },
        profiled: m.id != 0,
    });
    for image in records {
        if !out.contains(&image) {
            out.push(image);
        }
    }
    out
}

/// Name the function at `ip` among the modules of the profile.
fn locate(modules: &[Module], infos: &HashMap<PathBuf, Arc<ElfInfo>>, ip: u64) -> Option<String> {
    modules.iter().find_map(|m| location(infos.get(&m.path)?, ip.wrapping_sub(m.load_bias)))
}

/// Profile one start-up with the agent. Returns the result, the run (whose output
/// forwarding the caller finishes) and whether the agent ran at all (the loader may refuse it:
/// a temporary directory mounted `noexec`, a program whose interpreter is static).
pub(crate) fn run(
    options: &ProfileOptions,
    path: &Path,
) -> Result<(Traced, Launched, bool), ProfileError> {
    let workspace = Workspace::create()?;
    let agent = workspace.dir.join("coldstart-audit-agent.so");
    std::fs::write(&agent, AGENT).map_err(|e| ProfileError::os("write the audit agent", e))?;
    let buffer = Buffer::create(options)?;
    let mut ld_audit = agent.clone().into_os_string();
    if let Some(previous) = std::env::var_os("LD_AUDIT").filter(|v| !v.is_empty()) {
        ld_audit = previous;
        ld_audit.push(":");
        ld_audit.push(&agent);
    }
    let roots = if options.symbols.use_debug_files {
        std::env::join_paths(&options.symbols.debug_roots).unwrap_or_default()
    } else {
        OsString::new()
    };
    let env = [
        (OsString::from("LD_AUDIT"), ld_audit),
        (OsString::from("COLDSTART_AUDIT_BUFFER"), buffer.path().into_os_string()),
        (OsString::from("COLDSTART_AUDIT_DEBUG_ROOTS"), roots),
    ];
    let mut launched = crate::launch(options, path, false, &env, None)?;
    let pid = launched.stopped.pid;
    let mut guard = TreeGuard { pgid: pid, armed: true };
    buffer.set(H_ROOT_PID, pid as u64);
    let t0 = coldstart_sys::monotonic_ns();
    let started = Instant::now();
    // SAFETY: continuing our own child, stopped before its exec.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    if let Some(e) = crate::spawn::child_error(&mut launched.stopped.errors, path) {
        return Err(e);
    }
    let deadline = options.timeout.map(|t| started + t);
    let wake = ChildWake::new();
    let ready_fd = launched.ready_read.as_raw_fd();
    // Modules are read (symbols, debug files) while the program runs, on the other core.
    let done = AtomicBool::new(false);
    let (waited, infos, duration_ns) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| read_modules_meanwhile(&buffer, &options.symbols, &done));
        let waited = wait(options, &buffer, &launched, pid, deadline, &wake, ready_fd);
        // The program's time, not the reader's catching up.
        let duration_ns = started.elapsed().as_nanos() as u64;
        done.store(true, Ordering::Release);
        reader.thread().unpark();
        (waited, reader.join().unwrap_or_default(), duration_ns)
    });
    let (stop, kill) = waited?;
    buffer.set(H_STOP, 1);
    guard.armed = kill;
    drop(guard);
    launched.stop_pollers();
    let snapshot = buffer.snapshot();
    let mut warnings = Vec::new();
    let agent_ran = snapshot.header[H_ACTIVE] > 0;
    if !agent_ran {
        warnings.push(format!(
            "the audit agent did not run in {} (LD_AUDIT ignored? is {} mounted noexec?): nothing was recorded; use --tracer ptrace",
            path.display(),
            std::env::temp_dir().display()
        ));
    }
    let mut bare = Vec::new();
    let modules = assemble(&snapshot, t0, &options.symbols, infos, &mut warnings, &mut bare);
    let images = images(&snapshot);
    let stop = match stop {
        Stop::Crash { signal, pid, fault: Some(mut f) } => {
            let infos: HashMap<PathBuf, Arc<ElfInfo>> = modules
                .iter()
                .filter_map(|m| {
                    ElfInfo::open(&m.path, &options.symbols)
                        .ok()
                        .map(|i| (m.path.clone(), Arc::new(i)))
                })
                .collect();
            f.location = locate(&modules, &infos, f.ip);
            Stop::Crash { signal, pid, fault: Some(f) }
        }
        other => other,
    };
    Ok((
        Traced { modules, stop, duration_ns, warnings, images, unsymbolized: bare },
        launched,
        agent_ran,
    ))
}

/// Wait for readiness, the root's exit or death, or the timeout. Returns the stop and whether
/// the tree is to be killed; an interrupting signal is an error (the caller's guard kills the
/// tree).
fn wait(
    options: &ProfileOptions,
    buffer: &Buffer,
    launched: &Launched,
    pid: i32,
    deadline: Option<Instant>,
    wake: &ChildWake,
    ready_fd: i32,
) -> Result<(Stop, bool), ProfileError> {
    let pidfd = &launched.stopped.pidfd;
    let mut kill = true;
    let stop = loop {
        crate::interrupt::check()?;
        if launched.signal.is_raised() {
            buffer.set(H_STOP, 1);
            kill = options.kill_at_ready;
            break Stop::Ready { signal: options.ready.to_string(), killed: kill };
        }
        let mut status = 0;
        // SAFETY: polling our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid && libc::WIFEXITED(status) {
            kill = options.kill_at_ready;
            break Stop::Exit { code: libc::WEXITSTATUS(status) };
        }
        if r == pid && libc::WIFSIGNALED(status) {
            kill = options.kill_at_ready;
            let fault = (buffer.get(H_FAULT_SIGNAL) != 0)
                .then(|| (buffer.get(H_FAULT_TID) as i32, buffer.get(H_FAULT_IP)));
            break Stop::Crash {
                signal: signal_name(libc::WTERMSIG(status)),
                pid,
                fault: fault.map(|(tid, ip)| Fault { tid, ip, location: None }),
            };
        }
        if r < 0 {
            break Stop::Exit { code: 0 };
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            buffer.set(H_STOP, 1);
            break Stop::Timeout { seconds: options.timeout.unwrap_or_default().as_secs_f64() };
        }
        match pidfd {
            // Readable when the root exits, whatever SIGCHLD's disposition (an ignored
            // SIGCHLD inherited from the caller never reaches the signalfd).
            Some(fd) => {
                let mut fds = [
                    libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                    libc::pollfd { fd: ready_fd, events: libc::POLLIN, revents: 0 },
                ];
                // SAFETY: polling two descriptors we own.
                unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) };
            }
            None => wake.wait(Some(ready_fd), 5),
        }
    };
    Ok((stop, kill))
}

/// Module paths the agents have recorded so far, from record `*at` on (advanced).
fn new_module_paths(buffer: &Buffer, at: &mut usize) -> Vec<PathBuf> {
    let start = buffer.get(H_MODULE_OFFSET) as usize;
    let capacity = buffer.get(H_MODULE_CAPACITY) as usize;
    let mut out = Vec::new();
    while *at + M_WORDS * 8 <= capacity {
        let first = (start + *at) / 8;
        let len = buffer.get(first) as usize;
        if len < M_WORDS * 8 || *at + len > capacity {
            break;
        }
        let bytes: Vec<u8> =
            (first + M_WORDS..first + len / 8).flat_map(|i| buffer.get(i).to_ne_bytes()).collect();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        if buffer.get(first + 4) == KIND_MODULE {
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes[..end])));
        }
        *at += len;
    }
    out
}

/// Open each module's symbols as soon as its record appears, until `done`.
fn read_modules_meanwhile(buffer: &Buffer, symbols: &SymbolOptions, done: &AtomicBool) -> Infos {
    let mut infos = Infos::new();
    let mut at = 0;
    loop {
        let finished = done.load(Ordering::Acquire);
        let paths = new_module_paths(buffer, &mut at);
        for path in paths {
            infos.entry(path.clone()).or_insert_with(|| {
                ElfInfo::open(&path, symbols).map(Arc::new).map_err(|e| e.to_string())
            });
        }
        if finished {
            return infos;
        }
        // Woken at once when the run ends.
        std::thread::park_timeout(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer image as the agent would leave it.
    fn image(
        modules: &[(u64, u64, i32, u64, &str)],
        touches: &[(u64, u64, u64, i32, i32, bool)],
    ) -> Snapshot {
        let mut header = vec![0u64; HEADER_BYTES as usize / 8];
        header[H_TOUCH_NEXT] = touches.len() as u64;
        header[H_TOUCH_CAPACITY] = 100;
        let mut area = Vec::new();
        for &(id, bias, pid, kind, path) in modules {
            let len = (M_WORDS * 8 + path.len() + 1 + 7) & !7;
            for w in [len as u64, id, bias, pid as u64, kind, 0] {
                area.extend_from_slice(&w.to_ne_bytes());
            }
            area.extend_from_slice(path.as_bytes());
            area.resize(area.len() + len - M_WORDS * 8 - path.len(), 0);
        }
        let mut touch_words = Vec::new();
        for &(offset, time, module, pid, tid, valid) in touches {
            touch_words.extend([
                offset,
                time,
                module | (pid as u64) << 32,
                tid as u32 as u64 | u64::from(valid) << 32,
            ]);
        }
        header[H_MODULE_NEXT] = area.len() as u64;
        Snapshot { header, touch_words, modules: area }
    }

    #[test]
    fn module_and_touch_records_are_read_back_and_incomplete_touches_skipped() {
        let s = image(
            &[(0, 0x1000, 7, KIND_MODULE, "/bin/a"), (1, 0x5000, 7, KIND_IMAGE, "/bin/bb")],
            &[(0x10, 100, 0, 7, 8, true), (0x20, 90, 0, 7, 8, false), (0x30, 120, 0, 7, 9, true)],
        );
        let m = s.modules();
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0],
            RawModule {
                id: 0,
                bias: 0x1000,
                pid: 7,
                kind: KIND_MODULE,
                patched: 0,
                path: "/bin/a".into()
            }
        );
        assert_eq!(m[1].path, PathBuf::from("/bin/bb"));
        assert_eq!(m[1].kind, KIND_IMAGE);
        let t = s.touches();
        assert_eq!(t.len(), 2, "the record without its valid bit is skipped");
        assert_eq!(t[0], RawTouch { offset: 0x10, time_ns: 100, module: 0, pid: 7, tid: 8 });
        assert_eq!(t[1].tid, 9);
    }

    #[test]
    fn touches_become_functions_in_first_touch_order_once_each() {
        // This test binary itself is the module: take three of its functions.
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        let info = ElfInfo::open(&exe, &SymbolOptions::default()).unwrap();
        assert!(info.functions.len() > 3);
        let f: Vec<u64> = info.functions.iter().take(3).map(|f| f.address).collect();
        let path = exe.to_str().unwrap();
        let s = image(
            &[(0, 0x40_0000, 5, KIND_MODULE, path), (1, 0x80_0000, 5, KIND_MODULE, path)],
            &[
                (f[1], 1_000, 0, 5, 5, true),
                (f[1] + 1, 1_100, 0, 5, 5, true), // not a function start: dropped
                (f[0], 1_200, 0, 5, 6, true),
                (f[1], 1_300, 1, 5, 5, true), // same file loaded again: already touched
                (f[2], 1_400, 9, 5, 5, true), // unknown module
            ],
        );
        let mut warnings = Vec::new();
        let modules =
            assemble(&s, 500, &SymbolOptions::default(), Infos::new(), &mut warnings, &mut vec![]);
        assert_eq!(modules.len(), 1, "one module per file and build");
        let m = &modules[0];
        assert_eq!(m.load_bias, 0x40_0000);
        let got: Vec<(u64, u64, u64, i32)> =
            m.functions.iter().map(|t| (t.address, t.ordinal, t.first_touch_ns, t.tid)).collect();
        assert_eq!(got, vec![(f[1], 0, 500, 5), (f[0], 1, 700, 6)]);
        assert!(warnings.iter().any(|w| w.contains("1 touches")), "{warnings:?}");
    }

    #[test]
    fn static_and_setuid_programs_are_left_to_ptrace() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
        assert_eq!(unsupported(&script), None, "a script run by a dynamic shell is audited");
        assert_eq!(unsupported(Path::new("/bin/true")), None);
        assert_eq!(has_interpreter(Path::new("/bin/true")), Some(true));
        assert_eq!(has_interpreter(&script), None, "not ELF");
        let loader = interpreter(Path::new("/bin/true")).unwrap().unwrap();
        assert!(loader.is_absolute() && loader.exists(), "{}", loader.display());
        let copy = dir.path().join("suid-true");
        std::fs::copy("/bin/true", &copy).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();
        assert!(unsupported(&copy).unwrap().contains("setuid"));
    }
}
