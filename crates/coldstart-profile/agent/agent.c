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
 *   the agent reads the file's function symbols (.symtab and .dynsym, or the .symtab of a
 *   separate debug file found by build-id), makes its executable segments writable (a
 *   private copy, in transparent huge pages where the kernel gives them: see copy_text) and
 *   writes int3 at every function entry.
 * - On a trap the handler finds the entry (binary search), claims it with an atomic exchange,
 *   appends (module, offset, CLOCK_MONOTONIC time, pid, tid) to the buffer, puts the original
 *   byte back and rewinds the instruction pointer. A second thread racing into the same entry
 *   loses the exchange and is only rewound (it traps again until the byte is back).
 *
 * Not patched: the dynamic loader (it runs this library and is half-way through its own work
 * when the first callback comes), the vdso (no file, not writable), objects of other link-map
 * namespaces (dlmopen; the ptrace tracer's r_debug walk does not see them either) and this
 * library's own namespace (the loader never reports it).
 *
 * The signal path makes raw system calls and allocates nothing. Linked with -z now, so no
 * lazy binding (which would run the loader's resolver) happens in the handler.
 *
 * Follow rules (COLDSTART_AUDIT_* below): the first image of the root process is profiled;
 * images of later exec()s only with follow-exec (and of other processes only with
 * follow-forks too); touches of forked children are recorded only with follow-forks. An
 * image that is not profiled but would have been with follow-exec leaves an "unprofiled
 * exec" record, so coldstart can say what --follow-exec would add.
 */
#define _GNU_SOURCE
#include <elf.h>
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

/* ---- Buffer layout, shared with crates/coldstart-profile/src/audit.rs ---- */

#define BUF_MAGIC 0x31545541444c4f43ULL /* "COLDAUT1" little-endian */
#define BUF_VERSION 1

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

#define FLAG_FOLLOW_FORKS 1
#define FLAG_FOLLOW_EXEC 2

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
#define KIND_UNPROFILED_EXEC 2

/* ---- Raw system calls for the signal path ---- */

static inline long sys0(long n) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
    return r;
}
static inline long sys2(long n, long a, long b) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b) : "rcx", "r11", "memory");
    return r;
}
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
/* This process's id: set at start and by the fork handlers (the signal path makes no
 * getpid call). */
static int current_pid;
/* The calling thread's id, looked up at its first trap (initial-exec TLS: no call into the
 * loader); reset in a fork child. */
static __thread int current_tid __attribute__((tls_model("initial-exec")));
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

