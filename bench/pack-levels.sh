#!/bin/sh
# Pack time against bytes, by zstd level, on a real program: clang-19 and its libraries
# (libLLVM, libclang-cpp: about 190 MiB, as bench/network-clang.sh packs them), with the hot set
# of `clang --version` recorded from an uncompressed bundle.
#
#   bench/pack-levels.sh [-L "1 3 6 9 12 19"] [-w WORKERS] [-o DIR]
#
# For each level: `pack --compress zstd --compress-level N` (threads: -w, default every core)
# and its wall and CPU (user + system) time; the bytes `original` downloads (the start object's
# hot part and the cold objects, bundle version 4; the whole-file blobs before), the bytes a
# hot-set strategy fetches before the program starts (the start object) and the origin's size;
# then the seconds each set of bytes takes on the paper's links (2, 8 and 20 Mbit/s). Also the
# uncompressed bundle's origin size against the program's. Prints a Markdown table.
set -eu
levels="1 3 6 9 12 19"; workers=""; out=""
while getopts L:w:o: opt; do
    case $opt in
        L) levels=$OPTARG ;; w) workers="--workers $OPTARG" ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-L LEVELS] [-w WORKERS] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"

rm -rf "$out/app" "$out/plain" "$out"/z*
clang_app "$out/app"
program=$(du -sb "$out/app" | cut -f1)
"$cs" pack "$out/app" -o "$out/plain0" >/dev/null
"$cs" run "$out/plain0" --cache-dir "$out/cache" --record "$out/hot.json" -- '{root}/bin/clang' --version >/dev/null 2>&1
rm -rf "$out/plain0" "$out/cache"
/usr/bin/time -f '%e %U %S' -o "$out/time.txt" "$cs" pack "$out/app" --hot-list "$out/hot.json" -o "$out/plain" > "$out/plain.txt"
plain_time=$(awk '{ printf "%.1f | %.1f", $1, $2 + $3 }' "$out/time.txt")
# Bytes of the regular files under a directory.
size() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }'; }
# What `original` downloads: the hot part of the start object (from the offset in its header)
# and every cold object.
files() {
    cold=$(size "$1/blobs/cold"); at=$(od -An -t u8 -j 72 -N 8 "$1/start" | tr -d ' ')
    echo $(( ${cold:-0} + $(stat -c %s "$1/start") - at ))
}
start() { stat -c %s "$1/start"; }
# Seconds for BYTES at MBIT Mbit/s.
secs() { echo "scale=1; $1 * 8 / ($2 * 1000000)" | bc; }
echo "program (clang-19, libLLVM, libclang-cpp): $program bytes; $(nproc) cores; $(date -u +%Y-%m-%d)"
echo
echo "| level | pack s | pack CPU s | whole files (original) | start object | origin | original at 2 / 8 / 20 Mbit/s | start object at 2 / 8 / 20 Mbit/s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
row() {
    f=$(files "$2"); s=$(start "$2")
    echo "| $1 | $3 | $f | $s | $(size "$2") | $(secs "$f" 2) / $(secs "$f" 8) / $(secs "$f" 20) | $(secs "$s" 2) / $(secs "$s" 8) / $(secs "$s" 20) |"
}
row none "$out/plain" "$plain_time"
for level in $levels; do
    # shellcheck disable=SC2086
    /usr/bin/time -f '%e %U %S' -o "$out/time.txt" "$cs" pack "$out/app" --hot-list "$out/hot.json" \
        --compress zstd --compress-level "$level" $workers -o "$out/z$level" > "$out/z$level.txt"
    row "$level" "$out/z$level" "$(awk '{ printf "%.1f | %.1f", $1, $2 + $3 }' "$out/time.txt")"
    rm -rf "$out/z$level"
done
echo
grep '^origin' "$out/plain.txt"
