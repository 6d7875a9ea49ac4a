# BOLT for the layout bench scripts (bash). Source it from the repository's root:
#   . bench/bolt.sh
# It sets `bolt`: llvm-bolt finds its instrumentation runtime in ../lib of the path it was
# started by, so on Debian only /usr/lib/llvm-N/bin/llvm-bolt finds
# /usr/lib/llvm-N/lib/libbolt_rt_instr.a; the newest such N, or llvm-bolt on PATH.
bolt=$(ls /usr/lib/llvm-*/bin/llvm-bolt 2>/dev/null | sort -V | tail -1)
bolt=${bolt:-$(command -v llvm-bolt)}

# bolt_orders: in the current directory, BOLT instruments default/sample, runs it on workload
# a (its profile: a.fdata), and rewrites default/ into hfsort/ and cdsort/ with its own
# function orders (logs: bolt-*.log).
bolt_orders() {
  cp -a default instr
  "$bolt" default/sample -instrument -o instr/sample --instrumentation-file="$PWD/a.fdata" \
    > bolt-instrument.log 2>&1
  instr/sample --workload a >/dev/null
  for algo in hfsort cdsort; do
    cp -a default "$algo"
    "$bolt" default/sample -o "$algo/sample" -data=a.fdata -reorder-functions="$algo" \
      > "bolt-$algo.log" 2>&1
  done
  rm -rf instr
}
