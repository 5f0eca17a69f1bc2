#!/bin/sh
# The SystemVerilog register definitions match hw/regmap.def (make regmap-check).
BUILD=${1:-build}
exec make --no-print-directory -s regmap-check BUILD="$BUILD"
