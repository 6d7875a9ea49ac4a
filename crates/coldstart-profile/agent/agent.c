/*
 * coldstart's in-process first-touch tracer: an rtld-audit library (LD_AUDIT, rtld-audit(7)).
 *
 * Why: the ptrace tracer pays a ptrace stop and two context switches for every function
 * that runs. Here the trap is handled in the traced process itself: a SIGTRAP handler costs a
 * signal delivery and a sigreturn, no switch to another process.
 *
 * How:
 * - The loader loads this library into a link-map namespace of its own (with its own libc
 *   copy) before any object of the program runs, calls its constructor, then la_version.
 *   The constructor maps the shared buffer named by COLDSTART_AUDIT_BUFFER (created by
 *   coldstart) and decides whether this process image is profiled (the follow rules below);
 *   la_version installs the SIGTRAP handler, or returns 0 (the loader then drops the library).
 * - la_objopen is called for every object of the base namespace as it is mapped, before its
 *   relocation and constructors: the main program, its libraries, later dlopen()s. For each,
 *   the agent reads the file's function symbols (symbols.c: .symtab and .dynsym, or the
 *   .symtab of a separate debug file found by build-id), makes its executable segments
 *   writable (a private copy, in transparent huge pages where the kernel gives them: see
 *   copy_text) and writes int3 at every function entry.
 * - On a trap the handler finds the entry (binary search), claims it with an atomic exchange,
 *   appends (module, offset, CLOCK_MONOTONIC time, pid, tid) to the buffer, puts the original
 *   byte back and rewinds the instruction pointer. A second thread racing into the same entry
 *   loses the exchange and is only rewound (it traps again until the byte is back).
 *
 * Not patched: the dynamic loader (it runs this library and is half-way through its own work
 * when the first callback comes), the vdso (no file, not writable), objects of other link-map
 * namespaces (dlmopen; the ptrace tracer's r_debug walk does not see them either), this
 * library's own namespace (the loader never reports it), and code the program copies as data
 * (V8's embedded builtins, see symbols.c), where an int3 would go with the copy.
 *
 * SIGTRAP belongs to the agent for the life of the process (see signals.c): the
 * program's own SIGTRAP handler is recorded and run for traps that are not breakpoints, and
 * SIGTRAP is never blocked. Armed text stays writable for the life of the process too: the
 * C library's mprotect keeps write access there (agent_mprotect).
 *
 * The signal path makes raw system calls and allocates nothing. Linked with -z now, so no
 * lazy binding (which would run the loader's resolver) happens in the handler.
 *
 * Follow rules (FLAG_* below, decided in agent_init and new_process): the first image of the
 * root process is profiled; an image after an exec only with follow-exec, in the root process
 * (a wrapper's interpreter, the program a shim executes) and in a child that is followed. A
 * child is followed with follow-forks (every child), or with follow-same when it runs its
 * parent's program (a fork, or an exec of the program its parent runs: a browser's content
 * processes). Every image and every fork child the agent sees leaves a KIND_IMAGE record,
 * profiled or not, so coldstart can say what was followed and what was not.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#include <unistd.h>

#include "signals.h"
#include "symbols.h"
#include "sys.h"

/* ---- Buffer layout, shared with crates/coldstart-profile/src/audit.rs ---- */

#define BUF_MAGIC 0x31545541444c4f43ULL /* "COLDAUT1" little-endian */
#define BUF_VERSION 2

/* Header: 64-bit words. */
enum {
    H_MAGIC,
    H_VERSION,
    H_TOUCH_OFFSET,   /* byte offset of the touch records */
    H_TOUCH_CAPACITY, /* number of touch records */
    H_MODULE_OFFSET,  /* byte offset of the module area */
    H_MODULE_CAPACITY,/* bytes */
    H_ROOT_PID,
    H_FLAGS,          /* FLAG_* */
    H_TOUCH_NEXT,     /* atomic: records claimed */
    H_MODULE_NEXT,    /* atomic: module-area bytes claimed */
    H_STOP,           /* set by coldstart at readiness: record nothing more */
    H_INSTANCES,      /* atomic: images that loaded the agent */
    H_TOUCH_DROPPED,  /* atomic: touches lost to a full buffer */
    H_MODULE_IDS,     /* atomic: module ids handed out */
    H_MODULES_DROPPED,/* atomic: module records lost to a full area */
    H_ACTIVE,         /* atomic: images profiled */
    H_FAULT_IP,       /* the last fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) */
    H_FAULT_TID,
    H_FAULT_SIGNAL,
};

#define FLAG_FOLLOW_FORKS 1 /* every child process */
#define FLAG_FOLLOW_EXEC 2
#define FLAG_FOLLOW_SAME 4  /* child processes that run their parent's program */

