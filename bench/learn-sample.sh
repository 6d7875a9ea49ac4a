#!/bin/sh
# The sample program learns workload b from its users' starts (docs/learn.md), over an
# emulated link: profiled on workload a (a paged start's `--record`), packed; three starts of
# workload b with `run --learn`, each from a fresh cache; `pack --learn-from` those three
# records; then b and a from a fresh cache on the first and on the learned bundle, and
# `original` (whole files before start) on the learned bundle.
#
#   bench/learn-sample.sh [-s SIZE] [-l LINK] [-r RUNS] [-o DIR]
#
# SIZE is `coldstart sample --size` (default medium), LINK `serve --link` (default
# 20mbit/40ms), RUNS the timed starts of each cell (default 3, the median printed). Each start
# is `run --strategy reordered-paged --export-json`: printed are the misses outside the hot
# set, the bytes fetched besides the manifest and the hot request, and the start-up time
# (`startup_ms`: to the command's end, the unmount apart).
set -eu
size=medium; link=20mbit/40ms; runs=3; out=""
while getopts s:l:r:o: opt; do
    case $opt in
        s) size=$OPTARG ;; l) link=$OPTARG ;; r) runs=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-s SIZE] [-l LINK] [-r RUNS] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/start-lib.sh"
mkdir -p "$out"
cd "$out"
rm -rf app plain first second learned cache-* hot-a.json r-*.json
"$cs" sample --size "$size" --seed 1 -o app >/dev/null
"$cs" pack app -o plain >/dev/null
"$cs" run plain --strategy paged --cache-dir cache-rec --record hot-a.json -- '{root}/sample' --workload a >/dev/null
"$cs" pack app --hot-list hot-a.json -o first >/dev/null

# sample STRATEGY WORKLOAD [RUN OPTIONS]: one start of the sample from a fresh cache.
sample() { s=$1; w=$2; shift 2; start --strategy "$s" "$@" -- '{root}/sample' --workload "$w"; }

echo "| start ($size sample, $link, median of $runs) | misses outside the hot set | bytes besides the hot request | start-up |"
echo "| --- | --- | --- | --- |"
serve first
cell "b, hot set of a" sample reordered-paged b
cell "a, hot set of a" sample reordered-paged a
mkdir learned
for i in 1 2 3; do sample reordered-paged b --learn learned >/dev/null; done
stop_serving
"$cs" pack app --hot-list hot-a.json --learn-from learned -o second 2>learn.txt >/dev/null
serve second
cell "b, learned from 3 starts of b" sample reordered-paged b
cell "a, learned from 3 starts of b" sample reordered-paged a
cell "b, original" sample original b
stop_serving
grep '^learn:' learn.txt
echo "records: $(cat learned/*.json | wc -c) bytes in $(ls learned | wc -l)"
