#!/usr/bin/env bash
# Layout on a large real program nobody here wrote: the Typst compiler (`typst-cli` from
# crates.io, an ~85 MB binary with its fonts embedded), built with lld 22 and --emit-relocs,
# profiled compiling one document (a) and measured compiling another (b), cold, at 128 KiB
# read-ahead; against lld 22's balanced partitioning and BOLT 22, each trained on a. As root;
# needs crates.io, lld-22, llvm-22 and bolt-22 (scripts/setup.sh --bench). The two first builds
# (plain, and instrumented for lld's profile) take one to two hours on two cores; later runs
# reuse them and relink in minutes.
#
#   bench/layout-typst.sh [RUNS] [--measure-only]
#     RUNS: cold runs per build on the emulated hdd (default 3); --measure-only: measure the
#     builds an earlier run left (one stopped while measuring), making only those missing
#
# Builds, each a relink of the same objects (RUSTFLAGS stays fixed, so nothing recompiles but
# typst-cli's own crate; the order and linker flags come from compiler wrappers that rustc links
# through as `cc`: `coldstart link`'s, or the script's own for the peers):
#
#   plain      cargo install with lld 22 and --emit-relocs, as built
#   default    the same objects relinked with DT_RELR (`-z pack-relative-relocs`, which
#              `coldstart link` adds by default), no order: every build below has DT_RELR, so
#              they differ by their order only
#   ordered    coldstart's defaults: `order a.json --binary typst` (touched functions, their
#              untouched callees, data by the first touch of its pages in the exact profile),
#              `link --lld 22`
#   nodata     the same without the data order (`order --no-data`)
#   traced     the data order from a traced page profile (`profile --pages=traced`, what
#              profiles gave before they were exact)
#   siblings   `order --unprofiled siblings`: the callees, then the other implementations of
#              the trait methods start-up ran
#   ideal      coldstart's defaults trained on b itself: the perfect-profile order
#   bp         lld 22's balanced partitioning for start-up: typst rebuilt with IR PGO and
#              temporal profiling (`-C profile-generate -C llvm-args=-pgo-temporal-instrumentation`),
#              run on a, `llvm-profdata merge`, relinked with `--irpgo-profile=a.profdata
#              --bp-startup-sort=function`
#   cdsort     BOLT 22 on `plain` (its output of a DT_RELR binary crashes), instrumented
#              (`llvm-bolt -instrument`) and run on a, then
#              as BOLT's documentation recommends: `-reorder-blocks=ext-tsp
#              -reorder-functions=cdsort -split-functions -split-all-cold -split-eh`
#   compress   `ordered` linked with `link --compression-sort` (for bench/layout-pack.sh)
#
# Then bench/layout-breakdown.sh records one cold start of b per build with tracefs (pages read,
# read runs, faults; what an order can move), and `coldstart measure --compare --storage hdd`
# times cold starts of b, each build interleaved with `default`.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/layout-steps.sh
layout_options "$@"
version=0.15.1
llvm=/usr/lib/llvm-22/bin
for t in ld.lld llvm-bolt llvm-profdata; do
  [ -x "$llvm/$t" ] || { echo "no $llvm/$t: run scripts/setup.sh --bench" >&2; exit 2; }
done
work=/var/tmp/coldstart-bench/typst
mkdir -p "$work" && cd "$work"
unset CARGO_ENCODED_RUSTFLAGS
flags="-C link-arg=-fuse-ld=lld -C link-arg=-B$llvm -C link-arg=-Wl,--emit-relocs"
export CARGO_TARGET_DIR=$work/target

# 1. The plain build (the instrumented one, for lld, is built in step 6).
if [ ! -x plain/bin/typst ]; then
  RUSTFLAGS="$flags" nice -n 19 cargo install -q --locked "typst-cli@$version" --root plain
fi
ls -l plain/bin/typst

# 2. Two documents, in memory (compiling reads no block device but the binary).
docs=/dev/shm/coldstart-typst
rm -rf "$docs" && mkdir -p "$docs"
cat > "$docs/a.typ" <<'TYP'
#set page(paper: "a4", numbering: "1")
#set heading(numbering: "1.1")
#set par(justify: true)
= Start-up of large programs
#lorem(200)
== Measured
#table(columns: 3, [layout], [pages], [faults], [default], [6390], [131], [ordered], [783], [6])
The cost of a fault is $t = t_"seek" + n / B$ where $n$ is the read-ahead window.
- first item #lorem(20)
- second item #lorem(30)
#lorem(300)
TYP
cat > "$docs/b.typ" <<'TYP'
#set page(paper: "us-letter", columns: 2, margin: 1.5cm)
#set text(font: "New Computer Modern", size: 10pt)
#outline()
= Notes
#lorem(120)
== Code
```rust
fn main() { let v: Vec<u64> = (0..10).map(|x| x * x).collect(); println!("{v:?}"); }
```
```python
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
```
== Maths
$ mat(1, 2; 3, 4) vec(x, y) = integral_0^oo e^(-x^2) dif x $
#figure(table(columns: 2, [a], [b], [c], [d]), caption: [A table])
#lorem(250)
TYP
wa=(compile --ignore-system-fonts "$docs/a.typ" "$docs/a.pdf")
wb=(compile --ignore-system-fonts "$docs/b.typ" "$docs/b.pdf")

# 3. Relinks. `relink NAME [coldstart link options] [-- WRAPPER-DIR]`: with link options
# through `coldstart link --lld 22`; without, through the wrapper directory's `cc` alone.
relink() {
  local v=$1; shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  rm -f "$CARGO_TARGET_DIR"/release/typst "$CARGO_TARGET_DIR"/release/deps/typst-*
  local build=(env RUSTFLAGS="$flags" nice -n 19 cargo install -q --locked --force
               "typst-cli@$version" --root "$v")
  if [ ${#opts[@]} -gt 0 ]; then
    "$cs" link --lld 22 "${opts[@]}" --binary "$v/bin/typst" -- "${build[@]}" \
      > "link-$v.txt" 2>&1 || { cat "link-$v.txt"; exit 1; }
  else
    PATH=$1:$PATH "${build[@]}" > "link-$v.txt" 2>&1 || { cat "link-$v.txt"; exit 1; }
  fi
  tail -3 "link-$v.txt"
}
# A directory whose `cc` adds FLAGS to every link (rustc links through `cc`), its messages
# kept in link.log there.
wrapper() { # dir, flags...
  local dir=$1; shift
  mkdir -p "$dir"
  # What the linker says goes to link.log there (rustc would show it only on failure).
  printf '#!/bin/sh\nexec /usr/bin/cc "$@" %s 2>>%s/link.log\n' "$*" "$dir" > "$dir/cc"
  chmod +x "$dir/cc"
}
layout_builds typst "$work/relr-cc"
# 7. lld 22's balanced partitioning, from a run of a by a build instrumented for IR PGO with
# temporal profiling (its own target directory: other RUSTFLAGS).
if ! $measure_only || [ ! -x bp/bin/typst ]; then
  if [ ! -x pgo-instr/bin/typst ]; then
    RUSTFLAGS="$flags -C profile-generate=$work/profraw -C llvm-args=-pgo-temporal-instrumentation" \
      CARGO_TARGET_DIR=$work/target-instr \
      nice -n 19 cargo install -q --locked "typst-cli@$version" --root pgo-instr
  fi
  layout_bp pgo-instr/bin/typst wrapper
fi
# 8. Measured.
layout_measure typst plain default ordered nodata traced siblings ideal bp cdsort
