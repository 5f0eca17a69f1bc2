#!/bin/sh
# RTL tests of the Verilated kernel (sim/test/tsr_rtl_test.c) through the
# tsr_sim.h ABI: shapes, refusals, register map, ap_ctrl sequences, perf;
# then a cross-check of a small ring under iverilog when it is installed.
BUILD=${1:-build}
command -v verilator > /dev/null 2>&1 || { echo "verilator is not installed: the RTL cannot be built"; exit 77; }
make --no-print-directory -s rtl "$BUILD/rtl/tsr_rtl_test" BUILD="$BUILD" || exit 1
"$BUILD/rtl/tsr_rtl_test" --lib "$BUILD/lib/libtessera_rtl.so" || exit 1
if command -v iverilog > /dev/null 2>&1; then
  make --no-print-directory -s iverilog-check BUILD="$BUILD" || exit 1
else
  echo "SKIP case iverilog cross-check: iverilog is not installed"
fi
