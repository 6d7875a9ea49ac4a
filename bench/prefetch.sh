#!/usr/bin/env bash
# Prefetch on programs nobody here wrote, and on the sample: cold start without prefetch, with
# coldstart's prefetch (launch --prefetch, its defaults), the same without locking what it read
# (--hold 0), with whole-file preload of the same
# files (launch --mechanism whole-file: each file the database names read whole with
# read(2) before the program starts, as `cat FILES >/dev/null` or Firefox's old preload), and
# hot, on emulated storage. As root.
#
#   bench/prefetch.sh [RUNS] [STORAGE...] [-- PROGRAM...]
#       default: 5 runs, hdd emmc nvme; programs python3 sample firefox clang
#
# The database of each program is recorded once (`prefetch record`, an exact page profile)
# and kept in $out/NAME.prefetch. Writes one JSON report per program, storage and variant under
# /var/tmp/coldstart-bench/prefetch and prints the table of BENCHMARKS.md (median wall time
# of the cold runs; its cut against no prefetch).
#
# Choosing the defaults: bench/prefetch.sh defaults RUNS STORAGE measures python3 with each
# order, mechanism, gap and --no-wait.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}; shift || true
storages=(); programs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do storages+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
programs=("$@")
[ ${#storages[@]} -gt 0 ] || storages=(hdd emmc nvme)
[ ${#programs[@]} -gt 0 ] || programs=(python3 sample firefox clang)
# VARIANTS="none prefetch" measures only those (default: all five).
variants=${VARIANTS:-none prefetch nohold whole-file hot}
cs=${COLDSTART:-$PWD/target/release/coldstart}
[ -x "$cs" ] || cargo build --locked --release -q -p coldstart
out=${OUT:-/var/tmp/coldstart-bench/prefetch}
mkdir -p "$out"
work=$out/work
mkdir -p "$work/profile"
printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' > "$work/small.c"

command_of() {
  case $1 in
    python3) echo /usr/bin/python3 -c 'import json, email, http.client, sqlite3' ;;
    clang) echo "$(command -v clang-19)" -c "$work/small.c" -o "$work/small.o" ;;
    firefox) echo /usr/bin/firefox-esr --headless -no-remote -profile "$work/profile" \
      --screenshot "$work/shot.png" 'data:text/html,<h1>coldstart</h1>' ;;
    sample)
      [ -x "$work/sample/sample" ] || "$cs" sample --size bench --seed 1 -o "$work/sample" >/dev/null
      echo "$work/sample/sample" --workload a ;;
  esac
}

median() { # JSON report, command index -> median wall seconds of the first cache state
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); c=r["commands"][int(sys.argv[2])]; print(dict(c["summaries"])["wall_s"]["median"])' "$1" "$2"
}

measure() { # name storage variant cache [launch options] -- command
  local name=$1 storage=$2 variant=$3 cache=$4; shift 4
  local launch=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done
  shift
  local json=$out/$name-$storage-$variant.json
  local extra=()
  if [ "$variant" != none ] && [ "$variant" != hot ]; then
    extra=(--prefetch "$out/$name.prefetch")
    [ ${#launch[@]} -gt 0 ] && extra+=(--launch-options "${launch[*]}")
  fi
  nice -n 10 "$cs" measure --cache "$cache" --runs "$runs" --timeout 300 --storage "$storage" \
    "${extra[@]}" --export-json "$json" -- "$@" >"$out/$name-$storage-$variant.txt" 2>&1 ||
    echo "$0: $name $storage $variant: measure exited $? (see $out/$name-$storage-$variant.txt)" >&2
  [ -s "$json" ] && median "$json" 0 || echo nan
}

if [ "${storages[0]}" = defaults ]; then
  storage=${storages[1]:-hdd}
  read -r -a cmd <<<"$(command_of python3)"
  cmd=(/usr/bin/python3 -c 'import json, email, http.client, sqlite3')
  [ -s "$out/python3.prefetch" ] || "$cs" prefetch record -o "$out/python3.prefetch" -- "${cmd[@]}"
  printf '%-40s %s\n' variant "median cold (s), $storage"
  printf '%-40s %s\n' none "$(measure python3 "$storage" none cold -- "${cmd[@]}")"
  for opts in "--order first-touch" "--order physical" "--order first-touch --no-wait" \
    "--order physical --no-wait" "--mechanism fadvise" "--mechanism populate --jobs 4" \
    "--gap 0" "--gap 128k" "--gap 1m" "--open-jobs 1" "--open-jobs 16"; do
    v=$(echo "$opts" | tr -d ' -')
    printf '%-40s %s\n' "$opts" "$(measure python3 "$storage" "$v" cold $opts -- "${cmd[@]}")"
  done
  exit 0
fi

printf '| program | storage | none (s) | prefetch (s) | cut | prefetch, --hold 0 (s) | cut | whole-file (s) | cut | hot (s) |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
for name in "${programs[@]}"; do
  case $name in
    python3) cmd=(/usr/bin/python3 -c 'import json, email, http.client, sqlite3') ;;
    *) read -r -a cmd <<<"$(command_of "$name")" ;;
  esac
  if [ ! -s "$out/$name.prefetch" ]; then
    # The program's output goes to /dev/null, not into a file the recording would name.
    "$cs" prefetch record --timeout 300 -o "$out/$name.prefetch" -- "${cmd[@]}" >/dev/null 2>&1
    "$cs" prefetch show "$out/$name.prefetch" >"$out/$name-record.txt"
  fi
  for storage in "${storages[@]}"; do
    none=nan pf=nan nohold=nan whole=nan hot=nan
    want() { case " $variants " in *" $1 "*) return 0 ;; esac; return 1; }
    want none && none=$(measure "$name" "$storage" none cold -- "${cmd[@]}")
    want prefetch && pf=$(measure "$name" "$storage" prefetch cold -- "${cmd[@]}")
    want nohold && nohold=$(measure "$name" "$storage" prefetch-nohold cold --hold 0 -- "${cmd[@]}")
    want whole-file && whole=$(measure "$name" "$storage" whole-file cold --mechanism whole-file -- "${cmd[@]}")
    want hot && hot=$(measure "$name" "$storage" hot hot -- "${cmd[@]}")
    python3 - "$name" "$storage" "$none" "$pf" "$nohold" "$whole" "$hot" <<'EOF'
import sys
name, storage, none, pf, nohold, whole, hot = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
import math
cut = lambda x: "" if math.isnan(x) or math.isnan(none) else (f"-{(1 - x / none) * 100:.0f}%" if x < none else f"+{(x / none - 1) * 100:.0f}%")
print(f"| {name} | {storage} | {none:.3f} | {pf:.3f} | {cut(pf)} | {nohold:.3f} | {cut(nohold)} | {whole:.3f} | {cut(whole)} | {hot:.3f} |")
EOF
  done
done
