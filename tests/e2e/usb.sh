#!/bin/sh
# usb.sh BUILD - the usb backend against the emulated board (umockdev +
# sim/usb_board), through libusb's real code path:
#   - `tessera gemm --device usb` prints the same checksum as --device cpu
#     for several shapes (tiled in M, N and K);
#   - with 1 % of frames corrupted or dropped (plus one forced fault each)
#     the checksum is unchanged and the retries are counted and printed;
#   - an unplug mid-run ends with a clean status: exit 1, a message naming
#     the gone board, no crash;
#   - the board driven by the Verilator RTL agrees too (when it is built);
#   - protocol efficiency and host CPU per MiB are reported (REPORT lines).
# Exit 77 (skip) only when umockdev cannot present a device here.
set -u
BUILD=${1:-build}
T="$BUILD/bin/tessera"
RUN="scripts/usb-emu-run"
export BUILD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

[ -x "$T" ] || { echo "missing $T (run make)"; exit 1; }
[ -f "$BUILD/lib/libtsr_usb_emu.so" ] || { echo "missing $BUILD/lib/libtsr_usb_emu.so (make tests)"; exit 1; }
if ! command -v umockdev-wrapper >/dev/null 2>&1; then
  echo "skip: umockdev-wrapper is not installed (Debian package umockdev)"; exit 77
fi
# Probe: can umockdev present the board to libusb at all?
if ! "$RUN" "$T" gemm --device usb -M 4 -N 4 -K 4 > "$tmp/probe" 2>&1; then
  if grep -q "no board\|libusb-1.0 is not installed" "$tmp/probe"; then
    echo "skip: umockdev does not present the emulated board here:"; cat "$tmp/probe"; exit 77
  fi
  echo "FAIL probe run:"; cat "$tmp/probe"; exit 1
fi

checksum() { grep '^checksum' "$1" | cut -d' ' -f2; }

same_as_cpu() { # label m n k [device-spec] (env passes through)
  label=$1; m=$2; n=$3; k=$4; spec=${5:-usb:stats}
  "$T" gemm --device cpu -M "$m" -N "$n" -K "$k" --seed 7 > "$tmp/cpu" 2>&1 || {
    echo "FAIL $label: cpu run failed"; cat "$tmp/cpu"; fail=1; return; }
  "$RUN" "$T" gemm --device "$spec" -M "$m" -N "$n" -K "$k" --seed 7 > "$tmp/usb" 2>&1
  rc=$?
  a=$(checksum "$tmp/cpu"); b=$(checksum "$tmp/usb")
  if [ $rc = 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]; then
    echo "ok   $label ${m}x${n}x${k}: $b"
  else
    echo "FAIL $label ${m}x${n}x${k}: exit $rc, cpu $a, usb $b"; cat "$tmp/usb"; fail=1
  fi
  grep '^usb:' "$tmp/usb" | sed 's/^/     /'
}

for s in "1 1 1" "64 64 64" "100 37 300" "513 257 1000" "17 33 66000"; do
  set -- $s
  same_as_cpu "usb = cpu" "$1" "$2" "$3"
done

# 1 % of frames damaged or lost, in both directions; small chunks so a run
# has several hundred frames; one forced fault each so retries must happen.
for f in "corrupt=0.01,corrupt_at=20,seed=11" "drop=0.01,drop_at=21,seed=12" \
         "corrupt=0.01,drop=0.01,dup=0.01,delay=0.01,delay_ms=5,seed=13"; do
  TSR_USB_FAULTS=$f same_as_cpu "faults $f" 513 257 1000 "usb:stats,chunk=4K,timeout=20"
  retries=$(grep '^usb:' "$tmp/usb" | sed -n 's/.*retries \([0-9]*\).*/\1/p')
  if [ -z "$retries" ] || [ "$retries" -lt 1 ]; then
    echo "FAIL faults $f: no retries counted"; fail=1
  else
    echo "REPORT usb e2e faults $f: $retries retries, checksum unchanged"
  fi
done

# Unplug in the middle of the transfers: a clean status, no crash.
for at in 7 40 300; do
  TSR_USB_FAULTS=unplug_at=$at "$RUN" "$T" gemm --device usb:chunk=4K -M 513 -N 257 -K 1000 \
    > "$tmp/unplug" 2>&1
  rc=$?
  if [ $rc = 1 ] && grep -q "UNAVAILABLE.*gone" "$tmp/unplug"; then
    echo "ok   unplug at frame $at: exit 1, $(grep 'gemm:' "$tmp/unplug" | head -c 160)"
  else
    echo "FAIL unplug at frame $at: exit $rc (want 1 with a 'gone' message)"; cat "$tmp/unplug"; fail=1
  fi
done

# The same board with the Verilator RTL as its kernel.
if [ -f "$BUILD/lib/libtessera_rtl.so" ]; then
  TSR_USB_BOARD=rtl same_as_cpu "usb(rtl) = cpu" 40 24 100
else
  echo "note: $BUILD/lib/libtessera_rtl.so not built; RTL board not checked"
fi

# Efficiency and host CPU per MiB over the real libusb path.
if [ -x "$BUILD/tests/test_usb" ]; then
  "$RUN" "$BUILD/tests/test_usb" --bench || { echo "FAIL usb bench"; fail=1; }
fi
exit $fail
