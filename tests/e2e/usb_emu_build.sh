#!/bin/sh
# usb_emu_build.sh BUILD - `make` alone (the all target) builds the emulated
# USB board, so scripts/usb-emu-run works right after it:
#   - the all target of a fresh build directory has lib/libtsr_usb_emu.so
#     among its prerequisites (make's database, printed by a dry run that
#     builds nothing);
#   - in BUILD the library is there, and a gemm on the emulated board
#     through scripts/usb-emu-run matches the plain triple loop (--check).
# Exit 77 (skip) when umockdev's development files are not installed (then
# make cannot build the emulator and says nothing of it).
set -u
BUILD=${1:-build}
fail=0
if ! pkg-config --exists umockdev-1.0 2>/dev/null; then
  echo "umockdev's development files (Debian package libumockdev-dev) are not installed"
  exit 77
fi
D="$BUILD/test-tmp/e2e-usb-emu-build.$$"
mkdir -p "$D"
trap 'rm -rf "$D"' EXIT

# make's rules for a fresh build directory, printed (-p) by a dry run (-n)
# of the `deps` target; TSR_SKIP_DEPS keeps make from installing anything.
TSR_SKIP_DEPS=1 make --no-print-directory -pn BUILD="$D/fresh" deps > "$D/db" 2>&1
rc=$?
grep '^all:' "$D/db" > "$D/all"
if [ $rc = 0 ] && grep -q " $D/fresh/lib/libtsr_usb_emu.so" "$D/all"; then
  echo "ok   make all builds lib/libtsr_usb_emu.so"
else
  echo "FAIL make's all target (dry run exit $rc) does not build lib/libtsr_usb_emu.so:"
  cat "$D/all"
  fail=1
fi

if [ ! -f "$BUILD/lib/libtsr_usb_emu.so" ]; then
  echo "FAIL $BUILD/lib/libtsr_usb_emu.so is missing after make"
  exit 1
fi
if ! command -v umockdev-wrapper >/dev/null 2>&1; then
  echo "SKIP case gemm through scripts/usb-emu-run: umockdev-wrapper is not installed"
  exit $fail
fi
BUILD="$BUILD" scripts/usb-emu-run "$BUILD/bin/tessera" gemm --device usb -M 8 -N 8 -K 8 \
  --seed 1 --check > "$D/gemm" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^check       OK" "$D/gemm"; then
  echo "ok   scripts/usb-emu-run tessera gemm --device usb --check"
elif grep -q "no board\|libusb-1.0 is not installed" "$D/gemm"; then
  echo "SKIP case gemm through scripts/usb-emu-run: umockdev does not present the board here"
else
  echo "FAIL scripts/usb-emu-run tessera gemm --device usb --check: exit $rc"
  cat "$D/gemm"
  fail=1
fi
exit $fail
