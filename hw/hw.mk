# hw/hw.mk - hardware engineer's targets. Included by the top-level Makefile.
#
#   make lint           verilator --lint-only -Wall, 16x16, 32x32 and with several read ports
#   make synth          Yosys synth_xilinx (xc7) of 16x16 and 32x32: LUT/FF/DSP/BRAM, time
#   make regmap         regenerate hw/rtl/tsr_regs_pkg.svh from hw/regmap.def
#   make regmap-check   fail if the checked-in tsr_regs_pkg.svh is stale

HW_SV      := $(sort $(wildcard hw/rtl/*.sv))
SYNTH_SIZES ?= 16 32

.PHONY: lint synth regmap regmap-check
lint:
	verilator --lint-only -Wall -Ihw/rtl --top-module tsr_kernel $(HW_SV)
	verilator --lint-only -Wall -Ihw/rtl --top-module tsr_kernel -GRows=32 -GCols=32 $(HW_SV)
	verilator --lint-only -Wall -Ihw/rtl --top-module tsr_kernel -GNumPorts=4 $(HW_SV)
	verilator --lint-only -Wall -Ihw/rtl --top-module tsr_kernel -GRows=64 -GCols=64 -GNumPorts=32 $(HW_SV)
	@echo "lint: clean (16x16, 32x32, 16x16 with 4 read ports, 64x64 with 32)"

synth:
	@mkdir -p $(BUILD)/synth
	@for n in $(SYNTH_SIZES); do sh hw/syn/synth.sh $$n $(BUILD)/synth || exit 1; done
	@cat $(addprefix $(BUILD)/synth/summary_,$(addsuffix .txt,$(SYNTH_SIZES)))

regmap:
	python3 scripts/gen_regs_svh.py hw/regmap.def > hw/rtl/tsr_regs_pkg.svh.tmp
	mv hw/rtl/tsr_regs_pkg.svh.tmp hw/rtl/tsr_regs_pkg.svh

regmap-check:
	@mkdir -p $(BUILD)
	@python3 scripts/gen_regs_svh.py hw/regmap.def > $(BUILD)/tsr_regs_pkg.svh.check
	@if cmp -s $(BUILD)/tsr_regs_pkg.svh.check hw/rtl/tsr_regs_pkg.svh; then \
	  echo "regmap-check: hw/rtl/tsr_regs_pkg.svh matches hw/regmap.def"; \
	else \
	  diff -u hw/rtl/tsr_regs_pkg.svh $(BUILD)/tsr_regs_pkg.svh.check | head -n 40; \
	  echo "regmap-check: hw/rtl/tsr_regs_pkg.svh is stale: run make regmap"; exit 1; \
	fi
