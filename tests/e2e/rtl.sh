#!/bin/sh
# RTL tests of the Verilated kernel (sim/test/tsr_rtl_test.c) through the
# tsr_sim.h ABI: shapes, refusals, register map, ap_ctrl sequences, queue
# mode (doorbell, slots refilled while the kernel runs, CYC_BUSY against one
# launch of the same descriptors, its refusals), perf;
# the other geometries (16x16 with 4 read ports, 32x32 with 2, 64x64 with 4:
# each built once in its own directory) on the quick set, W striped over the
# ports included; the functional model's cycles against the RTL's within
# 5 % (sim/test/tsr_cycle_check.c; the geometries not under SANITIZE,
# whose RTL is not instrumented), dense and with W block-sparse
# (GEMM_BSR, two densities and both tile widths: at 16x16 the total within
# 5 % and every launch within 10 %, since a GEMM-mode launch whose tile rows
# are mostly empty is up to 6.1 % off; at 32x32, where single launches are
# further off, the total within 5 %); then a cross-check of
# a small ring (dense and block-sparse descriptors) under iverilog when it
# is installed, as one launch and again in queue mode.
BUILD=${1:-build}
command -v verilator > /dev/null 2>&1 || { echo "verilator is not installed: the RTL cannot be built"; exit 77; }
make --no-print-directory -s rtl "$BUILD/rtl/tsr_rtl_test" "$BUILD/rtl/tsr_cycle_check" BUILD="$BUILD" || exit 1
log=$(mktemp); trap 'rm -f "$log"' EXIT
# cycle_check PATTERN ARGS...: its lines matching PATTERN, its exit status
cycle_check() {
  pat=$1; shift
  "$BUILD/rtl/tsr_cycle_check" "$@" > "$log" 2>&1; rc=$?
  grep -E "$pat" "$log"
  return $rc
}
"$BUILD/rtl/tsr_rtl_test" --lib "$BUILD/lib/libtessera_rtl.so" || exit 1
CHECK="stories260k-decode stories260k-prefill attn 1x288x288*4,1x768x288*2 16x64x172 256x256x256 37x29x1 5x7x9,2x33x100"
cycle_check 'REPORT|FAIL|%' --lib "$BUILD/lib/libtessera_rtl.so" --tol 5 $CHECK || exit 1
BSR_CHECK="stories260k-decode stories260k-prefill 256x256x256 1x1024x1024 64x256x512"
for b in 0.5:64 0.25:128; do
  cycle_check 'REPORT|FAIL' --lib "$BUILD/lib/libtessera_rtl.so" --tol 10 --tol-total 5 --bsr $b $BSR_CHECK || exit 1
done
GEOMS="16:16:4 32:32:2 64:64:4"
if [ -n "${SANITIZE:-}" ]; then
  # the Verilated RTL is not instrumented and the harness is the one run
  # above; the geometries are checked by the plain build's run
  echo "SKIP case geometries $GEOMS: the RTL is not instrumented (SANITIZE=$SANITIZE); the plain build runs them"
  GEOMS=
fi
for g in $GEOMS; do
  r=${g%%:*}; rest=${g#*:}; c=${rest%%:*}; p=${rest#*:}
  make --no-print-directory -s rtl RTL_ROWS=$r RTL_COLS=$c RTL_PORTS=$p BUILD="$BUILD" || exit 1
  lib="$BUILD/rtl/${r}x${c}p$p/libtessera_rtl.so"
  echo "== ${r}x${c}, $p read ports"
  "$BUILD/rtl/tsr_rtl_test" --lib "$lib" --quick || exit 1
  if [ "$r" != 64 ]; then
    cycle_check 'REPORT|FAIL' --lib "$lib" --tol 5 --stripe $CHECK || exit 1
    if [ "$r" = 16 ]; then
      cycle_check 'REPORT|FAIL' --lib "$lib" --tol 10 --tol-total 5 --bsr 0.5:128 $BSR_CHECK || exit 1
    else
      cycle_check 'REPORT|FAIL' --lib "$lib" --tol-total 5 --bsr 0.5:128 $BSR_CHECK || exit 1
    fi
  fi
done
if command -v iverilog > /dev/null 2>&1; then
  make --no-print-directory -s iverilog-check BUILD="$BUILD" || exit 1
else
  echo "SKIP case iverilog cross-check: iverilog is not installed"
fi
