#!/usr/bin/env bash
# Where a cold start-up's reads go, file by file and section by section, for builds of the sample
# program: by default the default and the ordered builds that bench/layout-sample.sh leaves in
# /var/tmp/coldstart-bench (run it first), or the sample directories given.
# The builds are copied onto an ext4 image on a loop device with 128 KiB read-ahead; for each,
# every cache is dropped and held-out workload b is recorded with `coldstart profile
# --pages=traced` (its page run is the cold one: tracefs gives every page read from the device,
# every fault; the exact method, `--pages`'s default, would count the pages touched instead).
# (The device's own counters would also count the profiler reading the files' symbols.)
# Read requests per file are estimated from the trace: each run of consecutive pages read, cut
# every 128 KiB (the read-ahead window and the most one fault or read-ahead step reads).
# `coldstart analyze --profile` then splits each binary's pages by section class and by what a
# linker order can move (code and named data), and /var/tmp/coldstart-bench/breakdown/summary.json
# keeps the totals per build (binaries, data files under data/, all files: KiB read, major
# faults, requests; `movable`: the binaries' pages read in code and named data). As root.
#
#   bench/layout-breakdown.sh [DIR...] [-- PROGRAM ARGS...]
#     (default: /var/tmp/coldstart-bench/sample-bench /var/tmp/coldstart-bench/ordered-bench
#      -- sample --workload b)
#
# Each build is a directory holding PROGRAM (a path relative to it) and what it reads; it is
# named by the directory's last component (they must differ). ARGS are given as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
work=/var/tmp/coldstart-bench
given=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do given+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- sample --workload b
exe=$1; shift
[ ${#given[@]} -gt 0 ] || given=("$work/sample-bench" "$work/ordered-bench")
dirs=()
for d in "${given[@]}"; do
  [ -x "$d/$exe" ] || { echo "no $exe in $d (for the sample: run bench/layout-sample.sh first)" >&2; exit 2; }
  dirs+=("$(cd "$d" && pwd)")
done
# One breakdown at a time: they share the work directory below.
mkdir -p "$work"
exec 8>"$work/breakdown.lock"
flock 8
cargo build --locked --release -q -p coldstart
cs=$PWD/target/release/coldstart
out=$work/breakdown
rm -rf "$out" && mkdir -p "$out/mnt"
img=$out/disk.img
mb=$(( $(du -sm --exclude=src "${dirs[@]}" | awk '{s+=$1} END {print s}') * 5 / 4 + 64 ))
truncate -s "${mb}M" "$img"
mkfs.ext4 -q -b 4096 -m 0 -E lazy_itable_init=0,lazy_journal_init=0 "$img"
loop=$(losetup --find --show --direct-io=on "$img")
cleanup() { umount "$out/mnt" 2>/dev/null || true; losetup -d "$loop" 2>/dev/null || true; rm -f "$img"; }
trap cleanup EXIT
mount -o noatime "$loop" "$out/mnt"
dev=$(basename "$loop")
echo 128 > "/sys/block/$dev/queue/read_ahead_kb"
names=()
for d in "${dirs[@]}"; do
  v=$(basename "$d"); names+=("$v")
  # Sources and objects are not read at start-up.
  (cd "$d" && tar --exclude=./src -cf - .) | (mkdir "$out/mnt/$v" && cd "$out/mnt/$v" && tar -xpf -)
done
sync

exec 9>>/tmp/coldstart-measure-tests.lock  # held while caches are dropped and the run is cold
for v in "${names[@]}"; do
  flock 9
  sync && echo 3 > /proc/sys/vm/drop_caches
  "$cs" profile --pages=traced --workload b -o "$out/$v-b.json" -- "$out/mnt/$v/$exe" "$@" \
    >/dev/null 2>"$out/$v-profile.log"
  flock -u 9
  "$cs" analyze --profile "$out/$v-b.json" --json > "$out/$v-analyze.json" 2>/dev/null
done

python3 - "$out" "${names[@]}" <<'EOF'
import json, os, sys
out = sys.argv[1]
summary = {}
for v in sys.argv[2:]:
    prof = json.load(open(f"{out}/{v}-b.json"))
    pages = prof["pages"]
    files = pages["files"]
    read = {}    # file -> pages read from the device
    faults = {}  # file -> faults on a page not yet read (a read waited for)
    reqs = {}    # file -> estimated read requests
    last = {}    # file -> (last page read, length of its run)
    seen = {}
    for a in pages["accesses"]:
        f = a["file"]
        s = seen.setdefault(f, set())
        span = range(a["page"], a["page"] + a.get("count", 1))
        if a["event"] == "read":
            for p in span:
                if p not in s:
                    s.add(p)
                    read[f] = read.get(f, 0) + 1
                    lp, n = last.get(f, (-2, 0))
                    if p == lp + 1 and n < 32:
                        last[f] = (p, n + 1)
                    else:
                        last[f] = (p, 1)
                        reqs[f] = reqs.get(f, 0) + 1
        elif a["event"] == "fault" and a["page"] not in s:
            faults[f] = faults.get(f, 0) + 1
    mnt = f"{out}/mnt/{v}/"
    print(f"\n{v}: workload b, cold, 128 KiB read-ahead")
    print(f"  {'file':28} {'KiB read':>9} {'share':>6} {'major faults':>13} {'requests (est.)':>16}")
    rows = []
    for i, f in enumerate(files):
        p = str(f["path"])
        if not p.startswith(mnt) or i not in read:
            continue
        rows.append((p[len(mnt):], read[i] * 4, faults.get(i, 0), reqs.get(i, 0)))
    total = sum(r[1] for r in rows)
    summary.setdefault(v, {})["files"] = {r[0]: {"kib": r[1], "faults": r[2], "requests": r[3]}
                                          for r in rows}
    for name, kib, nf, nr in sorted(rows, key=lambda r: -r[1]):
        print(f"  {name:28} {kib:9} {100 * kib / max(total, 1):5.0f}% {nf:13} {nr:16}")
    for label, pick in (("data files", lambda r: r[0].startswith("data/")),
                        ("binaries", lambda r: not r[0].startswith("data/")),
                        ("all files", lambda r: True)):
        sel = [r for r in rows if pick(r)]
        print(f"  {label:28} {sum(r[1] for r in sel):9} {'':6} {sum(r[2] for r in sel):13} "
              f"{sum(r[3] for r in sel):16}")
        summary.setdefault(v, {})[label] = {"kib": sum(r[1] for r in sel),
                                            "faults": sum(r[2] for r in sel),
                                            "requests": sum(r[3] for r in sel)}
    an = json.load(open(f"{out}/{v}-analyze.json"))
    for a in an if isinstance(an, list) else [an]:
        path = a["static"]["path"] if "path" in a["static"] else ""
        if not str(path).startswith(mnt) or not a["sections"]:
            continue
        cells = ", ".join(f"{r['class']} {r['pages_read'] * 4} KiB ({r['pages_faulted']} faulted)"
                          for r in a["sections"] if r["pages_read"])
        print(f"  {str(path)[len(mnt):]}: {cells}")
        m = a.get("movable")
        if m:
            mv = summary[v].setdefault("movable", {"code": 0, "named_data": 0, "fixed": 0})
            for k in mv:
                mv[k] += m[k]
            print(f"  {str(path)[len(mnt):]}: what an order can move: "
                  f"{m['code'] + m['named_data']} pages (code {m['code']}, named data "
                  f"{m['named_data']}), fixed {m['fixed']}")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
EOF
