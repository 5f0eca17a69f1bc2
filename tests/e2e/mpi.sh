#!/bin/sh
# mpi.sh BUILD - the model across MPI ranks (mpirun on 127.0.0.1):
#   - the pipeline of layers with 2 and 3 ranks (devices per rank) and the
#     rows split give exactly the single-process greedy text, fp32 and int8,
#     for stories260K and for a generated model of 7 layers (uneven shares);
#   - several sequences at once (repeated -p: one batch, micro-batches in
#     the pipeline, sequences spread over the ranks in the rows split): each
#     sequence's text is its text alone;
#   - `tessera serve --mpi` (pipeline, 2 ranks) and `--mpi-split rows` (3
#     ranks) under concurrent clients: every answer equals `tessera run`;
#     SIGTERM to rank 0 drains it and ends the job with exit 0;
#   - a rank that stops answering (the last or a middle one) or is killed
#     makes rank 0 fail with the rank named within the timeout.
BUILD=${1:-build}
T="$BUILD/bin/tessera"
M=${TSR_MODELS_DIR:-../shared/models}
command -v mpirun >/dev/null || { echo "SKIP mpirun is not installed"; exit 77; }
# Open MPI's runtime is not built with the sanitizers and keeps memory
# until exit, which LeakSanitizer would report as the test's.
[ -n "$SANITIZE" ] && { echo "SKIP Open MPI is not instrumented (SANITIZE=$SANITIZE)"; exit 77; }
[ -f "$M/stories260K.bin" ] || { echo "SKIP $M/stories260K.bin is absent"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo
MPIRUN="mpirun --oversubscribe --bind-to none"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
"$T" gen-model -o "$out/gen.gguf" --preset stories260K --layers 7 --seed 5 --type q8_0 > /dev/null ||
  { echo "FAIL gen-model"; exit 1; }
stories="-m $M/stories260K.bin -z $M/tok512.bin"
gen="-m $out/gen.gguf"
cases="2 --mpi|3 --mpi --device fmodel;cpu;fmodel|2 --mpi-split rows|3 --mpi-split rows"
IFS_SAVE=$IFS
# check NAME MODEL-ARGS PROMPTS...: the solo text of each prompt, then every case
check() {
  name=$1 margs=$2; shift 2
  for prec in fp32 int8; do
    : > "$out/solo.txt"
    pargs=
    for p in "$@"; do
      "$T" run $margs -p "$p" -n 60 --temp 0 --precision $prec >> "$out/solo.txt" 2>/dev/null ||
        { echo "FAIL $name solo $prec '$p'"; fail=1; }
    done
    IFS='|'
    for case in $cases; do
      IFS=$IFS_SAVE
      np=${case%% *}; opt=${case#* }
      # the prompts (single words) as one -p each
      timeout 300 $MPIRUN -np $np "$T" run $margs -n 60 --temp 0 --precision $prec $opt \
          $(for p in "$@"; do printf -- '-p %s ' "$p"; done) > "$out/mpi.txt" 2>"$out/err.txt"
      rc=$?
      if [ $rc -ne 0 ]; then echo "FAIL $name $prec -np $np $opt: exit $rc"; tail -5 "$out/err.txt"; fail=1
      elif cmp -s "$out/solo.txt" "$out/mpi.txt"; then echo "ok   $name $prec -np $np $opt ($# sequences)"
      else echo "FAIL $name $prec -np $np $opt ($# sequences): text differs"; fail=1; fi
    done
    IFS=$IFS_SAVE
  done
}
check stories260K "$stories" Once
check stories260K "$stories" Once The Lily Tom Sam
check generated "$gen" Once The Lily
# a mixture of experts (4 experts, 2 per token): layers and rows across the ranks
"$T" gen-model -o "$out/moe.gguf" --preset moe260K --seed 5 --type q8_0 > /dev/null ||
  { echo "FAIL gen-model moe260K"; exit 1; }
check moe260K "-m $out/moe.gguf" Once The Lily

# the server: rank 0 serves HTTP, the others work behind it
for case in "2 --mpi" "3 --mpi-split rows"; do
  np=${case%% *}; opt=${case#* }
  rm -f "$out/port"
  $MPIRUN -np $np "$T" serve $opt -m "stories=$M/stories260K.bin,$M/tok512.bin" --port 0 \
      --port-file "$out/port" --quiet > "$out/serve.log" 2>&1 &
  MP=$!
  i=0
  while [ ! -s "$out/port" ] && [ $i -lt 300 ] && kill -0 $MP 2>/dev/null; do i=$((i + 1)); sleep 0.1; done
  if [ ! -s "$out/port" ]; then
    echo "FAIL serve -np $np $opt did not start"; tail -5 "$out/serve.log"; kill -KILL $MP; fail=1; continue
  fi
  timeout 120 "$T" loadgen --url "http://127.0.0.1:$(cat "$out/port")" --model stories --clients 4 \
      --requests 12 --max-tokens 16,40 --prompt Once --prompt "The cat" \
      --check-run "$stories --precision int8" > "$out/lg.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "12 answers equal" "$out/lg.txt"; then
    echo "ok   serve -np $np $opt: 12 concurrent answers equal tessera run"
  else echo "FAIL serve -np $np $opt: loadgen exit $rc"; tail -3 "$out/lg.txt"; fail=1; fi
  # SIGTERM to rank 0 (a signal to mpirun ends the job at once instead)
  R0=
  for d in /proc/[0-9]*; do
    grep -q "^PPid:[[:space:]]*$MP\$" "$d/status" 2>/dev/null || continue
    tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=0$' && R0=${d#/proc/}
  done
  [ -n "$R0" ] && kill -TERM "$R0"
  timeout 60 sh -c "while kill -0 $MP 2>/dev/null; do sleep 0.1; done"
  wait $MP
  rc=$?
  if [ -n "$R0" ] && [ $rc -eq 0 ]; then echo "ok   serve -np $np $opt: SIGTERM to rank 0, job exit 0"
  else echo "FAIL serve -np $np $opt: after SIGTERM to rank 0 ($R0) the job exited $rc"
    tail -5 "$out/serve.log"; kill -KILL $MP 2>/dev/null; fail=1; fi
done

# fault NAME WANT ENV MPIRUN-ARGS...: the job must fail (not time out) with
# WANT in rank 0's error
fault() {
  name=$1 want=$2 envs=$3; shift 3
  env $envs timeout 60 $MPIRUN "$@" > /dev/null 2>"$out/err.txt"
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "$want" "$out/err.txt"; then
    echo "FAIL $name: exit $rc"; tail -5 "$out/err.txt"; fail=1
  else echo "ok   $name: rank 0 exit $rc, '$want'"; fi
}
# a rank that hangs: rank 0 names the rank and exits non-zero within the timeout
fault "a hanging rank 1" "rank 1 did not answer" TSR_MPI_FAULT=rank=1,after=5,mode=hang \
  -np 2 "$T" run $stories -p Once --mpi --mpi-timeout 3000
# the middle rank of a 3-rank pipeline hangs: rank 0 waits on the last rank,
# and its probe of every rank names the silent one
fault "a hanging middle rank 1 of 3" "a probe finds rank 1 silent" \
  TSR_MPI_FAULT=rank=1,after=5,mode=hang -np 3 "$T" run $stories -p Once --mpi --mpi-timeout 3000
# a rank killed mid-run; mpirun is told not to end the job itself when a
# process dies, so that rank 0 meets the silence and names the rank
fault "a killed rank 2" "rank 2 did not answer" TSR_MPI_FAULT=rank=2,after=5,mode=kill \
  --mca orte_abort_on_non_zero_status 0 -np 3 "$T" run $stories -p Once -p The -p Lily \
  --mpi-split rows --mpi-timeout 3000
exit $fail
