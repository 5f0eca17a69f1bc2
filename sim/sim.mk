# sim/sim.mk - the Verilated kernel as a shared library, its tests,
# waveforms and coverage. Included by the top-level Makefile.
#
#   make rtl                 $(BUILD)/lib/libtessera_rtl.so (tsr_sim.h ABI)
#   make sim-test            RTL tests (sim/test/tsr_rtl_test.c)
#   make waves TEST=name     FST of one test: $(BUILD)/waves/name.fst
#                            (WAVE_START, WAVE_END cycles; WAVE_DEPTH levels)
#   make coverage            line + toggle coverage build, run, summary
#   make iverilog-check      a small ring under iverilog vs the Verilator model
#   $(BUILD)/rtl/tsr_cycle_check  model-vs-RTL cycles of given launches (see its header)
#
# Geometry: RTL_ROWS / RTL_COLS (default 16 x 16), RTL_PORTS read masters
# (default 1), e.g. make rtl RTL_ROWS=32 RTL_COLS=32 RTL_PORTS=4 (a separate
# build directory per geometry: 32x32, or 32x32p4 with several ports).

VERILATOR  ?= verilator
VL_ROOT    := $(shell $(VERILATOR) --getenv VERILATOR_ROOT 2>/dev/null)
RTL_ROWS   ?= 16
RTL_COLS   ?= 16
RTL_PORTS  ?= 1
RTL_SV     := $(sort $(wildcard hw/rtl/*.sv))
RTL_DEPS   := $(RTL_SV) $(wildcard hw/rtl/*.svh)
RTL_GEOM   := -GRows=$(RTL_ROWS) -GCols=$(RTL_COLS) -GNumPorts=$(RTL_PORTS)
RTL_NAME   := $(RTL_ROWS)x$(RTL_COLS)$(if $(filter-out 1,$(RTL_PORTS)),p$(RTL_PORTS))
RTL_DIR    := $(BUILD)/rtl/$(RTL_NAME)
RTL_LIB    := $(BUILD)/lib/libtessera_rtl.so
ifneq ($(RTL_NAME),16x16)
RTL_LIB    := $(RTL_DIR)/libtessera_rtl.so
endif
RTL_COV_DIR := $(BUILD)/rtl/cov
RTL_COV_LIB := $(RTL_COV_DIR)/libtessera_rtl_cov.so
RTL_TEST    := $(BUILD)/rtl/tsr_rtl_test

# Single-threaded model (threads only spin on two shared cores); Verilator
# builds its C++ at -Os unless told otherwise.
VL_FLAGS := --cc -Wall --assert -Ihw/rtl --top-module tsr_kernel --prefix Vtsr_kernel \
            -O3 --x-assign fast --x-initial fast \
            --output-split 20000 --output-split-cfuncs 2000 \
            -MAKEFLAGS OPT_FAST=-O2 -MAKEFLAGS OPT_SLOW=-O1 -MAKEFLAGS OPT_GLOBAL=-O2 \
            -CFLAGS -fPIC -j 2 --build
SIM_CXXFLAGS := -std=c++17 -O2 -g -fPIC -fvisibility=hidden -Wall -Wno-unused-parameter \
                -I$(VL_ROOT)/include -I$(VL_ROOT)/include/vltstd -Isim \
                -DTSR_SIM_ROWS=$(RTL_ROWS) -DTSR_SIM_COLS=$(RTL_COLS) -DTSR_SIM_PORTS=$(RTL_PORTS)
SIM_LDFLAGS  := -shared -Wl,--version-script=sim/tsr_sim.map -Wl,--exclude-libs,ALL -lz -pthread

.PHONY: rtl sim-test waves coverage
all: $(RTL_LIB)
rtl: $(RTL_LIB)

# ---- main library: with FST tracing compiled in (dumps only when asked) ----
$(RTL_DIR)/Vtsr_kernel__ALL.a: $(RTL_DEPS) sim/sim.mk
	@mkdir -p $(RTL_DIR)
	$(VERILATOR) $(VL_FLAGS) $(RTL_GEOM) --trace-fst --Mdir $(RTL_DIR) $(RTL_SV) > $(RTL_DIR)/build.log 2>&1 \
	  || { tail -n 40 $(RTL_DIR)/build.log; exit 1; }
	$(MAKE) -s -C $(RTL_DIR) -f Vtsr_kernel.mk verilated.o verilated_threads.o verilated_fst_c.o >> $(RTL_DIR)/build.log 2>&1
	@touch $@ # verilator leaves an up-to-date archive alone; make needs it newer

$(RTL_DIR)/tsr_sim.o: sim/tsr_sim.cpp sim/tsr_sim.h $(RTL_DIR)/Vtsr_kernel__ALL.a
	$(CXX) $(SIM_CXXFLAGS) -I$(RTL_DIR) -DTSR_SIM_TRACE -DVM_TRACE=1 -DVM_TRACE_FST=1 \
	  -DVM_COVERAGE=0 -c $< -o $@

$(RTL_LIB): $(RTL_DIR)/tsr_sim.o $(RTL_DIR)/Vtsr_kernel__ALL.a sim/tsr_sim.map
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $< $(RTL_DIR)/Vtsr_kernel__ALL.a \
	  $(addprefix $(RTL_DIR)/,verilated.o verilated_threads.o verilated_fst_c.o) $(SIM_LDFLAGS)

# ---- coverage library: line + toggle coverage, no tracing ----
$(RTL_COV_DIR)/Vtsr_kernel__ALL.a: $(RTL_DEPS) sim/sim.mk
	@mkdir -p $(RTL_COV_DIR)
	$(VERILATOR) $(VL_FLAGS) $(RTL_GEOM) --coverage-line --coverage-toggle --Mdir $(RTL_COV_DIR) \
	  $(RTL_SV) > $(RTL_COV_DIR)/build.log 2>&1 || { tail -n 40 $(RTL_COV_DIR)/build.log; exit 1; }
	$(MAKE) -s -C $(RTL_COV_DIR) -f Vtsr_kernel.mk verilated.o verilated_threads.o verilated_cov.o >> $(RTL_COV_DIR)/build.log 2>&1
	@touch $@

$(RTL_COV_DIR)/tsr_sim.o: sim/tsr_sim.cpp sim/tsr_sim.h $(RTL_COV_DIR)/Vtsr_kernel__ALL.a
	$(CXX) $(SIM_CXXFLAGS) -I$(RTL_COV_DIR) -DVM_TRACE=0 -DVM_COVERAGE=1 -c $< -o $@

$(RTL_COV_LIB): $(RTL_COV_DIR)/tsr_sim.o $(RTL_COV_DIR)/Vtsr_kernel__ALL.a sim/tsr_sim.map
	$(CXX) -o $@ $< $(RTL_COV_DIR)/Vtsr_kernel__ALL.a \
	  $(addprefix $(RTL_COV_DIR)/,verilated.o verilated_threads.o verilated_cov.o) $(SIM_LDFLAGS)

# ---- tests (C, through the tsr_sim.h ABI loaded with dlopen) ----
$(RTL_TEST): sim/test/tsr_rtl_test.c sim/tsr_sim.h driver/tsr_regmap.h hw/regmap.def
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -I. -Isim -o $@ $< -ldl

sim-test: $(RTL_LIB) $(RTL_TEST)
	$(RTL_TEST) --lib $(RTL_LIB) $(SIM_TEST_ARGS)
	@if command -v iverilog > /dev/null; then $(MAKE) --no-print-directory iverilog-check; fi

TEST       ?= gemm_small
WAVE_START ?= 0
WAVE_END   ?= 0
WAVE_DEPTH ?= 0
waves: $(RTL_LIB) $(RTL_TEST)
	@mkdir -p $(BUILD)/waves
	$(RTL_TEST) --lib $(RTL_LIB) --wave $(BUILD)/waves/$(TEST).fst --wave-start $(WAVE_START) \
	  --wave-end $(WAVE_END) --wave-depth $(WAVE_DEPTH) $(TEST)
	@echo "waveform: $(BUILD)/waves/$(TEST).fst (open with gtkwave)"

coverage: $(RTL_COV_LIB) $(RTL_TEST)
	rm -f $(RTL_COV_DIR)/coverage.dat $(RTL_COV_DIR)/part.dat.*
	$(RTL_TEST) --lib $(RTL_COV_LIB) --coverage $(RTL_COV_DIR)/part.dat
	verilator_coverage --write $(RTL_COV_DIR)/coverage.dat $(RTL_COV_DIR)/part.dat.*
	python3 sim/cov_summary.py $(RTL_COV_DIR)/coverage.dat
	verilator_coverage --annotate $(RTL_COV_DIR)/annotated $(RTL_COV_DIR)/coverage.dat | grep -i total

# ---- second simulator: the same kernel under iverilog on a small ring ----
# tsr_rtl_test writes the memory image, the arguments and the memory the
# Verilator model produced (checked against the reference); the testbench
# hw/tb/tsr_kernel_tb.sv runs the ring under iverilog and compares.
IV_DIR := $(BUILD)/iverilog
.PHONY: iverilog-check
iverilog-check: $(RTL_LIB) $(RTL_TEST)
	@mkdir -p $(IV_DIR)
	iverilog -g2012 -Ihw/rtl -o $(IV_DIR)/tb.vvp $(RTL_SV) hw/tb/tsr_kernel_tb.sv 2> $(IV_DIR)/compile.log \
	  || { cat $(IV_DIR)/compile.log; exit 1; }
	@for s in 1 2; do \
	  $(RTL_TEST) --lib $(RTL_LIB) --seed $$s --iverilog-case $(IV_DIR) || exit 1; \
	  vvp -n $(IV_DIR)/tb.vvp +dir=$(IV_DIR) 2>/dev/null | grep '^tb:' | tee $(IV_DIR)/run.log; \
	  grep -q 'tb: PASSED' $(IV_DIR)/run.log || exit 1; \
	done

# ---- the functional model's cycles next to the RTL's (sim/test/tsr_cycle_check.c) ----
CYCLE_CHECK := $(BUILD)/rtl/tsr_cycle_check
$(CYCLE_CHECK): sim/test/tsr_cycle_check.c sim/tsr_sim.h $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(TSR_CFLAGS) -Isim -o $@ $< $(STATIC_LIB) $(TSR_LIBS) -ldl
