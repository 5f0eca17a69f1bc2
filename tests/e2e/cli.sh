#!/bin/sh
# cli.sh BUILD - every command answers --help, and bad input gives a clear
# message and a usage exit status (2) or failure (1), never a crash.
set -u
BUILD=${1:-build}
T="$BUILD/bin/tessera"
fail=0
expect() { # want-status description cmd...
  want=$1; what=$2; shift 2
  "$@" > /tmp/tsr_cli_out.$$ 2>&1; got=$?
  if [ "$got" = "$want" ]; then echo "ok   $what"
  else echo "FAIL $what: exit $got, wanted $want"; cat /tmp/tsr_cli_out.$$; fail=1; fi
}
expect 0 "tessera --help" "$T" --help
for c in run info gen-model bench gemm devices; do
  expect 0 "tessera $c --help" "$T" "$c" --help
done
expect 2 "unknown command" "$T" frobnicate
expect 2 "run without model" "$T" run -p hi
expect 2 "run with bad -n" "$T" run -m x -n abc
expect 2 "run with bad precision" "$T" run -m x --precision fp64
expect 2 "run with bad topp" "$T" run -m x --topp 2
expect 2 "run with a bad --kv" "$T" run -m x --kv f8
expect 1 "run with missing file" "$T" run -m /nonexistent/model.gguf
expect 2 "bench with a bad --network" "$T" bench --mpi --network 25
grep -q "GBIT,LATENCY_US" /tmp/tsr_cli_out.$$ || { echo "FAIL: --network message"; fail=1; }
expect 2 "bench with a negative latency" "$T" bench --mpi --network 25,-1
expect 2 "bench --device without --mpi" "$T" bench --device fmodel
expect 2 "bench with a bad --mpi-split" "$T" bench --mpi-split columns
expect 2 "serve --mpi with --pool" "$T" serve --mpi -m x --pool fmodel
printf 'GGUF\003\000\000\000' > /tmp/tsr_cli_trunc.$$.gguf
expect 1 "run with truncated GGUF" "$T" run -m /tmp/tsr_cli_trunc.$$.gguf
grep -q "tsr_cli_trunc" /tmp/tsr_cli_out.$$ || { echo "FAIL: message does not name the file"; fail=1; }
rm -f /tmp/tsr_cli_out.$$ /tmp/tsr_cli_trunc.$$.gguf
exit $fail