/* Append a module record to the shared area. */
static void module_record(uint64_t kind, uint32_t id, uint64_t bias, uint64_t patched, const char *path) {
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
    m[M_PID] = (uint64_t)sys0(SYS_getpid);
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
    current_pid = image_pid;
    uint64_t earlier = __atomic_fetch_add(&buf[H_INSTANCES], 1, __ATOMIC_ACQ_REL);
    int is_root = (uint64_t)image_pid == buf[H_ROOT_PID];
    int pid_followed = is_root || (flags & FLAG_FOLLOW_FORKS);
    int first_image = is_root && earlier == 0;
    active = pid_followed && (first_image || (flags & FLAG_FOLLOW_EXEC)) && !buf[H_STOP];
    if (!active) {
        if (pid_followed && !first_image && !buf[H_STOP]) {
            char exe[4096];
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[n > 0 ? n : 0] = 0;
            module_record(KIND_UNPROFILED_EXEC, 0, 0, 0, exe);
        }
        /* Nothing below this image loads the agent again. */
        unset_in_place(envp, "LD_AUDIT");
        munmap((void *)buf, buf_size);
        buf = NULL;
        return;
    }
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

static struct sigaction previous;

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
        /* Not ours: what the program would have got without the agent. */
        if (previous.sa_flags & SA_SIGINFO && (void *)previous.sa_sigaction != NULL &&
            previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
            previous.sa_sigaction(sig, info, context);
        } else if (previous.sa_handler != SIG_IGN && previous.sa_handler != SIG_DFL &&
                   previous.sa_handler != NULL) {
            previous.sa_handler(sig);
        } else if (previous.sa_handler != SIG_IGN) {
            struct sigaction dfl;
            memset(&dfl, 0, sizeof dfl);
            dfl.sa_handler = SIG_DFL;
            sigaction(SIGTRAP, &dfl, NULL);
            sys2(SYS_kill, sys0(SYS_getpid), SIGTRAP);
        }
        return;
    }
    uint64_t trap_t0 = timing_fd >= 0 ? now_ns() : 0;
    if (__atomic_exchange_n(&e->hit, 1, __ATOMIC_ACQ_REL) == 0) {
        int pid = __atomic_load_n(&current_pid, __ATOMIC_RELAXED);
        volatile uint64_t *b = buf;
        if (b && !__atomic_load_n(&b[H_STOP], __ATOMIC_ACQUIRE) &&
            ((flags & FLAG_FOLLOW_FORKS) || pid == image_pid)) {
            uint64_t i = __atomic_fetch_add(&b[H_TOUCH_NEXT], 1, __ATOMIC_RELAXED);
            if (i < b[H_TOUCH_CAPACITY]) {
                volatile struct touch *t =
                    (volatile struct touch *)((char *)b + b[H_TOUCH_OFFSET]) + i;
                t->offset = addr - m->bias;
                t->time_ns = now_ns();
                t->module_and_pid = m->id | (uint64_t)(uint32_t)pid << 32;
                if (!current_tid) current_tid = (int)sys0(SYS_gettid);
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
    if (sigaction(SIGTRAP, &sa, &previous) != 0) {
        active = 0;
        return 0;
    }
    /* Fault reports; the program's own handlers replace these when it installs them. */
    struct sigaction fault;
    memset(&fault, 0, sizeof fault);
    fault.sa_sigaction = on_fault;
    fault.sa_flags = SA_SIGINFO;
    static const int faults[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (unsigned i = 0; i < sizeof faults / sizeof *faults; i++) sigaction(faults[i], &fault, NULL);
    return LAV_CURRENT;
}

/* Collected function entries of one object (ELF virtual addresses). */
struct list {
    uint64_t *v;
    size_t n, cap;
};

static int push(struct list *l, uint64_t x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4096;
        void *p = mmap(NULL, cap * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return -1;
        if (l->v) {
            memcpy(p, l->v, l->n * 8);
            munmap(l->v, l->cap * 8);
        }
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

struct file {
    const uint8_t *data;
    size_t size;
};

static int map_file(const char *path, struct file *f) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    f->data = p;
    f->size = (size_t)st.st_size;
    const Elf64_Ehdr *eh = p;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_machine != EM_X86_64 || eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > f->size) {
        munmap(p, f->size);
        return -1;
    }
    return 0;
}

/* Functions the C library calls with every signal blocked (thread exit, posix_spawn's
 * child) or after resetting SIGTRAP to its default (posix_spawn's and vfork children): a
 * breakpoint there would kill the process, since a blocked or defaulted SIGTRAP from int3 is
 * fatal. They are left alone (and so are never in an audit profile), whatever object
 * defines them (an allocator's free runs at thread exit too). */
static const char *const never_armed[] = {
    "madvise", "munmap", "free", "cfree", "__libc_free", "_dl_deallocate_tls",
    "sigprocmask", "pthread_sigmask", "__sigprocmask", "__pthread_sigmask",
    "execve", "execv", "execvp", "execvpe", "execl", "execle", "execlp", "fexecve", "execveat",
    "_exit", "_Exit", "__libc_sigaction", "sigaction", "__sigaction",
    "setsid", "setpgid", "dup2", "dup3", "close", "close_range", "__close", "chdir", "fchdir",
    "sched_setparam", "sched_setscheduler", "seteuid", "setegid", "getuid", "getgid",
    "__pthread_exit", "pthread_exit", "__call_tls_dtors", "__nptl_deallocate_tsd",
    "vfork", "__vfork", "clone", "__clone", "__clone3", "fork", "__fork", "__libc_fork", "_Fork",
};

/* The first two bytes of every never-armed name, one bit each: most symbols are ruled out
 * by one lookup instead of a comparison with every name (which was a tenth of the arming of
 * a program with many functions). */
static uint64_t never_armed_prefixes[65536 / 64];

static unsigned prefix_of(const char *name) {
    return (unsigned)(uint8_t)name[0] | (name[0] ? (unsigned)(uint8_t)name[1] << 8 : 0);
}

static int is_never_armed(const char *name) {
    if (!never_armed_prefixes[0]) {
        never_armed_prefixes[0] = 1; /* "": built (no name is empty) */
        for (unsigned i = 0; i < sizeof never_armed / sizeof *never_armed; i++) {
            unsigned p = prefix_of(never_armed[i]);
            never_armed_prefixes[p / 64] |= 1ull << (p % 64);
        }
    }
    unsigned p = prefix_of(name);
    if (p == 0 || !(never_armed_prefixes[p / 64] >> (p % 64) & 1)) return 0;
    for (unsigned i = 0; i < sizeof never_armed / sizeof *never_armed; i++)
        if (strcmp(name, never_armed[i]) == 0) return 1;
    return 0;
}

/* Add the defined, sized function symbols of the first section of `type` that lie in an
 * executable section. Returns how many were found. */
static size_t add_symbols(const struct file *f, uint32_t type, struct list *out, struct list *skip) {
    const Elf64_Ehdr *eh = (const void *)f->data;
    const Elf64_Shdr *sh = (const void *)(f->data + eh->e_shoff);
    size_t found = 0;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != type || sh[i].sh_entsize != sizeof(Elf64_Sym)) continue;
        if (sh[i].sh_offset + sh[i].sh_size > f->size) continue;
        const Elf64_Sym *sym = (const void *)(f->data + sh[i].sh_offset);
        size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        const char *strtab = NULL;
        size_t strsize = 0;
        if (sh[i].sh_link < eh->e_shnum && sh[sh[i].sh_link].sh_offset + sh[sh[i].sh_link].sh_size <= f->size) {
            strtab = (const char *)f->data + sh[sh[i].sh_link].sh_offset;
            strsize = sh[sh[i].sh_link].sh_size;
        }
        for (size_t k = 0; k < n; k++) {
            unsigned t = ELF64_ST_TYPE(sym[k].st_info);
            if (t != STT_FUNC && t != STT_GNU_IFUNC) continue;
            if (sym[k].st_size == 0 || sym[k].st_shndx == SHN_UNDEF || sym[k].st_shndx >= SHN_LORESERVE ||
                sym[k].st_shndx >= eh->e_shnum)
                continue;
            if (!(sh[sym[k].st_shndx].sh_flags & SHF_EXECINSTR)) continue;
            if (strtab && sym[k].st_name < strsize && memchr(strtab + sym[k].st_name, 0, strsize - sym[k].st_name) &&
                is_never_armed(strtab + sym[k].st_name)) {
                if (push(skip, sym[k].st_value) != 0) return found;
                continue;
            }
            if (push(out, sym[k].st_value) != 0) return found;
            found++;
        }
        break;
    }
    return found;
}

/* The GNU build-id of a file, from its note sections. */
static size_t build_id(const struct file *f, const uint8_t **id) {
    const Elf64_Ehdr *eh = (const void *)f->data;
    const Elf64_Shdr *sh = (const void *)(f->data + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_NOTE || sh[i].sh_offset + sh[i].sh_size > f->size) continue;
        size_t at = 0;
        while (at + sizeof(Elf64_Nhdr) <= sh[i].sh_size) {
            const Elf64_Nhdr *nh = (const void *)(f->data + sh[i].sh_offset + at);
            size_t name = (nh->n_namesz + 3) & ~3u, desc = (nh->n_descsz + 3) & ~3u;
            const uint8_t *p = (const uint8_t *)(nh + 1);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(p, "GNU", 4) == 0 &&
                at + sizeof *nh + name + nh->n_descsz <= sh[i].sh_size) {
                *id = p + name;
                return nh->n_descsz;
            }
            at += sizeof *nh + name + desc;
        }
    }
    return 0;
}

