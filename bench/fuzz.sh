#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (cargo-fuzz, libFuzzer), one after the other, one job at a
# time, each for a number of inputs or of seconds, and prints a Markdown table: the inputs
# each ran, how long, the corpus it grew, and the crashes found (files in fuzz/artifacts/).
#
#   bench/fuzz.sh                      # one million inputs for every target
#   bench/fuzz.sh 1000000 manifest elf # one million for two targets
#   bench/fuzz.sh 60s                  # a minute for every target
#
# Needs a nightly toolchain and cargo-fuzz: `rustup toolchain install nightly` and
# `cargo install --locked cargo-fuzz` (scripts/setup.sh). Each target starts from
# fuzz/seeds/TARGET (the ELF target from /usr/bin/true and libdl.so.2 of this machine), keeps
# what it finds in fuzz/corpus/, and runs under the memory limits of scripts/fuzz-limits.sh
# (-rss_limit_mb, -malloc_limit_mb: 128 MB for one allocation of the ELF target), niced. An
# optimised build with overflow checks (-a): an arithmetic overflow is a crash, as in the short
# form's debug build.
# scripts/fuzz.sh is the short form CI runs.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
. ../scripts/fuzz-limits.sh
amount=${1:-1000000}
shift || true
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
case $amount in
    *s) limit=(-max_total_time="${amount%s}") ;;
    *) limit=(-runs="$amount") ;;
esac
cargo +nightly fuzz build -O -a >&2
echo "| target | inputs run | seconds | inputs/s | corpus | crashes |"
echo "| --- | --- | --- | --- | --- | --- |"
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    seeds "$t" "corpus/$t"
    before=$(find "artifacts/$t" -type f | wc -l)
    log=$(mktemp)
    start=$(date +%s.%N)
    # -jobs=1: one worker process, its output in fuzz-0.log.
    # shellcheck disable=SC2046 # the limits are several words
    nice -n 10 cargo +nightly fuzz run -O -a "$t" "corpus/$t" -- "${limit[@]}" -jobs=1 \
        $(limits "$t") -artifact_prefix="artifacts/$t/" >"$log" 2>&1 || true
    end=$(date +%s.%N)
    runs=$(grep -hoE 'Done [0-9]+ runs' fuzz-0.log "$log" 2>/dev/null | tail -1 | grep -oE '[0-9]+' || echo 0)
    [ -n "$runs" ] || runs=0
    if [ "$runs" = 0 ]; then
        runs=$(grep -hoE '^#[0-9]+' fuzz-0.log 2>/dev/null | tail -1 | tr -d '#' || echo 0)
    fi
    secs=$(echo "$end - $start" | bc)
    crashes=$(( $(find "artifacts/$t" -type f | wc -l) - before ))
    corpus=$(find "corpus/$t" -type f | wc -l)
    rate=$(echo "scale=0; $runs / $secs" | bc)
    printf '| %s | %s | %.0f | %s | %s | %s |\n' "$t" "$runs" "$secs" "$rate" "$corpus" "$crashes"
    if [ "$crashes" != 0 ]; then
        echo "  $t: see fuzz/artifacts/$t and $log" >&2
        tail -30 fuzz-0.log >&2 || true
    fi
    rm -f fuzz-0.log
done
