#!/bin/sh
# Network start of a real program nobody here wrote: clang-19 and its libraries (libLLVM,
# libclang-cpp: about 190 MiB), hot set recorded on `clang --version`, measured on
# `clang --version` and on compiling a one-line file, over an emulated link.
#
#   bench/network-clang.sh [-l LINK] [-S "STRATEGY ..."] [-o DIR]
set -eu
link=20mbit/40ms; strategies="original paged reordered-paged reordered stream"; out=""
while getopts l:S:o: opt; do
    case $opt in
        l) link=$OPTARG ;; S) strategies=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-l LINK] [-S STRATEGIES] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; true' EXIT INT TERM

llvm=/usr/lib/llvm-19
rm -rf "$out/app" "$out/bundle0" "$out/bundle"
mkdir -p "$out/app/bin" "$out/app/lib"
cp "$llvm/bin/clang" "$out/app/bin/"
# Where the loader finds them here (Debian puts libLLVM in the multiarch directory).
for lib in libclang-cpp.so.19.1 libLLVM.so.19.1; do
    path=$(ldd "$llvm/bin/clang" | awk -v l="$lib" '$1 == l { print $3 }')
    [ -f "$path" ] || { echo "$0: clang-19 does not load $lib (apt-get install clang-19)" >&2; exit 1; }
    cp "$path" "$out/app/lib/"
done
printf 'int twice(int x) { return 2 * x; }\n' > "$out/x.c"
"$cs" pack "$out/app" -o "$out/bundle0" >/dev/null
rm -rf "$out/cache-rec"
"$cs" run "$out/bundle0" --strategy paged --cache-dir "$out/cache-rec" --record "$out/hot.json" \
    -- '{root}/bin/clang' --version >/dev/null 2>&1
"$cs" pack "$out/app" --hot-list "$out/hot.json" -o "$out/bundle" >/dev/null
"$cs" serve "$out/bundle" --link "$link" > "$out/url.txt" 2>/dev/null &
server=$!
while [ ! -s "$out/url.txt" ]; do sleep 0.05; done
url=$(cat "$out/url.txt")
now() { date +%s.%N; }
echo "| command | strategy | start-up (s) | bytes fetched | requests |"
echo "| --- | --- | --- | --- | --- |"
for what in version compile; do
    for s in $strategies; do
        rm -rf "$out/cache"
        t0=$(now)
        if [ $what = version ]; then
            "$cs" run "$url" --strategy "$s" --json --cache-dir "$out/cache" \
                -- '{root}/bin/clang' --version > /dev/null 2> "$out/report.json"
        else
            "$cs" run "$url" --strategy "$s" --json --cache-dir "$out/cache" \
                -- '{root}/bin/clang' -c "$out/x.c" -o "$out/x.o" > /dev/null 2> "$out/report.json"
        fi
        t1=$(now)
        bytes=$(grep -o '"bytes_fetched": [0-9]*' "$out/report.json" | awk '{print $2}')
        requests=$(grep -o '"requests": [0-9]*' "$out/report.json" | awk '{print $2}')
        echo "| clang $what | $s | $(echo "$t1 - $t0" | bc) | $bytes | $requests |"
    done
done
