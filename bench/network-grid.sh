#!/bin/sh
# The paper's grid of links (56 kbit/s, 256 kbit/s, 1 Mbit/s, 3 Mbit/s, each at 10, 50, 100 and
# 200 ms) with a program sized like the paper's applications: an executable and a 1 MiB shared
# library of data (about 1.03 MB of files), the same program `build_bench_program` builds in
# crates/coldstart/tests/network.rs. Workload a (`app a`) is profiled, workload b (`app b`,
# which also reads 16 KiB a does not) is measured. Every strategy, every cell.
#
#   bench/network-grid.sh [-l "LINK[:RUNS] ..."] [-a READAHEAD] [-o DIR] [-S STRATEGIES] [-P]
#                         [-w a|b]
#
# -S and -P are passed to bench/network.sh (strategies, e.g. with `auto`; predictions).
# -w b profiles the hot set on workload b itself, the one measured (a control: how close the
# mechanism comes to Eq. 1 with a perfect profile); default a (held out).
#
# Default run counts: one run per cell on the 56 kbit/s and 256 kbit/s rows (a full download
# takes 150 s and 33 s there), three on the 1 and 3 Mbit/s rows. Prints bench/network.sh's
# table, then a summary per cell: `original`, the best strategy, the bound of Eq. 1, and the
# ratios best / original and best / bound.
set -eu
links=""
for bw in 56kbit:1 256kbit:1 1mbit:3 3mbit:3; do
    for lat in 10ms 50ms 100ms 200ms; do
        links="$links ${bw%%:*}/$lat:${bw#*:}"
    done
done
out=""; ra=128k; strategies="original paged reordered-paged reordered stream"; predict=""
profiled=a
while getopts l:a:o:S:Pw: opt; do
    case $opt in
        l) links=$OPTARG ;; a) ra=$OPTARG ;; o) out=$OPTARG ;;
        S) strategies=$OPTARG ;; P) predict=-P ;; w) profiled=$OPTARG ;;
        *) echo "usage: $0 [-l LINKS] [-a READAHEAD] [-o DIR] [-S STRATEGIES] [-P] [-w a|b]" >&2; exit 2 ;;
    esac
done
case $profiled in a|b) ;; *) echo "$0: -w takes a or b" >&2; exit 2 ;; esac
. "$(dirname "$0")/lib.sh"
mkdir -p "$out/prog/src" "$out/prog/app/bin" "$out/prog/app/lib"

# The program: big_table[i] = bits 24-31 of i * 2654435761 (mod 2^32), as in the test.
awk 'BEGIN {
    printf "const unsigned char big_table[1048576] = {"
    for (i = 0; i < 1048576; i++) printf "%d,", int((i * 2654435761) % 4294967296 / 16777216)
    print "};"
}' > "$out/prog/src/big.c"
cp "$root/crates/coldstart/tests/fixtures/two-workloads.c" "$out/prog/src/app.c"
clang-19 -O1 -shared -fPIC "$out/prog/src/big.c" -o "$out/prog/app/lib/libbig.so"
clang-19 -O1 "$out/prog/src/app.c" -L "$out/prog/app/lib" -lbig -Wl,-rpath,'$ORIGIN/../lib' \
    -o "$out/prog/app/bin/app"

# shellcheck disable=SC2086
"$root/bench/network.sh" -p "$out/prog/app" -e bin/app -A "$profiled" -B b -a "$ra" -l "$links" -o "$out/run" \
    -S "$strategies" $predict

echo
echo "| link | original (s) | best (s) | best strategy | Eq. 1 bound (s) | best / original | best / bound | runs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
awk -F'\t' '
    $2 == "original" { orig[$1] = $3 }
    $2 !~ /^auto/ && (!($1 in best) || $3 < best[$1]) { best[$1] = $3; who[$1] = $2 }
    { bound[$1] = $6; runs[$1] = $7; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END { for (i = 1; i <= n; i++) { l = order[i]
        printf "| %s | %.2f | %.2f | `%s` | %.2f | %.2f (%+.0f%%) | %.2f (%+.0f%%) | %d |\n",
            l, orig[l], best[l], who[l], bound[l], best[l] / orig[l], (best[l] / orig[l] - 1) * 100,
            best[l] / bound[l], (best[l] / bound[l] - 1) * 100, runs[l] } }
' "$out/run/results.tsv"
