# run_hls.tcl - Vitis HLS flow for the tessera kernel.
#
#   vitis_hls -f hls/run_hls.tcl [-tclargs PART [CLOCK_NS [STEPS]]]
#
# Run from the repository root. STEPS is a comma list of csim, csynth,
# cosim, export (default csim,csynth,export). The export writes
# build/hls/vitis/tsr_kernel_hls.xo and checks the register offsets HLS
# chose for the four arguments against hw/regmap.def.
# Needs Vitis HLS (2022.1 or later) and the device part; nothing of this
# runs on a machine without the Xilinx tools (`make hls-csim` is the C
# simulation that does).

set part   "xcu250-figd2104-2L-e"
set clock  3.33
set steps  "csim,csynth,export"
if {[llength $argv] > 0} { set part  [lindex $argv 0] }
if {[llength $argv] > 1} { set clock [lindex $argv 1] }
if {[llength $argv] > 2} { set steps [lindex $argv 2] }

set root   [pwd]
set cflags "-I$root/hls -I$root/driver -I$root/host/include -I$root/host/src"
set tbflags "$cflags -DTSR_HLS_PHYS_BYTES=0x800000ull"

open_project -reset build/hls/vitis
set_top tsr_kernel
add_files hls/tsr_kernel_hls.cpp -cflags $cflags
# The testbench links the golden model from libtessera (build it first:
# `make`), as `make hls-csim` does.
add_files -tb hls/tsr_kernel_tb.cpp -cflags $tbflags
set tblibs "-L$root/build/lib -l:libtessera.a -lopenblas -lm -ldl -lpthread"
open_solution -reset -flow_target vitis sol
set_part $part
create_clock -period $clock -name default
config_interface -m_axi_addr64

if {[string match *csim* $steps]} {
  csim_design -ldflags $tblibs -argv "$root/hls/tsr_kernel_hls.cpp"
}
if {[string match *csynth* $steps]} {
  csynth_design
}
if {[string match *cosim* $steps]} {
  cosim_design -ldflags $tblibs -argv "$root/hls/tsr_kernel_hls.cpp"
}
if {[string match *export* $steps]} {
  export_design -format xo -output "$root/build/hls/vitis/tsr_kernel_hls.xo"

  # The register map HLS generated against hw/regmap.def's TSR_ARG rows.
  set hdr [glob -nocomplain build/hls/vitis/sol/impl/misc/drivers/*/src/x*_hw.h]
  if {$hdr eq ""} { error "export produced no driver header to check offsets in" }
  set fh [open [lindex $hdr 0]]; set text [read $fh]; close $fh
  set fh [open hw/regmap.def]; set def [read $fh]; close $fh
  foreach {all name off} [regexp -all -inline {TSR_ARG\((\w+),\s*(0x[0-9A-Fa-f]+)} $def] {
    if {![regexp "ADDR_${name}_DATA\\s+(0x\[0-9a-fA-F\]+)" $text -> got]} {
      error "regmap.def argument $name is missing from [lindex $hdr 0]"
    }
    if {[expr {$got}] != [expr {$off}]} {
      error "argument $name: HLS placed it at $got, hw/regmap.def says $off"
    }
    puts "register $name at $got matches hw/regmap.def"
  }
}
exit
