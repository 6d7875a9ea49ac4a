# The programs the gate benchmarks run, and the changed builds its sensitivity gates judge.
# Source it after bench/lib.sh (it uses $cs):
#   gate_programs DIR           node's script, the sample and the sample at its benchmark size, under DIR
#   program_line NAME           "DIR COMMAND" of a program: the directory it runs in, then its
#                               command as shell words (eval "set -- $COMMAND")
#   far_program DIR             DIR/sample-bench-far: the sample at its benchmark size with far_function
#   far_function SAMPLE_DIR [uncalled]
#                               one more function called at start-up, 5 pages, placed at the end
#                               of the executable's code, far from what start-up touches (rebuilt
#                               in place with the sample's Makefile); `uncalled`: the same function
#                               linked where it would be, but not called (a relink that changes
#                               the build and its layout, not what start-up runs)
#   node_script DIR PBKDF2_ITERATIONS READ_BYTES
#                               DIR/app.js: the node script, plus PBKDF2_ITERATIONS of
#                               crypto.pbkdf2Sync (OpenSSL's, in the node binary: a fixed amount
#                               of work, whose instructions do not depend on when a JIT compiler
#                               finishes) and a read of READ_BYTES from DIR/extra.bin at start-up
#                               (0: none)
#   walk_program DIR STRIDE     DIR/walk: a C program that reads 32 MiB of ints 8 million times,
#                               each STRIDE ints after the last, STRIDE read from DIR/walk.conf:
#                               1 (the caches serve 15 reads of 16) or 4099 (16 KiB on: each read
#                               a miss), the same instructions either way
#   node_pbkdf2_per_ms          the iterations of it node runs in a millisecond of CPU time here,
#                               now (the median of five timings of 20,000)

python_imports='import json, decimal, email.parser, http.client, sqlite3, argparse'

node_script() {
  local dir=$1 iterations=$2 read_bytes=$3
  mkdir -p "$dir"
  if [ "$read_bytes" -gt 0 ] && [ ! -f "$dir/extra.bin" ]; then
    head -c "$read_bytes" /dev/urandom >"$dir/extra.bin"
  fi
  {
    echo "// A small start-up: load http, zlib and crypto, format with Intl, print one line."
    echo "const http = require('http');"
    echo "const zlib = require('zlib');"
    echo "const crypto = require('crypto');"
    echo "const when = new Intl.DateTimeFormat('de-DE', { dateStyle: 'full', timeZone: 'UTC' }).format(new Date(0));"
    echo "const amount = new Intl.NumberFormat('ja-JP', { style: 'currency', currency: 'JPY' }).format(1234567);"
    echo "const packed = zlib.gzipSync(Buffer.from(when + amount));"
    echo "const digest = crypto.createHash('sha256').update(packed).digest('hex');"
    echo "const server = http.createServer(() => {});"
    if [ "$iterations" != 0 ]; then
      # A fixed amount of work in native code. (A JavaScript loop was not one: when V8's
      # optimizing compiler replaced it depended on timing, so its instructions fell in two
      # clusters, 773 and 1,100 million, under valgrind.)
      echo "// More CPU work: $iterations iterations of PBKDF2."
      echo "crypto.pbkdf2Sync('coldstart', 'salt', $iterations, 32, 'sha256');"
    fi
    if [ "$read_bytes" != 0 ]; then
      echo "// More bytes read: $read_bytes of extra.bin."
      echo "require('fs').readFileSync(require('path').join(__dirname, 'extra.bin'));"
    fi
    echo "console.log(digest.slice(0, 16), typeof server.listen);"
  } >"$dir/app.js.new"
  # Replaced only when it changes: the same file keeps its pages and inode.
  if cmp -s "$dir/app.js.new" "$dir/app.js"; then rm "$dir/app.js.new"; else mv "$dir/app.js.new" "$dir/app.js"; fi
}

