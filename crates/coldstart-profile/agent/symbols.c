/*
 * The audit agent's reading of an object's function symbols (see agent.c): the file mapped
 * read-only, the defined and sized functions of its .symtab, .dynsym or separate debug file
 * (found by build-id under the debug roots), less the functions that must never get a
 * breakpoint, and the sort that orders the entries. Runs in la_objopen, never on the trap
 * path; it allocates with mmap only (the agent shares the loader's namespace rules).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbols.h"

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

int map_file(const char *path, struct file *f) {
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
    "madvise", "munmap", "mprotect", "__mprotect", "free", "cfree", "__libc_free",
    "_dl_deallocate_tls",
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

/* Code a runtime copies as data must never hold a breakpoint: the copy would carry the int3
 * to an address the agent has no entry for, and the program would die of it. V8 assembles its
 * builtins into the program as one blob of code (embedded.S), which starts at
 * v8_NAME_embedded_blob_code_ and whose size is the 32-bit word at
 * v8_NAME_embedded_blob_code_size_; at start-up V8 copies it into its own code range, near the
 * code it generates, so that calls to builtins are short (CodeRange::RemapEmbeddedBuiltins:
 * the file mapped again at the blob's offset while the text is the file's, else a memcpy from
 * the text, which the agent's copy of the text in huge pages makes it do). Node.js died of
 * the first builtin run from that copy. Note the blob's symbols when `name` is one. */
static void note_copied(const char *name, size_t room, uint64_t value, struct copied_code *copied) {
    static const char start[] = "_embedded_blob_code_", size[] = "_embedded_blob_code_size_";
    const char *end = memchr(name, 0, room);
    if (!end || end - name < 3 || memcmp(name, "v8_", 3) != 0) return;
    size_t n = (size_t)(end - name);
    if (n > sizeof size - 1 && memcmp(end - (sizeof size - 1), size, sizeof size - 1) == 0)
        copied->size_at = value;
    else if (n > sizeof start - 1 && memcmp(end - (sizeof start - 1), start, sizeof start - 1) == 0)
        copied->start = value;
}

uint64_t copied_code_end(const struct file *f, const struct copied_code *copied) {
    if (!copied->start || !copied->size_at) return 0;
    const Elf64_Ehdr *eh = (const void *)f->data;
    if (eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > f->size) return 0;
    const Elf64_Phdr *ph = (const void *)(f->data + eh->e_phoff);
    for (unsigned k = 0; k < eh->e_phnum; k++) {
        if (ph[k].p_type != PT_LOAD || copied->size_at < ph[k].p_vaddr ||
            copied->size_at + 4 > ph[k].p_vaddr + ph[k].p_filesz)
            continue;
        uint64_t at = ph[k].p_offset + (copied->size_at - ph[k].p_vaddr);
        uint32_t size;
        if (at + 4 > f->size) return 0;
        memcpy(&size, f->data + at, 4);
        return size ? copied->start + size : 0;
    }
    return 0;
}

/* The version index of GLIBC_PRIVATE in the version definitions (.gnu.version_d) of `f`,
 * 0 when it defines none. Functions of that version are the C library's internals, exported
 * only to its sibling libraries (and the loader): no program calls them, and some run with
 * every signal blocked, on paths a breakpoint would turn fatal only now and then. Thread exit
 * takes the stack cache's lock with every signal blocked, and waits for it in
 * __lll_lock_wait_private when another thread holds it: Firefox died of SIGTRAP there in 3
 * cold starts of 20. */
static unsigned private_version(const struct file *f, const Elf64_Shdr *sh, unsigned shnum) {
    for (unsigned i = 0; i < shnum; i++) {
        if (sh[i].sh_type != SHT_GNU_verdef || sh[i].sh_offset + sh[i].sh_size > f->size ||
            sh[i].sh_link >= shnum)
            continue;
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        if (str->sh_offset + str->sh_size > f->size) return 0;
        const char *names = (const char *)f->data + str->sh_offset;
        uint64_t at = 0;
        for (uint64_t k = 0; k < sh[i].sh_info; k++) {
            if (at + sizeof(Elf64_Verdef) > sh[i].sh_size) return 0;
            const Elf64_Verdef *d = (const void *)(f->data + sh[i].sh_offset + at);
            uint64_t aux = at + d->vd_aux;
            if (aux + sizeof(Elf64_Verdaux) <= sh[i].sh_size) {
                const Elf64_Verdaux *a = (const void *)(f->data + sh[i].sh_offset + aux);
                static const char private_name[] = "GLIBC_PRIVATE"; /* with its NUL */
                if (a->vda_name + sizeof private_name <= str->sh_size &&
                    memcmp(names + a->vda_name, private_name, sizeof private_name) == 0)
                    return d->vd_ndx;
            }
            if (!d->vd_next) return 0;
            at += d->vd_next;
        }
        return 0;
    }
    return 0;
}

