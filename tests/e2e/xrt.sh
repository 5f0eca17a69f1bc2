#!/bin/sh
# xrt.sh BUILD - `tessera xclbin` writes and describes the kernel's xclbin and
# rejects a corrupted one by name; without a board, `tessera devices` lists
# xrt as unavailable with the reason and `tessera gemm --device xrt` fails
# with it (a run with fallback runs on the CPU and says why); XRT's noop
# shim (a test harness that computes nothing) runs only as xrt:shim=noop and
# yields no checksum; a broken XRT environment is reported as unavailable
# instead of aborting.
set -u
BUILD=${1:-build}
T="$BUILD/bin/tessera"
D="$BUILD/test-tmp/e2e-xrt.$$"
mkdir -p "$D"
fail=0
out="$D/out"
expect() { # want-status description cmd...
  want=$1; what=$2; shift 2
  "$@" > "$out" 2>&1; got=$?
  if [ "$got" = "$want" ]; then echo "ok   $what"
  else echo "FAIL $what: exit $got, wanted $want"; cat "$out"; fail=1; fi
}
has() { # description pattern
  if grep -q -- "$2" "$out"; then echo "ok   $1"
  else echo "FAIL $1: no '$2' in:"; cat "$out"; fail=1; fi
}

expect 0 "tessera xclbin --help" "$T" xclbin --help
expect 2 "xclbin without --write or --info" "$T" xclbin
expect 2 "xclbin --mode bad" "$T" xclbin --write "$D/x.xclbin" --mode fast
expect 0 "xclbin --write" "$T" xclbin --write "$D/hs.xclbin"
expect 0 "xclbin --info" "$T" xclbin --info "$D/hs.xclbin"
has "info lists the ring argument at 0x28" "arg  2 ring         offset 0x28"
has "info checks the register map" "matches hw/regmap.def"
head -c 5000 /dev/urandom > "$D/fake.bit"
expect 0 "xclbin --write --mode chain --bitstream" \
  "$T" xclbin --write "$D/chain.xclbin" --mode chain --bitstream "$D/fake.bit"
expect 0 "xclbin --info chain" "$T" xclbin --info "$D/chain.xclbin"
has "chain protocol" "ap_ctrl_chain"
has "bitstream section" "bitstream   5000 bytes"
printf 'XCLBIN2' | dd of="$D/hs.xclbin" bs=1 conv=notrunc 2>/dev/null
expect 1 "corrupted xclbin rejected" "$T" xclbin --info "$D/hs.xclbin"
has "named error" "bad magic"
head -c 300 "$D/chain.xclbin" > "$D/cut.xclbin"
expect 1 "truncated xclbin rejected" "$T" xclbin --info "$D/cut.xclbin"
has "named error" "truncated header"

# devices: xrt is listed with its state; a broken environment is a reason.
expect 0 "devices" "$T" devices
has "xrt listed" "^xrt "
expect 0 "devices with XILINX_XRT=/usr" env XILINX_XRT=/usr "$T" devices
has "reason given" "XILINX_XRT='/usr' has no lib/"
expect 0 "devices without the library" env TSR_XRT_LIB=/nonexistent/libxrt_coreutil.so.2 "$T" devices
has "reason given" "cannot load /nonexistent"

# Without a board, plain xrt is a missing device, never the noop shim.
if [ -d /sys/bus/pci/drivers/xocl ] && ls /sys/bus/pci/drivers/xocl | grep -q :; then
  echo "SKIP case xrt without a board: a Xilinx board is bound to xocl here"
elif "$T" devices 2>/dev/null | grep -q "^xrt .*cannot load"; then
  echo "SKIP case xrt without a board: XRT is not installed here"
else
  expect 0 "devices (no board)" "$T" devices
  has "xrt unavailable without a board" "^xrt .*unavailable: .*no Xilinx board"
  expect 1 "gemm --device xrt without a board" "$T" gemm --device xrt -M 4 -N 4 -K 4 --seed 1
  has "reason given" "UNAVAILABLE.*no Xilinx board.*xrt:shim=noop"
  if grep -q "^checksum" "$out"; then echo "FAIL gemm printed a checksum"; cat "$out"; fail=1; fi
  expect 0 "gen-model" "$T" gen-model -o "$D/m.gguf" --preset stories260K
  expect 0 "run --device xrt, fallback on" \
    "$T" run -m "$D/m.gguf" -p "Once" -n 6 --temp 0 --precision int8 --device xrt
  has "runs on the CPU and says why" "device 'xrt' unavailable, its work runs on the CPU.*no Xilinx board"
  expect 1 "run --device xrt --no-fallback" \
    "$T" run -m "$D/m.gguf" -p "Once" -n 6 --temp 0 --precision int8 --device xrt --no-fallback
  has "reason given" "no Xilinx board"
fi

# The noop shim, asked for by name, runs the whole host flow and yields no
# checksum (nothing was computed).
"$T" gemm --device xrt:shim=noop -M 4 -N 4 -K 4 --seed 1 > "$out" 2>&1
if grep -q "cannot load\|shim .* is not installed" "$out"; then
  echo "SKIP case gemm --device xrt:shim=noop: XRT is not available here"
else
  expect 0 "gemm --device xrt:shim=noop" "$T" gemm --device xrt:shim=noop -M 48 -N 40 -K 72 --seed 3
  has "noop device named" "noop shim: no compute"
  has "no checksum" "^checksum none: "
  expect 0 "run --device xrt:shim=noop --offload all --stats" \
    "$T" run -m "$D/m.gguf" -p "Once" -n 6 --temp 0 --precision int8 \
    --device xrt:shim=noop --offload all --stats
  has "never given work" "^device xrt0 (xrt (noop shim: no compute)): 0 launches"
  expect 0 "plan --device xrt:shim=noop" "$T" plan -m "$D/m.gguf" --device xrt:shim=noop --precision int8
  has "the plan says why" "cpu .*xrt0 computes nothing"
fi
rm -rf "$D"
exit $fail
