#!/bin/sh
# Python with its standard library from a fully cached bundle against the same files local.
#
#   bench/network-python.sh [-r RUNS] [-o DIR]
#
# Debian's standard library (/usr/lib/python3.11 with the `.pyc` compiled at install; without
# its static library and tests; times kept by `cp -a`) is packed; `run --strategy original`
# fills the chunk cache; then `coldstart mount` (default options: every chunk cached, so each
# opened file is handed to the kernel) serves it while hyperfine times
# `env PYTHONHOME=DIR /usr/bin/python3 -c "import json"` with DIR the mount and with DIR the
# local copy (in the page cache), RUNS runs each (default 40, 5 warm-up). Also counts the
# modules compiled from source on the mount (`-v`: 0 when every `.pyc` is used) and times the
# whole `coldstart run` of the same command (mount, the program, unmount).
set -eu
runs=40
. "$(dirname "$0")/opts.sh"
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
mnt="$out/mnt"
mounter=""
trap '[ -n "$mounter" ] && kill -INT "$mounter" 2>/dev/null && wait "$mounter"; true' EXIT INT TERM

rm -rf "$out/app" "$out/bundle" "$out/cache"
mkdir -p "$mnt"
python_app "$out/app"
"$cs" pack "$out/app" -o "$out/bundle" | tail -1
"$cs" run "$out/bundle" --strategy original --cache-dir "$out/cache" -- true 2>/dev/null
"$cs" mount "$out/bundle" "$mnt" --cache-dir "$out/cache" 2>/dev/null &
mounter=$!
while [ ! -d "$mnt/lib" ]; do sleep 0.05; done
env PYTHONHOME="$mnt" /usr/bin/python3 -v -c "import json" 2> "$out/verbose.txt"
echo "modules from their .pyc on the mount: $(grep -c "code object from '.*\.pyc'" "$out/verbose.txt")"
echo "compiled from source: $(grep -c -e 'code object from .*\.py$' -e 'bytecode is stale' "$out/verbose.txt" || true)"
hyperfine -N --warmup 5 --runs "$runs" --export-markdown "$out/hyperfine.md" \
    -n mount "env PYTHONHOME=$mnt /usr/bin/python3 -c 'import json'" \
    -n local "env PYTHONHOME=$out/app /usr/bin/python3 -c 'import json'" >/dev/null
cat "$out/hyperfine.md"
kill -INT "$mounter"; wait "$mounter" || true; mounter=""
hyperfine -N --warmup 2 --runs 10 --export-markdown "$out/hyperfine-run.md" \
    -n "coldstart run" \
    "$cs run $out/bundle --cache-dir $out/cache -- env PYTHONHOME={root} /usr/bin/python3 -c 'import json'" \
    >/dev/null
cat "$out/hyperfine-run.md"
