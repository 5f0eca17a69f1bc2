# package_rtl_xo.tcl - packages the hand-written RTL (hw/rtl) as a Vitis
# RTL kernel (.xo), the same interface as the HLS kernel.
#
#   vivado -mode batch -source hls/package_rtl_xo.tcl [-tclargs PART]
#
# Run from the repository root; writes build/hls/rtl_xo/tsr_kernel_rtl.xo.
# The argument registers (name, offset, size) are read from hw/regmap.def,
# so the kernel metadata XRT sees has one source with the RTL and the C
# driver. Needs Vivado (2022.1 or later); nothing of this runs here.

set part "xcu250-figd2104-2L-e"
if {[llength $argv] > 0} { set part [lindex $argv 0] }
set out  build/hls/rtl_xo
file mkdir $out

create_project -in_memory -part $part
read_verilog -sv [concat hw/rtl/tsr_regs_pkg.svh [glob hw/rtl/*.sv]]
set_property top tsr_kernel [current_fileset]
update_compile_order -fileset sources_1

ipx::package_project -root_dir $out/ip -vendor tessera.dev -library kernel -taxonomy /KernelIP \
  -import_files -set_current true
set core [ipx::current_core]

# Clock and reset have project names (clk_i, rst_ni): declare them.
ipx::infer_bus_interface clk_i xilinx.com:signal:clock_rtl:1.0 $core
ipx::infer_bus_interface rst_ni xilinx.com:signal:reset_rtl:1.0 $core
set_property value ACTIVE_LOW [ipx::add_bus_parameter POLARITY [ipx::get_bus_interfaces rst_ni -of_objects $core]]
ipx::associate_bus_interfaces -busif s_axi_control -clock clk_i $core
ipx::associate_bus_interfaces -busif m_axi_gmem -clock clk_i $core
ipx::associate_bus_interfaces -clock clk_i -reset rst_ni $core

# Kernel metadata: the ap_ctrl block and the arguments from regmap.def.
set_property sdx_kernel true $core
set_property sdx_kernel_type rtl $core
set_property vitis_drc {ctrl_protocol ap_ctrl_hs} $core
set_property ipi_drc {ignore_freq_hz true} $core
set mm  [ipx::get_memory_maps s_axi_control -of_objects $core]
set blk [ipx::add_address_block reg0 $mm]
set_property range 0x1000 $blk
set fh [open hw/regmap.def]; set def [read $fh]; close $fh
foreach {all name off} [regexp -all -inline {TSR_REG\((\w+),\s*(0x[0-9A-Fa-f]+)} $def] {
  set r [ipx::add_register $name $blk]
  set_property address_offset $off $r
  set_property size 32 $r
}
foreach {all name off bits kind} \
    [regexp -all -inline {TSR_ARG\((\w+),\s*(0x[0-9A-Fa-f]+),\s*(\d+),\s*(\w+)} $def] {
  set r [ipx::add_register $name $blk]
  set_property address_offset $off $r
  set_property size $bits $r
  if {$kind eq "PTR"} {
    # A pointer argument: XRT writes a buffer's device address here.
    set_property value m_axi_gmem [ipx::add_register_parameter ASSOCIATED_BUSIF $r]
  }
}
ipx::create_xgui_files $core
ipx::update_checksums $core
ipx::check_integrity -kernel $core
ipx::save_core $core

package_xo -force -xo_path $out/tsr_kernel_rtl.xo -kernel_name tsr_kernel \
  -ip_directory $out/ip -ctrl_protocol ap_ctrl_hs
puts "wrote $out/tsr_kernel_rtl.xo"
