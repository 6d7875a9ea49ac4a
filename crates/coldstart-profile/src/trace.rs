//! The ptrace first-touch profiler: one-shot `int3` breakpoints at every function entry.
//!
//! How it works, in the order things happen:
//!
//! 1. The program is forked stopped before `execve` ([`crate::spawn`]) and traced with
//!    `PTRACE_TRACEME`; options ask for clone, fork, vfork and exec events and kill the tree
//!    if the profiler dies (`PTRACE_O_EXITKILL`).
//! 2. At the exec stop the executable and the dynamic loader are mapped but no code has run.
//!    Their load biases come from the auxiliary vector (`AT_ENTRY`, `AT_BASE`); every function
//!    entry gets an `int3`, written page run by page run through `/proc/PID/mem` (one read and
//!    one write per run of pages, not one system call per byte).
//! 3. The loader calls `_dl_debug_state` (the `r_debug` rendezvous debuggers use) whenever the
//!    set of libraries changes. A permanent breakpoint there reads `r_debug`; on
//!    `RT_CONSISTENT` the `link_map` chain lists every library with its load bias, and new
//!    ones (start-up libraries and later `dlopen`s alike) are armed before their code runs.
//! 4. On a trap: look the address up, record (module, function, thread, time since exec,
//!    ordinal), put the original byte back, set the instruction pointer back by one and
//!    continue. Each function traps once; a second thread racing into the same entry is
//!    rewound without a record.
//! 5. At readiness (or exit) every thread is stopped, every remaining breakpoint restored and
//!    the tree detached (or killed). A guard kills the tree on any error, so no stopped or
//!    orphaned process is left behind.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coldstart_elf::{ElfInfo, SymbolOptions, SymbolSource};

use crate::format::{Fault, Module, Stop, Touch};
use crate::ProfileError;

const INT3: u8 = 0xCC;
/// Offset of `rip` in `struct user_regs_struct` (x86-64), for PTRACE_PEEKUSER/POKEUSER.
const RIP: usize = 16 * 8;
const RSP: usize = 19 * 8;
const RT_CONSISTENT: u64 = 0;
/// Breakpoints closer than this are written with one system call (the bytes between are
/// written back unchanged); farther apart, each gets its own write, so pages without
/// function entries are neither read nor copied.
const MERGE_GAP: u64 = 512;

/// What the tracer returns.
pub(crate) struct Traced {
    pub modules: Vec<Module>,
    pub stop: Stop,
    pub duration_ns: u64,
    pub warnings: Vec<String>,
}

/// Options of one traced run.
pub(crate) struct TraceOptions<'a> {
    pub follow_forks: bool,
    pub follow_exec: bool,
    pub kill_at_ready: bool,
    pub symbols: &'a SymbolOptions,
    pub ready_label: String,
    pub timeout: Option<Duration>,
}

/// A module as loaded somewhere in the tree (one per file and build).
struct ModuleRec {
    info: Arc<ElfInfo>,
    /// The file, mapped: original bytes come from here (the loader has not relocated the
    /// text when a module is armed, so file and memory agree), which spares reading the
    /// program's text back through `/proc/PID/mem`.
    file: Option<Arc<coldstart_elf::Mmap>>,
    mtime: i64,
    load_bias: u64,
    touched: Vec<bool>,
    order: Vec<Touch>,
    first_ordinal: u64,
}

#[derive(Clone, Copy)]
struct Breakpoint {
    module: usize,
    function: u32,
    orig: u8,
    armed: bool,
}

/// One address space (a process image); threads and `vfork` children share it.
struct Space {
    pid: i32,
    mem: Box<dyn Memory>,
    breakpoints: HashMap<u64, Breakpoint>,
    /// Load bias -> module index, for the modules armed here.
    loaded: HashMap<u64, usize>,
    /// Biases of the executable and the loader, which the link map does not list as
    /// libraries (the executable has no name there) and which are never unloaded.
    fixed: Vec<u64>,
    r_debug: Option<u64>,
    rendezvous: Option<Rendezvous>,
    /// A fork child that is not followed: cleaned and detached at its first stop.
    detach_at_first_stop: bool,
    /// A vfork child that is not followed: detached at its exec.
    detach_at_exec: bool,
    alive: bool,
}

#[derive(Clone, Copy)]
struct Rendezvous {
    address: u64,
    /// `_dl_debug_state` is an empty function (`ret`, maybe after `endbr64`): emulate it.
    emulate_ret: bool,
    orig: u8,
    /// The function breakpoint the rendezvous replaces (recorded on the first hit).
    function: Option<(usize, u32)>,
}

struct Thread {
    space: usize,
    /// Process (thread group) id.
    tgid: i32,
    seen: bool,
    /// Its first stop came before the event that created it; it waits stopped.
    early: bool,
    /// Single-stepping over the re-armed rendezvous breakpoint.
    stepping: bool,
    /// Sent SIGSTOP to quiesce, not yet seen.
    stop_pending: bool,
    stopped: bool,
}

/// Kills the whole tree unless disarmed: no stopped or orphaned process after an error.
pub(crate) struct TreeGuard {
    pub pgid: i32,
    pub armed: bool,
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if self.armed {
            // SAFETY: signalling and reaping our own process group.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
                let mut status = 0;
                while libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) > 0 {}
                libc::waitpid(self.pgid, &mut status, libc::__WALL);
                while libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) > 0 {}
            }
        }
    }
}

pub(crate) struct Tracer<'a> {
    opts: TraceOptions<'a>,
    root: i32,
    t0: Instant,
    modules: Vec<ModuleRec>,
    module_by_key: HashMap<(PathBuf, Option<Vec<u8>>), usize>,
    info_cache: HashMap<PathBuf, Arc<ElfInfo>>,
    spaces: Vec<Space>,
    threads: HashMap<i32, Thread>,
    ordinal: u64,
    warnings: Vec<String>,
    last_fault: Option<Fault>,
    recording: bool,
}

