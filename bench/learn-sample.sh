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
mkdir -p "$out"
cd "$out"
rm -rf app plain first second learned cache-* hot-a.json r-*.json
"$cs" sample --size "$size" --seed 1 -o app >/dev/null
"$cs" pack app -o plain >/dev/null
"$cs" run plain --strategy paged --cache-dir cache-rec --record hot-a.json -- '{root}/sample' --workload a >/dev/null
"$cs" pack app --hot-list hot-a.json -o first >/dev/null

# serve BUNDLE: `coldstart serve` through the link in the background; sets $url and $server.
server=""
trap '[ -z "$server" ] || kill $server 2>/dev/null || true' EXIT
serve() {
    rm -f serve.url
    "$cs" serve "$1" --link "$link" > serve.url 2>/dev/null &
    server=$!
    while [ ! -s serve.url ]; do sleep 0.1; done
    url=$(head -n 1 serve.url)
}
# start STRATEGY WORKLOAD [ARGS]: one start from a fresh cache; prints misses, bytes, ms.
n=0
start() {
    s=$1; w=$2; shift 2
    n=$((n + 1))
    rm -rf "cache-$n"
    "$cs" run "$url" --strategy "$s" --cache-dir "cache-$n" --export-json "r-$n.json" "$@" \
        -- '{root}/sample' --workload "$w" >/dev/null 2>&1
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["report"]; print(p["held_out_misses"], p["other_bytes"], round(r["startup_ms"]))' "r-$n.json"
}
# cell LABEL STRATEGY WORKLOAD: RUNS starts, the median of each figure.
cell() {
    label=$1; shift
    i=0; : > cell.txt
    while [ $i -lt "$runs" ]; do start "$@" >> cell.txt; i=$((i + 1)); done
    med() { cut -d' ' -f"$1" cell.txt | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    echo "| $label | $(med 1) | $(med 2) | $(med 3) ms |"
}

echo "| start ($size sample, $link, median of $runs) | misses outside the hot set | bytes besides the hot request | start-up |"
echo "| --- | --- | --- | --- |"
serve first
cell "b, hot set of a" reordered-paged b
cell "a, hot set of a" reordered-paged a
mkdir learned
for i in 1 2 3; do start reordered-paged b --learn learned >/dev/null; done
kill $server; wait $server 2>/dev/null || true
"$cs" pack app --hot-list hot-a.json --learn-from learned -o second 2>learn.txt >/dev/null
serve second
cell "b, learned from 3 starts of b" reordered-paged b
cell "a, learned from 3 starts of b" reordered-paged a
cell "b, original" original b
kill $server; wait $server 2>/dev/null || true
grep '^learn:' learn.txt
echo "records: $(cat learned/*.json | wc -c) bytes in $(ls learned | wc -l)"
