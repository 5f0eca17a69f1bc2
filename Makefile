# tessera - top-level build.
#
#   make            library (static + shared), the `tessera` CLI, the RTL model
#   make run        the demo generation (see README.md)
#   make test       every test: unit (CUnit), RTL, end-to-end, and the
#                   concurrency tests under ThreadSanitizer
#   make test-tsan  only those (library and tests rebuilt with -fsanitize=thread
#                   in $(BUILD)-tsan)
#   make test SANITIZE=address,undefined
#                   the library, the CLI and the tests built with those
#                   sanitizers (in build-san unless BUILD is given) and run
#   make soak       server, generation and fuzz corpora in a loop with devices
#                   failing at random; memory must not grow (SOAK_SECONDS=300)
#   make bench      CPU benchmark table
#   make install PREFIX=/usr/local
#
# Hardware targets (lint, sim-test, waves, coverage, synth) live in
# hw/hw.mk and sim/sim.mk and are included below.

# SANITIZE=address,undefined (or any -fsanitize= list but thread, which has
# its own build: test-tsan): everything compiled and linked instrumented, in
# its own directory; the tests run with the sanitizers' options below (and
# SANITIZE in their environment, for the scripts that call make).
ifneq ($(SANITIZE),)
BUILD    ?= build-san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_ENV  := SANITIZE=$(SANITIZE) ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0:detect_stack_use_after_return=0 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
endif
BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= gcc
CXX     ?= g++
VERSION := 0.1.0
SOMAJOR := 0
OPT     ?= -O2

# Packages first: every real target waits for scripts/setup-deps.sh.
DEPS_OK := $(shell scripts/setup-deps.sh >&2 && echo ok)
ifneq ($(DEPS_OK),ok)
$(error scripts/setup-deps.sh failed: see the message above)
endif

# Open MPI (the distributed context, host/src/dist*.c).
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c)
MPI_LIBS   := $(shell pkg-config --libs ompi-c)

# SANFLAGS: sanitizer flags for compiling and every link (e.g.
# SANFLAGS=-fsanitize=thread in a separate BUILD directory).
SANFLAGS ?=
TSR_CFLAGS := -std=c11 -g $(OPT) -Wall -Wextra -Wshadow -Wno-unused-parameter \
              -fPIC -pthread -D_GNU_SOURCE -fvisibility=hidden \
              -I. -Ihost/include $(MPI_CFLAGS) $(SANFLAGS) $(CFLAGS)
TSR_LIBS   := -lopenblas $(MPI_LIBS) -lm -ldl -lpthread

LIB_SRCS := $(sort $(wildcard base/*.c compute/*.c driver/*.c driver/*/*.c host/src/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
# The CLI: its commands (host/cli) and the server (host/serve), which alone
# link the HTTP, JSON and HTTP-client libraries.
CLI_SRCS := $(sort $(wildcard host/cli/*.c host/serve/*.c))
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_LIBS := -lmicrohttpd -ljansson -lcurl

# Kernels compiled for one ISA each, chosen at run time from CPUID; at -O3,
# so the tile loops unroll and their accumulators stay in registers.
$(BUILD)/obj/%_avx2.o:   ISA_FLAGS := -O3 -mavx2 -mfma
$(BUILD)/obj/%_avx512.o: ISA_FLAGS := -O3 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma

STATIC_LIB := $(BUILD)/lib/libtessera.a
SHARED_LIB := $(BUILD)/lib/libtessera.so.$(VERSION)
CLI        := $(BUILD)/bin/tessera

.PHONY: all run serve soak test bench install clean deps
# Keep the intermediate files of chained rules (test objects, generated
# sources) between runs. A .SECONDARY with prerequisites anywhere in the
# fragments would turn this off: do not add one.
.SECONDARY:
all: $(STATIC_LIB) $(SHARED_LIB) $(CLI)

deps:
	@scripts/setup-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(TSR_CFLAGS) $(ISA_FLAGS) -MMD -MP -c $< -o $@

$(STATIC_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SHARED_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -shared -Wl,-soname,libtessera.so.$(SOMAJOR) -o $@ $^ $(TSR_LIBS)
	ln -sf libtessera.so.$(VERSION) $(BUILD)/lib/libtessera.so.$(SOMAJOR)
	ln -sf libtessera.so.$(SOMAJOR) $(BUILD)/lib/libtessera.so

$(CLI): $(CLI_OBJS) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(TSR_CFLAGS) -o $@ $(CLI_OBJS) $(STATIC_LIB) $(CLI_LIBS) $(TSR_LIBS)

# ---- tests: one CUnit program per tests/unit/test_*.c ----
TEST_SRCS := $(sort $(wildcard tests/unit/test_*.c))
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
TEST_COMMON_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/unit/common/*.c))

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_COMMON_OBJS) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(TSR_CFLAGS) -o $@ $< $(TEST_COMMON_OBJS) $(STATIC_LIB) -lcunit $(TSR_LIBS)

$(BUILD)/obj/tests/%.o: TSR_CFLAGS += -Itests/unit/common

tests: all $(TEST_BINS) $(if $(SANITIZE),,tsan-tests)

test: tests
	@$(SAN_ENV) tests/run.sh $(BUILD)

# ---- ThreadSanitizer: the library, the concurrency tests and the CLI (for
# the server under load) rebuilt with -fsanitize=thread; tests/e2e/tsan.sh runs them (against this build's RTL
# library, which is not instrumented: the sim backend serializes its calls).
TSAN_BUILD := $(BUILD)-tsan
TSAN_TESTS := test_batch test_queue test_device_api test_xrt_threads
.PHONY: tsan-tests test-tsan
tsan-tests:
	@$(MAKE) --no-print-directory BUILD=$(TSAN_BUILD) OPT=-O1 CFLAGS="-fsanitize=thread" \
	    TSR_SKIP_DEPS=1 $(TSAN_BUILD)/bin/tessera \
	    $(foreach t,$(TSAN_TESTS),$(if $(wildcard tests/unit/$(t).c),$(TSAN_BUILD)/tests/$(t)))

test-tsan: all tsan-tests
	@sh tests/e2e/tsan.sh $(BUILD)

# ---- the main job ----
run: all
	@scripts/demo.sh $(BUILD)

# The bounded soak (minutes; not part of `make test`): SOAK_SECONDS=300.
soak: all
	@scripts/soak.sh $(BUILD) $(or $(SOAK_SECONDS),300)

# `tessera serve` on the embedded default model (open mode, port 8080).
serve: all
	@scripts/serve.sh $(BUILD)

bench: all
	$(CLI) bench

# ---- install ----
install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(PREFIX)/lib/
	# the Verilated kernel, found by the sim backend next to libtessera
	if [ -f $(BUILD)/lib/libtessera_rtl.so ]; then \
	  install -m 755 $(BUILD)/lib/libtessera_rtl.so $(DESTDIR)$(PREFIX)/lib/; fi
	ln -sf libtessera.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libtessera.so.$(SOMAJOR)
	ln -sf libtessera.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libtessera.so
	install -m 644 host/include/tessera.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    scripts/tessera.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tessera.pc

clean:
	rm -rf $(BUILD)

# Hardware, simulation and other fragments add their own targets.
include $(sort $(wildcard hw/*.mk sim/*.mk hls/*.mk kernels/*.mk driver/*.mk tests/*.mk examples/*.mk fuzz/*.mk))

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