fn ptrace(
    req: libc::c_uint,
    pid: i32,
    addr: usize,
    data: usize,
) -> Result<libc::c_long, std::io::Error> {
    // SAFETY: plain ptrace requests on our tracees; PEEK results are checked through errno.
    unsafe {
        *libc::__errno_location() = 0;
        let r = libc::ptrace(req, pid, addr, data);
        if r == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(r)
    }
}

fn cont(tid: i32, sig: i32) {
    let _ = ptrace(libc::PTRACE_CONT, tid, 0, sig as usize);
}

/// The `symbols` field of a profile module: where its function names come from.
/// The profile's record of a module whose functions were touched in `functions` order (both
/// tracers).
pub(crate) fn profile_module(
    info: &ElfInfo,
    mtime: i64,
    load_bias: u64,
    functions: Vec<Touch>,
) -> Module {
    Module {
        path: info.path.clone(),
        build_id: info.build_id_hex(),
        size: info.size,
        mtime,
        load_bias,
        symbols: symbols_label(&info.symbol_source),
        functions_total: info.functions.len(),
        functions,
    }
}

pub(crate) fn symbols_label(source: &SymbolSource) -> String {
    match source {
        SymbolSource::Symtab => "symtab".into(),
        SymbolSource::Dynsym => "dynsym".into(),
        SymbolSource::DebugFile(p) => format!("debug-file:{}", p.display()),
        SymbolSource::None => "none".into(),
    }
}

/// The warning for a module with code but no function symbols, which is profiled at page
/// level only. (A data-only library, a few bytes of crt code, has nothing to profile.)
pub(crate) fn stripped_warning(info: &ElfInfo, path: &Path) -> Option<String> {
    let code: u64 = info.sections.iter().filter(|s| s.executable).map(|s| s.size).sum();
    (info.symbol_source == SymbolSource::None && code >= coldstart_elf::PAGE_SIZE).then(|| {
        format!(
            "{} has no function symbols (stripped, no debug file): profiled at page level only (use --pages); \
             to get symbols install its -dbgsym package (apt-get install PACKAGE-dbgsym from the debian-debug archive) \
             or fetch them with debuginfod (debuginfod-find debuginfo {})",
            path.display(),
            info.build_id_hex().unwrap_or_else(|| "BUILD-ID".into())
        )
    })
}

pub(crate) fn mtime_of(path: &Path) -> i64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.mtime()).unwrap_or(0)
}

pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

fn read_auxv(pid: i32) -> HashMap<u64, u64> {
    let bytes = std::fs::read(format!("/proc/{pid}/auxv")).unwrap_or_default();
    bytes
        .chunks_exact(16)
        .map(|c| {
            (
                u64::from_ne_bytes(c[..8].try_into().unwrap()),
                u64::from_ne_bytes(c[8..].try_into().unwrap()),
            )
        })
        .collect()
}

