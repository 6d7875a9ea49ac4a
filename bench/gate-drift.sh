#!/usr/bin/env bash
# The drift detectors judged on recorded gate histories: how often each flags drift in the
# history of an unchanged program (as recorded, and in 200 shuffles of it), and how soon it
# finds a drift of 0.5% per run added to it (see crates/coldstart-gate/examples/drift-eval.rs).
#
#   bench/gate-drift.sh [HISTORY.jsonl...]   (default: the history bench/gate-false-alarms.sh
#                                            recorded, and the dogfooding one if present)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --release -q -p coldstart-gate --example drift-eval
if [ $# -eq 0 ]; then
  set -- /var/tmp/coldstart-bench/gate-false-alarms/history.jsonl
fi
./target/release/examples/drift-eval "$@"
