#!/bin/sh
# offload.sh BUILD - the offload path gives the CPU's answer (contract 1):
# stories260K greedy int8 through the Verilator RTL, split across two
# simulated devices, mixed with the host, and with faults injected mid-run
# (fallback on); with --no-fallback a fault is an error.
set -u
BUILD=${1:-build}
M=${TSR_MODELS_DIR:-../shared/models}
T="$BUILD/bin/tessera"
for f in stories260K.bin stories260K.gguf tok512.bin; do
  [ -f "$M/$f" ] || { echo "no $f in $M (the reference models)"; exit 77; }
done
if [ ! -f "$BUILD/lib/libtessera_rtl.so" ]; then echo "$BUILD/lib/libtessera_rtl.so is not built"; exit 77; fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
run() { # name devices extra...
  name=$1; dev=$2; shift 2
  "$T" run -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "Once upon a time" -n 200 --temp 0 \
    --precision int8 --device "$dev" --offload all --stats "$@" > "$out/$name.txt" 2> "$out/$name.err"
}
run ref cpu || { echo "FAIL reference run"; cat "$out/ref.err"; exit 1; }
check() { # name devices extra...
  name=$1
  if ! run "$@"; then echo "FAIL $name: exit status $?"; tail -5 "$out/$name.err"; fail=1; return; fi
  if cmp -s "$out/ref.txt" "$out/$name.txt"; then
    echo "ok   $name: same text as --device cpu; $(grep -E '^totals' "$out/$name.err" | cut -c1-150)"
  else
    echo "FAIL $name: output differs from --device cpu"; diff "$out/ref.txt" "$out/$name.txt" | head -5; fail=1
  fi
}
check sim sim
check sim_sim sim,sim
check sim_cpu sim,cpu
check fmodel fmodel
check sim_fail "sim:fail=40" --retries 0
grep -q "fall back to the CPU" "$out/sim_fail.err" || { echo "FAIL sim_fail: no fallback reported"; fail=1; }
check sim_hang "sim:hang=60" --device-timeout 500
grep -q "reset, retry" "$out/sim_hang.err" || { echo "FAIL sim_hang: no retry reported"; fail=1; }
check sim_lost "sim:lost_at=100"
grep -q "is gone" "$out/sim_lost.err" || { echo "FAIL sim_lost: loss not reported"; fail=1; }
# --no-fallback: the same fault ends the run with a clear error
if run nofb "sim:fail=40" --retries 0 --no-fallback; then
  echo "FAIL --no-fallback: a device fault did not fail the run"; fail=1
elif grep -q "fallback is off" "$out/nofb.err"; then echo "ok   --no-fallback: $(grep 'fallback is off' "$out/nofb.err" | head -1 | cut -c1-160)"
else echo "FAIL --no-fallback: message lacks the cause"; cat "$out/nofb.err"; fail=1; fi
# plan: every matmul has a placement and a cause
"$T" plan -m "$M/stories260K.gguf" --device sim > "$out/plan.txt" 2>&1 || { echo "FAIL plan"; fail=1; }
n=$(grep -cE '^ +[0-9-]+ (attn_|ffn_|output)' "$out/plan.txt")
c=$(grep -cE 'cost: sim0' "$out/plan.txt")
if [ "$n" -gt 0 ] && [ "$n" = "$c" ]; then echo "ok   plan: $n matmul placements, each with its cost cause"
else echo "FAIL plan: $n placements, $c with a cost cause"; fail=1; fi
exit $fail
