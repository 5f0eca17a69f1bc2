# examples.mk - example programs, built by `make` into $(BUILD)/bin.
# They include <tessera.h> only and link libtessera like an application.

EXAMPLE_SRCS := $(sort $(wildcard examples/*.c))
EXAMPLE_BINS := $(EXAMPLE_SRCS:examples/%.c=$(BUILD)/bin/%)

all: $(EXAMPLE_BINS)

$(EXAMPLE_BINS): $(BUILD)/bin/%: examples/%.c $(STATIC_LIB) host/include/tessera.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -g $(OPT) -Wall -Wextra -Ihost/include $(SANFLAGS) $(CFLAGS) -o $@ $< $(STATIC_LIB) $(TSR_LIBS)
