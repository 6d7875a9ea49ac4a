#!/bin/sh
# The model against the mount's read-ahead on a program nobody here wrote: Debian's Node.js
# (/usr/bin/node, one 94 MiB executable) packed with the hot set of `node -e 0` (recorded by
# `run --record`), served over 32mbit/10ms; `predict --link-hint` and `run --strategy
# reordered-paged` from an empty chunk cache, with each read-ahead.
#
#   bench/network-readahead.sh [-o DIR] [READAHEAD...]     (default: 4k 128k)
#
# COLDSTART=path picks the binary (default: release).
set -eu
out=""
while getopts o: opt; do
    case $opt in
        o) out=$OPTARG ;;
        *) echo "usage: $0 [-o DIR] [READAHEAD...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- 4k 128k
. "$(dirname "$0")/lib.sh"
rm -rf "$out/app" "$out/bare" "$out/bundle" "$out"/cache-*
mkdir -p "$out/app/bin"
cp /usr/bin/node "$out/app/bin/"
"$cs" pack "$out/app" -o "$out/bare" | tail -1
"$cs" run "$out/bare" --strategy original --cache-dir "$out/cache-record" --record "$out/hot.json" \
    -- '{root}/bin/node' -e 0 2>/dev/null
"$cs" pack "$out/app" --hot-list "$out/hot.json" -o "$out/bundle" | tail -1
"$cs" serve "$out/bundle" --link 32mbit/10ms > "$out/serve.log" 2>/dev/null &
server=$!
trap 'kill $server 2>/dev/null; true' EXIT INT TERM
while [ ! -s "$out/serve.log" ]; do sleep 0.05; done
url=$(head -1 "$out/serve.log")
for ra in "$@"; do
    echo "== read-ahead $ra"
    "$cs" predict "$url" --link-hint 32mbit/10ms --readahead "$ra" --cache-dir "$out/cache-predict-$ra" \
        | grep -e read-ahead -e reordered-paged
    "$cs" run "$url" --strategy reordered-paged --readahead "$ra" --cache-dir "$out/cache-run-$ra" \
        --export-json "$out/run-$ra.json" -- '{root}/bin/node' -e 0 2>&1 | grep fetched
    python3 -c "import json,sys; print('measured start-up %.2f s' % (json.load(open(sys.argv[1]))['startup_ms'] / 1e3))" "$out/run-$ra.json"
done
