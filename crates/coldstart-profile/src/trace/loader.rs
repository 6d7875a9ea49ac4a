//! Finding the modules of an address space and arming them: the executable and the loader
//! at exec (their load biases from the auxiliary vector), then every library the loader maps,
//! read from its `r_debug` link map at the rendezvous breakpoint (`_dl_debug_state`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use coldstart_elf::ElfInfo;

use super::breakpoints::{write_breakpoints, INT3};
use super::{ModuleRec, Space, Tracer};
use crate::modules::{stripped_warning, unsymbolized, ModuleTouches};
use crate::ProfileError;

const RT_CONSISTENT: u64 = 0;

/// The permanent breakpoint at the loader's `_dl_debug_state`.
#[derive(Clone, Copy)]
pub(super) struct Rendezvous {
    pub address: u64,
    /// `_dl_debug_state` is an empty function (`ret`, maybe after `endbr64`): emulate it.
    pub emulate_ret: bool,
    pub orig: u8,
    /// The function breakpoint the rendezvous replaces (recorded on the first hit).
    pub function: Option<(usize, u32)>,
}

/// The auxiliary vector of `pid` (`AT_*` -> value).
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

impl Tracer<'_> {
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
    pub(super) fn new_space_at_exec(&mut self, pid: i32) -> Result<usize, ProfileError> {
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
            alive: true,
            exe: exe.clone(),
            parent: 0,
            parent_exe: None,
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
                self.unsymbolized.extend(unsymbolized(&info, path));
                self.modules.push(ModuleRec {
                    file: coldstart_elf::Mmap::open(path).ok().map(Arc::new),
                    touches: ModuleTouches::new(info.clone(), path, bias),
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
            .filter(|(i, f)| !rec.touches.touched(*i) && !rec.touches.copied.contains(&f.address))
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

    /// At the loader's rendezvous: when the link map is consistent, arm new libraries and
    /// forget unloaded ones.
    pub(super) fn rendezvous(&mut self, space: usize) -> Result<(), ProfileError> {
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
}