impl<'a> Tracer<'a> {
    /// Take over a child stopped before exec (traced with TRACEME), let it exec, arm it.
    pub(crate) fn start(
        opts: TraceOptions<'a>,
        pid: i32,
        errors: &mut File,
        path: &Path,
    ) -> Result<Tracer<'a>, ProfileError> {
        let options = libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK
            | libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_EXITKILL;
        ptrace(libc::PTRACE_SETOPTIONS, pid, 0, options as usize)
            .map_err(|e| ProfileError::os("PTRACE_SETOPTIONS", e))?;
        cont(pid, 0);
        let mut status = 0;
        // SAFETY: waiting for our own traced child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        let exec_event = libc::WIFSTOPPED(status) && (status >> 16) == libc::PTRACE_EVENT_EXEC;
        if r != pid || !exec_event {
            return Err(crate::spawn::child_error(errors, path).unwrap_or_else(|| {
                ProfileError::Setup(format!(
                    "{} did not reach exec (status {status:#x})",
                    path.display()
                ))
            }));
        }
        let mut tracer = Tracer {
            opts,
            root: pid,
            t0: Instant::now(),
            modules: Vec::new(),
            module_by_key: HashMap::new(),
            info_cache: HashMap::new(),
            spaces: Vec::new(),
            threads: HashMap::new(),
            ordinal: 0,
            warnings: Vec::new(),
            last_fault: None,
            recording: true,
        };
        let space = tracer.new_space_at_exec(pid)?;
        tracer.threads.insert(
            pid,
            Thread {
                space,
                tgid: pid,
                seen: true,
                early: false,
                stepping: false,
                stop_pending: false,
                stopped: false,
            },
        );
        cont(pid, 0);
        Ok(tracer)
    }

    fn elf(&mut self, path: &Path) -> Result<Arc<ElfInfo>, ProfileError> {
        if let Some(i) = self.info_cache.get(path) {
            return Ok(i.clone());
        }
        let info = Arc::new(ElfInfo::open(path, self.opts.symbols)?);
        if info.machine != coldstart_elf::Machine::X86_64 {
            return Err(ProfileError::UnsupportedMachine { path: path.to_owned() });
        }
        self.info_cache.insert(path.to_owned(), info.clone());
        Ok(info)
    }

    /// A process just executed a new image: build its address space and arm the executable
    /// and the loader.
    fn new_space_at_exec(&mut self, pid: i32) -> Result<usize, ProfileError> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| ProfileError::os("open /proc/PID/mem", e))?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map_err(|e| ProfileError::os("readlink /proc/PID/exe", e))?;
        let auxv = read_auxv(pid);
        let info = self.elf(&exe)?;
        let entry = *auxv.get(&(libc::AT_ENTRY)).unwrap_or(&info.entry);
        let exe_bias = entry.wrapping_sub(info.entry);
        self.spaces.push(Space {
            pid,
            mem: Box::new(mem),
            breakpoints: HashMap::new(),
            loaded: HashMap::new(),
            fixed: vec![exe_bias],
            r_debug: None,
            rendezvous: None,
            detach_at_first_stop: false,
            detach_at_exec: false,
            alive: true,
        });
        let space = self.spaces.len() - 1;
        self.arm_module(space, &exe, exe_bias)?;
        if let Some(interp) = info.interpreter.clone() {
            let base = auxv.get(&libc::AT_BASE).copied().unwrap_or(0);
            let interp_path =
                std::fs::canonicalize(&interp).unwrap_or_else(|_| PathBuf::from(&interp));
            self.spaces[space].fixed.push(base);
            self.arm_module(space, &interp_path, base)?;
            let r_debug = coldstart_elf::find_symbol(&interp_path, "_r_debug")?;
            let state = coldstart_elf::find_symbol(&interp_path, "_dl_debug_state")?;
            match (r_debug, state) {
                (Some(r), Some(s)) => {
                    self.spaces[space].r_debug = Some(r + base);
                    self.set_rendezvous(space, s + base)?;
                }
                _ => self.warnings.push(format!(
                    "the loader {} has no _r_debug/_dl_debug_state symbols: libraries loaded after exec are not profiled",
                    interp_path.display()
                )),
            }
        }
        Ok(space)
    }

    fn set_rendezvous(&mut self, space: usize, address: u64) -> Result<(), ProfileError> {
        let sp = &mut self.spaces[space];
        let mut code = [0u8; 5];
        sp.mem.read_at(&mut code, address).map_err(|e| ProfileError::os("read loader code", e))?;
        // Already armed as a function entry? Then the original byte is in the table.
        // Already armed as a function entry? Then the original byte is in the table.
        let replaced = sp.breakpoints.remove(&address);
        let orig = match replaced {
            Some(bp) if bp.armed => bp.orig,
            _ => code[0],
        };
        let function = replaced.filter(|bp| bp.armed).map(|bp| (bp.module, bp.function));
        code[0] = orig;
        let emulate_ret = code[0] == 0xC3 || code[..5] == [0xF3, 0x0F, 0x1E, 0xFA, 0xC3];
        sp.mem.write_at(&[INT3], address).map_err(|e| ProfileError::os("write breakpoint", e))?;
        sp.rendezvous = Some(Rendezvous { address, emulate_ret, orig, function });
        Ok(())
    }

    /// Register (or find) the module at `path` and put a breakpoint at every untouched
    /// function entry of it in `space`.
    fn arm_module(&mut self, space: usize, path: &Path, bias: u64) -> Result<(), ProfileError> {
        let info = self.elf(path)?;
        let key = (path.to_owned(), info.build_id.clone());
        let module = match self.module_by_key.get(&key) {
            Some(&m) => m,
            None => {
                self.warnings.extend(stripped_warning(&info, path));
                self.modules.push(ModuleRec {
                    file: coldstart_elf::Mmap::open(path).ok().map(Arc::new),
                    touched: vec![false; info.functions.len()],
                    mtime: mtime_of(path),
                    info: info.clone(),
                    load_bias: bias,
                    order: Vec::new(),
                    first_ordinal: u64::MAX,
                });
                self.module_by_key.insert(key, self.modules.len() - 1);
                self.modules.len() - 1
            }
        };
        self.spaces[space].loaded.insert(bias, module);
        let rec = &self.modules[module];
        let mut addrs: Vec<(u64, u32)> = info
            .functions
            .iter()
            .enumerate()
            .filter(|(i, _)| !rec.touched[*i])
            .map(|(i, f)| (f.address.wrapping_add(bias), i as u32))
            .collect();
        addrs.sort_unstable();
        let file = rec.file.clone();
        let sp = &mut self.spaces[space];
        let file_offset = |a: u64| info.vaddr_to_offset(a.wrapping_sub(bias)).map(|o| o as usize);
        let bytes = file.as_ref().map(|f| f.bytes());
        let rendezvous = sp.rendezvous.map(|r| r.address);
        write_breakpoints(
            &*sp.mem,
            &mut sp.breakpoints,
            module,
            &addrs,
            bytes,
            file_offset,
            rendezvous,
        )
        .map_err(|e| ProfileError::os("write breakpoints", e))
    }

    fn record(&mut self, module: usize, function: u32, pid: i32, tid: i32) {
        if !self.recording {
            return;
        }
        let rec = &mut self.modules[module];
        if rec.touched[function as usize] {
            return;
        }
        rec.touched[function as usize] = true;
        let f = &rec.info.functions[function as usize];
        rec.first_ordinal = rec.first_ordinal.min(self.ordinal);
        rec.order.push(Touch {
            address: f.address,
            size: f.size,
            names: f.names.clone(),
            first_touch_ns: self.t0.elapsed().as_nanos() as u64,
            pid,
            tid,
            ordinal: self.ordinal,
            workloads: Vec::new(),
        });
        self.ordinal += 1;
    }

    /// Run until readiness, exit, crash or timeout; then detach or kill.
    pub(crate) fn run(
        mut self,
        ready_flag: &AtomicBool,
        ready_fd: Option<i32>,
    ) -> Result<Traced, ProfileError> {
        let deadline = self.opts.timeout.map(|t| Instant::now() + t);
        let wake = ChildWake::new();
        let stop = loop {
            if ready_flag.load(Ordering::Relaxed) {
                let killed = self.opts.kill_at_ready;
                self.finish(killed)?;
                break Stop::Ready { signal: self.opts.ready_label.clone(), killed };
            }
            let mut status = 0;
            // SAFETY: waiting for any of our tracees without blocking.
            let tid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) };
            if tid < 0 {
                // No children left.
                break Stop::Exit { code: 0 };
            }
            if tid == 0 {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    self.finish(true)?;
                    break Stop::Timeout {
                        seconds: self.opts.timeout.unwrap_or_default().as_secs_f64(),
                    };
                }
                wake.wait(ready_fd, 100);
                continue;
            }
            if let Some(stop) = self.handle(tid, status)? {
                // The root is gone: let followed children go.
                if self.threads.values().any(|t| !t.stopped) {
                    let kill = self.opts.kill_at_ready;
                    self.finish(kill)?;
                }
                break stop;
            }
        };
        let duration_ns = self.t0.elapsed().as_nanos() as u64;
        let mut order: Vec<usize> = (0..self.modules.len()).collect();
        order.sort_by_key(|&m| self.modules[m].first_ordinal);
        let modules = order
            .into_iter()
            .map(|m| {
                let rec = &mut self.modules[m];
                profile_module(&rec.info, rec.mtime, rec.load_bias, std::mem::take(&mut rec.order))
            })
            .collect();
        Ok(Traced { modules, stop, duration_ns, warnings: self.warnings })
    }

    /// Handle one wait status. Returns the stop reason when the root process ended.
    fn handle(&mut self, tid: i32, status: i32) -> Result<Option<Stop>, ProfileError> {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            if let Some(t) = self.threads.remove(&tid) {
                if let Some(sp) = self.spaces.get_mut(t.space).filter(|sp| sp.pid == tid) {
                    sp.alive = false;
                }
            }
            if tid == self.root {
                if libc::WIFEXITED(status) {
                    return Ok(Some(Stop::Exit { code: libc::WEXITSTATUS(status) }));
                }
                let sig = libc::WTERMSIG(status);
                return Ok(Some(Stop::Crash {
                    signal: signal_name(sig),
                    pid: tid,
                    fault: self.last_fault.clone(),
                }));
            }
            return Ok(None);
        }
        if !libc::WIFSTOPPED(status) {
            return Ok(None);
        }
        let sig = libc::WSTOPSIG(status);
        let event = status >> 16;
        if let std::collections::hash_map::Entry::Vacant(slot) = self.threads.entry(tid) {
            // A new thread or child whose creation event we have not seen yet: it is
            // reported with its first stop (SIGSTOP); the event assigns its space.
            slot.insert(Thread {
                space: usize::MAX,
                tgid: tid,
                seen: true,
                early: true,
                stepping: false,
                stop_pending: false,
                stopped: false,
            });
            return Ok(None);
        }
        if event != 0 {
            self.handle_event(tid, event)?;
            return Ok(None);
        }
        let t = self.threads.get_mut(&tid).expect("known thread");
        if t.stop_pending && sig == libc::SIGSTOP {
            t.stop_pending = false;
            t.stopped = true;
            return Ok(None);
        }
        if !t.seen && sig == libc::SIGSTOP {
            t.seen = true;
            let space = t.space;
            if space != usize::MAX && self.spaces[space].detach_at_first_stop {
                self.clean_and_detach(space, tid);
            } else {
                cont(tid, 0);
            }
            return Ok(None);
        }
        if sig == libc::SIGTRAP {
            self.handle_trap(tid)?;
            return Ok(None);
        }
        if matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGABRT)
        {
            let ip = ptrace(libc::PTRACE_PEEKUSER, tid, RIP, 0).unwrap_or(0) as u64;
            let location = self.locate(self.threads[&tid].space, ip);
            self.last_fault = Some(Fault { tid, ip, location });
        }
        if matches!(sig, libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU) {
            // A group-stop (the stop signal was already delivered) reports the same signal
            // again; GETSIGINFO fails there. Injecting it again would loop, so resume.
            let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::uninit();
            // SAFETY: GETSIGINFO writes one siginfo_t.
            let r = unsafe { libc::ptrace(libc::PTRACE_GETSIGINFO, tid, 0, info.as_mut_ptr()) };
            if r < 0 {
                cont(tid, 0);
                return Ok(None);
            }
        }
        // Not ours: pass the signal on unchanged.
        cont(tid, sig);
        Ok(None)
    }

    fn locate(&self, space: usize, ip: u64) -> Option<String> {
        let sp = self.spaces.get(space)?;
        sp.loaded.iter().find_map(|(&bias, &m)| {
            let info = &self.modules[m].info;
            let f = info.function_at(ip.wrapping_sub(bias))?;
            Some(format!("{}: {}", info.path.display(), coldstart_elf::demangle(&f.names[0])))
        })
    }

    fn handle_event(&mut self, tid: i32, event: i32) -> Result<(), ProfileError> {
        let (space, tgid) = (self.threads[&tid].space, self.threads[&tid].tgid);
        match event {
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                let mut msg: libc::c_ulong = 0;
                // SAFETY: GETEVENTMSG writes one c_ulong.
                unsafe {
                    libc::ptrace(libc::PTRACE_GETEVENTMSG, tid, 0, &mut msg as *mut libc::c_ulong)
                };
                let child = msg as i32;
                let (child_space, child_tgid) = match event {
                    libc::PTRACE_EVENT_CLONE => (space, tgid),
                    libc::PTRACE_EVENT_VFORK if self.opts.follow_forks => (space, child),
                    libc::PTRACE_EVENT_VFORK => {
                        (self.new_child_space(space, child, false, true)?, child)
                    }
                    _ => {
                        (self.new_child_space(space, child, !self.opts.follow_forks, false)?, child)
                    }
                };
                let early = self.threads.get(&child).is_some_and(|t| t.early);
                self.threads.insert(
                    child,
                    Thread {
                        space: child_space,
                        tgid: child_tgid,
                        seen: early,
                        early: false,
                        stepping: false,
                        stop_pending: false,
                        stopped: false,
                    },
                );
                if early {
                    // Its first stop came before this event: act on it now.
                    if self.spaces[child_space].detach_at_first_stop {
                        self.clean_and_detach(child_space, child);
                    } else {
                        cont(child, 0);
                    }
                }
                cont(tid, 0);
            }
            libc::PTRACE_EVENT_EXEC => {
                // Other threads of the process are gone; the exec'ing thread now has the
                // process id.
                let pid = tgid;
                self.threads.retain(|&t, th| th.tgid != pid || t == tid);
                if let Some(mut th) = self.threads.remove(&tid) {
                    th.tgid = pid;
                    self.threads.insert(pid, th);
                }
                let detach_at_exec = self.spaces[space].detach_at_exec;
                if self.spaces[space].pid == pid {
                    self.spaces[space].alive = false;
                }
                if detach_at_exec || !self.opts.follow_exec {
                    if !detach_at_exec {
                        let exe =
                            std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
                        self.warnings.push(format!(
                            "process {pid} executed {}, which is not profiled: add --follow-exec to profile it",
                            exe.display()
                        ));
                    }
                    self.threads.remove(&pid);
                    let _ = ptrace(libc::PTRACE_DETACH, pid, 0, 0);
                } else {
                    let new_space = self.new_space_at_exec(pid)?;
                    self.threads.get_mut(&pid).unwrap().space = new_space;
                    cont(pid, 0);
                }
            }
            _ => cont(tid, 0),
        }
        Ok(())
    }

    /// A fork or vfork child: its own space. Memory is a copy of the parent's, armed
    /// breakpoints included.
    fn new_child_space(
        &mut self,
        parent: usize,
        child: i32,
        detach: bool,
        detach_at_exec: bool,
    ) -> Result<usize, ProfileError> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{child}/mem"))
            .map_err(|e| ProfileError::os("open /proc/PID/mem of a child", e))?;
        let p = &self.spaces[parent];
        let space = Space {
            pid: child,
            mem: Box::new(mem),
            breakpoints: p.breakpoints.clone(),
            loaded: p.loaded.clone(),
            fixed: p.fixed.clone(),
            r_debug: p.r_debug,
            rendezvous: p.rendezvous,
            detach_at_first_stop: detach,
            detach_at_exec,
            alive: true,
        };
        self.spaces.push(space);
        Ok(self.spaces.len() - 1)
    }

    /// Restore every breakpoint of a (not followed) fork child, then let it go.
    fn clean_and_detach(&mut self, space: usize, tid: i32) {
        restore_all(&mut self.spaces[space]);
        self.spaces[space].alive = false;
        self.threads.remove(&tid);
        let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
    }

    fn handle_trap(&mut self, tid: i32) -> Result<(), ProfileError> {
        let space = self.threads[&tid].space;
        if self.threads[&tid].stepping {
            // Finished stepping over the rendezvous: re-arm it.
            self.threads.get_mut(&tid).unwrap().stepping = false;
            if let Some(r) = self.spaces[space].rendezvous {
                let _ = self.spaces[space].mem.write_at(&[INT3], r.address);
            }
            cont(tid, 0);
            return Ok(());
        }
        let rip = ptrace(libc::PTRACE_PEEKUSER, tid, RIP, 0)
            .map_err(|e| ProfileError::os("PTRACE_PEEKUSER", e))? as u64;
        let addr = rip.wrapping_sub(1);
        let sp = &mut self.spaces[space];
        if let Some(bp) = sp.breakpoints.get_mut(&addr) {
            let bp = *bp;
            if bp.armed {
                sp.mem
                    .write_at(&[bp.orig], addr)
                    .map_err(|e| ProfileError::os("restore breakpoint", e))?;
                sp.breakpoints.get_mut(&addr).unwrap().armed = false;
                let pid = self.threads[&tid].tgid;
                self.record(bp.module, bp.function, pid, tid);
            }
            ptrace(libc::PTRACE_POKEUSER, tid, RIP, addr as usize)
                .map_err(|e| ProfileError::os("PTRACE_POKEUSER", e))?;
            cont(tid, 0);
            return Ok(());
        }
        if let Some(r) = sp.rendezvous.filter(|r| r.address == addr) {
            // The loader's rendezvous: record the function once, look at r_debug, step over.
            let pid = self.threads[&tid].tgid;
            if let Some((m, f)) = r.function {
                self.record(m, f, pid, tid);
            }
            self.rendezvous(space)?;
            let sp = &mut self.spaces[space];
            if r.emulate_ret {
                let rsp = ptrace(libc::PTRACE_PEEKUSER, tid, RSP, 0)
                    .map_err(|e| ProfileError::os("PTRACE_PEEKUSER", e))?
                    as u64;
                let mut ret = [0u8; 8];
                sp.mem
                    .read_exact_at(&mut ret, rsp)
                    .map_err(|e| ProfileError::os("read return address", e))?;
                ptrace(libc::PTRACE_POKEUSER, tid, RIP, u64::from_ne_bytes(ret) as usize)
                    .map_err(|e| ProfileError::os("PTRACE_POKEUSER", e))?;
                ptrace(libc::PTRACE_POKEUSER, tid, RSP, (rsp + 8) as usize)
                    .map_err(|e| ProfileError::os("PTRACE_POKEUSER", e))?;
                cont(tid, 0);
            } else {
                sp.mem
                    .write_at(&[r.orig], addr)
                    .map_err(|e| ProfileError::os("restore breakpoint", e))?;
                ptrace(libc::PTRACE_POKEUSER, tid, RIP, addr as usize)
                    .map_err(|e| ProfileError::os("PTRACE_POKEUSER", e))?;
                self.threads.get_mut(&tid).unwrap().stepping = true;
                let _ = ptrace(libc::PTRACE_SINGLESTEP, tid, 0, 0);
            }
            return Ok(());
        }
        // A SIGTRAP we did not cause: the program's own.
        cont(tid, libc::SIGTRAP);
        Ok(())
    }

    /// At the loader's rendezvous: when the link map is consistent, arm new libraries and
    /// forget unloaded ones.
    fn rendezvous(&mut self, space: usize) -> Result<(), ProfileError> {
        let Some(r_debug) = self.spaces[space].r_debug else { return Ok(()) };
        let mem = &self.spaces[space].mem;
        let read_u64 = |addr: u64| -> Option<u64> {
            let mut b = [0u8; 8];
            mem.read_exact_at(&mut b, addr).ok().map(|()| u64::from_ne_bytes(b))
        };
        let Some(state) = read_u64(r_debug + 24) else { return Ok(()) };
        if state & 0xffff_ffff != RT_CONSISTENT {
            return Ok(());
        }
        let mut libraries = Vec::new();
        let mut link = read_u64(r_debug + 8).unwrap_or(0);
        let mut guard = 0;
        while link != 0 && guard < 100_000 {
            guard += 1;
            let (Some(l_addr), Some(l_name), Some(l_next)) =
                (read_u64(link), read_u64(link + 8), read_u64(link + 24))
            else {
                break;
            };
            let mut name = vec![0u8; 4096];
            let n = mem.read_at(&mut name, l_name).unwrap_or(0);
            name.truncate(n);
            if let Some(end) = name.iter().position(|&b| b == 0) {
                name.truncate(end);
            }
            if !name.is_empty() && name[0] == b'/' {
                let path = PathBuf::from(String::from_utf8_lossy(&name).into_owned());
                libraries.push((l_addr, path));
            }
            link = l_next;
        }
        let live: std::collections::HashSet<u64> = libraries.iter().map(|(b, _)| *b).collect();
        // Unloaded (dlclose): forget their breakpoints, the memory is gone.
        let sp = &mut self.spaces[space];
        let gone: Vec<(u64, usize)> = sp
            .loaded
            .iter()
            .filter(|(b, _)| !live.contains(b) && !sp.fixed.contains(b))
            .map(|(b, m)| (*b, *m))
            .collect();
        for (bias, m) in gone {
            sp.loaded.remove(&bias);
            sp.breakpoints.retain(|_, bp| bp.module != m);
        }
        for (bias, path) in libraries {
            if self.spaces[space].loaded.contains_key(&bias) {
                continue;
            }
            let canonical = std::fs::canonicalize(&path).unwrap_or(path);
            if let Err(e) = self.arm_module(space, &canonical, bias) {
                self.warnings.push(format!("{} is not profiled: {e}", canonical.display()));
            }
        }
        Ok(())
    }

    /// Stop every thread, restore every breakpoint, then detach (the program runs on) or
    /// kill the tree.
    fn finish(&mut self, kill: bool) -> Result<(), ProfileError> {
        self.recording = false;
        if kill {
            // SAFETY: killing our own process group and reaping it.
            unsafe {
                libc::kill(-self.root, libc::SIGKILL);
                for &tid in self.threads.keys() {
                    libc::kill(tid, libc::SIGKILL);
                }
            }
            let mut status = 0;
            // SAFETY: reaping our tracees.
            while unsafe { libc::waitpid(-1, &mut status, libc::__WALL) } > 0 {}
            self.threads.clear();
            return Ok(());
        }
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for &tid in &tids {
            let t = self.threads.get_mut(&tid).unwrap();
            if t.early {
                // Stopped already, waiting for its creation event.
                t.stopped = true;
                continue;
            }
            if t.space == usize::MAX || !t.seen {
                // Its first SIGSTOP is still coming: that stop will do.
                t.stop_pending = true;
                continue;
            }
            t.stop_pending = true;
            // SAFETY: stopping one of our tracee threads.
            unsafe { libc::syscall(libc::SYS_tgkill, t.tgid, tid, libc::SIGSTOP) };
        }
        let start = Instant::now();
        while self.threads.values().any(|t| !t.stopped) {
            let mut status = 0;
            // SAFETY: waiting for our tracees.
            let tid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) };
            if tid < 0 {
                break;
            }
            if tid == 0 {
                if start.elapsed() > Duration::from_secs(10) {
                    return Err(ProfileError::Setup(
                        "threads did not stop within 10 s for detaching".into(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            if !self.threads.contains_key(&tid) && libc::WIFSTOPPED(status) {
                // A brand-new thread: its first stop is its quiesce stop.
                self.threads.insert(
                    tid,
                    Thread {
                        space: usize::MAX,
                        tgid: tid,
                        seen: true,
                        early: false,
                        stepping: false,
                        stop_pending: false,
                        stopped: true,
                    },
                );
                continue;
            }
            if let Some(t) = self.threads.get_mut(&tid) {
                if libc::WIFSTOPPED(status)
                    && libc::WSTOPSIG(status) == libc::SIGSTOP
                    && (t.stop_pending || !t.seen)
                    && status >> 16 == 0
                {
                    t.seen = true;
                    t.stop_pending = false;
                    t.stopped = true;
                    continue;
                }
            }
            self.handle(tid, status)?;
            // Handling may have resumed a thread that had not been asked to stop yet (a
            // child whose creation event came late): ask it now.
            for (&other, t) in self.threads.iter_mut() {
                if !t.stopped && !t.stop_pending && t.seen && !t.early {
                    t.stop_pending = true;
                    // SAFETY: stopping one of our tracee threads.
                    unsafe { libc::syscall(libc::SYS_tgkill, t.tgid, other, libc::SIGSTOP) };
                }
            }
        }
        for space in &mut self.spaces {
            if space.alive {
                restore_all(space);
            }
        }
        // A thread stopped by the clone of a thread of some space: find its space by tgid.
        for (&tid, t) in &self.threads {
            let _ = t;
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
        }
        self.threads.clear();
        Ok(())
    }
}

/// Read and write the memory of a traced process (`/proc/PID/mem`); a fake in unit tests.
trait Memory {
    fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<()>;
    fn read_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<usize>;
    fn write_all_at(&self, buf: &[u8], addr: u64) -> std::io::Result<()>;
    fn write_at(&self, buf: &[u8], addr: u64) -> std::io::Result<usize> {
        self.write_all_at(buf, addr).map(|()| buf.len())
    }
}

impl Memory for File {
    fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self, buf, addr)
    }
    fn read_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<usize> {
        FileExt::read_at(self, buf, addr)
    }
    fn write_all_at(&self, buf: &[u8], addr: u64) -> std::io::Result<()> {
        FileExt::write_all_at(self, buf, addr)
    }
}

