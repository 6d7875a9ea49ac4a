//! The threads and processes of the traced tree: clone, fork, vfork and exec events (which
//! address space a new thread belongs to, which children are followed), and the end of the
//! trace, when every thread is stopped and every breakpoint restored before detaching.

use std::time::{Duration, Instant};

use super::{cont, ptrace, Space, Thread, Tracer};
use crate::format::{Image, Via};
use crate::{Follow, ProfileError};

impl Tracer<'_> {
    /// Act on a ptrace event of thread `tid`: a new thread or process joins the tree, an
    /// exec starts a new image (followed or let go); the thread then runs on.
    pub(super) fn handle_event(&mut self, tid: i32, event: i32) -> Result<(), ProfileError> {
        let (space, tgid) = (self.threads[&tid].space, self.threads[&tid].tgid);
        match event {
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                let mut msg: libc::c_ulong = 0;
                // SAFETY: GETEVENTMSG writes one c_ulong.
                unsafe {
                    libc::ptrace(libc::PTRACE_GETEVENTMSG, tid, 0, &mut msg as *mut libc::c_ulong)
                };
                self.on_new_thread(event, space, tgid, msg as i32)?;
                cont(tid, 0);
            }
            libc::PTRACE_EVENT_EXEC => self.on_exec(tid, space, tgid)?,
            _ => cont(tid, 0),
        }
        Ok(())
    }

    /// A thread (clone) or process (fork, vfork) `child` of a thread of `space`, process
    /// `tgid`: its space (the same for a thread, a copy for a process, with its image
    /// recorded), and its first stop acted on when it came before this event.
    fn on_new_thread(
        &mut self,
        event: i32,
        space: usize,
        tgid: i32,
        child: i32,
    ) -> Result<(), ProfileError> {
        let all = self.opts.follow_forks == Follow::All;
        let (child_space, child_tgid) = match event {
            libc::PTRACE_EVENT_CLONE => (space, tgid),
            libc::PTRACE_EVENT_VFORK if all => (space, child),
            // A vfork child is followed (or not) from its exec on.
            libc::PTRACE_EVENT_VFORK => (self.new_child_space(space, child, false)?, child),
            _ => {
                let followed = self.opts.follow_forks != Follow::None;
                let s = self.new_child_space(space, child, !followed)?;
                self.images.push(Image {
                    pid: child,
                    parent: tgid,
                    path: self.spaces[s].exe.clone(),
                    via: Via::Fork,
                    profiled: followed,
                });
                (s, child)
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
        Ok(())
    }

    /// Thread `tid` of process `tgid` (in `space`) executed a new image: the process's
    /// other threads are gone, the image is recorded, and followed (a new space) or let go.
    fn on_exec(&mut self, tid: i32, space: usize, tgid: i32) -> Result<(), ProfileError> {
        // Other threads of the process are gone; the exec'ing thread now has the
        // process id.
        let pid = tgid;
        self.threads.retain(|&t, th| th.tgid != pid || t == tid);
        if let Some(mut th) = self.threads.remove(&tid) {
            th.tgid = pid;
            self.threads.insert(pid, th);
        }
        let sp = &self.spaces[space];
        // A vfork child followed with every child shares its parent's space.
        let (parent, parent_exe) = if sp.pid == pid {
            (sp.parent, sp.parent_exe.clone())
        } else {
            (sp.pid, Some(sp.exe.clone()))
        };
        if self.spaces[space].pid == pid {
            self.spaces[space].alive = false;
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        // The command's own process follows its executions (a wrapper's program); a
        // child, by the rule for children.
        let followed = self.opts.follow_exec
            && (pid == self.root
                || match self.opts.follow_forks {
                    Follow::All => true,
                    Follow::Same => parent_exe.as_ref() == Some(&exe),
                    Follow::None => false,
                });
        self.images.push(Image { pid, parent, path: exe, via: Via::Exec, profiled: followed });
        if !followed {
            self.threads.remove(&pid);
            let _ = ptrace(libc::PTRACE_DETACH, pid, 0, 0);
        } else {
            let new_space = self.new_space_at_exec(pid)?;
            self.spaces[new_space].parent = parent;
            self.spaces[new_space].parent_exe = parent_exe;
            self.threads.get_mut(&pid).unwrap().space = new_space;
            cont(pid, 0);
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
            alive: true,
            exe: p.exe.clone(),
            parent: p.pid,
            parent_exe: Some(p.exe.clone()),
        };
        self.spaces.push(space);
        Ok(self.spaces.len() - 1)
    }

    /// Restore every breakpoint of a (not followed) fork child, then let it go.
    pub(super) fn clean_and_detach(&mut self, space: usize, tid: i32) {
        self.spaces[space].restore_all();
        self.spaces[space].alive = false;
        self.threads.remove(&tid);
        let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
    }

    /// Stop every thread, restore every breakpoint, then detach (the program runs on) or
    /// kill the tree.
    pub(super) fn finish(&mut self, kill: bool) -> Result<(), ProfileError> {
        self.recording = false;
        if kill {
            self.kill_tree();
            return Ok(());
        }
        self.ask_all_to_stop();
        self.wait_until_stopped()?;
        for space in &mut self.spaces {
            if space.alive {
                space.restore_all();
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

    /// Kill the process group and every traced thread, and reap them all.
    fn kill_tree(&mut self) {
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
    }

    /// Send every running thread `SIGSTOP`; a thread whose first stop is still coming, or
    /// that is stopped waiting for its creation event, needs none.
    fn ask_all_to_stop(&mut self) {
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
    }

    /// Wait (up to 10 s) until every thread is stopped: a stop asked for counts, a new
    /// thread's first stop counts, any other stop is handled as in the trace (and a thread it
    /// resumed is asked to stop).
    fn wait_until_stopped(&mut self) -> Result<(), ProfileError> {
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
        Ok(())
    }
}
