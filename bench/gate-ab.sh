#!/usr/bin/env bash
# Two builds of coldstart's gate, interleaved, on the same unchanged program under the same
# load: which of their rules calls it slower. Each build records its own baseline (quiet, with
# its defaults), then gate by gate, A then B, each under `newcomer.sh --busy 1`.
#
#   bench/gate-ab.sh [-o DIR] [-n GATES] CS_A CS_B      (default 6 gates each)
#
# The program is Debian's python3 importing six modules (bench/gate-programs.sh). One line per
# gate: build, gate, verdict, the calibration loop's slowdown, hot CPU time's change and runs.
set -euo pipefail
n=6
while getopts o:n: opt; do
  case $opt in
    o) out=$OPTARG ;;
    n) n=$OPTARG ;;
    *) echo "usage: $0 [-o DIR] [-n GATES] CS_A CS_B" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "usage: $0 [-o DIR] [-n GATES] CS_A CS_B" >&2; exit 2; }
builds=("$(realpath "$1")" "$(realpath "$2")")
COLDSTART=${COLDSTART:-${builds[0]}}   # lib.sh's coldstart: these builds, nothing to build
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gate-programs.sh"
shared=$(cd "$root/../shared" && pwd)
mkdir -p "$out"
cd "$out"
for k in 0 1; do
  [ -f "base-$k.json" ] || "${builds[$k]}" gate --baseline "base-$k.json" --update -- \
    /usr/bin/python3 -c "$python_imports" >"base-$k.txt" 2>&1
done
for i in $(seq "$n"); do
  for k in 0 1; do
    "$shared/newcomer.sh" --busy 1 -- "${builds[$k]}" gate --baseline "$out/base-$k.json" \
      --export-json "$out/gate-$k-$i.json" -- /usr/bin/python3 -c "$python_imports" >/dev/null 2>&1 || true
    /usr/bin/python3 - "$out/gate-$k-$i.json" "${builds[$k]}" "$i" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cpu = [x for x in r["figures"] if x["figure"] == "cpu_time" and x["state"] == "hot"][0]["time"]
machine = (r.get("machine") or {}).get("ratio", float("nan"))
print("%s gate %s: %s, machine %.2f, CPU time %+.1f%% after %d runs"
      % (sys.argv[2], sys.argv[3], r["verdict"], machine, (cpu["ratio"] - 1) * 100, cpu["n_now"]))
PY
  done
done
