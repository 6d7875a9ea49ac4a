#!/bin/sh
# What lld's compression sort of the code an order leaves does to a compressed bundle and to
# starting over a network: builds of one program that differ in layout (bench/layout-typst.sh
# and bench/layout-gdb.sh leave `ordered` and `compress`: coldstart's order, then the rest in
# input order or by `link --compression-sort`), each packed with zstd at pack's default level
# with the hot set of workload a, and started on held-out workload b over an emulated link with
# the `original` and `stream` strategies (`coldstart serve --link` on the loopback, `coldstart
# run` with an empty chunk cache each time). As root.
#
#   bench/layout-pack.sh -e EXE -A ARGS -B ARGS [-l "LINK ..."] [-r RUNS] [-o DIR] BUILD-DIR...
#
# Each BUILD-DIR holds EXE (relative, e.g. bin/typst). For each: the bundle's bytes (`origin`:
# everything stored; `original`: what that strategy downloads, the start object's hot part and
# the cold objects; the start object, which `stream` fetches first), then for each strategy the
# median start-up time of b over RUNS starts and the bytes it fetched.
set -eu
exe=""; args_a=""; args_b=""; link="8mbit/50ms"; runs=3; out=""
while getopts e:A:B:l:r:o: opt; do
    case $opt in
        e) exe=$OPTARG ;; A) args_a=$OPTARG ;; B) args_b=$OPTARG ;; l) link=$OPTARG ;;
        r) runs=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 -e EXE -A ARGS -B ARGS [-l LINK] [-r RUNS] [-o DIR] BUILD-DIR..." >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ -n "$exe" ] && [ $# -gt 0 ] || { echo "usage: $0 -e EXE -A ARGS -B ARGS BUILD-DIR..." >&2; exit 2; }
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
size() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
# What `original` downloads: the hot part of the start object (from the offset in its header)
# and every cold object.
files() {
    cold=$(size "$1/blobs/cold"); at=$(od -An -t u8 -j 72 -N 8 "$1/start" | tr -d ' ')
    echo $(( ${cold:-0} + $(stat -c %s "$1/start") - at ))
}
serve_pid=""
trap '[ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null; true' EXIT
port=$((20000 + $$ % 20000))
echo "link $link, $runs start(s) per cell, $(date -u +%Y-%m-%d), load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| build | program bytes | origin (zstd) | original downloads | start object | original: start-up / fetched | stream: start-up / fetched |"
echo "| --- | ---: | ---: | ---: | ---: | --- | --- |"
for dir in "$@"; do
    v=$(basename "$dir")
    rm -rf "${out:?}/$v" && mkdir -p "$out/$v"
    "$cs" pack "$dir" -o "$out/$v/plain" >/dev/null
    # shellcheck disable=SC2086
    "$cs" run "$out/$v/plain" --cache-dir "$out/$v/cache" --record "$out/$v/hot.json" \
        -- "{root}/$exe" $args_a >/dev/null 2>&1
    rm -rf "$out/$v/plain" "$out/$v/cache"
    "$cs" pack "$dir" --hot-list "$out/$v/hot.json" --compress zstd -o "$out/$v/z" >/dev/null
    row="| $v | $(size "$dir") | $(size "$out/$v/z") | $(files "$out/$v/z") | $(stat -c %s "$out/$v/z/start") |"
    "$cs" serve "$out/$v/z" --addr "127.0.0.1:$port" --link "$link" >/dev/null 2>&1 &
    serve_pid=$!
    sleep 1
    for strategy in original stream; do
        i=0
        while [ $i -lt "$runs" ]; do
            rm -rf "$out/$v/cache"
            # shellcheck disable=SC2086
            "$cs" run "http://127.0.0.1:$port" --strategy "$strategy" --cache-dir "$out/$v/cache" \
                --export-json "$out/$v/$strategy-$i.json" -- "{root}/$exe" $args_b >/dev/null 2>&1
            i=$((i + 1))
        done
        cell=$(python3 - "$out/$v" "$strategy" <<'PY'
import glob, json, statistics, sys
runs = [json.load(open(f)) for f in glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-*.json")]
ms = statistics.median(r["elapsed_ms"] for r in runs)
fetched = statistics.median(r["report"]["bytes_fetched"] for r in runs)
print(f"{ms / 1000:.2f} s / {int(fetched):,} B")
PY
)
        row="$row $cell |"
    done
    kill "$serve_pid" && wait "$serve_pid" 2>/dev/null || true
    serve_pid=""
    echo "$row"
done
