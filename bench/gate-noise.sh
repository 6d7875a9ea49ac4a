#!/usr/bin/env bash
# The gate's noise model, recorded: every run of unchanged programs measured as `coldstart gate`
# measures them, quiet and under each disturbance apart, written as the recordings the rules'
# tests replay (crates/coldstart-gate/tests/noise/PROGRAM-DISTURBANCE.json; docs/gate.md,
# "The noise model").
#
#   bench/gate-noise.sh [--again] [PROGRAM...]    (as root; default: every program)
#
# Programs (each unchanged throughout):
#   node          /usr/bin/node app.js: a script that requires http, zlib and crypto and uses Intl
#   python3       /usr/bin/python3 -c 'import json, decimal, email.parser, http.client, sqlite3, argparse'
#   sample        the sample program (coldstart sample --seed 1), workload a
#   sample-bench  the sample at its benchmark size (--size bench, about 40 MiB of code), workload a
#   sample-bench-far  the same with one more function called at start-up, 5 pages, placed after
#                 all other code (a far function: bench/gate-programs.sh); asked for by name
# Disturbances, one at a time:
#   quiet      nothing added (the machine's other work goes on: see the load in each recording)
#   busy1      /work/shared/newcomer.sh --busy 1: one spinning thread and a direct-I/O reader
#   busy2      newcomer.sh --busy 2: two spinning threads and a direct-I/O reader
#   direct-io  another process reading a 512 MiB file with direct I/O, over and over
#   reclaim    memory pressure: a process holding anonymous memory until 4 GiB stays available,
#              and another reading a 2 GiB file through the page cache, so reclaim runs
#   readahead  another process reading a 2 GiB file through the page cache with this disk's
#              read-ahead, each part dropped after it was read (dd iflag=nocache)
#
# Each recording ($batches, $runs and $profiles change it): 4 measurements (each with its own discovery and emulated device, as a gate's
# batches) of 5 cold and 5 hot runs, then 6 exact page profiles (noise-record, in
# crates/coldstart-gate/examples). A recording that exists is kept (--again records it anew).
# Each one holds the page-cache lock the test suites take, so no test drops the cache in it.
# The programs are built under $progdir (default /var/tmp/coldstart-bench/gate-programs).
# About 40 minutes for the four programs under the six disturbances on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
again=0
if [ "${1:-}" = --again ]; then again=1; shift; fi
programs=("$@")
[ ${#programs[@]} -gt 0 ] || programs=(node python3 sample sample-bench)
disturbances=(${disturbances:-quiet busy1 busy2 direct-io reclaim readahead})
[ "$(id -u)" = 0 ] || { echo "gate-noise.sh: needs root (cold runs, the emulated device, page profiles)" >&2; exit 2; }
out=${out:-/var/tmp/coldstart-bench/gate-noise}
fixtures=${fixtures:-crates/coldstart-gate/tests/noise}
. bench/lib.sh
if [ -z "${rec:-}" ]; then
  cargo build --locked --release -q -p coldstart-gate --example noise-record
  rec=$root/target/release/examples/noise-record
fi
newcomer=${newcomer:-/work/shared/newcomer.sh}
lock=${TMPDIR:-/tmp}/coldstart-measure-tests.lock
mkdir -p "$out" "$fixtures"

# The programs, each in the directory it runs in.
. bench/gate-programs.sh
gate_programs "${progdir:-/var/tmp/coldstart-bench/gate-programs}"
case " ${programs[*]} " in *" sample-bench-far "*) far_program "$programs_dir" ;; esac

# Disturbances: started in the background, stopped by their pids.
pids=()
stop() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap stop EXIT
file_of() { # file_of NAME SIZE: a file of SIZE zeros under $out, written once
  [ -f "$out/$1" ] || head -c "$2" /dev/zero >"$out/$1"
  echo "$out/$1"
}
start() {
  case $1 in
    direct-io)
      f=$(file_of noise-512m.bin 512M)
      ( while :; do dd if="$f" of=/dev/null bs=1M iflag=direct status=none || sleep 1; done ) &
      pids+=($!) ;;
    reclaim)
      /usr/bin/python3 - <<'PY' &
import time
chunk, keep = 256 << 20, 4 << 30
held = []
def available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
while True:
    a = available()
    if a > keep + chunk:
        held.append(bytearray(b"\x01") * chunk)
    while a < keep - chunk and held:
        held.pop()
        a += chunk
    time.sleep(0.1)
PY
      pids+=($!)
      f=$(file_of churn-2g.bin 2G)
      ( while :; do dd if="$f" of=/dev/null bs=1M status=none || sleep 1; done ) &
      pids+=($!)
      sleep 20 ;; # until the memory is held
    readahead)
      f=$(file_of churn-2g.bin 2G)
      ( while :; do dd if="$f" of=/dev/null bs=1M iflag=nocache status=none || sleep 1; done ) &
      pids+=($!) ;;
  esac
}
describe() {
  case $1 in
    quiet) echo "nothing added; the machine's other work went on" ;;
    busy1) echo "newcomer.sh --busy 1: one spinning thread and a direct-I/O reader of a 512 MiB file" ;;
    busy2) echo "newcomer.sh --busy 2: two spinning threads and a direct-I/O reader of a 512 MiB file" ;;
    direct-io) echo "another process reading a 512 MiB file with direct I/O, 1 MiB at a time, over and over" ;;
    reclaim) echo "a process holding anonymous memory until 4 GiB stays available, and another reading a 2 GiB file through the page cache" ;;
    readahead) echo "another process reading a 2 GiB file through the page cache (this disk's read-ahead), each part dropped after it was read" ;;
  esac
}

for prog in "${programs[@]}"; do
  for d in "${disturbances[@]}"; do
    file=$fixtures/$prog-$d.json
    if [ -f "$file" ] && [ $again = 0 ]; then echo "$prog $d: recorded ($file)"; continue; fi
    echo "$prog $d: recording"
    read -r dir cmd <<<"$(program_line "$prog")"
    eval "set -- $cmd"
    args=(--program "$prog" --disturbance "$d" --description "$(describe "$d")" --batches "${batches:-4}"
      --runs "${runs:-5}" --profiles "${profiles:-6}" -o "$(realpath -m "$file")" -- "$@")
    start "$d"
    case $d in
      busy1) (cd "$dir" && flock "$lock" "$newcomer" --busy 1 -- "$rec" "${args[@]}") ;;
      busy2) (cd "$dir" && flock "$lock" "$newcomer" --busy 2 -- "$rec" "${args[@]}") ;;
      *) (cd "$dir" && flock "$lock" "$rec" "${args[@]}") ;;
    esac
    stop
  done
done
