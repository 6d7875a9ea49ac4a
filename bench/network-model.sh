#!/bin/sh
# The start-up model of `coldstart predict` / `--strategy auto` against measurements: the
# ~1 MB program of bench/network-grid.sh on a few links, every strategy and `auto` measured
# (bench/network.sh, empty chunk cache each run), each prediction made with an empty cache
# and the local start-up time, once on the measured link and once on the link given.
#
#   bench/network-model.sh [-l "LINK[:RUNS] ..."] [-a READAHEAD] [-o DIR]
#
# Prints the grid's tables, then per link and strategy: measured, predicted (link measured),
# predicted (link given) and the errors; and per link: the measured best, what auto chose,
# auto's measured time (link probing included) and whether it is within 10% of the best, and
# the same for `auto --link-hint LINK` (no probe; the start object's request kept or dropped).
# Measured times are whole `coldstart run`s (mount, manifest, program, unmount); the model
# counts the manifest's request and leaves out the mount itself, common to every strategy.
set -eu
links="256kbit/50ms:1 3mbit/200ms:1 20mbit/40ms:3"; ra=16k; out=""
while getopts l:a:o: opt; do
    case $opt in
        l) links=$OPTARG ;; a) ra=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-l LINKS] [-a READAHEAD] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
"$root/bench/network-grid.sh" -l "$links" -a "$ra" -o "$out" -P \
    -S "original paged reordered-paged reordered stream auto auto-hint"

echo
echo "| link | strategy | measured (s) | predicted, link measured (s) | error | predicted, link given (s) | error |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk -F'\t' '$2 !~ /^auto/ {
    printf "| %s | %s | %.2f | %.2f | %+.0f%% | %.2f | %+.0f%% |\n", $1, $2, $3, $10, ($10 / $3 - 1) * 100, $11, ($11 / $3 - 1) * 100
}' "$out/run/results.tsv"
echo
echo "| link | measured best | auto chose | auto measured (s) | auto / best | within 10% | auto, link given: chose | measured (s) | / best |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
awk -F'\t' '
    { if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    $2 !~ /^auto/ && (!($1 in best) || $3 < best[$1]) { best[$1] = $3; who[$1] = $2 }
    $2 == "auto" { auto[$1] = $3; chose[$1] = $12 }
    $2 == "auto-hint" { hint[$1] = $3; hchose[$1] = $12 }
    END { for (i = 1; i <= n; i++) { l = order[i]; r = auto[l] / best[l]
        printf "| %s | `%s` %.2f s | `%s` | %.2f | %.2f | %s | `%s` | %.2f | %.2f |\n", l, who[l], best[l], chose[l], auto[l], r, r <= 1.10 ? "yes" : "no", hchose[l], hint[l], hint[l] / best[l] } }
' "$out/run/results.tsv"
