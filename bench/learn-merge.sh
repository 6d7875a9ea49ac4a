#!/bin/sh
# What `pack --learn-from` costs when a fleet's records come in: N records (default 10,000) of
# starts of clang-19 (bin/clang, libclang-cpp, libLLVM: 190 MiB, bench/lib.sh's clang_app),
# each PIECES pieces (default 700, about what `clang -c` misses outside a `--version` hot set,
# BENCHMARKS.md "Network start") of its 64 KiB chunks read outside the hot set, merged into
# the hot set of a pack of clang.
#
#   bench/learn-merge.sh [-n RECORDS] [-p PIECES] [-o DIR]
#
# The records are made by a script (no mount: the merge is what is measured), each the same
# core of PIECES/2 pieces (read by every start) and PIECES/2 drawn from the rest, so that the
# merge keeps the core and drops the draws (each read by under half the starts). Printed:
# the records' total and mean size, `pack` without and with --learn-from (hyperfine-free:
# one run each, wall time and peak memory from /usr/bin/time), and pack's own `learn:` line
# (records read, pieces kept, its time).
set -eu
n=10000; pieces=700; out=""
while getopts n:p:o: opt; do
    case $opt in
        n) n=$OPTARG ;; p) pieces=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-n RECORDS] [-p PIECES] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
rm -rf "$out/clang" "$out/records" "$out/plain.bundle" "$out/learned.bundle"
clang_app "$out/clang"

# The records, as `run --learn` writes them (crates/coldstart-bundle/src/learn.rs).
python3 - "$out/clang" "$out/records" "$n" "$pieces" <<'PY'
import hashlib, json, os, random, sys
app, dest, n, pieces = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dest)
files = []
for rel in ["bin/clang", "lib/libclang-cpp.so.19.1", "lib/libLLVM.so.19.1"]:
    p = os.path.join(app, rel)
    h = hashlib.sha256(open(p, "rb").read()).hexdigest()
    files.append({"sha256": h, "size": os.path.getsize(p)})
chunks = [(f, o) for f, e in enumerate(files) for o in range(0, e["size"] - 65536, 65536)]
rng = random.Random(27)
core = rng.sample(chunks, pieces // 2)
rest = [c for c in chunks if c not in set(core)]
for i in range(n):
    picked = core + rng.sample(rest, pieces - pieces // 2)
    rng.shuffle(picked)
    ps = [{"file": f, "offset": o, "length": 65536, "stored": 65536, "ms": k * 3 + rng.randrange(3)}
          for k, (f, o) in enumerate(picked)]
    r = {"format": "coldstart-learn-record", "version": 1, "bundle": "ab" * 32,
         "strategy": "reordered-paged", "completed": True, "files": files, "pieces": ps}
    with open(os.path.join(dest, "%016x-%d.json" % (0xabab, i)), "w") as f:
        f.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
bytes=$(du -sb "$out/records" | cut -f1)
echo "records: $n, $(echo "$bytes / 1000000" | bc -l | xargs printf '%.1f') MB, $(echo "$bytes / $n" | bc) bytes each ($pieces pieces)"

t() { /usr/bin/time -f "%e s, %M KiB peak" "$@"; }
echo "pack without --learn-from:"
t "$cs" pack "$out/clang" -o "$out/plain.bundle" >/dev/null
echo "pack --learn-from $n records:"
t "$cs" pack "$out/clang" --learn-from "$out/records" -o "$out/learned.bundle" 2>&1 >/dev/null | grep -v '^warning'
