#!/bin/sh
# Network start benchmark: every strategy of `coldstart run` on emulated links, with the hot set
# profiled on one workload (a) and start-up measured on another (b).
#
#   bench/network.sh [-s small|medium|bench] [-f FUNCTIONS] [-p APPDIR -e EXE -A ARGS -B ARGS]
#                    [-l "LINK[:RUNS] ..."] [-r RUNS] [-c CHUNK] [-a READAHEAD] [-S "STRATEGY ..."]
#                    [-o DIR] [-P]
#
# The program is `coldstart sample` (size -s, functions -f; `--workload a` / `--workload b`),
# reused from DIR/sample when DIR already holds one of the same size and functions, or a
# ready directory -p APPDIR whose executable -e EXE (relative) runs workload a with the
# arguments -A and workload b with -B. COLDSTART=path picks the coldstart binary (default:
# target/release/coldstart, built if missing).
#
# -a READAHEAD sets the mount's read-ahead for the recordings and the runs (default: none
# given, the mount chooses: one page while reads may fetch or when recording).
#
# Prints a Markdown table: start-up time (median of RUNS, each with an empty chunk cache; a
# link may say its own run count as LINK:RUNS), bytes and requests fetched, the bound of Eq. 1
# (bytes workload b reads / bandwidth + one latency + local start-up time) and the change
# against the first strategy listed (`original` by default: each file downloaded whole, one
# request per file, before the program starts). Each row also goes to DIR/results.tsv.
# The strategy `auto` may be listed (-S) like the others, and `auto-hint`: `--strategy auto
# --link-hint LINK`, the link given instead of measured. -P also runs `coldstart predict`
# on each link with an empty cache and the local start-up time, once measuring the link and
# once given it (--link-hint), into DIR/predict-N-{estimated,given}.json (N: the link's
# position in -l), and adds both predictions to each row of results.tsv (columns 10 and 11;
# column 12: the strategy `auto` chose in its last run).
set -eu

size=small; functions=""; links="1mbit/100ms 3mbit/50ms"; runs=1; chunk=16k; out=""
ra=""; app=""; exe=sample; args_a="--workload a"; args_b="--workload b"; predict=""
strategies="original paged reordered-paged reordered stream"
while getopts s:f:p:e:A:B:l:r:c:a:S:o:P opt; do
    case $opt in
        s) size=$OPTARG ;; f) functions=$OPTARG ;; l) links=$OPTARG ;; r) runs=$OPTARG ;;
        p) app=$OPTARG ;; e) exe=$OPTARG ;; A) args_a=$OPTARG ;; B) args_b=$OPTARG ;;
        c) chunk=$OPTARG ;; a) ra=$OPTARG ;; S) strategies=$OPTARG ;; o) out=$OPTARG ;;
        P) predict=1 ;;
        *) echo "usage: $0 [-s SIZE] [-f FUNCTIONS] [-p APPDIR -e EXE -A ARGS -B ARGS] [-l LINKS] [-r RUNS] [-c CHUNK] [-a READAHEAD] [-S STRATEGIES] [-o DIR] [-P]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; true' EXIT INT TERM

# The program, without its sources and objects.
rm -rf "$out/app" "$out/bundle0" "$out/bundle"
if [ -n "$app" ]; then
    cp -a "$app" "$out/app"
    what="$app"
else
    key="$size ${functions:-preset}"
    if [ ! -x "$out/sample/sample" ] || [ "$(cat "$out/sample.key" 2>/dev/null)" != "$key" ]; then
        rm -f "$out/sample.key"
        if [ -n "$functions" ]; then
            "$cs" sample --size "$size" --functions "$functions" -o "$out/sample" >/dev/null
        else
            "$cs" sample --size "$size" -o "$out/sample" >/dev/null
        fi
        echo "$key" > "$out/sample.key"
    fi
    mkdir "$out/app"
    (cd "$out/sample" && tar cf - --exclude=./src --exclude='*.o' .) | (cd "$out/app" && tar xf -)
    what="sample: size $size${functions:+, $functions functions}"
fi

now() { date +%s.%N; }
# The predicted seconds of strategy $2 in predict's JSON $1 (for `auto`: its choice's).
predicted() {
    want=$2
    case $want in auto|auto-hint) want=$(grep -o '"chosen": "[a-z-]*"' "$1" | cut -d'"' -f4) ;; esac
    awk -v s="\"$want\"," '$1 == "\"strategy\":" && $2 == s { getline; printf "%.3f", $2 / 1000 }' "$1"
}
# Local start-up: median of 21 warm runs.
for i in $(seq 21); do
    # shellcheck disable=SC2086
    t0=$(now); "$out/app/$exe" $args_b >/dev/null; t1=$(now)
    echo "$t1 - $t0" | bc
