#!/bin/sh
# Cached read throughput through a coldstart mount against the same file read locally.
#
#   bench/network-cached.sh [-m MB] [-c CHUNK] [-a READAHEAD] [-r RUNS] [-p] [-o DIR]
#
# A file of MB (default 200) random megabytes is packed (chunk CHUNK, default 64k); an
# `original` mount fills the chunk cache; then RUNS times (default 3) a fresh `paged` mount
# (nothing of it in the kernel's page cache) reads the file with dd bs=1M, and the local file
# (in the page cache) is read the same way. -p records the mount's CPU profile with perf
# (DIR/perf.data, summary on stdout). COLDSTART=path picks the binary.
set -eu
mb=200; chunk=64k; ra=128k; runs=3; perf=""; out=""
while getopts m:c:a:r:po: opt; do
    case $opt in
        m) mb=$OPTARG ;; c) chunk=$OPTARG ;; a) ra=$OPTARG ;; r) runs=$OPTARG ;; p) perf=1 ;;
        o) out=$OPTARG ;;
        *) echo "usage: $0 [-m MB] [-c CHUNK] [-a READAHEAD] [-r RUNS] [-p] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out/app"
[ "$(stat -c %s "$out/app/big" 2>/dev/null || echo 0)" = $((mb * 1048576)) ] ||
    head -c $((mb * 1048576)) /dev/urandom > "$out/app/big"
rm -rf "$out/bundle" "$out/cache"
"$cs" pack "$out/app" --chunk-size "$chunk" -o "$out/bundle" >/dev/null
"$cs" run "$out/bundle" --strategy original --cache-dir "$out/cache" -- true 2>/dev/null
rate() { grep -o '[0-9.]* [GMk]*B/s' | tail -1; }
echo "file: $mb MiB; chunk $chunk; read-ahead $ra"
for i in $(seq "$runs"); do
    if [ -n "$perf" ] && [ "$i" = 1 ]; then
        perf record -q -g -o "$out/perf.data" -- "$cs" run "$out/bundle" --readahead "$ra" \
            --strategy paged --cache-dir "$out/cache" -- dd if='{root}/big' of=/dev/null bs=1M \
            2> "$out/dd.txt" >/dev/null
    else
        "$cs" run "$out/bundle" --readahead "$ra" --strategy paged --cache-dir "$out/cache" \
            -- dd if='{root}/big' of=/dev/null bs=1M 2> "$out/dd.txt" >/dev/null
    fi
    echo "mount: $(rate < "$out/dd.txt")"
done
cat "$out/app/big" > /dev/null
for i in $(seq "$runs"); do
    echo "local: $(dd if="$out/app/big" of=/dev/null bs=1M 2>&1 | rate)"
done
if [ -n "$perf" ]; then
    perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2>/dev/null |
        grep -v '^#' | grep '%' | head -25
fi
