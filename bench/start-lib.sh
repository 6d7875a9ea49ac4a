# Network starts for the bench scripts that time `coldstart run` cell by cell. Source it after
# lib.sh, from the output directory, with `link` (serve's --link) and `runs` set.
#
#   serve BUNDLE      `coldstart serve BUNDLE --link $link` in the background; sets `url`
#   stop_serving      ends it (also on exit)
#   start [RUN OPTIONS] -- COMMAND...
#                     one `run` from a fresh cache; prints its misses outside the hot set, its
#                     bytes besides the manifest and the hot request, and its start-up in ms
#   cell LABEL FUNCTION [ARGS]
#                     $runs calls of FUNCTION ARGS (a start); one Markdown row of the medians

server=""
trap '[ -z "$server" ] || kill $server 2>/dev/null || true' EXIT
serve() {
    rm -f serve.url
    "$cs" serve "$1" --link "$link" > serve.url 2>/dev/null &
    server=$!
    while [ ! -s serve.url ]; do sleep 0.1; done
    url=$(head -n 1 serve.url)
}
stop_serving() {
    kill "$server"; wait "$server" 2>/dev/null || true
    server=""
}
n=0
start() {
    n=$((n + 1))
    rm -rf "cache-$n"
    opts=""
    while [ "$1" != -- ]; do opts="$opts $1"; shift; done
    shift
    # shellcheck disable=SC2086
    "$cs" run "$url" --cache-dir "cache-$n" --export-json "r-$n.json" $opts -- "$@" \
        >/dev/null 2>&1
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); p=r["report"]; print(p["held_out_misses"], p["other_bytes"], round(r["startup_ms"]))' "r-$n.json"
}
cell() {
    label=$1; shift
    i=0; : > cell.txt
    while [ $i -lt "$runs" ]; do "$@" >> cell.txt; i=$((i + 1)); done
    echo "| $label | $(median_of 1) | $(median_of 2) | $(median_of 3) ms |"
}
median_of() {
    cut -d' ' -f"$1" cell.txt | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
