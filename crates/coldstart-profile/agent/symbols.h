/*
 * What agent.c uses of symbols.c: reading an object's function entries. Internal to the
 * agent (hidden: the library exports the rtld-audit interface only).
 */
#ifndef COLDSTART_AGENT_SYMBOLS_H
#define COLDSTART_AGENT_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Collected function entries of one object (ELF virtual addresses). */
struct list {
    uint64_t *v;
    size_t n, cap;
};

/* An ELF file mapped read-only. */
struct file {
    const uint8_t *data;
    size_t size;
};

/* Map `path` if it is a 64-bit x86-64 ELF file with a section table: 0, or -1 (nothing
 * mapped). The caller unmaps f->data (f->size bytes). */
int map_file(const char *path, struct file *f);

/* Code the program reads as data: V8's embedded builtins (see symbols.c). ELF addresses of
 * its start and of the 32-bit word that holds its size, 0 when the object has none. */
struct copied_code {
    uint64_t start, size_at;
};

/* Add to `out` the defined, sized function symbols of the first section of `type`
 * (SHT_SYMTAB or SHT_DYNSYM) that lie in an executable section, and to `skip` the addresses
 * of those never armed; note in `copied` the code that the table says is read as data.
 * Returns how many were added to `out`. */
size_t add_symbols(const struct file *f, uint32_t type, struct list *out, struct list *skip,
                   struct copied_code *copied);

/* add_symbols of the .symtab of the separate debug file ROOT/.build-id/xx/rest.debug, for
 * the first of `debug_roots` (colon separated) that has one. */
size_t add_debug_file_symbols(const struct file *f, const char *debug_roots, struct list *out,
                              struct list *skip, struct copied_code *copied);

/* The end (an ELF address) of the code `copied` names, its size read from the object's file
 * `f` (a debug file has no contents for it); 0 when there is none or it cannot be read. */
uint64_t copied_code_end(const struct file *f, const struct copied_code *copied);

/* The address of the defined function `name` in .dynsym (its size in *size when not NULL),
 * 0 if none. */
uint64_t find_dynamic(const struct file *f, const char *name, uint64_t *size);

/* Sort in place, ascending. */
void sort_u64(uint64_t *v, size_t n);

#pragma GCC visibility pop

#endif