/// Arm `addrs` (run-time address, function index; sorted): close entries are written with one
/// write of the file's bytes (`file`, at `file_offset(address)`) with `int3` at each entry;
/// without file bytes, one byte at a time from memory. Entries already armed, and the
/// rendezvous, keep their `int3` and their recorded original byte.
fn write_breakpoints(
    mem: &dyn Memory,
    breakpoints: &mut HashMap<u64, Breakpoint>,
    module: usize,
    addrs: &[(u64, u32)],
    file: Option<&[u8]>,
    file_offset: impl Fn(u64) -> Option<usize>,
    rendezvous: Option<u64>,
) -> std::io::Result<()> {
    let offset = |a: u64| file_offset(a).filter(|&o| file.is_some_and(|f| o < f.len()));
    let sorted: Vec<u64> = addrs.iter().map(|a| a.0).collect();
    for (i, j) in groups(&sorted, MERGE_GAP) {
        let (start, end) = (addrs[i].0, addrs[j - 1].0);
        let span = match (offset(start), offset(end), file) {
            (Some(a), Some(b), Some(bytes)) if b >= a && (b - a) as u64 == end - start => {
                Some(&bytes[a..b + 1])
            }
            _ => None,
        };
        if let Some(span) = span {
            let mut buf = span.to_vec();
            for &(a, f) in &addrs[i..j] {
                let off = (a - start) as usize;
                if Some(a) != rendezvous && !breakpoints.get(&a).is_some_and(|b| b.armed) {
                    breakpoints
                        .insert(a, Breakpoint { module, function: f, orig: buf[off], armed: true });
                }
                buf[off] = INT3;
            }
            if let Some(r) = rendezvous.filter(|&r| r >= start && r <= end) {
                buf[(r - start) as usize] = INT3;
            }
            mem.write_all_at(&buf, start)?;
        } else {
            for &(a, f) in &addrs[i..j] {
                let mut b = [0u8; 1];
                if Some(a) == rendezvous
                    || breakpoints.get(&a).is_some_and(|b| b.armed)
                    || mem.read_exact_at(&mut b, a).is_err()
                {
                    continue;
                }
                if mem.write_all_at(&[INT3], a).is_ok() {
                    breakpoints
                        .insert(a, Breakpoint { module, function: f, orig: b[0], armed: true });
                }
            }
        }
    }
    Ok(())
}