/* Symbols of the separate debug file ROOT/.build-id/xx/rest.debug, for each debug root. */
static size_t add_debug_file_symbols(const struct file *f, struct list *out, struct list *skip) {
    const uint8_t *id;
    size_t n = build_id(f, &id);
    if (n < 2 || !debug_roots[0]) return 0;
    static const char hex[] = "0123456789abcdef";
    char rest[256];
    size_t r = 0;
    for (size_t i = 1; i < n && r + 2 < sizeof rest; i++) {
        rest[r++] = hex[id[i] >> 4];
        rest[r++] = hex[id[i] & 15];
    }
    rest[r] = 0;
    const char *root = debug_roots;
    while (*root) {
        const char *end = strchr(root, ':');
        size_t len = end ? (size_t)(end - root) : strlen(root);
        char path[4096];
        if (len + r + 32 < sizeof path) {
            memcpy(path, root, len);
            size_t p = len;
            memcpy(path + p, "/.build-id/", 11);
            p += 11;
            path[p++] = hex[id[0] >> 4];
            path[p++] = hex[id[0] & 15];
            path[p++] = '/';
            memcpy(path + p, rest, r);
            p += r;
            memcpy(path + p, ".debug", 7);
            struct file d;
            if (map_file(path, &d) == 0) {
                size_t found = add_symbols(&d, SHT_SYMTAB, out, skip);
                munmap((void *)d.data, d.size);
                if (found) return found;
            }
        }
        if (!end) break;
        root = end + 1;
    }
    return 0;
}

