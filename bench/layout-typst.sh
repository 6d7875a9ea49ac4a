#!/usr/bin/env bash
# Layout on a large real program nobody here wrote: the Typst compiler (`typst-cli` from
# crates.io, an ~80 MB binary with its fonts embedded), built with lld and --emit-relocs,
# profiled compiling one document (a) and measured compiling another (b), cold, at 128 KiB
# read-ahead. The whole pipeline with its defaults: `analyze`, `order`, `link` (which
# verifies), against the default layout and BOLT's own orders of the same binary. As root;
# needs crates.io. The first build takes about an hour on two cores; later runs reuse it.
#
#   bench/layout-typst.sh
#
# Builds (each a relink of the same objects: the script keeps RUSTFLAGS fixed and lets
# `coldstart link`'s compiler wrappers, which rustc links through as `cc`, add the order and
# the linker flags; a changed RUSTFLAGS would rebuild every crate):
#
#   default   cargo install with lld and --emit-relocs
#   input     functions of a in first-touch order, nothing else (`order --unprofiled input
#             --no-data`, `link --no-pack-relocs`): the pipeline before issue 14
#   ordered   coldstart's defaults: `order a.json --binary typst` (touched functions, their
#             untouched callees, data by page first touch), `link` (DT_RELR packing)
#   nopie     the same linked -no-pie, for a user who accepts a fixed load address: no
#             relocation of .data.rel.ro at start-up
#   ideal     coldstart's defaults trained on b itself (what a perfect profile gives)
#   hfsort, cdsort   BOLT's own orders from its instrumented profile of a
#
# Then bench/layout-breakdown.sh records one cold start of b per build with tracefs (pages
# read, faults, requests; by section), and `coldstart measure --compare` checks hot start-up.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
version=0.15.1
cargo build --locked --release -q -p coldstart
cs=$PWD/target/release/coldstart
bolt=$(ls /usr/lib/llvm-*/bin/llvm-bolt 2>/dev/null | sort -V | tail -1)
bolt=${bolt:-$(command -v llvm-bolt)}
work=/var/tmp/coldstart-bench/typst
mkdir -p "$work" && cd "$work"
unset CARGO_ENCODED_RUSTFLAGS
flags="-C link-arg=-fuse-ld=lld -C link-arg=-B/usr/lib/llvm-19/bin -C link-arg=-Wl,--emit-relocs"
export CARGO_TARGET_DIR=$work/target

# 1. The default build.
if [ ! -x default/bin/typst ]; then
  RUSTFLAGS="$flags" nice cargo install -q --locked "typst-cli@$version" --root default
fi
ls -l default/bin/typst

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

# 3. Profiles (functions and file pages), the static picture, the model's view.
"$cs" profile --pages --workload a -o a.json -- default/bin/typst "${wa[@]}" >/dev/null
"$cs" profile --pages --workload b -o b.json -- default/bin/typst "${wb[@]}" >/dev/null
"$cs" analyze default/bin/typst --profile a.json > analyze-default-a.txt
"$cs" order a.json --binary default/bin/typst --evaluate b.json --read-around forward \
  -o /dev/null > evaluate.txt 2>&1
cat evaluate.txt

# 4. Relinks.
relink() { # build name, then coldstart link options, then -- and PATH additions
  local v=$1; shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local path=$PATH
  [ $# -gt 0 ] && path=$1:$PATH
  rm -f "$CARGO_TARGET_DIR"/release/typst "$CARGO_TARGET_DIR"/release/deps/typst-*
  PATH=$path "$cs" link "${opts[@]}" --binary "$v/bin/typst" -- \
    env RUSTFLAGS="$flags" nice cargo install -q --locked --force "typst-cli@$version" \
    --root "$v" > "link-$v.txt" 2>&1 || { cat "link-$v.txt"; exit 1; }
  tail -3 "link-$v.txt"
}
"$cs" order a.json --binary default/bin/typst --unprofiled input --no-data -o order-input.txt \
  2> order-input.log
relink input --order order-input.txt --no-pack-relocs
"$cs" order a.json --binary default/bin/typst -o order-a.txt 2> order-a.log
cat order-a.log
relink ordered --order order-a.txt
mkdir -p nopie-cc
printf '#!/bin/sh\nexec /usr/bin/cc "$@" -no-pie\n' > nopie-cc/cc && chmod +x nopie-cc/cc
relink nopie --order order-a.txt -- "$work/nopie-cc"
"$cs" order b.json --binary default/bin/typst -o order-b.txt 2> order-b.log
relink ideal --order order-b.txt
"$cs" verify ordered/bin/typst --profile a.json > verify-ordered-profile.txt || true

# 5. BOLT's own orders, from an instrumented run of a.
mkdir -p instr
"$bolt" default/bin/typst -instrument -o instr/typst --instrumentation-file="$work/a.fdata" \
  > bolt-instrument.log 2>&1
rm -f a.fdata && instr/typst "${wa[@]}" >/dev/null
for algo in hfsort cdsort; do
  mkdir -p "$algo/bin"
  "$bolt" default/bin/typst -o "$algo/bin/typst" -data=a.fdata -reorder-functions="$algo" \
    > "bolt-$algo.log" 2>&1
done

# 6. Measured: one cold start of b per build, traced; hot start-up of ordered against default.
builds=(default input ordered nopie ideal hfsort cdsort)
dirs=()
for v in "${builds[@]}"; do
  rm -rf "run/$v" && mkdir -p "run/$v/bin" && cp "$v/bin/typst" "run/$v/bin/typst"
  dirs+=("$work/run/$v")
done
"$repo/bench/layout-breakdown.sh" "${dirs[@]}" -- bin/typst "${wb[@]}" | tee breakdown.txt
cp /var/tmp/coldstart-bench/breakdown/summary.json summary.json
"$cs" measure --compare --cache hot --runs 20 -- default/bin/typst "${wb[@]}" ::: \
  ordered/bin/typst "${wb[@]}" > hot.txt 2>&1 || true
grep -iE "faster|slower|within|p =" hot.txt || tail -5 hot.txt

python3 - summary.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
b = {v: s[v]["binaries"] for v in s}
d = b["default"]
print("\ntypst: the binary, cold start of held-out b, 128 KiB read-ahead")
print(f"{'build':10} {'pages read':>10} {'requests':>9} {'faults':>7}  vs default")
for v, r in b.items():
    print(f"{v:10} {r['kib'] // 4:10} {r['requests']:9} {r['faults']:7}  "
          f"{100 * (r['kib'] / max(d['kib'], 1) - 1):+.0f}% pages, "
          f"{100 * (r['requests'] / max(d['requests'], 1) - 1):+.0f}% requests")
PY
