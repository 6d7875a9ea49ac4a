#!/bin/sh
# Network start benchmark: every strategy of `coldstart run` on emulated links, with the hot set
# profiled on the sample program's workload a and start-up measured on workload b.
#
#   bench/network.sh [-s small|medium|bench] [-f FUNCTIONS] [-l "LINK ..."] [-r RUNS] [-c CHUNK]
#                            [-S "STRATEGY ..."] [-o DIR]
#
# Prints a Markdown table: start-up time (median of RUNS, each with an empty chunk cache),
# bytes and requests fetched, the bound of Eq. 1 (bytes workload b reads / bandwidth + one
# latency + local start-up time) and the change against the first strategy listed (`original`
# by default). `original` fetches chunk by chunk, several in flight, so on fast links it pays
# per-request latency that downloading each file in one request would not: compare with the
# ideal download (total bytes / bandwidth + one latency) printed with each link.
set -eu

size=small; functions=""; links="1mbit/100ms 3mbit/50ms"; runs=1; chunk=16k; out=""
strategies="original paged reordered-paged reordered stream"
while getopts s:f:l:r:c:S:o: opt; do
    case $opt in
        s) size=$OPTARG ;; f) functions=$OPTARG ;; l) links=$OPTARG ;; r) runs=$OPTARG ;;
        c) chunk=$OPTARG ;; S) strategies=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-s SIZE] [-f FUNCTIONS] [-l LINKS] [-r RUNS] [-c CHUNK] [-o DIR]" >&2; exit 2 ;;
    esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
cs=$root/target/release/coldstart
[ -x "$cs" ] || cargo build --release -p coldstart --manifest-path "$root/Cargo.toml"
[ -n "$out" ] || out=$(mktemp -d /tmp/coldstart-bench-network.XXXXXX)
mkdir -p "$out"
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; true' EXIT INT TERM

# The program, without its sources and objects.
if [ -n "$functions" ]; then
    "$cs" sample --size "$size" --functions "$functions" -o "$out/sample" >/dev/null
else
    "$cs" sample --size "$size" -o "$out/sample" >/dev/null
fi
rm -rf "$out/app" "$out/bundle0" "$out/bundle"
mkdir "$out/app"
(cd "$out/sample" && tar cf - --exclude=./src .) | (cd "$out/app" && tar xf -)

now() { date +%s.%N; }
# Local start-up: median of 21 warm runs.
for i in $(seq 21); do
    t0=$(now); "$out/app/sample" --workload b >/dev/null; t1=$(now)
    echo "$t1 - $t0" | bc
done | sort -n | sed -n 11p > "$out/local.txt"
local_s=$(cat "$out/local.txt")

"$cs" pack "$out/app" --chunk-size "$chunk" -o "$out/bundle0" >/dev/null
for w in a b; do
    rm -rf "$out/cache-rec"
    "$cs" run "$out/bundle0" --strategy paged --cache-dir "$out/cache-rec" --record "$out/hot-$w.json" \
        -- '{root}/sample' --workload "$w" >/dev/null 2>&1
done
used=$(grep -o '"length": [0-9]*' "$out/hot-b.json" | awk '{s += $2} END {print s}')
"$cs" pack "$out/app" --chunk-size "$chunk" --hot-list "$out/hot-a.json" -o "$out/bundle" >/dev/null
total=$(du -sb "$out/app" | cut -f1)

echo "sample: size $size${functions:+, $functions functions}; $total bytes; workload b reads $used bytes at start-up; local start-up ${local_s} s; chunk $chunk; $runs run(s) per cell"
echo
echo "| link | strategy | start-up (s) | bytes fetched | requests | Eq. 1 bound (s) | vs original |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for link in $links; do
    "$cs" serve "$out/bundle" --link "$link" > "$out/url.txt" 2>/dev/null &
    server=$!
    while [ ! -s "$out/url.txt" ]; do sleep 0.05; done
    url=$(cat "$out/url.txt")
    bps=$(echo "$link" | awk -F/ '{
        v = $1; m = 1
        if (v ~ /gbit$/) m = 1e9; else if (v ~ /mbit$/) m = 1e6; else if (v ~ /kbit$/) m = 1e3
        gsub(/[a-z]/, "", v); print v * m }')
    lat=$(echo "$link" | awk -F/ '{ v = $2; m = 1
        if (v ~ /ms$/) m = 1e-3; else if (v ~ /us$/) m = 1e-6
        gsub(/[a-z]/, "", v); print v * m }')
    bound=$(awk -v u="$used" -v b="$bps" -v l="$lat" -v s="$local_s" 'BEGIN { printf "%.2f", u * 8 / b + l + s }')
    ideal=$(awk -v t="$total" -v b="$bps" -v l="$lat" 'BEGIN { printf "%.2f", t * 8 / b + l }')
    echo "| $link | (ideal download of all $total bytes) | $ideal | | | | |"
    original=""
    for s in $strategies; do
        for i in $(seq "$runs"); do
            rm -rf "$out/cache"
            t0=$(now)
            "$cs" run "$url" --strategy "$s" --json --cache-dir "$out/cache" \
                -- '{root}/sample' --workload b > "$out/stdout.txt" 2> "$out/report.json"
            t1=$(now)
            echo "$t1 - $t0" | bc
        done | sort -n > "$out/times.txt"
        median=$(awk '{ a[NR] = $1 } END { printf "%.2f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }' "$out/times.txt")
        [ -n "$original" ] || original=$median
        bytes=$(grep -o '"bytes_fetched": [0-9]*' "$out/report.json" | awk '{print $2}')
        requests=$(grep -o '"requests": [0-9]*' "$out/report.json" | awk '{print $2}')
        change=$(awk -v m="$median" -v o="$original" 'BEGIN { printf "%+.0f%%", (m / o - 1) * 100 }')
        echo "| $link | $s | $median | $bytes | $requests | $bound | $change |"
    done
    kill "$server"; wait "$server" 2>/dev/null || true; server=""; rm -f "$out/url.txt"
done