/* Touch record: 4 words. w3 is written last (release): tid | 1 << 32. */
struct touch {
    uint64_t offset; /* function address - load bias (the ELF virtual address) */
    uint64_t time_ns;
    uint64_t module_and_pid; /* module id | pid << 32 */
    uint64_t tid_and_valid;
};

/* Module record: 6 words then the NUL-terminated path, padded to 8 bytes. w0 (the record
 * length in bytes) is written last (release). */
enum { M_LEN, M_ID, M_BIAS, M_PID, M_KIND, M_PATCHED, M_WORDS };
#define KIND_MODULE 1
/* A program a process runs: M_ID = whether it is profiled, M_BIAS = the parent's pid,
 * M_PATCHED = VIA_*; the path is the program's. */
#define KIND_IMAGE 2
#define VIA_START 0 /* the profiled command */
#define VIA_EXEC 1
#define VIA_FORK 2  /* a copy of its parent */

/* The C library's clock_gettime goes through the vdso: no system call. It is
 * async-signal-safe, and bound at load time (-z now), so the handler never enters the
 * loader's resolver. */
static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- State of this process image ---- */

struct entry {
    uint64_t addr; /* run-time address */
    uint8_t orig;
    uint8_t hit;
};

struct module {
    uint64_t lo, hi; /* run-time range of the entries */
    uint64_t bias;
    struct entry *entries;
    size_t count;
    uint32_t id;
    int live;
    struct link_map *map;
};

#define MAX_MODULES 4096
static struct module modules[MAX_MODULES];
static int module_count; /* published with release after the module is filled */

static volatile uint64_t *buf;
static size_t buf_size;
static int active;
static int image_pid;
/* This image's program (/proc/self/exe). */
static char *image_exe; /* PATH_MAX bytes, mapped apart from the trap path's statics */
#define EXE_MAX 4096

/* The process the agent runs in: its id and whether its touches are recorded. It lives in a
 * page the kernel zeroes in a child of fork (MADV_WIPEONFORK), so that the first trap in a
 * child the fork handlers never saw (a raw clone(), as Firefox's sandbox and fork server
 * make) finds pid 0 and decides about the child (new_process) instead of recording its
 * touches as its parent's; the signal path makes no getpid call. */
struct process {
    int pid;
    int followed;
};
static struct process *proc;
static struct process proc_unwiped; /* where the kernel has no MADV_WIPEONFORK */

/* The calling thread's id, looked up at its first trap in a process (initial-exec TLS: no
 * call into the loader), and the process it was looked up in. */
static __thread int current_tid __attribute__((tls_model("initial-exec")));
static __thread int current_tid_pid __attribute__((tls_model("initial-exec")));
static uint64_t flags;
static int main_seen;
/* The main program's audit cookie (MAX_MODULES + 1 when it has no entries), and whether
 * its la_objclose has come: the program is exiting. */
static uintptr_t main_cookie;
static int exiting;

