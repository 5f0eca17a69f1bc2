#!/bin/sh
# synth.sh SIZE OUTDIR - Yosys synth_xilinx (xc7) of tsr_kernel with a
# SIZE x SIZE array; writes OUTDIR/synth_SIZE.log and a one-line summary
# OUTDIR/summary_SIZE.txt (LUT, FF, DSP, BRAM, seconds).
#
# synth_xilinx runs in two parts: between them every remaining $add/$sub/$neg
# (the multiply-accumulates are in DSP48E1s by then) becomes an $alu of its
# own. Otherwise alumacc merges sums of several terms (the column sums) into
# one $macc, which maps to carry-save adders in LUTs at about twice the LUTs
# of a tree of carry-chain adders (16.4 k against 7.7 k for the 16x16 column
# sums).
set -e
n=$1; out=$2
mkdir -p "$out"
files=$(ls hw/rtl/*.sv | tr '\n' ' ')
start=$(date +%s)
yosys -q -l "$out/synth_$n.log" -p "
  read_verilog -sv -DSYNTHESIS -Ihw/rtl $files
  hierarchy -check -top tsr_kernel -chparam Rows $n -chparam Cols $n
  synth_xilinx -family xc7 -top tsr_kernel -flatten -run :coarse
  techmap -max_iter 1 -map +/techmap.v t:\$add t:\$sub t:\$neg
  synth_xilinx -family xc7 -top tsr_kernel -flatten -run coarse:
  tee -o $out/stat_$n.txt stat
" > /dev/null
secs=$(( $(date +%s) - start ))
st="$out/stat_$n.txt"
sum() { grep -E "^ +$1 +[0-9]+" "$st" | awk '{s+=$2} END {print s+0}'; }
lut=$(grep -E '^ +LUT[1-6] +[0-9]+' "$st" | awk '{s+=$2} END {print s+0}')
ff=$(grep -E '^ +FD[A-Z]+ +[0-9]+' "$st" | awk '{s+=$2} END {print s+0}')
dsp=$(sum DSP48E1)
bram=$(grep -E '^ +RAMB(18|36)E1 +[0-9]+' "$st" | awk '{s+=$2} END {print s+0}')
lutram=$(grep -E '^ +RAM(32|64|128|256)[A-Z0-9]* +[0-9]+' "$st" | awk '{s+=$2} END {print s+0}')
printf 'synth %sx%s (xc7): LUT %s  FF %s  DSP48E1 %s  BRAM %s  LUTRAM cells %s  time %ss\n' \
  "$n" "$n" "$lut" "$ff" "$dsp" "$bram" "$lutram" "$secs" | tee "$out/summary_$n.txt"
