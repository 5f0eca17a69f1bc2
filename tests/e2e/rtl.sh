#!/bin/sh
# RTL tests of the Verilated kernel (sim/test/tsr_rtl_test.c) through the
# tsr_sim.h ABI: shapes, refusals, register map, ap_ctrl sequences, perf.
BUILD=${1:-build}
make --no-print-directory -s rtl "$BUILD/rtl/tsr_rtl_test" BUILD="$BUILD" || exit 1
exec "$BUILD/rtl/tsr_rtl_test" --lib "$BUILD/lib/libtessera_rtl.so"