static const char *env_in(char **envp, const char *name) {
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static char debug_roots[4096];

/* Timing of the agent's own work (COLDSTART_AUDIT_TIMING=FILE): one line per armed object
 * and a summary at exit, appended to FILE. Off (-1) unless asked for. */
static int timing_fd = -1;
/* Whether executable segments are copied into transparent huge pages (see copy_text). */
static int huge_text;
static uint64_t timing_start_ns, timing_arm_ns, timing_traps, timing_trap_ns;

static void timing_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void timing_line(const char *fmt, ...) {
    char line[4608];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) {
        ssize_t w = write(timing_fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        (void)w;
    }
}

/* Append a record to the shared area (of this process). */
static void record_for(int pid, uint64_t kind, uint32_t id, uint64_t bias, uint64_t patched,
                       const char *path);
static void module_record(uint64_t kind, uint32_t id, uint64_t bias, uint64_t patched, const char *path) {
    record_for((int)sys0(SYS_getpid), kind, id, bias, patched, path);
}

static void record_for(int pid, uint64_t kind, uint32_t id, uint64_t bias, uint64_t patched,
                       const char *path) {
    size_t plen = strlen(path) + 1;
    uint64_t len = (M_WORDS * 8 + plen + 7) & ~7ull;
    uint64_t at = __atomic_fetch_add(&buf[H_MODULE_NEXT], len, __ATOMIC_RELAXED);
    if (at + len + 8 > buf[H_MODULE_CAPACITY]) {
        __atomic_fetch_add(&buf[H_MODULES_DROPPED], 1, __ATOMIC_RELAXED);
        return;
    }
    volatile uint64_t *m = (volatile uint64_t *)((char *)buf + buf[H_MODULE_OFFSET] + at);
    m[M_ID] = id;
    m[M_BIAS] = bias;
    m[M_PID] = (uint64_t)(uint32_t)pid;
    m[M_KIND] = kind;
    m[M_PATCHED] = patched;
    memcpy((char *)&m[M_WORDS], path, plen);
    __atomic_store_n(&m[M_LEN], len, __ATOMIC_RELEASE);
}

/* Remove NAME=... from the environment array in place (the program sees the same array). */
static void unset_in_place(char **envp, const char *name) {
    size_t n = strlen(name);
    char **w = envp;
    for (char **e = envp; e && *e; e++)
        if (!(strncmp(*e, name, n) == 0 && (*e)[n] == '=')) *w++ = *e;
    if (w) *w = NULL;
}

/* Whether this image runs the program the process `parent` runs now, as recorded by the
 * parent's own agent (a browser starting its content processes, Python's multiprocessing:
 * the parent's program executed again). */
static int runs_parents_program(int parent) {
    const char *last = NULL;
    uint64_t at = 0, end = __atomic_load_n(&buf[H_MODULE_NEXT], __ATOMIC_ACQUIRE);
    if (end > buf[H_MODULE_CAPACITY]) end = buf[H_MODULE_CAPACITY];
    while (at + M_WORDS * 8 <= end) {
        volatile uint64_t *m = (volatile uint64_t *)((char *)buf + buf[H_MODULE_OFFSET] + at);
        uint64_t len = __atomic_load_n(&m[M_LEN], __ATOMIC_ACQUIRE);
        if (len < M_WORDS * 8) break; /* a record still being written */
        if (m[M_KIND] == KIND_IMAGE && (int)m[M_PID] == parent)
            last = (const char *)&m[M_WORDS];
        at += len;
    }
    return last && image_exe[0] && strcmp(last, image_exe) == 0;
}

__attribute__((constructor)) static void agent_init(int argc, char **argv, char **envp) {
    (void)argc;
    (void)argv;
    const char *path = env_in(envp, "COLDSTART_AUDIT_BUFFER");
    if (!path) return;
    const char *roots = env_in(envp, "COLDSTART_AUDIT_DEBUG_ROOTS");
    if (roots && strlen(roots) < sizeof debug_roots) strcpy(debug_roots, roots);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 4096) {
        close(fd);
        return;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return;
    buf = p;
    buf_size = (size_t)st.st_size;
    if (buf[H_MAGIC] != BUF_MAGIC || buf[H_VERSION] != BUF_VERSION) {
        munmap(p, buf_size);
        buf = NULL;
        return;
    }
    flags = buf[H_FLAGS];
    image_pid = (int)sys0(SYS_getpid);
    int parent = (int)sys0(SYS_getppid);
    image_exe = mmap(NULL, EXE_MAX, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (image_exe == MAP_FAILED) {
        munmap((void *)buf, buf_size);
        buf = NULL;
        return;
    }
    ssize_t n = readlink("/proc/self/exe", image_exe, EXE_MAX - 1);
    image_exe[n > 0 ? n : 0] = 0;
    uint64_t earlier = __atomic_fetch_add(&buf[H_INSTANCES], 1, __ATOMIC_ACQ_REL);
    int is_root = (uint64_t)image_pid == buf[H_ROOT_PID];
    int first_image = is_root && earlier == 0;
    /* The command's first program always; a later one (after exec) with follow-exec, in the
     * command's process (a wrapper's interpreter, the program a shim executes) and in a
     * child followed (every child, or one running its parent's program again). */
    if (first_image) active = 1;
    else if (!(flags & FLAG_FOLLOW_EXEC)) active = 0;
    else if (is_root || (flags & FLAG_FOLLOW_FORKS)) active = 1;
    else if (flags & FLAG_FOLLOW_SAME) active = runs_parents_program(parent);
    else active = 0;
    if (buf[H_STOP]) active = 0;
    if (!buf[H_STOP])
        record_for(image_pid, KIND_IMAGE, (uint32_t)active, (uint64_t)parent,
                   first_image ? VIA_START : VIA_EXEC, image_exe);
    if (!active) {
        /* Nothing below this image loads the agent again. */
        unset_in_place(envp, "LD_AUDIT");
        munmap((void *)buf, buf_size);
        buf = NULL;
        return;
    }
    proc = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (proc == MAP_FAILED || madvise(proc, 4096, MADV_WIPEONFORK) != 0) {
        if (proc != MAP_FAILED) munmap(proc, 4096);
        proc = &proc_unwiped;
    }
    proc->followed = 1;
    __atomic_store_n(&proc->pid, image_pid, __ATOMIC_RELEASE);
    __atomic_fetch_add(&buf[H_ACTIVE], 1, __ATOMIC_RELAXED);
    /* Huge pages for the text copies, unless the kernel never gives them (or, to measure
     * the difference, COLDSTART_AUDIT_HUGE=0). */
    const char *huge = env_in(envp, "COLDSTART_AUDIT_HUGE");
    if (!huge || strcmp(huge, "0") != 0) {
        char mode[128] = {0};
        int hfd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
        if (hfd >= 0) {
            ssize_t n = read(hfd, mode, sizeof mode - 1);
            close(hfd);
            huge_text = n > 0 && !strstr(mode, "[never]");
        }
    }
    const char *timing = env_in(envp, "COLDSTART_AUDIT_TIMING");
    if (timing && timing[0]) {
        timing_fd = open(timing, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        timing_start_ns = now_ns();
    }
}

__attribute__((destructor)) static void agent_fini(void) {
    if (timing_fd < 0) return;
    uint64_t end = now_ns();
    /* How much of the process's memory is in transparent huge pages (the text copies). */
    long huge_kib = -1;
    char rollup[4096];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, rollup, sizeof rollup - 1);
        close(fd);
        rollup[n > 0 ? n : 0] = 0;
        const char *at = strstr(rollup, "AnonHugePages:");
        if (at) huge_kib = strtol(at + 14, NULL, 10);
    }
    timing_line("exit pid=%d since_init_ms=%.3f arm_ms=%.3f traps=%llu trap_handler_ms=%.3f "
                "anon_huge_kib=%ld\n",
                (int)sys0(SYS_getpid), (end - timing_start_ns) / 1e6, timing_arm_ns / 1e6,
                (unsigned long long)timing_traps, timing_trap_ns / 1e6, huge_kib);
}

/* ---- The trap ---- */

static struct entry *find(uint64_t addr, struct module **out) {
    int n = __atomic_load_n(&module_count, __ATOMIC_ACQUIRE);
    for (int i = n - 1; i >= 0; i--) {
        struct module *m = &modules[i];
        if (!__atomic_load_n(&m->live, __ATOMIC_ACQUIRE) || addr < m->lo || addr >= m->hi) continue;
        size_t a = 0, b = m->count;
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if (m->entries[mid].addr < addr) a = mid + 1;
            else b = mid;
        }
        if (a < m->count && m->entries[a].addr == addr) {
            *out = m;
            return &m->entries[a];
        }
    }
    return NULL;
}