/* The version index of each symbol of the table in section `table` (.gnu.version), NULL
 * when it has none. */
static const Elf64_Versym *versions_of(const struct file *f, const Elf64_Shdr *sh, unsigned shnum,
                                       unsigned table, size_t count) {
    for (unsigned i = 0; i < shnum; i++)
        if (sh[i].sh_type == SHT_GNU_versym && sh[i].sh_link == table &&
            sh[i].sh_size >= count * sizeof(Elf64_Versym) &&
            sh[i].sh_offset + sh[i].sh_size <= f->size)
            return (const void *)(f->data + sh[i].sh_offset);
    return NULL;
}

/* Add the defined, sized function symbols of the first section of `type` that lie in an
 * executable section. Returns how many were found. */
size_t add_symbols(const struct file *f, uint32_t type, struct list *out, struct list *skip,
                   struct copied_code *copied) {
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
        unsigned private = private_version(f, sh, eh->e_shnum);
        const Elf64_Versym *version = private ? versions_of(f, sh, eh->e_shnum, i, n) : NULL;
        for (size_t k = 0; k < n; k++) {
            unsigned t = ELF64_ST_TYPE(sym[k].st_info);
            if (t != STT_FUNC && t != STT_GNU_IFUNC) {
                if (strtab && sym[k].st_name < strsize && sym[k].st_shndx != SHN_UNDEF)
                    note_copied(strtab + sym[k].st_name, strsize - sym[k].st_name, sym[k].st_value,
                                copied);
                continue;
            }
            if (sym[k].st_size == 0 || sym[k].st_shndx == SHN_UNDEF || sym[k].st_shndx >= SHN_LORESERVE ||
                sym[k].st_shndx >= eh->e_shnum)
                continue;
            if (!(sh[sym[k].st_shndx].sh_flags & SHF_EXECINSTR)) continue;
            int named = strtab && sym[k].st_name < strsize &&
                        memchr(strtab + sym[k].st_name, 0, strsize - sym[k].st_name);
            if ((named && is_never_armed(strtab + sym[k].st_name)) ||
                (version && (version[k] & 0x7fff) == private)) {
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
size_t add_debug_file_symbols(const struct file *f, const char *debug_roots, struct list *out,
                              struct list *skip, struct copied_code *copied) {
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
                size_t found = add_symbols(&d, SHT_SYMTAB, out, skip, copied);
                munmap((void *)d.data, d.size);
                if (found) return found;
            }
        }
        if (!end) break;
        root = end + 1;
    }
    return 0;
}

/* The address of the defined function `name` in .dynsym, 0 if none. */
uint64_t find_dynamic(const struct file *f, const char *name, uint64_t *size) {
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

/* Move v[root] down the heap of the first n values until both children are smaller. */
static void sift_down(uint64_t *v, size_t root, size_t n) {
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n) break;
        if (child + 1 < n && v[child] < v[child + 1]) child++;
        if (v[root] >= v[child]) break;
        uint64_t t = v[root]; v[root] = v[child]; v[child] = t;
        root = child;
    }
}

/* Sort in place (heap sort: no allocation, no recursion). */
static void heap_sort_u64(uint64_t *v, size_t n) {
    for (size_t start = n / 2; start-- > 0;) sift_down(v, start, n);
    for (size_t end = n; end-- > 1;) {
        uint64_t t = v[0]; v[0] = v[end]; v[end] = t;
        sift_down(v, 0, end);
    }
}

/* Sort in place: a byte-wise radix sort (bytes that are the same in every value are
 * skipped), with heap sort for short lists or when no scratch memory can be had. The heap
 * sort's cache misses were most of the agent's own time in a module of 10,000 functions. */
void sort_u64(uint64_t *v, size_t n) {
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