walk_program() {
  local dir=$1 stride=$2
  mkdir -p "$dir"
  if [ ! -x "$dir/walk" ]; then
    cat >"$dir/walk.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
  size_t n = 8u << 20, idx = 0, stride = 1;
  FILE *f = fopen("walk.conf", "r");
  if (f) { if (fscanf(f, "%zu", &stride) != 1) stride = 1; fclose(f); }
  int *a = malloc(n * sizeof *a);
  memset(a, 1, n * sizeof *a);
  long sum = 0;
  for (size_t i = 0; i < n; i++) { idx = (idx + stride) & (n - 1); sum += a[idx]; }
  printf("%ld\n", sum);
  return 0;
}
C
    cc -O2 -o "$dir/walk.new" "$dir/walk.c" && mv "$dir/walk.new" "$dir/walk"
  fi
  # Rewritten only when it changes, as app.js is.
  [ "$(cat "$dir/walk.conf" 2>/dev/null)" = "$stride" ] || echo "$stride" >"$dir/walk.conf"
}

node_pbkdf2_per_ms() {
  for _ in 1 2 3 4 5; do
    /usr/bin/node -e 'const crypto = require("crypto"); crypto.pbkdf2Sync("coldstart", "salt", 100, 32, "sha256");
const u0 = process.cpuUsage(); crypto.pbkdf2Sync("coldstart", "salt", 20000, 32, "sha256");
const u = process.cpuUsage(u0); console.log(20000 / ((u.user + u.system) / 1000));'
  done | sort -g | sed -n 3p
}

gate_programs() {
  local dir=$1
  node_script "$dir/node" 0 0
  [ -f "$dir/sample/sample.json" ] || "$cs" sample --seed 1 -o "$dir/sample" >/dev/null
  [ -f "$dir/sample-bench/sample.json" ] || "$cs" sample --size bench --seed 1 -o "$dir/sample-bench" >/dev/null
  programs_dir=$dir
}

far_program() {
  local dir=$1
  [ -f "$dir/sample-bench-far/.far" ] && return 0
  rm -rf "$dir/sample-bench-far"
  cp -a "$dir/sample-bench" "$dir/sample-bench-far"
  far_function "$dir/sample-bench-far"
  touch "$dir/sample-bench-far/.far"
}

program_line() {
  local d=$programs_dir
  case $1 in
    node*) echo "$d/$1 /usr/bin/node app.js" ;;
    python3) echo "$d /usr/bin/python3 -c $(printf %q "$python_imports")" ;;
    sample*) echo "$d/$1 ./sample --workload a" ;;
    *) echo "unknown program $1" >&2; return 2 ;;
  esac
}

far_function() {
  local src=$1/src called=${2:-called}
  grep -q cs_exe_far "$src/decls.h" && return 0
  local last
  last=$(ls "$src"/exe_*.c | sort | tail -1)
  /usr/bin/python3 - "$last" <<'PY'
import sys
# About 590 statements of 35 bytes: a function of 5 pages, after every other function of the
# executable (its last object file links last).
lines = ["CS_NOINLINE void cs_exe_far(void)", "{"]
for i in range(590):
    d, s = (i * 7 + 3) % 64, (i * 13 + 5) % 64
    lines.append(f"    S[{d}] = S[{s}] * 0x{(0x9e3779b97f4a7c15 * (i + 1)) % (1 << 64):016x}ull + 0x{i:04x}ull;")
lines.append("}")
open(sys.argv[1], "a").write("\n" + "\n".join(lines) + "\n")
PY
  sed -i 's|^#endif$|void cs_exe_far(void);\n#endif|' "$src/decls.h"
  if [ "$called" = uncalled ]; then
    # Called from workload b's start-up, which the gates (workload a) do not run: linked, and
    # kept by --gc-sections, where it would be.
    sed -i '/^CS_NOINLINE void cs_startup_b(const char \*dir)$/{n;s|^{$|{\n    cs_exe_far();|}' "$src/startup_b.c"
    grep -q 'cs_exe_far();' "$src/startup_b.c" || { echo "far_function: cs_startup_b not found in $src/startup_b.c" >&2; return 2; }
    make -s -C "$src" -j2 >/dev/null
    return 0
  fi
  sed -i '/^CS_NOINLINE void cs_startup_a(const char \*dir)$/{n;s|^{$|{\n    cs_exe_far();|}' "$src/startup_a.c"
  grep -q 'cs_exe_far();' "$src/startup_a.c" || { echo "far_function: cs_startup_a not found in $src/startup_a.c" >&2; return 2; }
  make -s -C "$src" -j2 >/dev/null
}
