#!/usr/bin/env bash
# Layout on a large C++ program built from Debian's sources: GDB 13.1 with every target
# (`--enable-targets=all`, as Debian's gdb-multiarch; about 10 MB of code), built with clang 22,
# `-ffunction-sections -fdata-sections`, lld 22 and --emit-relocs. Profiled on one start-up (a:
# load a program's symbols, list functions and source) and measured on another (b, held out:
# disassemble, print types and expressions), cold, at 128 KiB read-ahead; against lld 22's
# balanced partitioning and BOLT 22, each trained on a. As root; needs deb-src entries, clang-22,
# lld-22, llvm-22, bolt-22 and GDB's build dependencies (scripts/setup.sh --bench). The two
# builds (plain, and instrumented for lld's profile) took 19 and 11 minutes on the project's
# machine (2 cores) beside a CI run (beside heavier builds, compiles and orders took 100
# minutes); later runs reuse them,
# and the relinks, orders, peers and measurement take about five minutes.
#
#   bench/layout-gdb.sh [RUNS] [--measure-only]
#     RUNS: cold runs per build on the emulated hdd (default 3); --measure-only: measure the
#     builds an earlier run left (one stopped while measuring), making only those missing
#   bench/layout-gdb.sh --builds-only
#     only the two compiles (plain and instrumented), nothing measured: the compiles can run
#     beside other work, and a compile stopped midway goes on where it stopped next time
#
# Builds, each a relink of the same objects in build-plain (`rm gdb; make gdb`, the link through
# `coldstart link`'s compiler wrappers or the script's own for the peers), copied out after:
#
#   plain      as configured
#   default    relinked with DT_RELR (`-z pack-relative-relocs`, which `coldstart link` adds),
#              no order: the builds below differ by their order only
#   ordered    coldstart's defaults: `order a.json --binary gdb`, `link --lld 22`
#   nodata / traced / siblings / ideal / compress   as in bench/layout-typst.sh
#   bp         lld 22's balanced partitioning: GDB rebuilt with `-fprofile-generate
#              -ftemporal-profile`, run on a, `llvm-profdata merge`, relinked with
#              `--irpgo-profile=a.profdata --bp-startup-sort=function`
#   cdsort     BOLT 22 on `plain` (its output of a DT_RELR binary crashes), from its
#              instrumented run of a: `-reorder-blocks=ext-tsp
#              -reorder-functions=cdsort -split-functions -split-all-cold -split-eh`
set -euo pipefail
cd "$(dirname "$0")/.."
builds_only=false
if [ "${1:-}" = --builds-only ]; then builds_only=true; shift; fi
. bench/layout-steps.sh
layout_options "$@"
llvm=/usr/lib/llvm-22/bin
for t in clang ld.lld llvm-bolt llvm-profdata; do
  [ -x "$llvm/$t" ] || { echo "no $llvm/$t: run scripts/setup.sh --bench" >&2; exit 2; }
done
work=/var/tmp/coldstart-bench/gdb
mkdir -p "$work/src" && cd "$work"

# 1. The source, from Debian, and GDB's own enum-flags.h made to compile with clang 20+ (it
# converts -1 to an enum without a fixed type in a constant expression, an error since clang
# 16 that clang 20 no longer lets one turn off; later GDB releases use std::underlying_type).
if [ ! -d src/gdb-13.1 ]; then
  (cd src && apt-get source --download-only gdb=13.1-3 >/dev/null && tar xf gdb_13.1.orig.tar.xz)
  python3 - src/gdb-13.1/gdbsupport/enum-flags.h <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
old = """  typedef typename
    integer_for_size<sizeof (T), static_cast<bool>(T (-1) < T (0))>::type
    type;"""
