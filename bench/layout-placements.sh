#!/usr/bin/env bash
# Where should the functions no profile touched go? Every placement (`order --evaluate`: input
# order, callees, references; model with forward read-around, 128 KiB) scored on held-out
# workloads of Debian's /usr/bin/python3 and /usr/bin/perl (profiled here), of typst (trained
# on one and on two documents; needs bench/layout-typst.sh run first) and of the bench sample
# (needs bench/layout-heldout.sh run first). Then the leave-one-out choice `order` makes with
# two training workloads. As root (profiling).
#
#   bench/layout-placements.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release -q -p coldstart
cs=$PWD/target/release/coldstart
work=/var/tmp/coldstart-bench/placements
mkdir -p "$work" && cd "$work"
show() { echo "== $1"; shift; "$cs" order "$@" --read-around forward -o /dev/null 2>/dev/null; }

"$cs" profile --workload a -o py-a.json -- /usr/bin/python3 -c pass >/dev/null
"$cs" profile --workload b -o py-b.json -- /usr/bin/python3 -c \
  "import json, re, argparse; print(json.dumps({'a': 1}))" >/dev/null
show "python3.11 (a: -c pass; b: json, re, argparse)" py-a.json --binary /usr/bin/python3.11 \
  --evaluate py-b.json
"$cs" profile --workload a -o perl-a.json -- perl -e 1 >/dev/null
"$cs" profile --workload b -o perl-b.json -- perl -e \
  'my %h = map { $_ => length } qw(a bb ccc); printf "%s\n", join ",", sort keys %h; $_ = "abc"; s/b/x/g;' >/dev/null
show "perl (a: -e 1; b: a hash, sort, a substitution)" perl-a.json --binary /usr/bin/perl \
  --evaluate perl-b.json

t=/var/tmp/coldstart-bench/typst
if [ -x "$t/default/bin/typst" ] && [ -f "$t/a.json" ]; then
  cat > /dev/shm/coldstart-typst/a2.typ <<'TYP'
#set page(paper: "a5", margin: 2cm)
#set text(font: "DejaVu Sans Mono", size: 9pt)
= Release notes
#lorem(80)
+ first change `code`
+ second change *bold* and _emphasis_
#align(center)[#rect(width: 50%)[#lorem(30)]]
#grid(columns: 2, gutter: 1em, lorem(40), lorem(40))
TYP
  "$cs" profile --workload a2 -o typst-a2.json -- "$t/default/bin/typst" compile \
    --ignore-system-fonts /dev/shm/coldstart-typst/a2.typ /dev/shm/coldstart-typst/a2.pdf >/dev/null
  show "typst, trained on a" "$t/a.json" --binary "$t/default/bin/typst" --evaluate "$t/b.json"
  show "typst, trained on a and a2" "$t/a.json" typst-a2.json --binary "$t/default/bin/typst" \
    --evaluate "$t/b.json"
  echo "== typst, trained on a and a2, no held-out profile: order's own choice"
  "$cs" order "$t/a.json" typst-a2.json --binary "$t/default/bin/typst" --no-data \
    --read-around forward -o /dev/null 2>&1 | grep "untouched functions"
fi
s=/var/tmp/coldstart-bench/heldout-bench
if [ -f "$s/a.json" ]; then
  for m in sample libcs_a.so libcs_b.so plugin/libcs_plugin.so; do
    show "bench sample: $m" "$s/a.json" --binary "$s/default/$m" --evaluate "$s/b.json"
  done
fi