typedef pid_t (*fork_fn)(void);
static fork_fn real_fork; /* the program's C library's fork (from its .dynsym) */
typedef int (*register_atfork_fn)(void (*)(void), void (*)(void), void (*)(void), void *);
static register_atfork_fn register_atfork; /* and its __register_atfork */
static void redirect_vfork(uint64_t vfork_at, uint64_t size);

/* The address of the defined function `name` in .dynsym, 0 if none. */
static uint64_t find_dynamic(const struct file *f, const char *name, uint64_t *size) {
    const Elf64_Ehdr *eh = (const void *)f->data;
    const Elf64_Shdr *sh = (const void *)(f->data + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_offset + sh[i].sh_size > f->size ||
            sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        if (str->sh_offset + str->sh_size > f->size) continue;
        const char *strtab = (const char *)f->data + str->sh_offset;
        const Elf64_Sym *sym = (const void *)(f->data + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); k++)
            if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_shndx != SHN_UNDEF &&
                sym[k].st_name < str->sh_size && strcmp(strtab + sym[k].st_name, name) == 0) {
                if (size) *size = sym[k].st_size;
                return sym[k].st_value;
            }
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort in place (heap sort: no allocation, no recursion). */
static void heap_sort_u64(uint64_t *v, size_t n) {
    for (size_t start = n / 2; start-- > 0;) {
        size_t root = start;
        for (;;) {
            size_t child = 2 * root + 1;
            if (child >= n) break;
            if (child + 1 < n && cmp_u64(&v[child], &v[child + 1]) < 0) child++;
            if (cmp_u64(&v[root], &v[child]) >= 0) break;
            uint64_t t = v[root]; v[root] = v[child]; v[child] = t;
            root = child;
        }
    }
    for (size_t end = n; end-- > 1;) {
        uint64_t t = v[0]; v[0] = v[end]; v[end] = t;
        size_t root = 0;
        for (;;) {
            size_t child = 2 * root + 1;
            if (child >= end) break;
            if (child + 1 < end && cmp_u64(&v[child], &v[child + 1]) < 0) child++;
            if (cmp_u64(&v[root], &v[child]) >= 0) break;
            uint64_t tt = v[root]; v[root] = v[child]; v[child] = tt;
            root = child;
        }
    }
}

/* Sort in place: a byte-wise radix sort (bytes that are the same in every value are
 * skipped), with heap sort for short lists or when no scratch memory can be had. The heap
 * sort's cache misses were most of the agent's own time in a module of 10,000 functions. */
