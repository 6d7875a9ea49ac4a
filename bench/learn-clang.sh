#!/bin/sh
# clang-19 (about 190 MiB with libLLVM and libclang-cpp) learns to compile from its users'
# starts (docs/learn.md), over an emulated link: packed with the hot set of `clang --version`;
# three starts of `clang -c` on three other one-line files with `run --learn`, each from a
# fresh cache; `pack --learn-from` those records; then `clang -c x.c` (a file no learned start
# compiled) and `clang --version` from a fresh cache, on the first and on the learned bundle,
# each with run's default strategy (auto), and `original` (whole files before start) on the
# learned bundle. Uncompressed, then with -z packed with `--compress zstd`.
#
#   bench/learn-clang.sh [-l LINK] [-r RUNS] [-z] [-c CHUNK] [-o DIR]
#
# LINK is `serve --link` (default 20mbit/40ms), RUNS the timed starts of each cell (default 3,
# the median printed), CHUNK pack's `--chunk-size` (default: pack's, 64k). Printed for each
# cell: the misses outside the hot set, the bytes fetched besides the manifest and the hot
# request, and the start-up time (`startup_ms`: to the command's end, the unmount apart).
set -eu
link=20mbit/40ms; runs=3; out=""; compress=""; chunk=""
while getopts l:r:zc:o: opt; do
    case $opt in
        l) link=$OPTARG ;; r) runs=$OPTARG ;; z) compress="--compress zstd" ;; o) out=$OPTARG ;;
        c) chunk=$OPTARG ;;
        *) echo "usage: $0 [-l LINK] [-r RUNS] [-z] [-c CHUNK] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/start-lib.sh"
mkdir -p "$out"
cd "$out"
rm -rf app plain first second learned cache-* hot-version.json r-*.json ./*.c ./*.o
clang_app app
printf 'int twice(int x) { return 2 * x; }\n' > x.c
printf 'static int n; int next(void) { return ++n; }\n' > y.c
printf 'struct p { int x, y; }; int dot(struct p a, struct p b) { return a.x * b.x + a.y * b.y; }\n' > z.c
printf '#include <stddef.h>\nsize_t len(const char *s) { size_t n = 0; while (s[n]) n++; return n; }\n' > w.c
"$cs" pack app -o plain >/dev/null
"$cs" run plain --strategy paged --cache-dir cache-rec --record hot-version.json \
    -- '{root}/bin/clang' --version >/dev/null
# shellcheck disable=SC2086
"$cs" pack app $compress ${chunk:+--chunk-size "$chunk"} --hot-list hot-version.json -o first \
    >/dev/null

version() { start "$@" -- '{root}/bin/clang' --version; }
compile() { src=$1; shift; start "$@" -- '{root}/bin/clang' -c "$PWD/$src" -o "$PWD/${src%.c}.o"; }

echo "| start (clang-19, $link${compress:+, zstd}${chunk:+, $chunk chunks}, median of $runs) | misses outside the hot set | bytes besides the hot request | start-up |"
echo "| --- | --- | --- | --- |"
serve first
cell "-c x.c, hot set of --version" compile x.c
cell "--version, hot set of --version" version
mkdir learned
for src in y.c z.c w.c; do compile "$src" --learn learned >/dev/null; done
stop_serving
# shellcheck disable=SC2086
"$cs" pack app $compress ${chunk:+--chunk-size "$chunk"} --hot-list hot-version.json \
    --learn-from learned -o second \
    2>learn.txt >/dev/null
serve second
cell "-c x.c, learned from 3 other compiles" compile x.c
cell "--version, learned from 3 other compiles" version
cell "-c x.c, original" compile x.c --strategy original
stop_serving
grep '^learn:' learn.txt
echo "records: $(cat learned/*.json | wc -c) bytes in $(ls learned | wc -l)"
