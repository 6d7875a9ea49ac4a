#!/usr/bin/env bash
# False alarms, sensitivity and time of `coldstart gate`, as root: N gates per cell, counted
# SLOWER / NOT SLOWER / UNCLEAR, with the time of each gate, as the Markdown table of
# BENCHMARKS.md ("coldstart gate: false alarms and time on a busy machine").
#
#   bench/gate-verdicts.sh [N]        (default 50 gates per cell)
#   bench/gate-verdicts.sh --table    print the table of what is recorded, run nothing
#
# Cells: a program and a change, each gated quiet and under `newcomer.sh --busy 1` (one other
# job: a spinning thread and a direct-I/O reader):
#   node      unchanged: /usr/bin/node app.js, a script that requires http, zlib, crypto, uses Intl
#   python3   unchanged: Debian's /usr/bin/python3 importing json, decimal, email.parser,
#             http.client, sqlite3 and argparse
#   sample    unchanged: the sample program (coldstart sample --seed 1), workload a
#   far       the sample at its benchmark size (about 40 MiB of code) with one more function
#             called at start-up, 5 pages, placed after all other code (--new-build: a new build
#             of the same program)
#   relink    the sample at its benchmark size relinked with that function not called at start-up
#             (called from workload b's start-up only): a new build (--new-build) whose layout
#             moved as far's did, running the same functions
#   cpu20     the node script with 20% more CPU work at start-up: more iterations of PBKDF2
#             (node_pbkdf2_per_ms), as many as take 20% of the baseline's median hot CPU time on
#             the quiet machine, added to 2,000 the unchanged script runs too (so that the code
#             it runs is the same: a change of work, not of pages)
#   bytes10   the node script reading 10% more bytes at start-up (of its cold runs' median read
#             from the emulated device), from a file beside it
#   misses    a C program that reads 32 MiB of ints 8 million times, in order, against the same
#             program reading each 16 KiB after the last (walk.conf): the same instructions, each
#             read a cache miss (walk_program)
# Each cell's baseline is recorded once, quiet, with the gate's defaults (`gate --update`; its
# time is kept in updates.tsv), from the unchanged program; a change is then put in place and
# every gate of the cell, quiet and busy, is against that baseline. A gate is judged by its exit
# code: 0 not slower or unclear (the JSON report tells which), 1 slower, 2 could not measure.
#
# Resumable: each gate appends a line to $out/gates.tsv (cell, condition, gate, verdict, exit
# code, the gate's wall time in seconds); a rerun skips what is there. Everything else under $out (default
# /var/tmp/coldstart-bench/gate-verdicts): baselines, each gate's JSON report and output.
# The programs are built under $progdir (default /var/tmp/coldstart-bench/gate-programs, shared
# with bench/gate-noise.sh). Each gate holds the page-cache lock the test suites take. $cells and
# $conditions choose a part.
set -euo pipefail
cd "$(dirname "$0")/.."
table_only=0
if [ "${1:-}" = --table ]; then table_only=1; n=0; else n=${1:-50}; fi
out=${out:-/var/tmp/coldstart-bench/gate-verdicts}
cells=(${cells:-node python3 sample far relink cpu20 bytes10 misses})
conditions=(${conditions:-quiet busy1})
tsv=$out/gates.tsv

