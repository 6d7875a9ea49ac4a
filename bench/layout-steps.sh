# The steps bench/layout-typst.sh and bench/layout-gdb.sh share, on a program PROG with its
# builds under $work/BUILD/bin/PROG. Source it from the repository's root and call
# `layout_options "$@"` (it sets `repo`, `runs`, `measure_only` and `cs`); define `llvm` (LLVM
# 22's bin directory), `work`, the arrays `wa` and `wb` (the arguments of workloads a and b),
# `relink NAME [coldstart link options] [-- WRAPPER-DIR]`, which relinks the program's objects
# into $work/NAME/bin/PROG, and `wrapper DIR FLAGS...`, which writes a compiler driver into DIR
# that adds FLAGS, before the steps.

# The scripts' arguments, RUNS (default 3) and --measure-only; also `repo` (the repository,
# the current directory) and `cs` (coldstart's release binary, built here).
layout_options() { # [RUNS] [--measure-only]
  repo=$PWD
  runs=${1:-3}
  measure_only=false
  if [ "${2:-}" = --measure-only ]; then measure_only=true; fi
  cargo build --locked --release -q -p coldstart
  cs=$repo/target/release/coldstart
}

# Steps 3 to 6, unless --measure-only: the default build, relinked with DT_RELR through the
# compiler wrapper `wrapper DIR FLAGS...` writes in WRAPPER-DIR; then its profiles, coldstart's
# orders and BOLT 22's.
layout_builds() { # PROG WRAPPER-DIR
  $measure_only && return 0
  wrapper "$2" -Wl,-z,pack-relative-relocs
  relink default -- "$2"
  # 4. Profiles, the static picture, the model's view.
  layout_profiles "$1"
  # 5. coldstart's orders.
  layout_orders "$1"
  # 6. BOLT 22 on the default build, from its instrumented run of a.
  layout_bolt "$1"
}

# Profiles of the default build (functions, exact and traced file pages), the static picture
# and the model's view of every placement on held-out b.
layout_profiles() { # PROG
  local p=default/bin/$1
  "$cs" profile --pages --workload a -o a.json -- "$p" "${wa[@]}" >/dev/null
  "$cs" profile --pages --workload b -o b.json -- "$p" "${wb[@]}" >/dev/null
  "$cs" profile --pages=traced --workload a -o a-traced.json -- "$p" "${wa[@]}" >/dev/null
  "$cs" analyze "$p" --profile a.json > analyze-default-a.txt
  "$cs" order a.json --binary "$p" --evaluate b.json --read-around forward -o /dev/null \
    > evaluate.txt 2>&1
  cat evaluate.txt
}

# coldstart's orders, each relinked: the defaults, without data, data from a traced profile,
# siblings, trained on b (the ideal), and the defaults with lld's compression sort.
layout_orders() { # PROG
  local p=default/bin/$1
  "$cs" order a.json --binary "$p" -o order-a.txt 2> order-a.log
  cat order-a.log
  relink ordered --order order-a.txt
  "$cs" order a.json --binary "$p" --no-data -o order-nodata.txt 2> order-nodata.log
  relink nodata --order order-nodata.txt
  "$cs" order a-traced.json --binary "$p" -o order-traced.txt 2> order-traced.log
  relink traced --order order-traced.txt
  "$cs" order a.json --binary "$p" --unprofiled siblings -o order-siblings.txt \
    2> order-siblings.log
  relink siblings --order order-siblings.txt
  "$cs" order b.json --binary "$p" -o order-b.txt 2> order-b.log
  relink ideal --order order-b.txt
  relink compress --order order-a.txt --compression-sort
  # Where b's own code went: how many of the functions b ran and a did not each placement lists.
  "$cs" order a.json --binary "$p" --unprofiled references --no-data -o order-references.txt \
    2>/dev/null
  python3 "$repo/bench/layout-recall.py" a.json b.json "$1" order-a.txt order-siblings.txt \
    order-references.txt | tee recall.txt
}

# lld 22's balanced partitioning: the instrumented executable run on a, its profile merged,
# the objects relinked through WRAPPER-DIR (whose compiler adds the flags given) as `bp`.
layout_bp() { # INSTRUMENTED-EXE WRAPPER-FUNCTION
  rm -rf profraw && mkdir -p profraw
  LLVM_PROFILE_FILE="$work/profraw/a-%p.profraw" "$1" "${wa[@]}" >/dev/null
  "$llvm/llvm-profdata" merge -o a.profdata profraw/*.profraw
  "$2" "$work/bp-wrap" -Wl,-z,pack-relative-relocs "-Wl,--irpgo-profile=$work/a.profdata" \
    -Wl,--bp-startup-sort=function -Wl,--verbose-bp-section-orderer
  rm -f "$work/bp-wrap/link.log"
  relink bp -- "$work/bp-wrap"
  grep -i "functions for startup" "$work/bp-wrap/link.log" || true
}

# BOLT 22 from its instrumented run of a, with the options BOLT's documentation recommends, as
# `cdsort`. On the plain build: BOLT 22's output of a binary with DT_RELR (`default`) crashes,
# instrumented or not, so BOLT's build keeps `.rela.dyn` (compare what an order can move).
layout_bolt() { # PROG
  # The instrumented binary runs among the plain build's files (its libraries, its data).
  rm -rf instr cdsort && cp -a plain instr && cp -a plain cdsort
  "$llvm/llvm-bolt" "plain/bin/$1" -instrument -o "instr/bin/$1" \
    --instrumentation-file="$work/a.fdata" > bolt-instrument.log 2>&1
  rm -f a.fdata && "instr/bin/$1" "${wa[@]}" >/dev/null
  "$llvm/llvm-bolt" "plain/bin/$1" -o "cdsort/bin/$1" -data=a.fdata \
    -reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh \
    > bolt-cdsort.log 2>&1 || { tail -20 bolt-cdsort.log; exit 1; }
  rm -rf instr
}

# One traced cold start of b per build (bench/layout-breakdown.sh: pages read, read runs,
# faults, what an order can move), then cold starts on the emulated hdd, each build
# interleaved with default in one `measure --compare`, and the table.
layout_measure() { # PROG BUILD...
  local prog=$1; shift
  local dirs=() v
  for v in "$@"; do
    "$v/bin/$prog" "${wb[@]}" >/dev/null || { echo "the $v build fails on b" >&2; exit 1; }
    rm -rf "run/$v" && mkdir -p "run/$v/bin" && cp "$v/bin/$prog" "run/$v/bin/$prog"
    dirs+=("$work/run/$v")
  done
  "$repo/bench/layout-breakdown.sh" "${dirs[@]}" -- "bin/$prog" "${wb[@]}" | tee breakdown.txt
  cp /var/tmp/coldstart-bench/breakdown/summary.json summary.json
  uptime | tee hdd-load.txt
  for v in ordered ideal bp cdsort; do
    "$cs" measure --compare --storage hdd --cache cold --runs "$runs" \
      --export-json "hdd-$v.json" -- "run/default/bin/$prog" "${wb[@]}" ::: \
      "run/$v/bin/$prog" "${wb[@]}" > "hdd-$v.txt" 2>&1 || true
    grep -iE "faster|slower|within" "hdd-$v.txt" || tail -3 "hdd-$v.txt"
  done
  uptime | tee -a hdd-load.txt
  python3 "$repo/bench/layout-table.py" summary.json hdd- "$@"
}
