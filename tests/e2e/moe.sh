#!/bin/sh
# moe.sh BUILD - Mixture-of-Experts models on every backend (contract 1): a
# generated moe260K (4 experts, 2 per token) q8_0 file, greedy int8 text on
# the CPU equal to the functional model's, the RTL's (sim), two functional
# models splitting the rows and the layers, and the host mixed in; experts
# reported per layer by --stats; bad expert options refused.
set -u
BUILD=${1:-build}
T="$BUILD/bin/tessera"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
"$T" gen-model -o "$out/moe.gguf" --preset moe260K --type q8_0 --seed 9 > /dev/null ||
  { echo "FAIL gen-model moe260K"; exit 1; }
run() { # name devices extra...
  name=$1; dev=$2; shift 2
  "$T" run -m "$out/moe.gguf" -p "Once upon a time" -n 80 --temp 0 --precision int8 \
    --device "$dev" --offload all --stats "$@" > "$out/$name.txt" 2> "$out/$name.err"
}
run ref cpu || { echo "FAIL reference run"; cat "$out/ref.err"; exit 1; }
check() { # name devices extra...
  name=$1
  if ! run "$@"; then echo "FAIL $name: exit status $?"; tail -5 "$out/$name.err"; fail=1; return; fi
  if cmp -s "$out/ref.txt" "$out/$name.txt"; then
    echo "ok   $name: same text as --device cpu ($(wc -c < "$out/ref.txt") bytes)"
  else
    echo "FAIL $name: output differs from --device cpu"; diff "$out/ref.txt" "$out/$name.txt" | head -5; fail=1
  fi
}
check fmodel fmodel
check fmodel_rows fmodel,fmodel --split rows
check fmodel_layers fmodel,fmodel --split layers
check fmodel_cpu fmodel,cpu --split rows
if [ -f "$BUILD/lib/libtessera_rtl.so" ]; then
  check sim sim
else
  echo "SKIP sim: $BUILD/lib/libtessera_rtl.so is not built"
fi
# the experts' matmuls ran on the device, and --stats says how rows were routed
grep -q 'ffn_gate_exps' "$out/fmodel.err" || { echo "FAIL fmodel: no ffn_gate_exps in --stats"; fail=1; }
if grep -q '^experts' "$out/fmodel.err"; then
  echo "ok   --stats: $(grep -A1 '^experts' "$out/fmodel.err" | tail -1 | cut -c1-100)"
else
  echo "FAIL --stats: no experts table"; fail=1
fi
# placement of experts by override: experts 0-1 on dev0, 2-3 on dev1, the text unchanged
check place_experts fmodel,fmodel --place experts=cpu,expert0-1=dev0,expert2-3=dev1
"$T" plan -m "$out/moe.gguf" --device fmodel,fmodel \
  --place experts=cpu,expert1=dev1 > "$out/plan.txt" 2>&1
n1=$(grep -c ':e1 ffn_.*_exps .*fmodel1 .*--place expert1=dev1' "$out/plan.txt")
n0=$(grep -c ':e0 ffn_.*_exps .*cpu .*--place experts=cpu' "$out/plan.txt")
# 3 layers x 3 matmuls, in every planned batch size's table
if [ "$n1" -ge 9 ] && [ "$n0" -ge 9 ]; then echo "ok   plan: expert1 on fmodel1, expert0 on the host ($n1, $n0 lines)"
else echo "FAIL plan: expert overrides not applied ($n1, $n0)"; fail=1; fi
# --place repeated: the overrides of both, not only the last
"$T" plan -m "$out/moe.gguf" --device fmodel,fmodel \
  --place experts=cpu --place expert1=dev1 > "$out/plan2.txt" 2>&1
n1=$(grep -c ':e1 ffn_.*_exps .*fmodel1 .*--place expert1=dev1' "$out/plan2.txt")
n0=$(grep -c ':e0 ffn_.*_exps .*cpu .*--place experts=cpu' "$out/plan2.txt")
if [ "$n1" -ge 9 ] && [ "$n0" -ge 9 ]; then echo "ok   plan: --place repeated keeps both overrides ($n1, $n0 lines)"
else echo "FAIL plan: --place repeated lost an override ($n1, $n0)"; fail=1; fi
for bad in "expert4=dev0" "expert2-1=dev0" "expertx=dev0" "expert0=dev7"; do
  if "$T" plan -m "$out/moe.gguf" --device fmodel --place "$bad" > "$out/bad.txt" 2>&1; then
    echo "FAIL --place $bad accepted"; fail=1
  else echo "ok   --place $bad refused: $(tail -1 "$out/bad.txt" | cut -c1-110)"; fi
done
# the auto policy replans from the experts' popularity every 64 passes: the text stays
"$T" run -m "$out/moe.gguf" -p "Once upon a time" -n 200 --temp 0 --precision int8 \
  > "$out/long_cpu.txt" 2>/dev/null
"$T" run -m "$out/moe.gguf" -p "Once upon a time" -n 200 --temp 0 --precision int8 \
  --device fmodel --stats > "$out/long_auto.txt" 2> "$out/long_auto.err"
if cmp -s "$out/long_cpu.txt" "$out/long_auto.txt" && grep -q 'rebuilt [1-9][0-9]* times' "$out/long_auto.err"; then
  echo "ok   auto placement replanned from popularity ($(grep -o 'rebuilt [0-9]* times' "$out/long_auto.err")), the CPU's text"
else echo "FAIL auto replanning: text differs or no replan"; fail=1; fi
# fp32 and fp16 run the same model on the host
for p in fp32 fp16 bf16; do
  "$T" run -m "$out/moe.gguf" -p "Once upon a time" -n 40 --temp 0 --precision $p \
    > "$out/$p.txt" 2> "$out/$p.err" && [ -s "$out/$p.txt" ] ||
    { echo "FAIL $p run"; tail -3 "$out/$p.err"; fail=1; }
done
"$T" gen-model -o "$out/bad.gguf" --preset moe260K --experts-used 5 2> "$out/bad.err"
[ $? -eq 2 ] && grep -q 'n_experts_used = 5' "$out/bad.err" ||
  { echo "FAIL --experts-used 5 of 4 accepted"; fail=1; }
exit $fail