static void sort_u64(uint64_t *v, size_t n) {
    static size_t count[8][256]; /* la_objopen calls do not overlap (the loader's lock) */
    if (n < 256) {
        heap_sort_u64(v, n);
        return;
    }
    uint64_t *scratch = mmap(NULL, n * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (scratch == MAP_FAILED) {
        heap_sort_u64(v, n);
        return;
    }
    memset(count, 0, sizeof count);
    for (size_t i = 0; i < n; i++)
        for (unsigned b = 0; b < 8; b++) count[b][(v[i] >> (8 * b)) & 255]++;
    uint64_t *from = v, *to = scratch;
    for (unsigned b = 0; b < 8; b++) {
        if (count[b][(v[0] >> (8 * b)) & 255] == n) continue;
        size_t at = 0;
        for (unsigned d = 0; d < 256; d++) {
            size_t c = count[b][d];
            count[b][d] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++) to[count[b][(from[i] >> (8 * b)) & 255]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    if (from != v) memcpy(v, from, n * 8);
    munmap(scratch, n * 8);
}

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
    /* The C library's internal functions (from .symtab or its debug file) include thread
     * exit and fork/spawn paths that run with every signal blocked: only its exported
     * functions (less the never-armed ones) get breakpoints. */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t full_table = 0;
    if (strncmp(base, "libc.so", 7) != 0) {
        full_table = add_symbols(&f, SHT_SYMTAB, &l, &skip);
        if (!full_table) full_table = add_debug_file_symbols(&f, &l, &skip);
    }
    /* The C library's fork, vfork and fork handlers (see agent_vfork, la_preinit). */
    uint64_t fork_at = 0, vfork_at = 0, vfork_size = 0, atfork_at = 0;
    if (strncmp(base, "libc.so", 7) == 0) {
        fork_at = find_dynamic(&f, "fork", NULL);
        vfork_at = find_dynamic(&f, "vfork", &vfork_size);
        atfork_at = find_dynamic(&f, "__register_atfork", NULL);
    }
    /* .dynsym only repeats what a full symbol table has (and coldstart, like the ptrace
     * tracer, takes the full table alone when there is one). */
    if (!full_table) add_symbols(&f, SHT_DYNSYM, &l, &skip);
    symbols = l.n + skip.n;
    if (t_start) t_symbols = now_ns();
    /* An address any of whose names is never armed stays unarmed (aliases: __madvise). */
    sort_u64(skip.v, skip.n);

    /* Keep entries inside executable load segments (as mapped now). */
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
        redirect_vfork(bias + vfork_at, vfork_size);
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

/* Put every byte back in this process's copy of the program and forget the entries: a fork
 * child that is not followed runs without breakpoints, as under the ptrace tracer (which
 * cleans and detaches such a child). The child may also block every signal or reset
 * SIGTRAP to its default before it calls exec (vfork users do), where a breakpoint would
 * kill it. */
static void disarm_all(void) {
    int n = __atomic_load_n(&module_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        struct module *m = &modules[i];
        if (!m->live) continue;
        for (size_t k = 0; k < m->count; k++)
            if (!__atomic_exchange_n(&m->entries[k].hit, 1, __ATOMIC_ACQ_REL))
                *(volatile uint8_t *)m->entries[k].addr = m->entries[k].orig;
    }
}


/* vfork shares the parent's memory, so the child cannot be given a text of its own: it is
 * run as a fork (which POSIX allows), disarmed, since vfork children typically run with
 * every signal blocked until they exec. */
static pid_t agent_vfork(void) {
    pid_t pid = real_fork();
    if (pid == 0) {
        __atomic_store_n(&current_pid, (int)sys0(SYS_getpid), __ATOMIC_RELAXED);
        current_tid = 0;
        disarm_all();
    }
    return pid;
}

/* Send the C library's vfork to agent_vfork: `jmp *0(%rip)` and the address, 14 bytes over
 * its entry (it is never armed). */
static void redirect_vfork(uint64_t vfork_at, uint64_t size) {
    if (size < 14) return;
    uint8_t *p = (uint8_t *)vfork_at;
    uint64_t target = (uint64_t)agent_vfork;
    p[0] = 0xFF; p[1] = 0x25; p[2] = p[3] = p[4] = p[5] = 0;
    memcpy(p + 6, &target, 8);
}

/* A fork child that is not followed is disarmed by a fork handler registered with the
 * program's C library once it is relocated (la_preinit). */
static void atfork_child(void) {
    __atomic_store_n(&current_pid, (int)sys0(SYS_getpid), __ATOMIC_RELAXED);
    current_tid = 0;
    if (!(flags & FLAG_FOLLOW_FORKS)) disarm_all();
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
    for (size_t i = 0; i < m->count; i++)
        if (!__atomic_exchange_n(&m->entries[i].hit, 1, __ATOMIC_ACQ_REL))
            *(volatile uint8_t *)m->entries[i].addr = m->entries[i].orig;
    __atomic_store_n(&m->live, 0, __ATOMIC_RELEASE);
    return 0;
}
