#!/bin/sh
# mpi.sh BUILD - the model across MPI ranks (mpirun on 127.0.0.1):
#   - the pipeline of layers with 2 and 3 ranks (devices per rank) and the
#     rows split give exactly the single-process greedy text, fp32 and int8,
#     for stories260K and for a generated model of 7 layers (uneven shares);
#   - several sequences at once (repeated -p: one batch, micro-batches in
#     the pipeline, sequences spread over the ranks in the rows split): each
#     sequence's text is its text alone;
#   - a rank that stops answering or is killed makes rank 0 fail with the
#     rank named within the timeout.
BUILD=${1:-build}
T="$BUILD/bin/tessera"
M=${TSR_MODELS_DIR:-../shared/models}
command -v mpirun >/dev/null || { echo "SKIP mpirun is not installed"; exit 77; }
# Open MPI's runtime is not built with the sanitizers and keeps memory
# until exit, which LeakSanitizer would report as the test's.
[ -n "$SANITIZE" ] && { echo "SKIP Open MPI is not instrumented (SANITIZE=$SANITIZE)"; exit 77; }
[ -f "$M/stories260K.bin" ] || { echo "SKIP $M/stories260K.bin is absent"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo
MPIRUN="mpirun --oversubscribe"
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

# a rank that hangs: rank 0 names the rank and exits non-zero within the timeout
TSR_MPI_FAULT=rank=1,after=5,mode=hang timeout 60 $MPIRUN -np 2 "$T" run $stories -p Once --mpi \
    --mpi-timeout 3000 > /dev/null 2>"$out/err.txt"
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "rank 1 did not answer" "$out/err.txt"; then
  echo "FAIL hang fault: exit $rc"; tail -5 "$out/err.txt"; fail=1
else echo "ok   a hanging rank 1: rank 0 exit $rc, named it"; fi
# a rank killed mid-run; mpirun is told not to end the job itself when a
# process dies, so that rank 0 meets the silence and names the rank
TSR_MPI_FAULT=rank=2,after=5,mode=kill timeout 60 $MPIRUN --mca orte_abort_on_non_zero_status 0 \
    -np 3 "$T" run $stories -p Once --mpi-split rows --mpi-timeout 3000 -p The -p Lily \
    > /dev/null 2>"$out/err.txt"
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "rank 2 did not answer" "$out/err.txt"; then
  echo "FAIL kill fault: exit $rc"; tail -5 "$out/err.txt"; fail=1
else echo "ok   a killed rank 2: rank 0 exit $rc, named it"; fi
exit $fail