assert old in s, "enum-flags.h is not GDB 13.1's"
open(p, "w").write(s.replace(old, "  typedef typename std::underlying_type<T>::type type;"))
PY
fi
build() { # NAME, extra compile and link flags
  local name=$1 extra=${2:-}
  mkdir -p "build-$name"
  local flags="-O2 -g0 -ffunction-sections -fdata-sections $extra"
  if [ ! -f "build-$name/config.status" ]; then
    (cd "build-$name" && nice -n 19 ../src/gdb-13.1/configure -q CC=clang-22 CXX=clang++-22 \
      CFLAGS="$flags" CXXFLAGS="$flags" LDFLAGS="-fuse-ld=lld -Wl,--emit-relocs $extra" \
      MAKEINFO=true --enable-targets=all --enable-64-bit-bfd --disable-sim --disable-gdbserver \
      --without-guile --disable-werror --disable-nls --with-python=/usr/bin/python3 \
      --disable-gprofng --disable-ld --disable-gas --disable-binutils --disable-gold \
      --disable-gprof)
  fi
  nice -n 19 make -s -C "build-$name" -j2 MAKEINFO=true all-gdb > "build-$name.log" 2>&1 \
    || { tail -30 "build-$name.log"; exit 1; }
}
[ -x build-plain/gdb/gdb ] || build plain
if $builds_only; then
  [ -x build-instr/gdb/gdb ] || build instr "-fprofile-generate -ftemporal-profile"
  exit 0
fi
size -A build-plain/gdb/gdb | awk '$1 == ".text" { printf "gdb: %.1f MB of code\n", $2 / 1e6 }'

# 2. A program to debug, with debug information, and the two start-ups (no inferior is run:
# the profiler's own tracing stays out of gdb's ptrace).
prog=/dev/shm/coldstart-gdb
rm -rf "$prog" && mkdir -p "$prog"
cat > "$prog/t.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
struct point { double x, y; const char *name; struct point *next; };
enum colour { RED, GREEN, BLUE };
static double norm(const struct point *p) { return p->x * p->x + p->y * p->y; }
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
struct point *make(int n) {
  struct point *head = NULL;
  for (int i = 0; i < n; i++) {
    struct point *p = malloc(sizeof *p);
    p->x = i; p->y = fib(i % 20); p->name = "p"; p->next = head; head = p;
  }
  return head;
}
int main(int argc, char **argv) {
  struct point *p = make(argc * 10);
  enum colour c = argc > 1 ? BLUE : RED;
  printf("%f %d %s\n", norm(p), c, argv[0]);
  return 0;
}
C
clang-22 -g -O0 -o "$prog/t" "$prog/t.c"
dd=$work/build-plain/gdb/data-directory
wa=(-nx -batch -data-directory "$dd" -ex "info functions ^m" -ex "list main" -ex "info line fib" "$prog/t")
wb=(-nx -batch -data-directory "$dd" -ex "disassemble fib" -ex "ptype struct point"
    -ex "print sizeof(struct point) * 3" -ex "info scope make" "$prog/t")

# 3. Relinks of build-plain's objects. `relink NAME [coldstart link options] [-- WRAPPER-DIR]`.
relink() {
  local v=$1; shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  rm -f build-plain/gdb/gdb
  local make=(nice -n 19 make -s -C build-plain/gdb gdb)
  if [ ${#opts[@]} -gt 0 ]; then
    "$cs" link --lld 22 "${opts[@]}" --binary build-plain/gdb/gdb -- "${make[@]}" \
      > "link-$v.txt" 2>&1 || { cat "link-$v.txt"; exit 1; }
  else
    PATH=$1:$PATH "${make[@]}" > "link-$v.txt" 2>&1 || { cat "link-$v.txt"; exit 1; }
  fi
  tail -3 "link-$v.txt"
  mkdir -p "$v/bin" && cp build-plain/gdb/gdb "$v/bin/gdb"
}
# A directory whose clang++-22 adds FLAGS to every link (GDB links with $(CXX)), its messages
# kept in link.log there.
wrapper() { # dir, flags...
  local dir=$1; shift
  mkdir -p "$dir"
  printf '#!/bin/sh\nexec %s "$@" %s 2>>%s/link.log\n' "$(command -v clang++-22)" "$*" "$dir" \
    > "$dir/clang++-22"
  chmod +x "$dir/clang++-22"
}
[ -x plain/bin/gdb ] || { mkdir -p plain/bin && cp build-plain/gdb/gdb plain/bin/gdb; }
layout_builds gdb "$work/relr-cxx"
# 7. lld 22's balanced partitioning, from a run of a by a build instrumented for IR PGO with
# temporal profiling.
if ! $measure_only || [ ! -x bp/bin/gdb ]; then
  [ -x build-instr/gdb/gdb ] || build instr "-fprofile-generate -ftemporal-profile"
  layout_bp build-instr/gdb/gdb wrapper
fi
# 8. Measured.
layout_measure gdb plain default ordered nodata traced siblings ideal bp cdsort
