# hls.mk - the HLS kernel: C simulation here, the Vitis flow elsewhere.
#
#   make hls-csim   builds hls/tsr_kernel_hls.cpp with g++ (HLS pragmas are
#                   ignored), links the testbench with libtessera's golden
#                   model and runs it: prints PASSED or FAILED
#
# Synthesis, co-simulation and xclbin builds need Vitis: hls/run_hls.tcl and
# hls/Makefile.vitis (see hls/README.md).

HLS_CSIM      := $(BUILD)/hls/tsr_kernel_csim
HLS_CSIM_PHYS ?= 0x800000
HLS_CXXFLAGS  := -std=c++14 -g -O2 -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-label \
                 -DTSR_HLS_PHYS_BYTES=$(HLS_CSIM_PHYS)ull -I. -Ihls -Ihost/include $(SANFLAGS)

$(BUILD)/hls/%.o: hls/%.cpp hls/tsr_kernel_hls.h hw/regmap.def driver/tsr_regmap.h
	@mkdir -p $(dir $@)
	$(CXX) $(HLS_CXXFLAGS) -c $< -o $@

$(HLS_CSIM): $(BUILD)/hls/tsr_kernel_hls.o $(BUILD)/hls/tsr_kernel_tb.o $(STATIC_LIB)
	$(CXX) $(HLS_CXXFLAGS) -o $@ $(BUILD)/hls/tsr_kernel_hls.o $(BUILD)/hls/tsr_kernel_tb.o \
	    $(STATIC_LIB) $(TSR_LIBS)

.PHONY: hls-csim
hls-csim: $(HLS_CSIM)
	$(HLS_CSIM) hls/tsr_kernel_hls.cpp