table() {
  /usr/bin/python3 - "$tsv" "$out/updates.tsv" "$out/gates" <<'PY'
import collections, json, os, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    cell, cond, _, verdict, code, secs = line.rstrip("\n").split("\t")
    rows.setdefault((cell, cond), []).append((verdict, int(code), float(secs)))
updates = {}
try:
    for line in open(sys.argv[2]):
        cell, secs = line.split("\t")
        updates[cell] = float(secs)
except FileNotFoundError:
    pass
what = {
    "node": "Node.js script, unchanged", "python3": "python3 imports, unchanged",
    "sample": "sample, unchanged", "far": "sample (47 MB): one far function more",
    "relink": "sample (47 MB): relinked, the same functions run",
    "cpu20": "Node.js script: 20% more CPU work", "bytes10": "Node.js script: 10% more bytes read",
    "misses": "C walk of 32 MiB: the same instructions, each read a cache miss",
}
target = {"node": 120, "cpu20": 120, "bytes10": 120, "sample": 60}
def spans(cell, cond, n):
    """The range of hot CPU time, instructions and the cycles of their cache misses against the
    baseline, and of the machine's slowdown (its calibration loop), over the cell's JSON reports."""
    cpu, ins, miss, machine = [], [], [], []
    by_work = 0
    for i in range(1, n + 1):
        try:
            r = json.load(open(os.path.join(sys.argv[3], f"{cell}-{cond}-{i}.json")))
        except (OSError, ValueError):
            continue
        if r.get("machine"):
            machine.append(r["machine"]["ratio"])
        for f in r["figures"]:
            if f["figure"] == "cpu_time" and "the same work (" in (f.get("note") or ""):
                by_work += 1
            if f["state"] == "hot" and f.get("baseline") and f.get("now"):
                {"cpu_time": cpu, "instructions": ins, "miss_cycles": miss}.get(f["figure"], []).append(f["now"] / f["baseline"] - 1)
    pct = lambda v: f"{min(v) * 100:+.0f}% to {max(v) * 100:+.0f}%" if v else "-"
    pct1 = lambda v: f"{min(v) * 100:+.1f}% to {max(v) * 100:+.1f}%" if v else "-"
    return (pct(cpu), str(by_work), pct1(ins), pct1(miss),
            f"{min(machine):.2f} to {max(machine):.2f}" if machine else "-")
print("| program and change | machine | gates | SLOWER | NOT SLOWER | UNCLEAR | could not measure | time, median | time, worst | `--update` | hot CPU time | CPU time settled by the work | instructions | cycles of cache misses | calibration loop |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- |")
for (cell, cond), gates in rows.items():
    count = lambda v: sum(1 for g in gates if g[0] == v)
    failed = sum(1 for g in gates if g[1] not in (0, 1))
    secs = [g[2] for g in gates]
    goal = target.get(cell)
    worst = max(secs)
    mark = lambda s: f"{s:.0f} s" + (f" (> {goal} s)" if goal and s > goal else "")
    upd = f"{updates[cell]:.0f} s" if cell in updates else "-"
    machine = "quiet" if cond == "quiet" else "one other job (`newcomer.sh --busy 1`)"
    print(f"| {what.get(cell, cell)} | {machine} | {len(gates)} | {count('slower')} | "
          f"{count('not_slower')} | {count('unclear')} | {failed} | {mark(statistics.median(secs))} | "
          f"{mark(worst)} | {upd} | {' | '.join(spans(cell, cond, len(gates)))} |")
PY
}
if [ $table_only = 1 ]; then table; exit 0; fi

[ "$(id -u)" = 0 ] || { echo "gate-verdicts.sh: needs root (cold runs, the storage emulation, page profiles)" >&2; exit 2; }
. bench/lib.sh
. bench/gate-programs.sh
newcomer=${newcomer:-/work/shared/newcomer.sh}
lock=${TMPDIR:-/tmp}/coldstart-measure-tests.lock
mkdir -p "$out/baselines" "$out/gates"
touch "$tsv" "$out/updates.tsv"
p=${progdir:-/var/tmp/coldstart-bench/gate-programs}
gate_programs "$p"

