#!/bin/sh
# Network start of a real program nobody here wrote: clang-19 and its libraries (libLLVM,
# libclang-cpp: about 190 MiB), hot set recorded on `clang --version`, measured on
# `clang --version` and on compiling a one-line file (held out), over an emulated link.
#
#   bench/network-clang.sh [-l LINK] [-S "STRATEGY ..."] [-z] [-c CHUNK] [-e "ARGS"]
#                          [-m "version compile"] [-o DIR]
#
# The default pipeline, every command with its defaults: `pack` without a hot set, `run
# --record` of `clang --version` from that bundle, `pack --hot-list` of the record, `serve
# --link LINK`, then `run` with each strategy (-S; default: original and the default,
# stream) and an empty chunk cache. -z packs the measured bundle with `--compress zstd` (so
# `original` downloads compressed files too). Also records `clang -c` on its own (never
# packed) to count the bytes it touches, for the bound of Eq. 1: touched bytes / bandwidth +
# one latency + the local start-up time (median of 11 warm runs).
#
# For the held-out misses: -c CHUNK packs the measured bundle with `--chunk-size CHUNK` (the
# size of cold chunks: what a miss fetches); -e "ARGS" also records `clang ARGS` (another
# workload, never measured; `{x}` stands for a second one-line C file) and packs its record as
# a second `--hot-list`, its new pages after those of `--version`; -m picks the commands
# measured (default: version compile).
set -eu
link=20mbit/40ms; strategies="original stream"; out=""; compress=""; chunk=""; extra=""
measured="version compile"
while getopts l:S:zc:e:m:o: opt; do
    case $opt in
        l) link=$OPTARG ;; S) strategies=$OPTARG ;; z) compress="--compress zstd" ;;
        c) chunk=$OPTARG ;; e) extra=$OPTARG ;; m) measured=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-l LINK] [-S STRATEGIES] [-z] [-c CHUNK] [-e ARGS] [-m COMMANDS] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; true' EXIT INT TERM

rm -rf "$out/app" "$out/bundle0" "$out/bundle"
clang_app "$out/app"
printf 'int twice(int x) { return 2 * x; }\n' > "$out/x.c"
printf 'static int n; int next(void) { return ++n; }\n' > "$out/y.c"
now() { date +%s.%N; }
# Local start-up of each command: median of 11 warm runs.
for what in version compile; do
    for i in $(seq 11); do
        t0=$(now)
        if [ $what = version ]; then "$out/app/bin/clang" --version >/dev/null
        else "$out/app/bin/clang" -c "$out/x.c" -o "$out/x.o"; fi
        t1=$(now)
        echo "$t1 - $t0" | bc
    done | sort -n | sed -n 6p > "$out/local-$what.txt"
done
# The recordings read the same pages from a compressed bundle: record from a plain one.
"$cs" pack "$out/app" -o "$out/bundle0" >/dev/null
for what in version compile; do
    rm -rf "$out/cache-rec"
    if [ $what = version ]; then set -- --version; else set -- -c "$out/x.c" -o "$out/x.o"; fi
    "$cs" run "$out/bundle0" --cache-dir "$out/cache-rec" --record "$out/hot-$what.json" \
        -- '{root}/bin/clang' "$@" >/dev/null 2>&1
done
set --
if [ -n "$extra" ]; then
    rm -rf "$out/cache-rec"
    # shellcheck disable=SC2086
    "$cs" run "$out/bundle0" --cache-dir "$out/cache-rec" --record "$out/hot-extra.json" \
        -- '{root}/bin/clang' $(echo "$extra" | sed "s|{x}|$out/y.c|g") >/dev/null 2>&1
    set -- --hot-list "$out/hot-extra.json"
fi
# shellcheck disable=SC2086
"$cs" pack "$out/app" $compress ${chunk:+--chunk-size "$chunk"} \
    --hot-list "$out/hot-version.json" "$@" -o "$out/bundle" > "$out/pack.txt"
cat "$out/pack.txt"
# A URL left by an earlier run into the same directory is a dead server's.
rm -f "$out/url.txt"
"$cs" serve "$out/bundle" --link "$link" > "$out/url.txt" 2>/dev/null &
server=$!
while [ ! -s "$out/url.txt" ]; do sleep 0.05; done
url=$(cat "$out/url.txt")
bw=$(echo "$link" | sed 's|/.*||; s/mbit/*1000000/; s/kbit/*1000/; s/gbit/*1000000000/; s/bit//' | bc)
lat=$(echo "$link" | sed 's|.*/||; s/ms$/\/1000/; s/us$/\/1000000/; s/s$//' | bc -l)
echo "| command | strategy | start-up (s) | bytes fetched | requests | touched bytes | Eq. 1 bound (s) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for what in $measured; do
    touched=$(grep -o '"length": [0-9]*' "$out/hot-$what.json" | awk '{s += $2} END {print s}')
    bound=$(echo "$touched * 8 / $bw + $lat + $(cat "$out/local-$what.txt")" | bc -l)
    for s in $strategies; do
        rm -rf "$out/cache"
        if [ $what = version ]; then set -- --version; else set -- -c "$out/x.c" -o "$out/x.o"; fi
        t0=$(now)
        "$cs" run "$url" --strategy "$s" --json --cache-dir "$out/cache" \
            -- '{root}/bin/clang' "$@" > /dev/null 2> "$out/report-$what-$s.json"
        t1=$(now)
        bytes=$(grep -o '"bytes_fetched": [0-9]*' "$out/report-$what-$s.json" | awk '{print $2}')
        requests=$(grep -o '"requests": [0-9]*' "$out/report-$what-$s.json" | awk '{print $2}')
        printf '| clang %s | %s | %.2f | %s | %s | %s | %.2f |\n' "$what" "$s" \
            "$(echo "$t1 - $t0" | bc)" "$bytes" "$requests" "$touched" "$bound"
    done
done
