#!/usr/bin/env bash
# Layout on a program nobody here wrote: ripgrep from crates.io, built from source with lld.
# Three builds: default; functions in coldstart's first-touch order of workload a (`order`,
# `link`); functions and data in that order with DT_RELR (`order --data`, `link --pack-relocs`).
# Each ordered build is measured against the default on held-out workload b with
# `coldstart measure --compare`: cold from an emulated device with 128 KiB read-ahead (major
# faults, bytes read, read requests) and hot. As root; needs crates.io.
#
#   bench/layout-ripgrep.sh [STORAGE] [RUNS]     (default: nvme, 5)
#
# `coldstart measure` counts read requests on the whole machine (cgroup v1), so on a shared
# machine they scatter; the script ends with bench/layout-breakdown.sh on the three binaries:
# pages read, faults and requests estimated from a tracefs record of one cold start each.
#
# Workload a: `rg -c "fn " CORPUS/ripgrep`; workload b (held out):
# `rg -i -l "struct|enum" CORPUS/regex-syntax CORPUS/memchr`. The corpus (crate sources from
# Cargo's registry) is copied to /dev/shm, so searching it reads no block device: the reads
# measured are the binary's. Builds are kept between runs of the script (delete
# /var/tmp/coldstart-bench/ripgrep to rebuild). Cold runs hold
# /tmp/coldstart-measure-tests.lock, as the test suite's cache tests do.
set -euo pipefail
cd "$(dirname "$0")/.."
storage=${1:-nvme}; runs=${2:-5}
version=15.2.0
cargo build --locked --release -q -p coldstart
cs=$PWD/target/release/coldstart
repo=$PWD
work=/var/tmp/coldstart-bench/ripgrep
mkdir -p "$work" && cd "$work"
lld="-C link-arg=-fuse-ld=lld -C link-arg=-B/usr/lib/llvm-19/bin"
unset CARGO_ENCODED_RUSTFLAGS

# 1. Default build (lld, no order).
if [ ! -x default/bin/rg ]; then
  RUSTFLAGS="$lld" CARGO_TARGET_DIR=$work/target-default \
    cargo install -q --locked "ripgrep@$version" --root default
fi

# The corpus: sources of three crates of ripgrep's build, in memory.
reg=$(dirname "$(ls -d "$HOME"/.cargo/registry/src/*/ripgrep-$version | head -1)")
corpus=/dev/shm/coldstart-rg-corpus
rm -rf "$corpus" && mkdir -p "$corpus"
cp -r "$reg/ripgrep-$version" "$corpus/ripgrep"
cp -r "$(ls -d "$reg"/regex-syntax-* | sort -V | tail -1)" "$corpus/regex-syntax"
cp -r "$(ls -d "$reg"/memchr-* | sort -V | tail -1)" "$corpus/memchr"
wa=(-c "fn " "$corpus/ripgrep")
wb=(-i -l "struct|enum" "$corpus/regex-syntax" "$corpus/memchr")

# 2. Profile a (and b, for the model figures only), order on a, relink.
"$cs" profile --workload a -o a.json -- default/bin/rg "${wa[@]}" >/dev/null
"$cs" profile --pages --workload a -o a-pages.json -- default/bin/rg "${wa[@]}" >/dev/null
"$cs" profile --workload b -o b.json -- default/bin/rg "${wb[@]}" >/dev/null
"$cs" order a.json --binary default/bin/rg --evaluate b.json -o order.txt 2>order-warnings.txt \
  | tee evaluate.txt
if [ ! -x ordered/bin/rg ]; then
  RUSTFLAGS="$lld" CARGO_TARGET_DIR=$work/target-ordered \
    "$cs" link --order order.txt --binary ordered/bin/rg -- \
    cargo install -q --locked "ripgrep@$version" --root ordered | tee verify-ordered.txt
fi
"$cs" order a-pages.json --binary default/bin/rg --data -o order-data.txt 2>>order-warnings.txt
if [ ! -x data/bin/rg ]; then
  RUSTFLAGS="$lld" CARGO_TARGET_DIR=$work/target-data \
    "$cs" link --pack-relocs --order order-data.txt --binary data/bin/rg -- \
    cargo install -q --locked "ripgrep@$version" --root data | tee verify-data.txt
fi

# 3. Model: code pages b touches in each build.
for v in default ordered data; do
  "$cs" analyze "$v/bin/rg" --profile b.json --module rg --json > "analyze-$v.json"
  "$cs" analyze "$v/bin/rg" --profile b.json --module rg --read-around forward --json \
    > "analyze-$v-forward.json"
done

# 4. Measured: the three binaries side by side in one directory on the emulated device.
rm -rf bins && mkdir bins
for v in default ordered data; do
  cp "$v/bin/rg" "bins/rg-$v"
  rm -rf "run-$v" && mkdir "run-$v" && cp "$v/bin/rg" "run-$v/rg"
done
for v in ordered data; do
  flock /tmp/coldstart-measure-tests.lock \
    "$cs" measure --compare --storage "$storage" --app-dir "$work/bins" --cache cold \
    --runs "$runs" --export-json "cold-$v.json" \
    -- "$work/bins/rg-default" "${wb[@]}" ::: "$work/bins/rg-$v" "${wb[@]}" > "cold-$v.txt"
  "$cs" measure --compare --cache hot --runs 20 --export-json "hot-$v.json" \
    -- "$work/bins/rg-default" "${wb[@]}" ::: "$work/bins/rg-$v" "${wb[@]}" > "hot-$v.txt"
done

med() { jq -r --argjson i "$2" --arg m "$3" \
  '.commands[$i].summaries[] | select(.[0] == $m) | .[1].median' "$1"; }
echo
echo "ripgrep $version, storage $storage (128 KiB read-ahead), held-out workload b, medians"
printf '%-8s %14s %8s %8s %11s %13s %10s %10s %12s\n' build "pages touched" faults fwd \
  "pages read" "major faults" "KiB read" "read reqs" "hot (ms)"
row() { # build, analyze file, measure json (cold), index, hot json
  printf '%-8s %14s %8s %8s %11s %13s %10s %10s %12.2f\n' "$1" \
    "$(jq '.utilization.code_pages_touched' "$2")" "$(jq '.utilization.current.faults' "$2")" \
    "$(jq '.utilization.current.faults' "${2%.json}-forward.json")" \
    "$(jq '.utilization.current.pages_read' "$2")" "$(med "$3" "$4" major_faults)" \
    "$(med "$3" "$4" read_bytes | awk '{printf "%d", $1/1024}')" \
    "$(med "$3" "$4" read_requests)" "$(med "$5" "$4" wall_s | awk '{print $1*1000}')"
}
row default analyze-default.json cold-ordered.json 0 hot-ordered.json
row ordered analyze-ordered.json cold-ordered.json 1 hot-ordered.json
row default analyze-default.json cold-data.json 0 hot-data.json
row data analyze-data.json cold-data.json 1 hot-data.json
for v in ordered data; do
  echo "hot, $v against default:"; grep -iE "faster|slower|within|p =" "hot-$v.txt" || true
done
echo
"$repo/bench/layout-breakdown.sh" "$work/run-default" "$work/run-ordered" "$work/run-data" \
  -- rg "${wb[@]}"