/// Put every original byte back (the rendezvous breakpoint included).
fn restore_all(space: &mut Space) {
    let rendezvous = space.rendezvous.take();
    restore_breakpoints(
        &*space.mem,
        &mut space.breakpoints,
        rendezvous.map(|r| (r.address, r.orig)),
    );
}

fn restore_breakpoints(
    mem: &dyn Memory,
    breakpoints: &mut HashMap<u64, Breakpoint>,
    extra: Option<(u64, u8)>,
) {
    let mut writes: Vec<(u64, u8)> =
        breakpoints.iter().filter(|(_, b)| b.armed).map(|(&a, b)| (a, b.orig)).collect();
    writes.extend(extra);
    writes.sort_unstable();
    let sorted: Vec<u64> = writes.iter().map(|w| w.0).collect();
    for (i, j) in groups(&sorted, MERGE_GAP) {
        let start = writes[i].0;
        let end = writes[j - 1].0 + 1;
        let mut buf = vec![0u8; (end - start) as usize];
        if mem.read_exact_at(&mut buf, start).is_ok() {
            for &(a, b) in &writes[i..j] {
                buf[(a - start) as usize] = b;
            }
            let _ = mem.write_all_at(&buf, start);
        }
    }
    for bp in breakpoints.values_mut() {
        bp.armed = false;
    }
}

