#!/bin/sh
# gemm_opencl.sh BUILD - `tessera gemm --device opencl` prints the checksum
# of an independent naive computation (BUILD/tests/tools/ref_gemm), as
# `--device fmodel` does (contract 1: bit-exact integers), for square, odd
# and tiled shapes; exits 77 (skip) when no OpenCL device opens here.
set -u
BUILD=${1:-build}
CLI="$BUILD/bin/tessera"
[ -x "$CLI" ] || { echo "no $CLI"; exit 1; }
REF="$BUILD/tests/tools/ref_gemm"
[ -x "$REF" ] || { echo "no $REF (make tests builds it)"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

if ! "$CLI" gemm --device opencl:mem=16M -M 1 -N 1 -K 1 > "$out" 2>&1; then
  if grep -q "UNAVAILABLE\|unavailable" "$out"; then
    echo "opencl unavailable: $(tail -n 1 "$out")"
    exit 77
  fi
  echo "FAIL tessera gemm --device opencl:"; cat "$out"; exit 1
fi

fail=0
checksum() { # device M N K SEED [extra...]
  dev=$1; shift
  m=$1 n=$2 k=$3 s=$4; shift 4
  "$CLI" gemm --device "$dev" -M "$m" -N "$n" -K "$k" --seed "$s" "$@" > "$out" 2>&1 ||
    { echo "FAIL $dev $m x $n x $k:"; cat "$out" >&2; return 1; }
  grep '^checksum' "$out"
}
for shape in "64 64 64 1" "1 300 77 2" "37 5 1000 3" "129 130 131 4" "256 256 256 5"; do
  set -- $shape
  c_ref=$("$REF" "$@") || { fail=1; continue; }
  c_cpu=$(checksum fmodel:mem=64M "$@") || { fail=1; continue; }
  c_ocl=$(checksum opencl:mem=64M "$@" --check) || { fail=1; continue; }
  if [ "$c_ref" = "$c_ocl" ] && [ "$c_ref" = "$c_cpu" ]; then echo "ok   $* $c_ocl (naive, fmodel, opencl)"
  else echo "FAIL $*: naive $c_ref, fmodel $c_cpu, opencl $c_ocl"; fail=1; fi
done
# Tiled: many descriptors in one launch, K split into partial sums.
c_ref=$("$REF" 100 90 300 6) || fail=1
c_cpu=$(checksum fmodel:mem=64M 100 90 300 6 --tile-m 32 --tile-n 48 --tile-k 128) || fail=1
c_ocl=$(checksum opencl:mem=64M 100 90 300 6 --tile-m 32 --tile-n 48 --tile-k 128) || fail=1
if [ "$c_ref" = "$c_ocl" ] && [ "$c_ref" = "$c_cpu" ]; then echo "ok   tiled 100x90x300 $c_ocl (naive, fmodel, opencl)"
else echo "FAIL tiled: naive $c_ref, fmodel $c_cpu, opencl $c_ocl"; fail=1; fi
exit $fail
