#!/bin/sh
# Network start benchmark: every strategy of `coldstart run` on emulated links, with the hot set
# profiled on one workload (a) and start-up measured on another (b). A thin call of
# `coldstart experiment` (cache state warm-remote: the server's copy in its page cache, the
# chunk cache empty at each start), whose result DIR/experiment.json it prints as before.
#
#   bench/network.sh [-s small|medium|bench] [-f FUNCTIONS] [-p APPDIR -e EXE -A ARGS -B ARGS]
#                    [-l "LINK[:RUNS] ..."] [-r RUNS] [-c CHUNK] [-a READAHEAD] [-S "STRATEGY ..."]
#                    [-o DIR] [-P]
#
# The program is `coldstart sample` (size -s, functions -f; `--workload a` / `--workload b`),
# reused from DIR/sample when DIR already holds one of the same size and functions, or a
# ready directory -p APPDIR whose executable -e EXE (relative) runs workload a with the
# arguments -A and workload b with -B. COLDSTART=path picks the coldstart binary (default:
# target/release/coldstart, built if missing).
#
# -a READAHEAD sets the mount's read-ahead for the recordings and the runs (default: none
# given, the mount chooses: one page while reads may fetch or when recording).
#
# Prints a Markdown table: start-up time (median of RUNS, each with an empty chunk cache that
# holds the miss history of the starts before it; a link may say its own run count as
# LINK:RUNS), bytes and requests fetched (medians), the bound of Eq. 1 (bytes workload b reads
# / bandwidth + one latency + local start-up time) and the change against the first strategy
# listed (`original` by default: each file downloaded whole, one request per file, before the
# program starts). Each row also goes to DIR/results.tsv. The strategy `auto` may be listed
# (-S) like the others, and `auto-hint`: `--strategy auto --link-hint LINK`, the link given
# instead of measured. -P also predicts each link with the link measured, besides the link
# given, and adds both predictions to each row of results.tsv (columns 10 and 11; column 12:
# the strategy `auto` chose, most often).
set -eu

size=small; functions=""; links="1mbit/100ms 3mbit/50ms"; runs=1; chunk=16k; out=""
ra=""; app=""; exe=sample; args_a="--workload a"; args_b="--workload b"; predict=""
strategies="original paged reordered-paged reordered stream"
while getopts s:f:p:e:A:B:l:r:c:a:S:o:P opt; do
    case $opt in
        s) size=$OPTARG ;; f) functions=$OPTARG ;; l) links=$OPTARG ;; r) runs=$OPTARG ;;
        p) app=$OPTARG ;; e) exe=$OPTARG ;; A) args_a=$OPTARG ;; B) args_b=$OPTARG ;;
        c) chunk=$OPTARG ;; a) ra=$OPTARG ;; S) strategies=$OPTARG ;; o) out=$OPTARG ;;
        P) predict=1 ;;
        *) echo "usage: $0 [-s SIZE] [-f FUNCTIONS] [-p APPDIR -e EXE -A ARGS -B ARGS] [-l LINKS] [-r RUNS] [-c CHUNK] [-a READAHEAD] [-S STRATEGIES] [-o DIR] [-P]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"

# The program, without its sources and objects.
rm -rf "$out/app"
if [ -n "$app" ]; then
    cp -a "$app" "$out/app"
    what="$app"
else
    key="$size ${functions:-preset}"
    if [ ! -x "$out/sample/sample" ] || [ "$(cat "$out/sample.key" 2>/dev/null)" != "$key" ]; then
        rm -f "$out/sample.key"
        if [ -n "$functions" ]; then
            "$cs" sample --size "$size" --functions "$functions" -o "$out/sample" >/dev/null
        else
            "$cs" sample --size "$size" -o "$out/sample" >/dev/null
        fi
        echo "$key" > "$out/sample.key"
    fi
    mkdir "$out/app"
    (cd "$out/sample" && tar cf - --exclude=./src --exclude='*.o' .) | (cd "$out/app" && tar xf -)
    what="sample: size $size${functions:+, $functions functions}"
fi

# Every cell measured afresh.
rm -f "$out/experiment.json"
# shellcheck disable=SC2086
"$cs" experiment "$out/app" -o "$out/experiment.json" --cache warm-remote --runs "$runs" \
    --link "$(echo $links | tr ' ' ',')" --strategy "$(echo $strategies | tr ' ' ',')" \
    --chunk-size "$chunk" ${ra:+--readahead "$ra"} ${predict:+--predict-measured-link} \
    --profiled "$exe $args_a" -- "$exe" $args_b >/dev/null

/usr/bin/python3 - "$out/experiment.json" "$out/results.tsv" "$what" "$chunk" "${ra:-chosen by the mount}" "$runs" <<'PY'
import json, statistics, sys
path, tsv, what, chunk, ra, runs = sys.argv[1:]
e = json.load(open(path))
local = e.get("local_s") or 0.0
used, total = e.get("used_bytes") or 0, e["program"]["bytes"]
print(f"{what}; {total} bytes; workload b reads {used} bytes at start-up; local start-up "
      f"{local:.4f} s; chunk {chunk}; read-ahead {ra}; {runs} run(s) per cell unless the link "
      "says LINK:RUNS")
print()
print("| link | strategy | start-up (s) | bytes fetched | requests | Eq. 1 bound (s) | vs original |")
print("| --- | --- | --- | --- | --- | --- | --- |")
med = lambda c, k: statistics.median(r[k] for r in c["runs"])
fmt = lambda v: "" if v is None else f"{v:.3f}"
with open(tsv, "w") as out:
    for l in e["settings"]["links"]:
        bps, lat = l["bits_per_second"], l["latency_s"]
        cells = [c for c in e["cells"] if c["link"]["label"] == l["label"]]
        bound = used * 8 / bps + lat + local
        print(f"| {l['label']} | (model of a download: all {total} bytes / bandwidth + one "
              f"latency) | {total * 8 / bps + lat:.2f} | | | | |")
        first = None
        for c in cells:
            m = med(c, "wall_s")
            first = first or m
            b, r = round(med(c, "bytes_fetched")), round(med(c, "requests"))
            print(f"| {l['label']} | {c['strategy']} | {m:.2f} | {b} | {r} | {bound:.2f} | "
                  f"{(m / first - 1) * 100:+.0f}% |")
            chosen = [x["chosen"] for x in c["runs"] if x.get("chosen")]
            chosen = max(set(chosen), key=chosen.count) if chosen else ""
            out.write("\t".join(map(str, [l["label"], c["strategy"], f"{m:.2f}", b, r,
                f"{bound:.2f}", len(c["runs"]), used, total, fmt(c.get("predicted_measured_s")),
                fmt(c.get("predicted_s")), chosen])) + "\n")
PY