/// Split sorted addresses into groups `(first, end)` (index ranges) whose neighbours are at
/// most `gap` bytes apart: each group becomes one write.
fn groups(sorted: &[u64], gap: u64) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i + 1;
        while j < sorted.len() && sorted[j] - sorted[j - 1] <= gap {
            j += 1;
        }
        out.push((i, j));
        i = j;
    }
    out
}

/// Wakes the tracer when a tracee stops: `SIGCHLD` is blocked in the tracing thread and read
/// from a `signalfd`, so an idle tracer sleeps in `poll` instead of spinning, and a trap is
/// handled as soon as it happens. (The callers block `SIGCHLD` before starting any helper
/// thread; the poll timeout bounds the delay if another thread consumed the signal.)
pub(crate) struct ChildWake {
    fd: i32,
}

impl ChildWake {
    pub(crate) fn new() -> ChildWake {
        // SAFETY: building a signal set and a signalfd for SIGCHLD, both checked.
        unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGCHLD);
            libc::pthread_sigmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
            let fd = libc::signalfd(-1, &mask, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            ChildWake { fd }
        }
    }

    /// Sleep until a child changes state, readiness fires, or `ms` pass.
    pub(crate) fn wait(&self, ready_fd: Option<i32>, ms: i32) {
        let mut fds = Vec::with_capacity(2);
        if self.fd >= 0 {
            fds.push(libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 });
        }
        if let Some(fd) = ready_fd {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        // SAFETY: polling and draining descriptors we own.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
            let mut info = [0u8; 128];
            while self.fd >= 0 && libc::read(self.fd, info.as_mut_ptr().cast(), info.len()) > 0 {}
        }
    }
}