/* Off the hot path: called once per child process. */
static int new_process(void) __attribute__((noinline, cold));

static void on_trap(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    uint64_t addr = (uint64_t)uc->uc_mcontext.gregs[REG_RIP] - 1;
    struct module *m = NULL;
    struct entry *e = info->si_code == SI_KERNEL ? find(addr, &m) : NULL;
    if (!e && info->si_code == SI_KERNEL && *(volatile uint8_t *)addr != 0xCC) {
        /* An entry whose module was closed (la_objclose put its bytes back) while this
         * thread was on its way here: run it again. */
        uc->uc_mcontext.gregs[REG_RIP] = (greg_t)addr;
        return;
    }
    if (!e) {
        program_trap(sig, info, uc);
        return;
    }
    uint64_t trap_t0 = timing_fd >= 0 ? now_ns() : 0;
    int pid = __atomic_load_n(&proc->pid, __ATOMIC_ACQUIRE);
    if (__builtin_expect(pid == 0, 0)) pid = new_process();
    if (__atomic_exchange_n(&e->hit, 1, __ATOMIC_ACQ_REL) == 0) {
        volatile uint64_t *b = buf;
        if (b && !__atomic_load_n(&b[H_STOP], __ATOMIC_ACQUIRE) && proc->followed) {
            uint64_t i = __atomic_fetch_add(&b[H_TOUCH_NEXT], 1, __ATOMIC_RELAXED);
            if (i < b[H_TOUCH_CAPACITY]) {
                volatile struct touch *t =
                    (volatile struct touch *)((char *)b + b[H_TOUCH_OFFSET]) + i;
                t->offset = addr - m->bias;
                t->time_ns = now_ns();
                t->module_and_pid = m->id | (uint64_t)(uint32_t)pid << 32;
                if (current_tid_pid != pid) {
                    current_tid = (int)sys0(SYS_gettid);
                    current_tid_pid = pid;
                }
                __atomic_store_n(&t->tid_and_valid, (uint64_t)(uint32_t)current_tid | 1ull << 32,
                                 __ATOMIC_RELEASE);
            } else {
                __atomic_fetch_add(&b[H_TOUCH_DROPPED], 1, __ATOMIC_RELAXED);
            }
        }
        *(volatile uint8_t *)addr = e->orig;
    }
    if (trap_t0) {
        __atomic_fetch_add(&timing_traps, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&timing_trap_ns, now_ns() - trap_t0, __ATOMIC_RELAXED);
    }
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)addr;
}

/* A fault: note where (coldstart names the function in its crash report), then let the
 * program die of it as it would have: the default action, the instruction faults again. */
