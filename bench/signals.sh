#!/usr/bin/env bash
# How long mount, run and predict take to end after SIGINT, SIGTERM or SIGHUP, also while
# stuck on a server that never answers or drips, and how long nothing of a killed run is
# left: five times each, against the fault-injection server of the test suite, release build.
# Needs root (FUSE). Prints a Markdown table (BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release -p coldstart --test fault_injection -- --ignored --nocapture \
    --test-threads=1 signal_benchmark 2>&1 | grep '^|'