impl Drop for ChildWake {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: closing our signalfd.
            unsafe { libc::close(self.fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::{groups, restore_breakpoints, write_breakpoints, Memory, INT3};

    /// Process memory as a byte vector at `base`; counts writes.
    struct FakeMemory {
        base: u64,
        bytes: RefCell<Vec<u8>>,
        writes: RefCell<usize>,
    }

    impl Memory for FakeMemory {
        fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<()> {
            let off = addr.checked_sub(self.base).ok_or(std::io::ErrorKind::InvalidInput)? as usize;
            let mem = self.bytes.borrow();
            let src = mem.get(off..off + buf.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn read_at(&self, buf: &mut [u8], addr: u64) -> std::io::Result<usize> {
            self.read_exact_at(buf, addr).map(|()| buf.len())
        }
        fn write_all_at(&self, buf: &[u8], addr: u64) -> std::io::Result<()> {
            let off = addr.checked_sub(self.base).ok_or(std::io::ErrorKind::InvalidInput)? as usize;
            let mut mem = self.bytes.borrow_mut();
            mem.get_mut(off..off + buf.len())
                .ok_or(std::io::ErrorKind::UnexpectedEof)?
                .copy_from_slice(buf);
            *self.writes.borrow_mut() += 1;
            Ok(())
        }
    }

    #[test]
    fn arming_puts_int3_at_every_entry_and_restoring_gives_the_text_back() {
        let text: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8 + 1).collect();
        let base = 0x40_0000;
        let mem = FakeMemory { base, bytes: RefCell::new(text.clone()), writes: RefCell::new(0) };
        // Entries: a dense cluster, then sparse ones; file offset = address - base.
        let mut addrs: Vec<(u64, u32)> = (0..50).map(|i| (base + 16 * i, i as u32)).collect();
        addrs.extend((0..5).map(|i| (base + 4096 + 2048 * i, 50 + i as u32)));
        let mut bps = HashMap::new();
        let rendezvous = Some(base + 32);
        write_breakpoints(
            &mem,
            &mut bps,
            0,
            &addrs,
            Some(&text),
            |a| Some((a - base) as usize),
            rendezvous,
        )
        .unwrap();

        let now = mem.bytes.borrow().clone();
        for &(a, _) in &addrs {
            assert_eq!(now[(a - base) as usize], INT3, "{a:#x}");
        }
        assert_eq!(bps.len(), addrs.len() - 1, "the rendezvous is not a one-shot breakpoint");
        for (a, b) in &bps {
            assert_eq!(b.orig, text[(*a - base) as usize]);
        }
        let changed = now.iter().zip(&text).filter(|(x, y)| x != y).count();
        assert_eq!(changed, addrs.len(), "nothing but the entries changed");
        assert_eq!(*mem.writes.borrow(), 1 + 5, "one write for the cluster, one per far entry");

        restore_breakpoints(&mem, &mut bps, rendezvous.map(|r| (r, text[32])));
        assert_eq!(*mem.bytes.borrow(), text);
        assert!(bps.values().all(|b| !b.armed));
    }

    #[test]
    fn without_file_bytes_entries_are_armed_one_by_one_and_unmapped_ones_skipped() {
        let text = vec![0x55u8; 8192];
        let base = 0x1000;
        let mem = FakeMemory { base, bytes: RefCell::new(text.clone()), writes: RefCell::new(0) };
        let addrs = vec![(base + 8, 0), (base + 100, 1), (base + 100_000, 2)];
        let mut bps = HashMap::new();
        write_breakpoints(&mem, &mut bps, 3, &addrs, None, |_| None, None).unwrap();
        assert_eq!(bps.len(), 2, "the unmapped entry is skipped");
        assert_eq!(mem.bytes.borrow()[8], INT3);
        assert_eq!(mem.bytes.borrow()[100], INT3);
        assert!(bps.values().all(|b| b.orig == 0x55 && b.module == 3));
    }

    #[test]
    fn close_entries_share_a_write_far_ones_do_not() {
        assert_eq!(groups(&[], 512), vec![]);
        assert_eq!(groups(&[100], 512), vec![(0, 1)]);
        assert_eq!(groups(&[100, 600, 1200, 5000, 5001], 512), vec![(0, 2), (2, 3), (3, 5)]);
    }

    #[test]
    fn twenty_thousand_small_functions_need_few_writes() {
        // 20,000 functions of 16 bytes each, back to back: one write.
        let dense: Vec<u64> = (0..20_000u64).map(|i| 0x1000 + i * 16).collect();
        assert_eq!(groups(&dense, 512).len(), 1);
        // Large functions (2 KiB apart): one write each, never a read of the text between.
        let sparse: Vec<u64> = (0..100u64).map(|i| 0x1000 + i * 2048).collect();
        assert_eq!(groups(&sparse, 512).len(), 100);
    }
}