static void on_fault(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    volatile uint64_t *b = buf;
    if (b && (int)sys0(SYS_getpid) == image_pid) {
        b[H_FAULT_IP] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
        b[H_FAULT_TID] = (uint64_t)sys0(SYS_gettid);
        __atomic_store_n(&b[H_FAULT_SIGNAL], (uint64_t)sig, __ATOMIC_RELEASE);
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    if (info->si_code <= 0) sys2(SYS_kill, sys0(SYS_getpid), sig); /* sent, not raised by the CPU */
}

/* ---- rtld-audit interface ---- */

unsigned int la_version(unsigned int version) {
    (void)version;
    if (!active) return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    /* Block everything while the handler runs: a signal handler of the program that comes
     * in between and reaches an armed entry would find SIGTRAP blocked and die. */
    sigfillset(&sa.sa_mask);
    struct sigaction before;
    if (sigaction(SIGTRAP, &sa, &before) != 0) {
        active = 0;
        return 0;
    }
    signals_take_over(&before);
    /* Fault reports; the program's own handlers replace these when it installs them. */
    struct sigaction fault;
    memset(&fault, 0, sizeof fault);
    fault.sa_sigaction = on_fault;
    fault.sa_flags = SA_SIGINFO;
    static const int faults[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (unsigned i = 0; i < sizeof faults / sizeof *faults; i++) sigaction(faults[i], &fault, NULL);
    return LAV_CURRENT;
}

/* ---- Arming an object ---- */

/* The program's C library's fork functions, found when it is armed (see agent_vfork). */
typedef pid_t (*fork_fn)(void);
static fork_fn real_fork; /* the program's C library's fork (from its .dynsym) */
typedef int (*register_atfork_fn)(void (*)(void), void (*)(void), void (*)(void), void *);
static register_atfork_fn register_atfork; /* and its __register_atfork */
static pid_t agent_vfork(void);
static int agent_mprotect(void *addr, size_t len, int prot);
static void redirect(uint64_t at, uint64_t size, void *target);

#define HUGE (2ull << 20)

/* Replace the mapping [lo, hi) (an executable segment, page-aligned) by a private anonymous
 * copy of it in transparent huge pages, readable, writable and executable. Writing an int3
 * into every function copies every text page anyway; copied a 4 KiB copy-on-write page at a
 * time (MADV_POPULATE_WRITE), each page also costs its own fault, charge and, at exit, its
 * own release. In 2 MiB pages what is left is zeroing and copying the bytes (about 0.5 ms a
 * MiB here). The copy is made at an address with the same offset modulo 2 MiB as `lo`, so
 * that mremap moves its huge pages whole. Returns -1 (nothing changed) when the segment
 * spans no whole aligned 2 MiB or a call fails before anything moved: the caller then makes
 * the file mapping writable as before. */
static int copy_text(uint64_t lo, uint64_t hi) {
    size_t len = hi - lo, span = len + HUGE;
    if (((lo + HUGE - 1) & ~(HUGE - 1)) + HUGE > hi) return -1;
    uint8_t *r = mmap(NULL, span, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (r == MAP_FAILED) return -1;
    uint64_t base = ((uint64_t)r & ~(HUGE - 1)) + (lo & (HUGE - 1));
    if (base < (uint64_t)r) base += HUGE;
    if (base > (uint64_t)r) munmap(r, base - (uint64_t)r);
    if ((uint64_t)r + span > base + len) munmap((void *)(base + len), (uint64_t)r + span - base - len);
    madvise((void *)base, len, MADV_HUGEPAGE);
    /* The bytes as mapped now (the loader has not relocated anything yet). */
    memcpy((void *)base, (const void *)lo, len);
    if (mremap((void *)base, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)lo) != MAP_FAILED)
        return 0;
    /* mremap may have unmapped the destination before failing: put a copy there in any
     * case (small pages), from the one made above. */
    int placed = mmap((void *)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED;
    if (placed) memcpy((void *)lo, (const void *)base, len);
    munmap((void *)base, len);
    return placed ? 0 : -1;
}

/* Arm every function entry of `path`, loaded at `bias`. Returns the module's index + 1 (its
 * audit cookie), 0 when nothing was armed. */
static uintptr_t arm(struct link_map *map, const char *path, uint64_t bias) {
    struct file f;
    uintptr_t cookie = 0;
    uint64_t t_start = timing_fd >= 0 ? now_ns() : 0, t_symbols = 0, t_filter = 0, t_protect = 0,
             t_populate = 0, t_write = 0, text_bytes = 0, symbols = 0;
    if (map_file(path, &f) != 0) return 0;
    struct list l = {0}, skip = {0};
    struct copied_code copied = {0, 0};
    /* The C library's internal functions (from .symtab or its debug file) include thread
     * exit and fork/spawn paths that run with every signal blocked: only its exported
     * functions get breakpoints, less the never-armed ones and those exported to the C
     * library's sibling libraries only (version GLIBC_PRIVATE, see symbols.c). */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t full_table = 0;
    if (strncmp(base, "libc.so", 7) != 0) {
        full_table = add_symbols(&f, SHT_SYMTAB, &l, &skip, &copied);
        if (!full_table) full_table = add_debug_file_symbols(&f, debug_roots, &l, &skip, &copied);
    }
    /* The C library's fork, vfork and fork handlers (see agent_vfork, la_preinit), and its
     * signal functions (see signals.c). */
    uint64_t fork_at = 0, vfork_at = 0, vfork_size = 0, atfork_at = 0;
    uint64_t sigaction_at = 0, sigaction_size = 0, sigmask_at = 0, sigmask_size = 0;
    uint64_t libc_sigaction_at = 0, errno_at = 0, mprotect_at = 0, mprotect_size = 0;
    if (strncmp(base, "libc.so", 7) == 0) {
        mprotect_at = find_dynamic(&f, "mprotect", &mprotect_size);
        fork_at = find_dynamic(&f, "fork", NULL);
        vfork_at = find_dynamic(&f, "vfork", &vfork_size);
        atfork_at = find_dynamic(&f, "__register_atfork", NULL);
        sigaction_at = find_dynamic(&f, "__sigaction", &sigaction_size);
        sigmask_at = find_dynamic(&f, "pthread_sigmask", &sigmask_size);
        libc_sigaction_at = find_dynamic(&f, "__libc_sigaction", NULL);
        errno_at = find_dynamic(&f, "__errno_location", NULL);
    }
    /* .dynsym only repeats what a full symbol table has (and coldstart, like the ptrace
     * tracer, takes the full table alone when there is one). */
    if (!full_table) add_symbols(&f, SHT_DYNSYM, &l, &skip, &copied);
    symbols = l.n + skip.n;
    if (t_start) t_symbols = now_ns();
    /* An address any of whose names is never armed stays unarmed (aliases: __madvise). */
    sort_u64(skip.v, skip.n);

    /* Keep entries inside executable load segments (as mapped now), outside code the
     * program copies (symbols.c). */
    uint64_t copied_end = copied_code_end(&f, &copied);
    const Elf64_Ehdr *eh = (const void *)f.data;
    const Elf64_Phdr *ph = NULL;
    if (eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) <= f.size)
        ph = (const void *)(f.data + eh->e_phoff);
    sort_u64(l.v, l.n);
    size_t kept = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (kept && l.v[kept - 1] == l.v[i]) continue;
        size_t a = 0, b = skip.n;
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if (skip.v[mid] < l.v[i]) a = mid + 1;
            else b = mid;
        }
        if (a < skip.n && skip.v[a] == l.v[i]) continue;
        if (l.v[i] >= copied.start && l.v[i] < copied_end) continue;
        int text = 0;
        for (unsigned k = 0; ph && k < eh->e_phnum; k++)
            if (ph[k].p_type == PT_LOAD && (ph[k].p_flags & PF_X) && l.v[i] >= ph[k].p_vaddr &&
                l.v[i] < ph[k].p_vaddr + ph[k].p_filesz)
                text = 1;
        if (text) l.v[kept++] = l.v[i];
    }
    if (t_start) t_filter = now_ns();
    size_t bytes = (kept ? kept : 1) * sizeof(struct entry);
    struct entry *entries = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int ok = entries != MAP_FAILED && module_count < MAX_MODULES;
    size_t armed = 0;
    if (ok) {
        for (unsigned k = 0; ph && k < eh->e_phnum; k++) {
            if (ph[k].p_type != PT_LOAD || !(ph[k].p_flags & PF_X)) continue;
            uint64_t lo = (bias + ph[k].p_vaddr) & ~4095ull;
            uint64_t hi = (bias + ph[k].p_vaddr + ph[k].p_memsz + 4095) & ~4095ull;
            uint64_t t = t_start ? now_ns() : 0;
            text_bytes += hi - lo;
            if (huge_text && kept && copy_text(lo, hi) == 0) {
                if (t_start) t_populate += now_ns() - t;
                continue;
            }
            if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) ok = 0;
            /* Copy the pages now, in one system call, rather than in one write fault per page
             * below (the faults dominate arming a large program). Older kernels refuse the
             * advice; the faults then do the work. */
            else if (kept) {
                uint64_t u = t_start ? now_ns() : 0;
                t_protect += u - t;
                madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
                if (t_start) t_populate += now_ns() - u;
            }
        }
    }
    uint32_t id = (uint32_t)__atomic_fetch_add(&buf[H_MODULE_IDS], 1, __ATOMIC_RELAXED);
    if (ok && fork_at && vfork_at && atfork_at) {
        real_fork = (fork_fn)(bias + fork_at);
        register_atfork = (register_atfork_fn)(bias + atfork_at);
        redirect(bias + vfork_at, vfork_size, (void *)agent_vfork);
    }
    if (ok && sigaction_at && sigmask_at && libc_sigaction_at && errno_at) {
        signals_use_libc((void *)(bias + libc_sigaction_at), (void *)(bias + errno_at));
        redirect(bias + sigaction_at, sigaction_size, (void *)agent_sigaction);
        redirect(bias + sigmask_at, sigmask_size, (void *)agent_sigmask);
        if (mprotect_at) redirect(bias + mprotect_at, mprotect_size, (void *)agent_mprotect);
    }
    if (ok) {
        for (size_t i = 0; i < kept; i++) {
            uint8_t *at = (uint8_t *)(bias + l.v[i]);
            entries[armed].addr = (uint64_t)at;
            entries[armed].orig = *at;
            entries[armed].hit = 0;
            armed++;
        }
        struct module *m = &modules[module_count];
        m->entries = entries;
        m->count = armed;
        m->lo = armed ? entries[0].addr : 0;
        m->hi = armed ? entries[armed - 1].addr + 1 : 0;
        m->bias = bias;
        m->id = id;
        m->map = map;
        m->live = 1;
        cookie = (uintptr_t)module_count + 1;
        __atomic_store_n(&module_count, module_count + 1, __ATOMIC_RELEASE);
        /* Only now, with the table visible to the handler, write the breakpoints. */
        for (size_t i = 0; i < armed; i++) *(volatile uint8_t *)entries[i].addr = 0xCC;
        if (t_start) t_write = now_ns();
    } else if (entries != MAP_FAILED) {
        munmap(entries, bytes);
    }
    module_record(KIND_MODULE, id, bias, armed, path);
    if (l.v) munmap(l.v, l.cap * 8);
    if (skip.v) munmap(skip.v, skip.cap * 8);
    munmap((void *)f.data, f.size);
    if (t_start) {
        uint64_t t_end = now_ns();
        timing_arm_ns += t_end - t_start;
        uint64_t w = t_write ? t_write : t_end;
        timing_line("arm %s file_kib=%zu symbols=%llu entries=%zu text_kib=%llu total_ms=%.3f "
                    "symbols_ms=%.3f filter_ms=%.3f mprotect_ms=%.3f populate_ms=%.3f "
                    "write_ms=%.3f unmap_ms=%.3f\n",
                    path, f.size / 1024, (unsigned long long)symbols, armed,
                    (unsigned long long)text_bytes / 1024, (t_end - t_start) / 1e6,
                    (t_symbols - t_start) / 1e6, (t_filter - t_symbols) / 1e6, t_protect / 1e6,
                    t_populate / 1e6, (w - t_filter - t_protect - t_populate) / 1e6,
                    (t_end - w) / 1e6);
    }
    return cookie;
}

