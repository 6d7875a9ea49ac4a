#!/bin/sh
# The sample program's network grid, for BENCHMARKS.md: 3 bandwidths x 3 latencies x every
# strategy and auto, cold (the server's copy evicted, the chunk cache empty), RUNS starts per
# cell; the hot set recorded from workload a, workload b measured (held out). Then the report.
#
#   bench/experiment-sample.sh [-s SIZE] [-r RUNS] [-l LINKS] [-o DIR]
#
# Defaults: the medium sample (5.3 MB of files), 3 runs, 2, 8 and 32 Mbit/s at 10, 50 and 200 ms
# (about 25 minutes). Interrupted, the same command goes on where it stopped. Writes
# DIR/grid.json and DIR/report.html; COLDSTART=path picks the binary (default: release).
set -eu
size=medium; runs=3; out=""
links="2mbit/10ms,2mbit/50ms,2mbit/200ms,8mbit/10ms,8mbit/50ms,8mbit/200ms,32mbit/10ms,32mbit/50ms,32mbit/200ms"
while getopts s:r:l:o: opt; do
    case $opt in
        s) size=$OPTARG ;; r) runs=$OPTARG ;; l) links=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-s SIZE] [-r RUNS] [-l LINKS] [-o DIR]" >&2; exit 2 ;;
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
"$cs" experiment "$out/prog" -o "$out/grid.json" --link "$links" --cache cold --runs "$runs" \
    --profiled "sample --workload a" -- sample --workload b
"$cs" report "$out/grid.json" -o "$out/report.html"
