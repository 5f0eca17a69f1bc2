# fuzz.mk - libFuzzer targets, one per input that crosses a trust boundary.
#
#   make fuzz [FUZZ_SECONDS=20] [FUZZ_TARGETS="fuzz_gguf ..."]
#        builds every target and runs each for FUZZ_SECONDS
#        (scripts/fuzz-run.sh): one line per target "target execs crashes",
#        non-zero exit when any target crashed
#   make fuzz-build      the targets and the seed corpora only
#
# Everything lives in $(FUZZ_BUILD): the library rebuilt with clang and
# -fsanitize=fuzzer-no-link,address,undefined (its own objects, never
# mixed with the normal build), the targets bin/fuzz_*, the generated seeds
# seeds/<target>/ (fuzz/seeds.c), and the corpora the runs grow,
# corpus/<target>/. Hand-written seeds and reproducers of fixed crashes
# are in fuzz/corpus/<target>/.

FUZZ_BUILD   := $(BUILD)-fuzz
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 20
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -std=c11 -g -O1 -Wall -Wextra -Wshadow -Wno-unused-parameter -pthread \
                -D_GNU_SOURCE -I. -Ihost/include $(MPI_CFLAGS) $(FUZZ_SAN)

# The library (as LIB_SRCS, with the OpenCL kernel text that
# kernels/kernels.mk generates) and the emulated board's firmware.
FUZZ_LIB_SRCS := $(LIB_SRCS) sim/usb_board/usb_board.c \
                 $(patsubst kernels/%.cl,$(BUILD)/gen/kernels/%_cl.c,$(sort $(wildcard kernels/*.cl)))
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_LIB      := $(FUZZ_BUILD)/lib/libtessera_fuzz.a
FUZZ_UTIL_OBJ := $(FUZZ_BUILD)/obj/fuzz/util.o

# The server's parsers join once host/serve/serve.h declares them.
FUZZ_SERVE    := $(if $(shell grep -l 'srv_tenants_parse' host/serve/serve.h 2>/dev/null),yes)
FUZZ_SERVE_SRCS := fuzz/fuzz_tenants.c fuzz/fuzz_completion.c
FUZZ_SRCS     := $(filter-out $(if $(FUZZ_SERVE),,$(FUZZ_SERVE_SRCS)),$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_ALL      := $(FUZZ_SRCS:fuzz/%.c=%)
FUZZ_TARGETS  ?= $(FUZZ_ALL)
FUZZ_BINS     := $(FUZZ_ALL:%=$(FUZZ_BUILD)/bin/%)
FUZZ_SEEDS    := $(FUZZ_BUILD)/seeds/.done

# The ISA kernels with the flags of the normal build.
$(FUZZ_BUILD)/obj/%_avx2.o:   FUZZ_ISA := -O3 -mavx2 -mfma
$(FUZZ_BUILD)/obj/%_avx512.o: FUZZ_ISA := -O3 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_ISA) -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/bin/fuzz_%: fuzz/fuzz_%.c $(FUZZ_UTIL_OBJ) $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP -MF $@.d -o $@ $< $(FUZZ_UTIL_OBJ) \
	    $(FUZZ_EXTRA_ARCHIVES) $(FUZZ_LIB) $(FUZZ_EXTRA_LIBS) $(TSR_LIBS)

$(FUZZ_BUILD)/bin/fuzz_tenants $(FUZZ_BUILD)/bin/fuzz_completion: \
    FUZZ_EXTRA_ARCHIVES = $(FUZZ_BUILD)/lib/libtessera_serve_fuzz.a
$(FUZZ_BUILD)/bin/fuzz_tenants $(FUZZ_BUILD)/bin/fuzz_completion: \
    FUZZ_EXTRA_LIBS = -ljansson -lmicrohttpd
# host/serve without its command (cmd_serve.c), and the CLI helpers it uses.
FUZZ_SERVE_OBJS := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,\
    $(filter-out host/serve/cmd_serve.c,$(sort $(wildcard host/serve/*.c))) host/cli/cli_util.c)
$(FUZZ_BUILD)/lib/libtessera_serve_fuzz.a: $(FUZZ_SERVE_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(FUZZ_BUILD)/bin/fuzz_tenants $(FUZZ_BUILD)/bin/fuzz_completion: $(FUZZ_BUILD)/lib/libtessera_serve_fuzz.a

# The benchmark peer's output: host/cli/bench_peer.c (which runs the peer
# through bench_proc.c), parsed with jansson.
FUZZ_PEER_OBJS := $(FUZZ_BUILD)/obj/host/cli/bench_peer.o $(FUZZ_BUILD)/obj/host/cli/bench_proc.o
$(FUZZ_BUILD)/bin/fuzz_peer: FUZZ_EXTRA_ARCHIVES = $(FUZZ_PEER_OBJS)
$(FUZZ_BUILD)/bin/fuzz_peer: FUZZ_EXTRA_LIBS = -ljansson
$(FUZZ_BUILD)/bin/fuzz_peer: $(FUZZ_PEER_OBJS)

$(FUZZ_BUILD)/bin/fuzz-seeds: fuzz/seeds.c $(FUZZ_UTIL_OBJ) $(FUZZ_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -MF $@.d -o $@ $< $(FUZZ_UTIL_OBJ) $(FUZZ_LIB) $(TSR_LIBS)

$(FUZZ_SEEDS): $(FUZZ_BUILD)/bin/fuzz-seeds
	rm -rf $(FUZZ_BUILD)/seeds
	ASAN_OPTIONS=detect_leaks=0 $(FUZZ_BUILD)/bin/fuzz-seeds $(FUZZ_BUILD)/seeds
	@touch $@

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BINS) $(FUZZ_SEEDS)

fuzz: fuzz-build
	@scripts/fuzz-run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

-include $(shell find $(FUZZ_BUILD)/obj $(FUZZ_BUILD)/bin -name '*.d' 2>/dev/null)