/* ---- fork and vfork ---- */

/* Put back the byte of every entry of `m` no thread has claimed (claiming it here, so a
 * trap still on its way only rewinds). */
static void disarm(struct module *m) {
    for (size_t k = 0; k < m->count; k++)
        if (!__atomic_exchange_n(&m->entries[k].hit, 1, __ATOMIC_ACQ_REL))
            *(volatile uint8_t *)m->entries[k].addr = m->entries[k].orig;
}

/* Put every byte back in this process's copy of the program and forget the entries: a fork
 * child that is not followed runs without breakpoints, as under the ptrace tracer (which
 * cleans and detaches such a child). The child may also block every signal or reset
 * SIGTRAP to its default before it calls exec (vfork users do), where a breakpoint would
 * kill it. */
static void disarm_all(void) {
    int n = __atomic_load_n(&module_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (modules[i].live) disarm(&modules[i]);
}


/* A child of fork: followed (it runs its parent's program) unless only the command's own
 * process is, in which case every byte goes back (the child runs without breakpoints, as
 * under the ptrace tracer, which cleans and detaches such a child). Called in the child by
 * the fork handler, or at its first trap when no handler ran (a raw clone()). Returns its
 * pid. */
static int new_process(void) {
    int pid = (int)sys0(SYS_getpid);
    int followed = (flags & (FLAG_FOLLOW_FORKS | FLAG_FOLLOW_SAME)) != 0;
    if (!followed) disarm_all();
    proc->followed = followed;
    __atomic_store_n(&proc->pid, pid, __ATOMIC_RELEASE);
    volatile uint64_t *b = buf;
    if (b && !__atomic_load_n(&b[H_STOP], __ATOMIC_ACQUIRE))
        record_for(pid, KIND_IMAGE, (uint32_t)followed, (uint64_t)sys0(SYS_getppid), VIA_FORK,
                   image_exe);
    return pid;
}

/* Set in the thread that runs agent_vfork while it forks (the child inherits it). */
static __thread int vforking __attribute__((tls_model("initial-exec")));

/* A vfork child is not followed until it executes a program (which its exec decides): it
 * runs without breakpoints, since vfork children typically run with every signal blocked
 * or reset until they exec. */
static void vfork_child(void) {
    proc->followed = 0;
    __atomic_store_n(&proc->pid, (int)sys0(SYS_getpid), __ATOMIC_RELEASE);
    disarm_all();
}

/* vfork shares the parent's memory, so the child cannot be given a text of its own: it is
 * run as a fork (which POSIX allows), disarmed, since vfork children typically run with
 * every signal blocked until they exec. */
static pid_t agent_vfork(void) {
    vforking = 1;
    pid_t pid = real_fork();
    vforking = 0;
    if (pid == 0) vfork_child();
    return pid;
}

/* What the C library's mprotect does now: the same, except that armed text stays writable,
 * since the trap handler puts the original bytes back there. Node.js with
 * --use-largepages=on copies its text into huge pages and makes it read-only and executable
 * again: the handler died of SIGSEGV putting back the next breakpoint's byte. */
static int agent_mprotect(void *addr, size_t len, int prot) {
    uint64_t lo = (uint64_t)addr, hi = lo + len;
    int n = __atomic_load_n(&module_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && (prot & PROT_EXEC) && !(prot & PROT_WRITE); i++)
        if (__atomic_load_n(&modules[i].live, __ATOMIC_ACQUIRE) && lo < modules[i].hi &&
            hi > modules[i].lo)
            prot |= PROT_WRITE;
    long r = sys4(SYS_mprotect, (long)lo, (long)len, prot, 0);
    if (r < 0) {
        program_set_errno((int)-r);
        return -1;
    }
    return 0;
}

/* Send a function of the C library (vfork, __sigaction, pthread_sigmask, mprotect) to the
 * agent's: `jmp *0(%rip)` and the address, 14 bytes over its entry (it is never armed, see
 * symbols.c), in the program's writable copy of the text. */
static void redirect(uint64_t at, uint64_t size, void *target) {
    if (size < 14) return;
    uint8_t *p = (uint8_t *)at;
    uint64_t to = (uint64_t)target;
    p[0] = 0xFF; p[1] = 0x25; p[2] = p[3] = p[4] = p[5] = 0;
    memcpy(p + 6, &to, 8);
}

/* A fork child that is not followed is disarmed by a fork handler registered with the
 * program's C library once it is relocated (la_preinit). */
static void atfork_child(void) {
    if (vforking) vfork_child();
    else new_process();
}

void la_preinit(uintptr_t *cookie) {
    (void)cookie;
    if (active && register_atfork) register_atfork(NULL, NULL, atfork_child, NULL);
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
    *cookie = 0;
    if (!active || !buf || lmid != LM_ID_BASE || __atomic_load_n(&buf[H_STOP], __ATOMIC_ACQUIRE))
        return 0;
    const char *name = map->l_name;
    if ((!name || !name[0]) && !main_seen) {
        main_seen = 1;
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return 0;
        exe[n] = 0;
        *cookie = arm(map, exe, map->l_addr);
        if (!*cookie) *cookie = MAX_MODULES + 1;
        main_cookie = *cookie;
        return 0;
    }
    /* The vdso has no file; the loader runs this library. */
    if (!name || name[0] != '/' || map->l_addr == getauxval(AT_BASE)) return 0;
    char real[4096];
    if (!realpath(name, real)) return 0;
    *cookie = arm(map, real, map->l_addr);
    return 0;
}

/* dlclose: the object's memory goes away (and may be reused by the next dlopen). */
static int closing;

/* dlclose announces itself (LA_ACT_DELETE) before closing objects; so does exit in newer
 * C libraries (see la_objclose). */
void la_activity(uintptr_t *cookie, unsigned int flag) {
    (void)cookie;
    closing = flag == LA_ACT_DELETE;
}

unsigned int la_objclose(uintptr_t *cookie) {
    /* At exit the loader closes every object but its code still runs (destructors, atexit
     * handlers, _exit): keep the entries, as the ptrace tracer does. The C library (2.36)
     * announces exit with LA_ACT_DELETE as it does a dlclose; but only exit closes the main
     * program, and first (_dl_fini). Putting the bytes back there also wrote into every
     * text page of the process at exit. */
    if (*cookie && *cookie == main_cookie) exiting = 1;
    if (!closing || exiting || !*cookie || *cookie > MAX_MODULES) return 0;
    struct module *m = &modules[*cookie - 1];
    /* Put every byte back before forgetting the entries: a thread may still run there. */
    disarm(m);
    __atomic_store_n(&m->live, 0, __ATOMIC_RELEASE);
    return 0;
}