done | sort -n | sed -n 11p > "$out/local.txt"
local_s=$(cat "$out/local.txt")

"$cs" pack "$out/app" --chunk-size "$chunk" -o "$out/bundle0" >/dev/null
for w in a b; do
    rm -rf "$out/cache-rec"
    if [ $w = a ]; then wargs=$args_a; else wargs=$args_b; fi
    # shellcheck disable=SC2086
    "$cs" run "$out/bundle0" ${ra:+--readahead "$ra"} --strategy paged --cache-dir "$out/cache-rec" --record "$out/hot-$w.json" \
        -- "{root}/$exe" $wargs >/dev/null 2>&1
done
used=$(grep -o '"length": [0-9]*' "$out/hot-b.json" | awk '{s += $2} END {print s}')
"$cs" pack "$out/app" --chunk-size "$chunk" --hot-list "$out/hot-a.json" -o "$out/bundle" >/dev/null
total=$(find "$out/app" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

echo "$what; $total bytes; workload b reads $used bytes at start-up; local start-up ${local_s} s; chunk $chunk; read-ahead ${ra:-chosen by the mount}; $runs run(s) per cell unless the link says LINK:RUNS"
echo
echo "| link | strategy | start-up (s) | bytes fetched | requests | Eq. 1 bound (s) | vs original |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
: > "$out/results.tsv"
cell=0
for spec in $links; do
    cell=$((cell + 1))
    link=${spec%%:*}
    n=$runs
    [ "$link" = "$spec" ] || n=${spec#*:}
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
    echo "| $link | (model of a download: all $total bytes / bandwidth + one latency) | $ideal | | | | |"
    if [ -n "$predict" ]; then
        local_ms=$(awk -v s="$local_s" 'BEGIN { printf "%.1f", s * 1000 }')
        rm -rf "$out/cache-empty"
        "$cs" predict "$url" ${ra:+--readahead "$ra"} --local-ms "$local_ms" --cache-dir "$out/cache-empty" \
            --json > "$out/predict-$cell-estimated.json"
        "$cs" predict "$url" ${ra:+--readahead "$ra"} --local-ms "$local_ms" --cache-dir "$out/cache-empty" \
            --link-hint "$link" --json > "$out/predict-$cell-given.json"
    fi
    original=""
    for s in $strategies; do
        for i in $(seq "$n"); do
            rm -rf "$out/cache"
            t0=$(now)
            # shellcheck disable=SC2086
            if [ "$s" = auto-hint ]; then set -- --strategy auto --link-hint "$link"; else set -- --strategy "$s"; fi
            "$cs" run "$url" ${ra:+--readahead "$ra"} "$@" --json --cache-dir "$out/cache" \
                -- "{root}/$exe" $args_b > "$out/stdout.txt" 2> "$out/report.json"
            t1=$(now)
            echo "$t1 - $t0" | bc
        done | sort -n > "$out/times.txt"
        median=$(awk '{ a[NR] = $1 } END { printf "%.2f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }' "$out/times.txt")
        [ -n "$original" ] || original=$median
        bytes=$(grep -o '"bytes_fetched": [0-9]*' "$out/report.json" | awk '{print $2}')
        requests=$(grep -o '"requests": [0-9]*' "$out/report.json" | awk '{print $2}')
        change=$(awk -v m="$median" -v o="$original" 'BEGIN { printf "%+.0f%%", (m / o - 1) * 100 }')
        echo "| $link | $s | $median | $bytes | $requests | $bound | $change |"
        pe=""; pg=""
        if [ -n "$predict" ]; then
            pe=$(predicted "$out/predict-$cell-estimated.json" "$s")
            pg=$(predicted "$out/predict-$cell-given.json" "$s")
        fi
        chosen=$(grep -o '"chosen": "[a-z-]*"' "$out/report.json" | cut -d'"' -f4)
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$link" "$s" "$median" "$bytes" "$requests" \
            "$bound" "$n" "$used" "$total" "$pe" "$pg" "$chosen" >> "$out/results.tsv"
    done
    kill "$server"; wait "$server" 2>/dev/null || true; server=""; rm -f "$out/url.txt"
done
