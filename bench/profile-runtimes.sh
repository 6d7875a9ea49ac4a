#!/usr/bin/env bash
# `coldstart profile` on runtimes with a JIT (Node.js, OpenJDK): the program's own run under
# each first-touch tracer against its plain run, in interleaved rounds (plain, audit, ptrace,
# and the default tracer of another coldstart build when given), so that every configuration
# sees the same load on this shared machine.
#
#   bench/profile-runtimes.sh [ROUNDS] [BEFORE]     (default: 10 rounds)
#
# BEFORE is a second coldstart binary (an older build) run with its default tracer, as a user
# runs it: before the audit agent ran Node.js, its default tracer crashed it and profiled it
# again with ptrace. Per command and configuration: the median of the program's run (the
# profile's duration_ns: exec to exit, what profiling costs the program), its ratio to the
# plain median, the median of the whole `coldstart profile` command, the tracer that made the
# profile (a fallback is counted) and the functions recorded.
set -euo pipefail
rounds=${1:-10}; before=${2:-}
[ -n "${COLDSTART:-}" ] || cargo build --locked --release -q -p coldstart \
  --manifest-path "$(dirname "$0")/../Cargo.toml"
. "$(dirname "$0")/lib.sh"
node=$(command -v node) || { echo "node missing: run scripts/setup.sh" >&2; exit 3; }
java=$(command -v java) || { echo "java missing: run scripts/setup.sh" >&2; exit 3; }
python3 - "$rounds" "$cs" "$before" "$out" "$node" "$java" <<'PY'
import json, os, statistics, subprocess, sys, time

rounds, cs, before, out, node, java = int(sys.argv[1]), *sys.argv[2:]
commands = {
    "node -e 1": [node, "-e", "1"],
    "node -e 'require(\"http\")'": [node, "-e", "require('http')"],
    "java -version": [java, "-version"],
}
configs = [("plain", None, []), ("audit", cs, ["--tracer", "audit"]),
           ("ptrace", cs, ["--tracer", "ptrace"])]
if before:
    configs.append(("before, default", before, []))
runs = {(c, k): [] for c in commands for k, _, _ in configs}
profile = os.path.join(out, "p.json")
for _ in range(rounds):
    for label, cmd in commands.items():
        for name, binary, flags in configs:
            t = time.monotonic()
            if binary is None:
                subprocess.run(cmd, check=True, capture_output=True)
                runs[(label, name)].append((time.monotonic() - t, None, None, None))
                continue
            # A generous timeout: other work on this machine drops the page cache and reads
            # the disk, and a start-up that reads node's 99 MB again can take many seconds.
            r = subprocess.run([binary, "profile", "--timeout", "300", *flags, "-o", profile,
                                "--", *cmd], capture_output=True, text=True)
            wall = time.monotonic() - t
            assert r.returncode == 0, f"{name}, {label}: {r.stderr}"
            p = json.load(open(profile))
            fell_back = "profiled again with the ptrace tracer" in r.stderr
            functions = sum(len(m["functions"]) for m in p["modules"])
            runs[(label, name)].append((wall, p["duration_ns"] / 1e9, fell_back, functions))

print(f"{rounds} rounds; load average at the end: {os.getloadavg()[0]:.1f}")
print(f"{'command':<28} {'configuration':<16} {'program':>10} {'x plain':>8} {'command':>10} "
      f"{'fallbacks':>9} {'functions':>9}")
for label in commands:
    plain = statistics.median(w for w, *_ in runs[(label, "plain")])
    print(f"{label:<28} {'plain':<16} {plain * 1e3:8.1f} ms")
    for name, binary, _ in configs[1:]:
        rs = runs[(label, name)]
        program = statistics.median(d for _, d, _, _ in rs)
        whole = statistics.median(w for w, _, _, _ in rs)
        fallbacks = sum(1 for _, _, f, _ in rs if f)
        functions = statistics.median(n for *_, n in rs)
        print(f"{'':<28} {name:<16} {program * 1e3:8.1f} ms {program / plain:7.2f}x "
              f"{whole * 1e3:8.1f} ms {fallbacks:>9} {functions:>9.0f}")
PY
