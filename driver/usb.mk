# usb.mk - build rules of the emulated USB board live with it.
include sim/usb_board/usb.mk
