#!/usr/bin/env bash
# The fuzz targets of fuzz/ in their short form, for CI (scripts/test.sh): each target for a
# few seconds from its seeds, under libFuzzer's memory limits, in a scratch corpus (nothing
# written into the checkout but fuzz/target), as many at once as there are CPUs. A debug build
# with line tables only: it compiles in two thirds of the time of an optimised one, and its
# overflow checks make an arithmetic overflow a crash too.
# Fails on any crash, naming the input that made it (kept under $TMPDIR) and the command that
# replays it. The long form is bench/fuzz.sh (an optimised build, millions of inputs).
#
#   scripts/fuzz.sh            # 5 seconds a target
#   scripts/fuzz.sh 30         # 30 seconds a target
#
# Needs a nightly toolchain and cargo-fuzz: scripts/setup.sh installs cargo-fuzz, and says
# what to do when nightly is missing (rustup toolchain install nightly).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-5}
. ../scripts/fuzz-limits.sh
if ! cargo +nightly --version >/dev/null 2>&1 || ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: needs a nightly toolchain and cargo-fuzz: run scripts/setup.sh (or: rustup toolchain install nightly; cargo install --locked cargo-fuzz)" >&2
    exit 3
fi
# fuzz/Cargo.lock as committed, as the workspace's builds take theirs (--locked).
if ! cargo +nightly metadata --locked --format-version 1 >/dev/null; then
    echo "fuzz: fuzz/Cargo.lock does not hold what the crates now depend on; update it with: (cd fuzz && cargo +nightly update --workspace)" >&2
    exit 1
fi
start=$(date +%s)
cargo +nightly fuzz build --dev >&2
built=$(date +%s)
# The targets as built, run directly: `cargo fuzz run` would look at the build again for each.
bin="${CARGO_TARGET_DIR:-target}/$(rustc +nightly -vV | sed -n 's/^host: //p')/debug"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/coldstart-fuzz.XXXXXX")
# A signal ends the targets running with this script.
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT
trap 'kill $(jobs -p) 2>/dev/null; exit 143' TERM

# fuzz TARGET: runs it, its log, inputs and exit status under $scratch/TARGET.
fuzz() {
    mkdir -p "$scratch/$1/corpus" "$scratch/$1/artifacts"
    seeds "$1" "$scratch/$1/corpus"
    # shellcheck disable=SC2046 # the limits are several words
    local status=0
    "$bin/$1" "$scratch/$1/corpus" -max_total_time="$seconds" $(limits "$1") \
        -artifact_prefix="$scratch/$1/artifacts/" >"$scratch/$1/log" 2>&1 || status=$?
    echo "$status" >"$scratch/$1/status"
}

# As many targets at once as there are CPUs: each is one process of one thread.
targets=$(cargo +nightly fuzz list)
for t in $targets; do
    while [ "$(jobs -pr | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
    fuzz "$t" &
done
wait
failed=()
for t in $targets; do
    if [ "$(cat "$scratch/$t/status")" != 0 ]; then
        failed+=("$t")
        echo "fuzz: $t crashed; its log: $scratch/$t/log; the input: $(ls "$scratch/$t/artifacts/"*)" >&2
        echo "fuzz: replay it with: (cd fuzz && cargo +nightly fuzz run --dev $t $(ls "$scratch/$t/artifacts/"* | head -1))" >&2
        tail -25 "$scratch/$t/log" >&2
        continue
    fi
    runs=$(grep -hoE 'Done [0-9]+ runs' "$scratch/$t/log" | grep -oE '[0-9]+' || echo "?")
    echo "fuzz: $t: $runs inputs in ${seconds} s, no crash"
done
echo "fuzz: built in $((built - start)) s, run in $(($(date +%s) - built)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashed: ${failed[*]} (inputs kept in $scratch)" >&2
    exit 1
fi
rm -rf "$scratch"
