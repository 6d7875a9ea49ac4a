#!/usr/bin/env bash
# False alarms of a start-up gate on an unchanged program: coldstart gate against a plain
# hyperfine threshold rule, as root.
#
#   bench/gate-false-alarms.sh [RUNS] [-- CMD...]   (default: 50 gate runs of the sample program)
#
# One baseline of each: `coldstart gate --update` (its defaults: cold and hot, the storage
# emulation where this disk hides cold start, exact page profiles), and hyperfine's mean of a
# cold start (`--prepare` drops the page cache) and of a hot one (3 warm-up runs), 10 runs
# each. Then RUNS times, with nothing changed:
#   - `coldstart gate` with its defaults: a false alarm is exit code 1 ("slower");
#   - hyperfine, 10 runs cold and 10 hot: a false alarm is a mean more than 1.05 times the
#     baseline's, cold or hot.
# Every gate run is appended to a history file, which bench/gate-drift.sh (the drift
# detectors on recorded histories) reads. The machine keeps its other work running: this is
# the noise a CI runner has.
#
# Output under $out (default /var/tmp/coldstart-bench/gate-false-alarms): gate-N.json,
# hyperfine-{cold,hot}-N.json, history.jsonl, summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
shift || true
[ "${1:-}" = "--" ] && shift
out=${out:-/var/tmp/coldstart-bench/gate-false-alarms}
. bench/lib.sh
command -v hyperfine >/dev/null || { echo "hyperfine is missing: run scripts/setup.sh" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (cold runs, the storage emulation)" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/gate-*.json "$out"/hyperfine-*.json "$out/history.jsonl" "$out/baseline.json"
if [ $# -eq 0 ]; then
  "$cs" sample --seed 1 -o /var/tmp/coldstart-bench/gate-sample >/dev/null
  set -- /var/tmp/coldstart-bench/gate-sample/sample --workload a
fi
cmd=$(printf '%q ' "$@")
# hyperfine -N runs --prepare without a shell too: the shell is named.
drop="sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'"
# Other checkouts' tests drop the page cache: each measurement takes their lock (the CPU noise
# of the rest of the machine stays).
lock=${TMPDIR:-/tmp}/coldstart-measure-tests.lock

hf() { # hyperfine STATE FILE: 10 runs of the command, mean in FILE
  if [ "$1" = cold ]; then
    flock "$lock" hyperfine -N --runs 10 --prepare "$drop" --export-json "$2" "$cmd" >/dev/null 2>&1
  else
    flock "$lock" hyperfine -N --runs 10 --warmup 3 --export-json "$2" "$cmd" >/dev/null 2>&1
  fi
}
mean() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["mean"])' "$1"; }

echo "baseline: coldstart gate --update, hyperfine cold and hot ($cmd)"
flock "$lock" "$cs" gate --baseline "$out/baseline.json" --update --history "$out/history.jsonl" -- "$@" \
  >"$out/baseline.txt" 2>&1
hf cold "$out/hyperfine-cold-base.json"; hf hot "$out/hyperfine-hot-base.json"
base_cold=$(mean "$out/hyperfine-cold-base.json"); base_hot=$(mean "$out/hyperfine-hot-base.json")

gate_alarms=0; gate_unclear=0; gate_failed=0; hf_alarms=0; hf_cold=0; hf_hot=0
start=$(date +%s)
for i in $(seq 1 "$runs"); do
  code=0
  flock "$lock" "$cs" gate --baseline "$out/baseline.json" --history "$out/history.jsonl" \
    --export-json "$out/gate-$i.json" -- "$@" >"$out/gate-$i.txt" 2>&1 || code=$?
  verdict=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' \
    "$out/gate-$i.json" 2>/dev/null || echo none)
  case $code in
    0) [ "$verdict" = unclear ] && gate_unclear=$((gate_unclear + 1)) ;;
    1) gate_alarms=$((gate_alarms + 1)) ;;
    *) gate_failed=$((gate_failed + 1)) ;;
  esac
  hf cold "$out/hyperfine-cold-$i.json"; hf hot "$out/hyperfine-hot-$i.json"
  read -r rc rh alarm < <(/usr/bin/python3 -c '
import sys
c, h, bc, bh = map(float, sys.argv[1:])
print(f"{c/bc:.3f} {h/bh:.3f} {int(c/bc > 1.05 or h/bh > 1.05)}")' \
    "$(mean "$out/hyperfine-cold-$i.json")" "$(mean "$out/hyperfine-hot-$i.json")" "$base_cold" "$base_hot")
  hf_alarms=$((hf_alarms + alarm))
  /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 1.05 else 1)' "$rc" && hf_cold=$((hf_cold + 1))
  /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 1.05 else 1)' "$rh" && hf_hot=$((hf_hot + 1))
  echo "run $i: gate exit $code ($verdict); hyperfine mean ratio cold $rc, hot $rh"
done
elapsed=$(( $(date +%s) - start ))
{
  echo "command: $cmd"
  echo "gate runs: $runs in ${elapsed}s ($((elapsed / runs))s each, hyperfine included)"
  echo "coldstart gate: $gate_alarms false alarms (exit 1), $gate_unclear unclear (exit 0), $gate_failed could not measure"
  echo "hyperfine, mean ratio above 1.05: $hf_alarms false alarms ($hf_cold cold, $hf_hot hot)"
  # The same rule with other baselines: each run against the one before (a baseline updated
  # after every merge), and every run against every other.
  /usr/bin/python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
mean = lambda s, i: json.load(open(os.path.join(d, f"hyperfine-{s}-{i}.json")))["results"][0]["mean"]
n = 0
while os.path.exists(os.path.join(d, f"hyperfine-hot-{n + 1}.json")):
    n += 1
cold = [mean("cold", i) for i in range(1, n + 1)]
hot = [mean("hot", i) for i in range(1, n + 1)]
alarm = lambda b, c: cold[c] / cold[b] > 1.05 or hot[c] / hot[b] > 1.05
prev = sum(alarm(i - 1, i) for i in range(1, n))
pairs = [(b, c) for b in range(n) for c in range(n) if b != c]
every = sum(alarm(b, c) for b, c in pairs)
print(f"hyperfine, each run against the one before: {prev} false alarms in {n - 1}")
print(f"hyperfine, every run against every other: {every} of {len(pairs)} ({100 * every / max(1, len(pairs)):.0f}%)")
PY
} | tee "$out/summary.txt"