# Each cell: the directory it runs in, its command, and the gate's extra flags.
setup() { # setup CELL: the unchanged program of the cell in place; prints "DIR<TAB>COMMAND"
  case $1 in
    node|python3|sample) program_line "$1" | sed 's/ /\t/' ;;
    far|relink)
      local how=called; [ "$1" = relink ] && how=uncalled
      [ -d "$p/$1" ] || cp -a "$p/sample-bench" "$p/$1"
      [ -f "$p/$1/changed/sample" ] || { rm -rf "$p/$1/changed"; cp -a "$p/sample-bench" "$p/$1.changed.tmp";
        far_function "$p/$1.changed.tmp" "$how"; mkdir -p "$p/$1/changed";
        for f in sample libcs_a.so libcs_b.so; do cp -a "$p/$1.changed.tmp/$f" "$p/$1/changed/"; done
        rm -rf "$p/$1.changed.tmp"; }
      printf '%s\t%s\n' "$p/$1" "./sample --workload a" ;;
    cpu20) node_script "$p/$1" "$warm_iterations" 0; printf '%s\t%s\n' "$p/$1" "/usr/bin/node app.js" ;;
    bytes10) node_script "$p/$1" 0 0; printf '%s\t%s\n' "$p/$1" "/usr/bin/node app.js" ;;
    misses) walk_program "$p/$1" 1; printf '%s\t%s\n' "$p/$1" "./walk" ;;
  esac
}
# Iterations of PBKDF2 the unchanged script of cpu20 runs too.
warm_iterations=2000
flags_of() { case $1 in far|relink) echo --new-build ;; esac; }
change() { # change CELL: put the changed program in place (after its baseline)
  case $1 in
    far|relink) for f in sample libcs_a.so libcs_b.so; do cmp -s "$p/$1/changed/$f" "$p/$1/$f" || cp -a "$p/$1/changed/$f" "$p/$1/$f"; done ;;
    cpu20)
      ms=$(/usr/bin/python3 -c 'import json,sys,statistics
b=json.load(open(sys.argv[1]))
v=[f for f in b["figures"] if f["figure"]=="cpu_time" and f["state"]=="hot"][0]["values"]
print(round(0.2*statistics.median(v)*1000, 1))' "$out/baselines/cpu20.json")
      [ -f "$out/baselines/cpu20.iterations" ] ||
        awk -v ms="$ms" -v r="$(node_pbkdf2_per_ms)" 'BEGIN { printf "%d\n", ms * r }' >"$out/baselines/cpu20.iterations"
      node_script "$p/cpu20" "$((warm_iterations + $(cat "$out/baselines/cpu20.iterations")))" 0 ;;
    bytes10)
      bytes=$(/usr/bin/python3 -c 'import json,sys,statistics
b=json.load(open(sys.argv[1]))
v=[f for f in b["figures"] if f["figure"]=="device_read_bytes"][0]["values"]
print(int(0.1*statistics.median(v)))' "$out/baselines/bytes10.json")
      node_script "$p/bytes10" 0 "$bytes" ;;
    misses) walk_program "$p/misses" 4099 ;;
  esac
}
unchange() { # the unchanged program back in place, for a baseline to be recorded again
  case $1 in
    far|relink) for f in sample libcs_a.so libcs_b.so; do cp -a "$p/sample-bench/$f" "$p/$1/$f"; done ;;
    cpu20) node_script "$p/$1" "$warm_iterations" 0 ;;
    bytes10) node_script "$p/$1" 0 0 ;;
    misses) walk_program "$p/$1" 1 ;;
  esac
}

for cell in "${cells[@]}"; do
  IFS=$'\t' read -r dir cmd <<<"$(setup "$cell")"
  eval "set -- $cmd"
  base=$out/baselines/$cell.json
  if [ ! -f "$base" ]; then
    unchange "$cell"
    echo "$cell: recording the baseline (gate --update, quiet)"
    (cd "$dir" && flock "$lock" bash -c 's=$(date +%s%N); "${@:2}"; c=$?; echo $(( ($(date +%s%N) - s) / 1000000000 )) >"$1"; exit $c' \
      _ "$out/baselines/$cell.s" "$cs" gate --baseline "$base" --update -- "$@") >"$out/baselines/$cell.txt" 2>&1
    printf '%s\t%s\n' "$cell" "$(cat "$out/baselines/$cell.s")" >>"$out/updates.tsv"
  fi
  change "$cell"
  for cond in "${conditions[@]}"; do
    done_already=$(awk -F'\t' -v c="$cell" -v k="$cond" '$1 == c && $2 == k' "$tsv" | wc -l)
    for i in $(seq $((done_already + 1)) "$n"); do
      report=$out/gates/$cell-$cond-$i.json
      rm -f "$report"
      gate=("$cs" gate --baseline "$base" --export-json "$report" $(flags_of "$cell") -- "$@")
      [ "$cond" = busy1 ] && gate=("$newcomer" --busy 1 -- "${gate[@]}")
      code=0
      # The gate's wall time, from its start to its exit (the wait for the lock left out).
      clock=$out/gates/$cell-$cond-$i.ms
      (cd "$dir" && flock "$lock" bash -c 's=$(date +%s%N); "${@:2}"; c=$?; echo $(( ($(date +%s%N) - s) / 1000000 )) >"$1"; exit $c' \
        _ "$clock" "${gate[@]}") >"$out/gates/$cell-$cond-$i.txt" 2>&1 || code=$?
      verdict=$(/usr/bin/python3 -c 'import json,sys
try:
    print(json.load(open(sys.argv[1]))["verdict"])
except Exception:
    print("none")' "$report")
      secs=$(awk '{printf "%.1f", $1 / 1000}' "$clock")
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$cell" "$cond" "$i" "$verdict" "$code" "$secs" >>"$tsv"
      echo "$cell $cond $i: exit $code, $verdict, $secs s"
    done
  done
done
table
