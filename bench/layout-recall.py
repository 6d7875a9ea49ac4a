#!/usr/bin/env python3
"""Where the code a held-out start-up adds went: of the functions profile B touched in MODULE
that profile A did not, how many each order file (made from A) lists after A's own (recall),
among how many it lists there (precision).

    layout-recall.py A.json B.json MODULE ORDER...
"""
import json, sys
def touched(p, mod):
    d = json.load(open(p))
    for m in d["modules"]:
        if m["path"].endswith(mod):
            return [set(f["names"]) for f in m["functions"]]
    return []
a = touched(sys.argv[1], sys.argv[3]); b = touched(sys.argv[2], sys.argv[3])
a_names = set().union(*a) if a else set()
extra = [n for n in b if not (n & a_names)]
print(f"b touched {len(b)} functions of {sys.argv[3]}, {len(extra)} of them not touched by a")
for o in sys.argv[4:]:
    names = []
    keep = False
    for line in open(o):
        line = line.strip()
        if line.startswith("# module"):
            keep = line.split()[2].endswith(sys.argv[3]); continue
        if line.startswith("#") or not line: 
            if line.startswith("# data"): keep = False
            continue
        if keep: names.append(line)
    placed = [n for n in names if n not in a_names]
    ps = set(placed)
    hit = sum(1 for n in extra if n & ps)
    print(f"{o}: {len(placed)} untouched placed; {hit} of b's {len(extra)} extra among them "
          f"(recall {hit / max(len(extra), 1):.0%}, precision {hit / max(len(placed), 1):.1%})")
