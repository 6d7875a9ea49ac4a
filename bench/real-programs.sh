#!/usr/bin/env bash
# Debian programs nobody here wrote, cold against hot, as root, on this machine as it is (login
# shells running): Python importing three modules, clang compiling a small file, Perl loading a
# module, git --version, and Firefox ESR taking a headless screenshot.
#
#   bench/real-programs.sh [RUNS] [STORAGE]     (default: 10 runs, this disk)
#
# STORAGE is a `--storage` profile (hdd, emmc, sata-ssd, nvme): each program's own files are
# then read from an emulated device with that profile's throttle and 128 KiB read-ahead (system
# libraries, clang's libLLVM among them, stay on this disk). Installs firefox-esr with
# `scripts/setup.sh --bench`. Writes one JSON report per program under
# /var/tmp/coldstart-bench/real and prints the table of BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}; storage=${2:-}
bash scripts/setup.sh --bench
cargo build --locked --release -q
cs=$PWD/target/release/coldstart
out=/var/tmp/coldstart-bench/real
mkdir -p "$out"
work=$(mktemp -d /var/tmp/coldstart-bench-real.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' > "$work/small.c"
mkdir "$work/profile"

suffix=${storage:+-$storage}
measure() {
  local name=$1; shift
  # A state where no run counted exits 1: the table shows it, so go on.
  "$cs" measure --cache cold,hot --runs "$runs" --timeout 300 ${storage:+--storage "$storage"} \
    --export-json "$out/$name$suffix.json" -- "$@" >"$out/$name$suffix.txt" ||
    echo "$0: $name: coldstart measure exited $? (see $out/$name$suffix.txt)" >&2
}
measure python3 /usr/bin/python3 -c 'import json, email, http.client'
measure clang "$(command -v clang-19)" -c "$work/small.c" -o "$work/small.o"
measure perl /usr/bin/perl -MPOSIX -e 'print floor(2.5)'
measure git /usr/bin/git --version
measure firefox /usr/bin/firefox-esr --headless -no-remote -profile "$work/profile" \
  --screenshot "$work/shot.png" 'data:text/html,<h1>coldstart</h1>'

python3 - "$out" "$suffix" <<'EOF'
import json, sys
out, suffix = sys.argv[1], sys.argv[2]
def ms(s): return f"{s * 1e3:.1f} ms"
def timed(s): return f"{ms(s['median'])} [{ms(s['ci95'][0])}, {ms(s['ci95'][1])}]" if s and s["n"] else "n/a"
def mib(b): return f"{b / 1048576:.1f} MiB"
print("| program | cold | hot | I/O share | cold: read, major faults | stayed cached (start-up uses) | runs counted |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name in ["python3", "clang", "perl", "git", "firefox"]:
    r = json.load(open(f"{out}/{name}{suffix}.json"))
    cold, hot = r["commands"]
    def summary(c, metric):
        return dict(c["summaries"]).get(metric)
    w_cold, w_hot = summary(cold, "wall_s"), summary(hot, "wall_s")
    share = r["io_share"][0]["fraction"] if r["io_share"] else float("nan")
    read, faults = summary(cold, "read_bytes"), summary(cold, "major_faults")
    held = [run["held_by_others"] for run in cold["runs"] if run["held_by_others"]]
    held_text = "none"
    if held:
        worst = max(held, key=lambda h: h["pages"])
        held_text = f"{mib(worst['bytes'])} of {worst['files']} files ({mib(worst['touched_bytes'])})"
    counted = lambda c: sum(run["excluded"] is None for run in c["runs"])
    io = f"{mib(read['median'])}, {faults['median']:g}" if read and read["n"] else "n/a"
    print(f"| {name} | {timed(w_cold)} | {timed(w_hot)} "
          f"| {share * 100:.0f}% | {io} | {held_text} "
          f"| {counted(cold)}/{len(cold['runs'])} cold, {counted(hot)}/{len(hot['runs'])} hot |")
EOF
