#!/usr/bin/env bash
# Which measure of the machine's speed follows the hot CPU time of a start-up whose work does
# not change, on a machine whose speed drifts (a VM whose host runs other guests): every
# EVERY seconds, holding the page-cache lock the gates and test suites take (so it runs between
# them), times four probes and 5 hot starts of the Node.js script of bench/gate-programs.sh
# (after one more, unmeasured), and appends a line to $out/probe.tsv:
#
#   time  mul  faults  chase  exec  node_cpu  node_wall     (ms)
#
#   mul     the gate's calibration loop (crates/coldstart-gate/src/linux.rs), one copy on each
#           of 2 threads, until both are done
#   faults  32 MiB of anonymous memory written a page at a time, then unmapped, on 2 threads
#   chase   500,000 steps of a random cycle through 64 MiB (beyond the caches), on 2 threads
#   exec    50 fork + exec + wait of /bin/true
#   node_cpu, node_wall   medians of the 5 hot starts: user + system CPU time, and wall time
#
#   bench/gate-machine-probe.sh [EVERY] [COUNT]   (default every 60 s, until stopped)
#   bench/gate-machine-probe.sh --table           each probe's range and its correlation with
#                                                 node_cpu over what $out/probe.tsv holds
set -euo pipefail
cd "$(dirname "$0")/.."
out=${out:-/var/tmp/coldstart-bench/machine-probe}
mkdir -p "$out"
if [ "${1:-}" = --table ]; then
  /usr/bin/python3 - "$out/probe.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
cols = ["mul", "faults", "chase", "exec", "node_cpu", "node_wall"]
data = {c: [float(r[i + 1]) for r in rows] for i, c in enumerate(cols)}
print(f"{len(rows)} samples, {rows[0][0]} to {rows[-1][0]} UTC")
print("| probe | median, ms | range (max / min) | correlation with node's hot CPU time |")
print("| --- | ---: | ---: | ---: |")
for c in cols:
    v = data[c]
    print(f"| {c} | {statistics.median(v):.1f} | {max(v) / min(v):.2f} | {statistics.correlation(v, data['node_cpu']):+.2f} |")
PY
  exit 0
fi
every=${1:-60}
count=${2:-0}
. bench/gate-programs.sh
node_script "$out/node" 0 0
cat >"$out/probe.c" <<'C'
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void *mul(void *a) { volatile uint64_t x = 0x9e3779b97f4a7c15ULL; for (uint64_t i = 0; i < 10000000ULL; i++) x = x * 6364136223846793005ULL + i; return a; }
static void *faults(void *a) { size_t n = 32 << 20; char *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); for (size_t i = 0; i < n; i += 4096) p[i] = 1; munmap(p, n); return a; }
static uint32_t *ring;
static void *chase(void *a) { volatile uint32_t j = 0; for (int i = 0; i < 500000; i++) j = ring[j]; return a; }
static double par(void *(*f)(void *)) { pthread_t t; double s = now(); pthread_create(&t, 0, f, 0); f(0); pthread_join(t, 0); return now() - s; }
int main(void) {
  size_t n = 16 << 20; ring = malloc(n * 4);
  for (size_t i = 0; i < n; i++) ring[i] = i;
  srand(1);
  for (size_t i = n - 1; i > 0; i--) { size_t k = ((size_t)rand() * RAND_MAX + rand()) % i; uint32_t t = ring[i]; ring[i] = ring[k]; ring[k] = t; }
  double m = par(mul), f = par(faults), c = par(chase);
  double s = now();
  for (int i = 0; i < 50; i++) { pid_t p = fork(); if (!p) { execl("/bin/true", "true", (char *)0); _exit(127); } waitpid(p, 0, 0); }
  printf("%.2f %.2f %.2f %.2f\n", m, f, c, now() - s);
  return 0;
}
C
gcc -O2 -pthread -o "$out/probe" "$out/probe.c"
exec /usr/bin/python3 - "$out" "$every" "$count" "${TMPDIR:-/tmp}/coldstart-measure-tests.lock" <<'PY'
import datetime, fcntl, os, statistics, subprocess, sys, time
out, every, count, lockpath = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lock = open(lockpath, "a")
log = open(os.path.join(out, "probe.tsv"), "a")
def node_once():
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.chdir(os.path.join(out, "node"))
        null = os.open("/dev/null", os.O_WRONLY)
        os.dup2(null, 1); os.dup2(null, 2)
        os.execv("/usr/bin/node", ["node", "app.js"])
    _, _, ru = os.wait4(pid, 0)
    return ru.ru_utime + ru.ru_stime, time.monotonic() - start
done = 0
while count == 0 or done < count:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        probes = subprocess.run([os.path.join(out, "probe")], capture_output=True, text=True, check=True).stdout.split()
        node_once()
        runs = [node_once() for _ in range(5)]
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
    cpu = statistics.median(r[0] for r in runs) * 1e3
    wall = statistics.median(r[1] for r in runs) * 1e3
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    log.write("\t".join([stamp, *probes, f"{cpu:.1f}", f"{wall:.1f}"]) + "\n")
    log.flush()
    done += 1
    time.sleep(every)
PY
