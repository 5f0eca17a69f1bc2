#!/bin/sh
# isolation_usb.sh BUILD - the isolation cases of tests/unit/test_isolation.c
# on the usb backend, which needs the emulated board (umockdev +
# sim/usb_board) attached to the process: two engines with device-memory
# windows on one board give the host's int8 logits, and descriptors forged
# in one window that point into the other are refused by the board's kernel
# with ADDR_RANGE, the other window unchanged. Runs against the board's
# functional model, then against the board driven by the Verilator RTL
# (when it is built).
# Exit 77 (skip) only when umockdev cannot present the board here.
set -u
BUILD=${1:-build}
RUN="scripts/usb-emu-run"
T="$BUILD/tests/test_isolation"
export BUILD

[ -x "$T" ] || { echo "missing $T (make tests)"; exit 1; }
[ -f "$BUILD/lib/libtsr_usb_emu.so" ] || { echo "missing $BUILD/lib/libtsr_usb_emu.so (make tests)"; exit 1; }
if ! command -v umockdev-wrapper >/dev/null 2>&1; then
  echo "umockdev-wrapper is not installed (Debian package umockdev)"; exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

board() { # label [env assignments...]
  label=$1; shift
  env "$@" TSR_ISOLATION_BACKENDS=usb "$RUN" "$T" > "$tmp/out" 2>&1
  rc=$?
  if [ $rc = 0 ]; then
    echo "ok   $label: $(grep '^cases:' "$tmp/out" | cut -d';' -f1)"
    grep -o 'REPORT.*' "$tmp/out" | sed "s/^REPORT isolation usb:/REPORT isolation usb ($label):/"
  elif [ $rc = 77 ]; then
    cat "$tmp/out"; echo "umockdev does not present the emulated board here (output above)"; exit 77
  else
    echo "FAIL $label: exit $rc"; tail -n 30 "$tmp/out"; fail=1
  fi
}

board "board with the functional model" TSR_USB_BOARD=model
if [ -f "$BUILD/lib/libtessera_rtl.so" ]; then
  board "board with the RTL kernel" TSR_USB_BOARD=rtl
else
  echo "SKIP case the board with the RTL kernel: libtessera_rtl.so is not built"
fi
exit $fail
