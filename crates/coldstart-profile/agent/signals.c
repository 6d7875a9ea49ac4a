/*
 * The audit agent's hold on SIGTRAP (see agent.c): what the program's sigaction and
 * pthread_sigmask do once the agent has redirected them, and what a SIGTRAP that is not a
 * breakpoint runs. Internal to the agent (hidden).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>

#include "signals.h"
#include "sys.h"

/* ---- SIGTRAP belongs to the agent ----
 *
 * A breakpoint must never reach a handler of the program: LLVM (PrintStackTraceOnErrorSignal)
 * and Firefox's crash reporter install their own SIGTRAP handlers, and the next breakpoint
 * ran theirs instead of on_trap (LLVM's returned past the int3, into the middle of the
 * function's first instruction, and the program died of SIGSEGV). A blocked SIGTRAP kills the
 * process at the next breakpoint. So for the life of the process the agent keeps SIGTRAP:
 * the program's sigaction(SIGTRAP) is recorded as its wish (returned as the old action, and
 * run by on_trap for traps that are not breakpoints), SIGTRAP is taken out of the masks it
 * asks for (pthread_sigmask, sigprocmask, a handler's sa_mask). Both are caught at the entry
 * of the C library's functions (see redirect), which every path reaches: calls through the
 * PLT or a function pointer, and the library's own signal(), sigset(), sigprocmask() and
 * friends, which call __sigaction and pthread_sigmask. */

/* The program's SIGTRAP action, double-buffered: on_trap reads the current slot without a
 * lock; writers (rare) serialise on wished_lock with every signal blocked. */
static struct sigaction wished[2];
static int wished_current;
static int wished_lock;


/* The kernel's sigset is 8 bytes (the C library's sigset_t is larger). */
static void mask_all(uint64_t *saved) {
    uint64_t all = ~0ull;
    sys4(SYS_rt_sigprocmask, SIG_BLOCK, (long)&all, (long)saved, 8);
}

static void mask_restore(const uint64_t *saved) {
    sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)saved, 0, 8);
}

static void wished_get(struct sigaction *out) {
    *out = wished[__atomic_load_n(&wished_current, __ATOMIC_ACQUIRE)];
}

/* Record `act` (if any) as the program's SIGTRAP action; the one it replaces in `old`. */
static void wished_set(const struct sigaction *act, struct sigaction *old) {
    uint64_t saved;
    mask_all(&saved);
    while (__atomic_exchange_n(&wished_lock, 1, __ATOMIC_ACQUIRE)) {
    }
    int i = wished_current;
    struct sigaction before = wished[i];
    if (act) {
        wished[!i] = *act;
        __atomic_store_n(&wished_current, !i, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&wished_lock, 0, __ATOMIC_RELEASE);
    mask_restore(&saved);
    if (old) *old = before;
}

/* The program's C library: its own __libc_sigaction (below the entry the agent redirects:
 * the program's errno and signal-return trampoline) and its errno. */
typedef int (*libc_sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static libc_sigaction_fn program_libc_sigaction;
typedef int *(*errno_fn)(void);
static errno_fn program_errno;

void signals_take_over(const struct sigaction *before) {
    wished[0] = *before;
}

void signals_use_libc(void *libc_sigaction, void *errno_location) {
    program_libc_sigaction = (libc_sigaction_fn)libc_sigaction;
    program_errno = (errno_fn)errno_location;
}

void program_set_errno(int e) {
    *program_errno() = e;
}

/* What __sigaction (= sigaction) of the program's C library does now. */
int agent_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    /* The C library refuses its own internal signals (SIGCANCEL, SIGSETXID) and bad numbers. */
    if (sig <= 0 || sig >= 65 || sig == 32 || sig == 33) {
        *program_errno() = EINVAL;
        return -1;
    }
    if (sig == SIGTRAP) {
        wished_set(act, old);
        return 0;
    }
    if (act && sigismember(&act->sa_mask, SIGTRAP)) {
        struct sigaction copy = *act;
        sigdelset(&copy.sa_mask, SIGTRAP);
        return program_libc_sigaction(sig, &copy, old);
    }
    return program_libc_sigaction(sig, act, old);
}

/* What pthread_sigmask (which sigprocmask calls) of the program's C library does now: the
 * same (the C library's internal signals are never blocked, the error is returned), with
 * SIGTRAP never blocked. */
int agent_sigmask(int how, const sigset_t *set, sigset_t *old) {
    sigset_t local;
    if (set) {
        local = *set;
        sigdelset(&local, 32);
        sigdelset(&local, 33);
        if (how != SIG_UNBLOCK) sigdelset(&local, SIGTRAP);
        set = &local;
    }
    long r = sys4(SYS_rt_sigprocmask, how, (long)set, (long)old, 8);
    return r < 0 ? (int)-r : 0;
}

/* A SIGTRAP that is not a breakpoint of the agent: what the program asked for. A handler runs
 * as the kernel would have run it (its sa_mask added, SIGTRAP too unless SA_NODEFER, reset
 * with SA_RESETHAND), except that SIGTRAP stays unblocked, so that breakpoints in the handler
 * still work, and that it runs on the current stack (not the alternate one of SA_ONSTACK). */
void program_trap(int sig, siginfo_t *info, ucontext_t *uc) {
    struct sigaction w;
    wished_get(&w);
    int is_handler = w.sa_handler != SIG_IGN && w.sa_handler != SIG_DFL && w.sa_handler != NULL;
    if (!is_handler) {
        /* Ignored: a sent SIGTRAP is dropped; one the CPU raises kills, as the kernel does. */
        if (w.sa_handler == SIG_IGN && info->si_code != SI_KERNEL) return;
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGTRAP, &dfl, NULL);
        /* Pending until on_trap returns (SIGTRAP is blocked in it), then fatal. */
        sys2(SYS_kill, sys0(SYS_getpid), SIGTRAP);
        return;
    }
    if (w.sa_flags & SA_RESETHAND) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        wished_set(&dfl, NULL);
    }
    uint64_t mask, wanted;
    memcpy(&mask, &uc->uc_sigmask, 8);
    memcpy(&wanted, &w.sa_mask, 8);
    mask |= wanted;
    mask &= ~(1ull << (SIGTRAP - 1));
    sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&mask, 0, 8);
    if (w.sa_flags & SA_SIGINFO) w.sa_sigaction(sig, info, uc);
    else w.sa_handler(sig);
}

