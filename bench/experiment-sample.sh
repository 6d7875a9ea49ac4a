#!/bin/sh
# The sample program's network grid, for BENCHMARKS.md: 3 bandwidths x 3 latencies x every
# strategy and auto, cold (the server's copy evicted, the chunk cache empty), RUNS starts per
# cell; the hot set recorded from workload a, workload b measured (held out). Then the report.
#
#   bench/experiment-sample.sh [-s SIZE] [-r RUNS] [-l LINKS] [-c CACHES] [-o DIR]
#
# Defaults: the medium sample (5.3 MB of files), 3 runs, 2, 8 and 32 Mbit/s at 10, 50 and 200 ms
# (about 25 minutes), cache state cold (-c cold,warm-remote for both). Interrupted, the same command goes on where it stopped. Writes
# DIR/grid.json and DIR/report.html; COLDSTART=path picks the binary (default: release).
set -eu
size=medium; runs=3; out=""; caches=cold
links="2mbit/10ms,2mbit/50ms,2mbit/200ms,8mbit/10ms,8mbit/50ms,8mbit/200ms,32mbit/10ms,32mbit/50ms,32mbit/200ms"
while getopts s:r:l:c:o: opt; do
    case $opt in
        s) size=$OPTARG ;; r) runs=$OPTARG ;; l) links=$OPTARG ;; c) caches=$OPTARG ;;
        o) out=$OPTARG ;;
        *) echo "usage: $0 [-s SIZE] [-r RUNS] [-l LINKS] [-c CACHES] [-o DIR]" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=/var/tmp/coldstart-bench/experiment-$size
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
# The sample's files a user would ship (sources left out): what is packed.
"$cs" sample --size "$size" --seed 1 -o "$out/sample" >/dev/null
if [ ! -x "$out/prog/sample" ]; then
    mkdir -p "$out/prog"
    (cd "$out/sample" && tar cf - --exclude=./src .) | tar xf - -C "$out/prog"
fi
"$cs" experiment "$out/prog" -o "$out/grid.json" --link "$links" --cache "$caches" --runs "$runs" \
    --profiled "sample --workload a" -- sample --workload b
"$cs" report "$out/grid.json" -o "$out/report.html"
# The checks: predict within 15% of the measured median in every cell; auto's measured start-up
# within 5% of the best fixed strategy's in every link and cache state.
/usr/bin/python3 - "$out/grid.json" <<'PY'
import json, statistics as st, sys
e = json.load(open(sys.argv[1]))
med = lambda c: st.median(r["wall_s"] for r in c["runs"])
cells = [c for c in e["cells"] if c["runs"]]
worst = max(cells, key=lambda c: abs(c["predicted_s"] / med(c) - 1) if c["predicted_s"] else 0)
outside = [c for c in cells if c["predicted_s"] is None or abs(c["predicted_s"] / med(c) - 1) > 0.15]
print(f"predict within 15%: {len(cells) - len(outside)} of {len(cells)} cells; "
      f"worst {worst['link']['label']} {worst['cache']} {worst['strategy']}: "
      f"{worst['predicted_s']:.2f} s predicted, {med(worst):.2f} s measured")
for c in outside:
    print(f"  outside: {c['link']['label']} {c['cache']} {c['strategy']}: predicted {c['predicted_s']}, measured {med(c):.2f} s")
groups = {}
for c in cells:
    groups.setdefault((c["link"]["label"], c["cache"]), []).append(c)
ok = judged = 0
for (link, cache), cs in groups.items():
    auto = [c for c in cs if c["strategy"] == "auto"]
    fixed = [c for c in cs if c["strategy"] != "auto"]
    if not auto or not fixed:
        continue
    best = min(fixed, key=med)
    a = auto[0]
    chose = [r["chosen"] for r in a["runs"]]
    within = med(a) <= med(best) * 1.05
    ok += within
    judged += 1
    print(f"  {link} {cache}: best {best['strategy']} {med(best):.2f} s; auto chose {','.join(chose)}: "
          f"{med(a):.2f} s ({(med(a) / med(best) - 1) * 100:+.1f}%){'' if within else '  MISS'}")
print(f"auto within 5% of the measured best: {ok} of {judged} links and cache states")
slow = [(c, r) for c in cells for r in c["runs"] if (r.get("teardown_s") or 0) > 1]
for c, r in slow:
    print(f"  slow unmount: {c['link']['label']} {c['cache']} {c['strategy']}: {r['teardown_s']:.2f} s of {r['wall_s']:.2f} s")
print(f"runs whose unmount took over 1 s: {len(slow)}")
PY
