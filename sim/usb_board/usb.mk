# usb.mk - the emulated USB board (not part of libtessera).
#
#   $(BUILD)/lib/libtsr_usb_emu.so   preloaded by scripts/usb-emu-run: a
#                                    umockdev testbed with the board attached;
#                                    built by `make` (all) whenever umockdev's
#                                    development files are installed
#   $(BUILD)/tests/test_usb          links the board firmware for in-process
#                                    protocol and recovery tests
USB_EMU_SO      := $(BUILD)/lib/libtsr_usb_emu.so
USB_BOARD_OBJ   := $(BUILD)/obj/sim/usb_board/usb_board.o
USB_EMU_OBJ     := $(BUILD)/obj/sim/usb_board/usb_emu.o
USB_EMU_CFLAGS  := $(shell pkg-config --cflags umockdev-1.0 2>/dev/null)
USB_EMU_LIBS    := $(shell pkg-config --libs umockdev-1.0 2>/dev/null)

$(USB_EMU_OBJ): TSR_CFLAGS += $(USB_EMU_CFLAGS)

$(USB_EMU_SO): $(USB_EMU_OBJ) $(USB_BOARD_OBJ) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(SANFLAGS) -shared -Wl,--exclude-libs,ALL -o $@ $(USB_EMU_OBJ) $(USB_BOARD_OBJ) $(STATIC_LIB) \
	    $(USB_EMU_LIBS) $(TSR_LIBS)


$(BUILD)/tests/test_usb: $(BUILD)/obj/tests/unit/test_usb.o $(USB_BOARD_OBJ) $(TEST_COMMON_OBJS) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(TSR_CFLAGS) -o $@ $(filter %.o,$^) $(STATIC_LIB) -lcunit $(TSR_LIBS)

# `make` builds the emulator too when it can, so scripts/usb-emu-run works
# right after it; without umockdev's pkg-config file only `make usb-emu`
# (which then fails to compile, naming the missing header) asks for it.
ifneq ($(USB_EMU_LIBS),)
all: $(USB_EMU_SO)
endif

.PHONY: usb-emu
usb-emu: $(USB_EMU_SO)
tests: $(USB_EMU_SO)
