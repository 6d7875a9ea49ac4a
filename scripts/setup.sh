#!/usr/bin/env bash
# Install everything coldstart and its tests need on a Debian 12 (bookworm) machine, as root.
# Idempotent: packages already installed are not fetched again.
#
#   scripts/setup.sh           what the tests need
#   scripts/setup.sh --bench   also what bench/ measures beyond them
set -euo pipefail

PACKAGES=(
  clang-19 lld-19 bolt-19 llvm-19       # the sample program, linkers and BOLT
  lld-22                                # link --lld 22 and --compression-sort (lld 20+)
  hyperfine                             # the peer measure is compared against (BENCHMARKS.md)
  xvfb x11-utils xdotool                # window readiness tests (Xvfb, xmessage)
  fuse3 libfuse3-dev pkg-config         # the lazy mount
  nginx-light                           # network start served by a real web server
  openssl                               # the https test makes its own CA (tests/origins.rs)
  linux-perf                            # instruction counts where the CPU exposes them
  valgrind                              # the gate's instruction counts where it does not
  python3 build-essential
  python3-venv                          # moto, the S3-compatible server of tests/s3.rs (below)
  perl git                              # real programs measured by the tests
  firefox-esr                           # the report's browser test; a real program the tests
                                        # and bench/real-programs.sh measure
  chromium                              # the report's layout test (headless, --dump-dom)
  nodejs openjdk-17-jre-headless        # runtimes with a JIT the profiler's default tracer must
                                        # run (tests/real_programs_profile.rs)
)
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(
    clang-22 llvm-22 bolt-22            # the peers of bench/layout-*.sh: lld 22's balanced
    libclang-rt-22-dev                  # partitioning from an instrumented (-fprofile-generate)
                                        # build, BOLT 22
    libgmp-dev libmpfr-dev libexpat1-dev libreadline-dev zlib1g-dev python3-dev
                                        # gdb built from Debian's sources (bench/layout-gdb.sh)
    dpkg-dev                            # apt-get source
  )
  # bench/layout-gdb.sh fetches gdb's source with `apt-get source`, which needs deb-src
  # entries: made from the machine's own deb entries (same mirrors, suites and keys).
  if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [ "$(id -u)" != 0 ]; then
      echo "setup: no deb-src entry for apt-get source; run this script as root" >&2
      exit 3
    fi
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] && sed 's/^Types: deb$/Types: deb-src/' "$f"
      echo
    done > /etc/apt/sources.list.d/coldstart-src.sources
    [ -f /etc/apt/sources.list ] && sed -n 's/^deb /deb-src /p' /etc/apt/sources.list \
      > /etc/apt/sources.list.d/coldstart-src.list
    apt-get update -qq
  fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}; run this script as root (or: sudo apt-get install ${missing[*]})" >&2
    exit 3
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# moto (a Python package): the S3-compatible server tests/s3.rs starts. In a virtual environment
# of Debian's python3 (whose own site-packages pip may not change), on PATH as moto_server.
MOTO_VENV=/opt/coldstart/moto
if ! command -v moto_server >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: moto_server is missing; run this script as root, or: python3 -m pip install 'moto[server]'" >&2
    exit 3
  fi
  echo "setup: installing moto[server] in $MOTO_VENV"
  /usr/bin/python3 -m venv "$MOTO_VENV"
  "$MOTO_VENV/bin/pip" install --quiet 'moto[server]'
  ln -sf "$MOTO_VENV/bin/moto_server" /usr/local/bin/moto_server
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
  else
    echo "setup: no Rust toolchain; install one with rustup (https://rustup.rs), then run this again" >&2
    exit 3
  fi
fi
# The fuzz targets' short form (scripts/fuzz.sh, run by scripts/test.sh) needs a nightly
# toolchain (libFuzzer's instrumentation) and cargo-fuzz: each installed when missing.
if ! cargo +nightly --version >/dev/null 2>&1; then
  if command -v rustup >/dev/null 2>&1; then
    echo "setup: installing the nightly Rust toolchain (rustup toolchain install nightly --profile minimal)"
    rustup toolchain install nightly --profile minimal
  else
    echo "setup: no nightly Rust toolchain and no rustup to install one: the fuzz targets' short form needs one (scripts/test.sh skips them without it, and fails under COLDSTART_TESTS_NO_SKIP=1)" >&2
  fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "setup: installing cargo-fuzz (cargo install --locked cargo-fuzz)"
  cargo install --locked --quiet cargo-fuzz
fi
# The workspace's rust-version (Cargo.toml): its locked dependencies need it, and cargo's own
# message for an older compiler names a dependency, not what to do.
need_rust=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../Cargo.toml")
have_rust=$(rustc --version | awk '{print $2}')
if [ -n "$need_rust" ] && [ "$(printf '%s\n%s\n' "$need_rust" "$have_rust" | sort -V | head -n 1)" != "$need_rust" ]; then
  echo "setup: Rust $have_rust is older than the $need_rust this workspace needs; run 'rustup update stable', then this again" >&2
  exit 3
fi
