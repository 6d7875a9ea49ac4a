//! The hot path: a thread stopped on one of our `int3`s. Look the address up, record the
//! function's first call, put the byte back, rewind the instruction pointer and continue.
//! Nothing else happens on a hit (no symbol is read, no file opened); only the loader's
//! rendezvous breakpoint reads the link map, when the set of libraries changed.

use super::breakpoints::INT3;
use super::{cont, ptrace, Tracer, RIP, RSP};
use crate::ProfileError;

impl Tracer<'_> {
    /// Record the first call of `function` of `module` (a second call, or any after the
    /// trace began to end, records nothing).
    fn record(&mut self, module: usize, function: u32, pid: i32, tid: i32) {
        if !self.recording {
            return;
        }
        let touches = &mut self.modules[module].touches;
        if touches.touched(function as usize) {
            return;
        }
        let at_ns = self.t0.elapsed().as_nanos() as u64;
        touches.record(function as usize, self.ordinal, at_ns, pid, tid);
        self.ordinal += 1;
    }

    pub(super) fn handle_trap(&mut self, tid: i32) -> Result<(), ProfileError> {
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
}
