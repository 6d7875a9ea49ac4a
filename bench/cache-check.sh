#!/bin/sh
# What checking the chunk cache's whole-file copies costs: a mount hands FUSE passthrough a
# copy only once its content is known to be the manifest's, checked now (every chunk-sized
# piece against the manifest's SHA-256) or recorded as checked and unchanged since
# (crates/coldstart-lazyfs/src/engine/local.rs). Warm starts from a fully cached bundle, each
# `coldstart run` a fresh mount, of:
#
#   clang-19 (bin/clang, libclang-cpp 71 MB, libLLVM 129 MB), `clang --version`;
#   python3 with its standard library (as bench/network-python.sh), `python3 -c 'import json'`;
#   libLLVM alone, its first byte read (`head -c 1`): the check of one large file.
#
#   bench/cache-check.sh [-r RUNS] [-o DIR]
#
# Each bundle is packed, `run --strategy original` fills a chunk cache and writes the copies,
# then hyperfine times RUNS runs (default 20, 3 warm-up) of the binary measured (COLDSTART):
# `recorded` (the copies' records in place: what every start after the first sees), `checked`
# (the records removed before each run: every copy read whole and checked, what the first
# start after a change pays, and every start where `trusted.` attributes cannot be written),
# and with COLDSTART_BASE set (a build of the commit before, whose copies are trusted by a
# stamp of their modification time) `stamp`, each with its own cache; then the time the checks
# took by the runs' reports (`passthrough_check_ms`, median of RUNS `checked` mounts).
set -eu
runs=20
. "$(dirname "$0")/opts.sh"
. "$(dirname "$0")/lib.sh"
base=${COLDSTART_BASE:-}
mkdir -p "$out"

rm -rf "$out/clang" "$out/python" "$out/llvm"
clang_app "$out/clang"
python_app "$out/python"
mkdir -p "$out/llvm"
cp "$out/clang/lib/libLLVM.so.19.1" "$out/llvm/"

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# bench NAME 'CMD': the command (quoted as for a shell) run from the mount ({root}), by each
# binary.
bench() {
    name=$1; line=$2
    eval "set -- $line"
    rm -rf "$out/$name.bundle" "$out/$name.cache" "$out/$name.cache-base" "$out/$name.reports"
    "$cs" pack "$out/$name" -o "$out/$name.bundle" >/dev/null
    mkdir -p "$out/$name.reports"
    "$cs" run "$out/$name.bundle" --strategy original --cache-dir "$out/$name.cache" -- "$@" \
        >/dev/null 2>&1
    if [ -n "$base" ]; then
        "$base" run "$out/$name.bundle" --strategy original --cache-dir "$out/$name.cache-base" \
            -- "$@" >/dev/null 2>&1
    fi
    cmd="$cs run $out/$name.bundle --cache-dir $out/$name.cache -- $line"
    forget="find $out/$name.cache/files -name '*.check' -delete"
    set -- -n recorded --prepare true "$cmd" -n checked --prepare "$forget" "$cmd"
    if [ -n "$base" ]; then
        set -- "$@" -n stamp --prepare true \
            "$base run $out/$name.bundle --cache-dir $out/$name.cache-base -- $line"
    fi
    hyperfine -N --warmup 3 --runs "$runs" --export-json "$out/$name.json" "$@" >/dev/null 2>&1
    eval "set -- $line"
    # The checks' own time, from mounts that check every copy.
    : > "$out/$name.check"
    for i in $(seq "$runs"); do
        find "$out/$name.cache/files" -name '*.check' -delete
        "$cs" run "$out/$name.bundle" --cache-dir "$out/$name.cache" --export-json \
            "$out/$name.reports/r.json" -- "$@" >/dev/null 2>&1
        grep -o '"passthrough_check_ms": [0-9.e+-]*' "$out/$name.reports/r.json" |
            awk '{ print $2 }' >> "$out/$name.check"
    done
    passthrough=$(grep -o '"passthrough": [0-9]*' "$out/$name.reports/r.json" | awk '{ print $2 }')
    echo "## $name: $line ($passthrough files handed over per run)"
    python3 - "$out/$name.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))["results"]
base = statistics.median(r[0]["times"])
print("| start | median | min | median against recorded |")
print("| --- | --- | --- | --- |")
for x in r:
    m = statistics.median(x["times"])
    print(f"| {x['command']} | {m * 1e3:.1f} ms | {min(x['times']) * 1e3:.1f} ms | {m / base:.2f}x |")
PY
    echo "check of the copies, median of $runs mounts: $(median < "$out/$name.check") ms"
    echo
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%F)"
bench clang "{root}/bin/clang --version"
bench python "env PYTHONHOME={root} /usr/bin/python3 -c 'import json'"
bench llvm "head -c 1 {root}/libLLVM.so.19.1"
