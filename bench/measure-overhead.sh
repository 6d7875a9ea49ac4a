#!/usr/bin/env bash
# coldstart measure's own overhead per run against hyperfine, on the same command and the same
# machine, in alternating rounds (this machine is noisy: compare the ratio, not the figures).
#
#   bench/measure-overhead.sh [ROUNDS] [RUNS] [-- CMD ARGS]     (default: 3 rounds, 50 runs, `true`)
#
# Two figures per round, for each tool:
#   reported: the median start-up it reports for CMD (for `true`, close to the floor: what the
#             harness itself adds to every figure it reports);
#   per run:  the harness's own wall time for the whole invocation divided by its runs
#             (cgroup set-up and removal, readiness, counters).
# and the ratios coldstart/hyperfine of both.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}; runs=${2:-50}
shift $(( $# >= 2 ? 2 : $# )) || true
[ "${1:-}" = "--" ] && shift
cmd=("$@"); [ ${#cmd[@]} -eq 0 ] && cmd=(true)
cargo build --locked --release -q
cs=./target/release/coldstart
command -v hyperfine >/dev/null || { echo "hyperfine missing: run scripts/setup.sh" >&2; exit 3; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
printf '%-6s %14s %14s %14s %14s %8s %8s\n' round hf-reported cs-reported hf-per-run cs-per-run r-rep r-run
for r in $(seq 1 "$rounds"); do
  t0=$(now)
  hyperfine -N --style none --runs "$runs" --warmup 5 --export-json "$tmp/hf.json" -- "${cmd[*]}" >/dev/null
  t1=$(now)
  "$cs" measure --runs "$runs" --warmup 5 --export-json "$tmp/cs.json" -- "${cmd[@]}" >/dev/null
  t2=$(now)
  python3 - "$tmp/hf.json" "$tmp/cs.json" "$r" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$((runs + 5))" <<'PY'
import json, statistics, sys
hf = json.load(open(sys.argv[1]))["results"][0]["times"]
cs = [r["counters"]["wall_s"] for c in json.load(open(sys.argv[2]))["commands"] for r in c["runs"] if r["excluded"] is None]
h, c = statistics.median(hf) * 1e3, statistics.median(cs) * 1e3
n = int(sys.argv[6])
hr, cr = float(sys.argv[4]) * 1e3 / n, float(sys.argv[5]) * 1e3 / n
print(f"{sys.argv[3]:<6} {h:11.3f} ms {c:11.3f} ms {hr:11.3f} ms {cr:11.3f} ms {c/h:8.2f} {cr/hr:8.2f}")
PY
done
