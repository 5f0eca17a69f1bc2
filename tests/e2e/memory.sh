#!/bin/sh
# memory.sh BUILD - the weights are used in place: the peak resident memory
# of `tessera run` on a generated stories15M-shaped model stays below a bound
# derived from the file's size (F bytes) plus a fixed allowance A (32 MiB:
# the program, KV cache, activations, libraries):
#   q8_0 file, int8   <= 1.10 F + A  (int8 weights derived row by row; no
#                                     fp32 copy, the file's pages dropped)
#   f32 file,  fp32   <= 1.05 F + A  (the mapping read in place)
#   f32 file,  int8   <= 0.30 F + A  (int8 is a quarter of f32; the file's
#                                     pages dropped once quantized)
#   f16 file,  fp16   <= 1.05 F + A  (the halves read in place)
#   bf16 file, bf16   <= 1.05 F + A
#   f32 file,  bf16   <= 0.55 F + A  (a half copy made at load, the file's
#                                     pages dropped once converted)
# And decoding does not grow it beyond the KV cache: the q8_0 file in int8
# over 250 positions against 2 (the embedding rows are read, not mapped:
# each new token would otherwise map some 64 KiB of the table), within the
# KV cache's bytes (6 layers x 2 x 288 floats x 256 positions) + 2 MiB.
# Under the sanitizers the bounds do not hold (shadow memory): skipped.
set -u
BUILD=${1:-build}
T="$BUILD/bin/tessera"
[ -n "${SANITIZE:-}" ] && { echo "SKIP the sanitizers' shadow memory (SANITIZE=$SANITIZE)"; exit 77; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
"$T" gen-model -o "$out/q8.gguf" --preset stories15M --type q8_0 --seed 3 > /dev/null &&
  "$T" gen-model -o "$out/f32.gguf" --preset stories15M --seed 3 > /dev/null &&
  "$T" gen-model -o "$out/f16.gguf" --preset stories15M --type f16 --seed 3 > /dev/null &&
  "$T" gen-model -o "$out/bf16.gguf" --preset stories15M --type bf16 --seed 3 > /dev/null ||
  { echo "FAIL gen-model"; exit 1; }
# peak RSS in KiB of a command (getrusage of the child)
peak() {
  "$PY" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else -1)' "$@"
}
check() { # file precision factor
  f=$1 prec=$2 factor=$3
  size=$(wc -c < "$f")
  got=$(peak "$T" run -m "$f" -p "Once upon a time" -n 64 --temp 0 --precision "$prec" -t 2)
  bound=$(awk -v s="$size" -v k="$factor" 'BEGIN { printf "%d", (k * s + 32 * 1048576) / 1024 }')
  name="$(basename "$f") $prec: peak $got KiB, bound $bound KiB (${factor} x $((size / 1024)) KiB + 32 MiB)"
  if [ "$got" -gt 0 ] && [ "$got" -le "$bound" ]; then echo "ok   $name"
  else echo "FAIL $name"; fail=1; fi
}
check "$out/q8.gguf" int8 1.10
check "$out/f32.gguf" fp32 1.05
check "$out/f32.gguf" int8 0.30
check "$out/f16.gguf" fp16 1.05
check "$out/bf16.gguf" bf16 1.05
check "$out/f32.gguf" bf16 0.55
short=$(peak "$T" run -m "$out/q8.gguf" -p "Once upon a time" -n 2 --temp 0 --precision int8 -t 2)
long=$(peak "$T" run -m "$out/q8.gguf" -p "Once upon a time" -n 250 --temp 0.9 --seed 5 --precision int8 -t 2)
kv=$((6 * 2 * 288 * 4 * 256 / 1024))
grow=$((long - short))
name="q8.gguf int8 decode: peak $short KiB at 2 positions, $long KiB at 250 (+$grow KiB, bound KV $kv KiB + 2048 KiB)"
if [ "$short" -gt 0 ] && [ "$long" -gt 0 ] && [ "$grow" -le $((kv + 2048)) ]; then echo "ok   $name"
else echo "FAIL $name"; fail=1; fi
exit $fail
