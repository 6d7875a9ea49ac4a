#!/usr/bin/env bash
# Dogfooding: gate the sample program's start-up against the committed baseline
# (scripts/gate-sample.baseline.json), as CI does after the tests. Needs root.
#
#   scripts/gate-sample.sh            gate: exit 0 not slower (or unclear, said so), 1 slower,
#                                     2 could not measure
#   scripts/gate-sample.sh --update   record the baseline again, then commit it (after a change
#                                     that alters the sample's start-up on purpose, or on a new
#                                     CI machine)
#
# The sample (`coldstart sample`, seed 1) builds bit for bit the same from the same sources, so
# its steady figures (bytes and reads of the emulated device, pages touched) match the
# baseline's exactly unless coldstart's sample generator, the compiler or the C library
# changed. Time is judged with a 20% minimum effect: this machine is shared by parallel builds
# (docs/gate.md, "Dogfooding"). A baseline recorded on another machine is flagged and not
# compared: the job passes and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
cs=${COLDSTART:-./target/debug/coldstart}
[ -x "$cs" ] || cargo build --locked -q -p coldstart
dir=/var/tmp/coldstart-ci/sample
"$cs" sample --seed 1 -o "$dir" >/dev/null
mkdir -p target
# Tests of other checkouts on this machine drop the page cache: take their lock while measuring.
lock=${TMPDIR:-/tmp}/coldstart-measure-tests.lock
code=0
flock "$lock" "$cs" gate --baseline scripts/gate-sample.baseline.json --min-effect 20 \
  --export-markdown target/gate-sample.md --export-json target/gate-sample.json "$@" \
  -- "$dir/sample" --workload a || code=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f target/gate-sample.md ]; then
  cat target/gate-sample.md >>"$GITHUB_STEP_SUMMARY"
fi
exit "$code"
