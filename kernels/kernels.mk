# kernels.mk - OpenCL C kernels, embedded into libtessera as text.
#
# kernels/tsr_kernel.cl becomes $(BUILD)/gen/kernels/tsr_kernel_cl.c, one
# C string (tsr_kernel_cl_source) that the opencl backend
# (driver/opencl/opencl_backend.c) hands to clCreateProgramWithSource after a
# prelude generated from hw/regmap.def. The object joins the library as an
# extra prerequisite of both library targets: their recipes link $^, so the
# top-level Makefile needs no change.
#
#   make kernels-check   compiles the kernels offline for the first OpenCL
#                        device (needs the library and a device)

KERNEL_CL_SRCS := $(sort $(wildcard kernels/*.cl))
KERNEL_GEN_SRCS := $(KERNEL_CL_SRCS:kernels/%.cl=$(BUILD)/gen/kernels/%_cl.c)
KERNEL_GEN_OBJS := $(KERNEL_GEN_SRCS:%.c=%.o)

# Each line becomes a string literal ending in \n; backslashes, quotes and
# question marks (trigraphs) are escaped. The symbol is named after the file.
$(BUILD)/gen/kernels/%_cl.c: kernels/%.cl kernels/kernels.mk
	@mkdir -p $(dir $@)
	{ echo '/* Generated from $< by kernels/kernels.mk: do not edit. */'; \
	  echo 'const char $(subst -,_,$*)_cl_source[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; \
	  echo ';'; } > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/kernels/%_cl.o: $(BUILD)/gen/kernels/%_cl.c
	$(CC) $(TSR_CFLAGS) -c $< -o $@

$(STATIC_LIB) $(SHARED_LIB): $(KERNEL_GEN_OBJS)

# (The top-level Makefile's .SECONDARY keeps the generated sources.)

# OpenCL-on-this-machine throughput against the CPU int8 kernel.
#   make bench-opencl [BENCH_OPENCL_ARGS="512 512 512 7"]
BENCH_OPENCL := $(BUILD)/bin/tsr_bench_opencl
BENCH_OPENCL_ARGS ?= 512 512 512 7

$(BENCH_OPENCL): $(BUILD)/obj/kernels/bench_opencl.o $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(TSR_CFLAGS) -o $@ $< $(STATIC_LIB) $(TSR_LIBS)

.PHONY: bench-opencl
bench-opencl: $(BENCH_OPENCL)
	$(BENCH_OPENCL) $(BENCH_OPENCL_ARGS)
