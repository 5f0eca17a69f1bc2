#!/bin/sh
# stories.sh BUILD - the fp32 reference path reproduces the reference
# implementation's greedy transcripts of stories260K byte for byte, from the
# llama2.c checkpoint and from the GGUF file; both prompts in one run (one
# batch of two sequences) give both transcripts, in order.
set -u
BUILD=${1:-build}
M=${TSR_MODELS_DIR:-../shared/models}
T="$BUILD/bin/tessera"
for f in stories260K.bin stories260K.gguf tok512.bin; do
  [ -f "$M/$f" ] || { echo "no $f in $M (the reference models)"; exit 77; }
done
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
check() { # name expected-file cmd...
  name=$1; exp=$2; shift 2
  if ! "$@" > "$out/got" 2> "$out/err"; then
    echo "FAIL $name: exit status $?"; cat "$out/err"; fail=1; return
  fi
  if cmp -s "$out/got" "$exp"; then echo "ok   $name"
  else echo "FAIL $name: output differs from $exp"; diff "$exp" "$out/got" | head -10; fail=1; fi
}
for prompt in "Once upon a time" "The little dog"; do
  slug=$(echo "$prompt" | tr 'A-Z ' 'a-z_')
  exp="$M/expected/stories260K.greedy.$slug.txt"
  check "bin  fp32 '$prompt'" "$exp" "$T" run -m "$M/stories260K.bin" -z "$M/tok512.bin" \
    -p "$prompt" -n 200 --temp 0 --precision fp32
  check "gguf fp32 '$prompt'" "$exp" "$T" run -m "$M/stories260K.gguf" \
    -p "$prompt" -n 200 --temp 0 --precision fp32
  check "bin  fp32 '$prompt' 1 thread" "$exp" "$T" run -m "$M/stories260K.bin" \
    -z "$M/tok512.bin" -p "$prompt" -n 200 --temp 0 -t 1
done
cat "$M/expected/stories260K.greedy.once_upon_a_time.txt" \
    "$M/expected/stories260K.greedy.the_little_dog.txt" > "$out/both"
check "bin  fp32 both prompts in one batch" "$out/both" "$T" run -m "$M/stories260K.bin" \
  -z "$M/tok512.bin" -p "Once upon a time" -p "The little dog" -n 200 --temp 0
# int8: each prompt alone is the reference of the batch
for prompt in "Once upon a time" "The little dog"; do
  "$T" run -m "$M/stories260K.gguf" -p "$prompt" -n 200 --temp 0 --precision int8 \
    >> "$out/both.int8" 2> /dev/null || { echo "FAIL int8 '$prompt' alone"; fail=1; }
done
check "gguf int8 both prompts in one batch" "$out/both.int8" "$T" run -m "$M/stories260K.gguf" \
  -p "Once upon a time" -p "The little dog" -n 200 --temp 0 --precision int8
exit $fail
