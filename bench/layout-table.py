#!/usr/bin/env python3
"""The layout table of bench/layout-typst.sh and bench/layout-gdb.sh, as Markdown.

    layout-table.py SUMMARY.json HDD-PREFIX BUILD...

SUMMARY.json is bench/layout-breakdown.sh's summary (one traced cold start per build: the
program's binaries' KiB read, faults, read runs, and `movable`, the pages read in code and named
data); HDD-PREFIX names the `coldstart measure --compare --export-json` files of the cold starts
on the emulated hdd, PREFIX + BUILD + .json, each BUILD timed against `default` in one
interleaved series (absent files leave the cell empty). Ratios are against `ideal`, the
perfect-profile order, on the pages an order can move (code and named data) and on all pages.
"""
import json
import os
import sys


def wall(path):
    """(median A, median B, ratio B/A, [low, high], p) of a measure --compare export."""
    if not os.path.exists(path):
        return None
    m = json.load(open(path))
    med = []
    for c in m["commands"]:
        s = dict(c["summaries"]).get("wall_s")
        med.append(s["median"] if s else None)
    comp = m.get("comparison") or {}
    return med[0], med[1], comp.get("ratio"), comp.get("ratio_ci95"), comp.get("p_value")


def main():
    summary, prefix, builds = sys.argv[1], sys.argv[2], sys.argv[3:]
    s = json.load(open(summary))
    bins = {v: s[v]["binaries"] for v in builds if v in s}
    mov = {v: s[v].get("movable", {}) for v in builds if v in s}
    ideal = bins.get("ideal")
    ideal_mov = mov.get("ideal", {})

    def movable(v):
        m = mov.get(v, {})
        return m.get("code", 0) + m.get("named_data", 0)

    print("| build | pages read | movable pages read (code + named data) | against ideal: movable / all "
          "| read runs | major faults | cold on hdd, against default |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for v in builds:
        if v not in bins:
            continue
        b = bins[v]
        pages = b["kib"] // 4
        m = mov.get(v, {})
        against = ""
        if ideal:
            im = max(ideal_mov.get("code", 0) + ideal_mov.get("named_data", 0), 1)
            against = f"{movable(v) / im:.2f}x / {b['kib'] / max(ideal['kib'], 1):.2f}x"
        t = wall(f"{prefix}{v}.json")
        time = ""
        if t and t[1] is not None:
            a, bb, r, ci, p = t
            time = f"{bb:.2f} s against {a:.2f} s ({r:.2f}x"
            if ci:
                time += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
            if p is not None:
                time += f", p = {p:.3f}"
            time += ")"
        print(f"| {v} | {pages:,} | {movable(v):,} ({m.get('code', 0):,} + {m.get('named_data', 0):,}) "
              f"| {against} | {b['requests']:,} | {b['faults']:,} | {time} |")
    if ideal and "ordered" in bins:
        r = movable("ordered") / max(ideal_mov.get("code", 0) + ideal_mov.get("named_data", 0), 1)
        print(f"\ncoldstart's defaults read {r:.2f}x the movable pages of the perfect-profile order "
              f"(target 1.3x): {'met' if r <= 1.3 else 'NOT met'}")


if __name__ == "__main__":
    main()
