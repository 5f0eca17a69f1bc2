#!/bin/sh
# mpi.sh BUILD - the model across MPI ranks (mpirun on 127.0.0.1): the
# pipeline of layers with 2 and 3 ranks (devices per rank) and the rows
# split give exactly the single-process greedy text; a rank that stops
# answering makes rank 0 fail with a named error within the timeout.
BUILD=${1:-build}
T="$BUILD/bin/tessera"
M=../shared/models
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
args="-m $M/stories260K.bin -z $M/tok512.bin -p Once -n 80 --temp 0"
for prec in fp32 int8; do
  "$T" run $args --precision $prec > "$out/solo.txt" 2>/dev/null || { echo "FAIL solo $prec"; fail=1; }
  for case in "2 --mpi" "3 --mpi --device fmodel;cpu;fmodel" "2 --mpi-split rows" "3 --mpi-split rows"; do
    np=${case%% *}; opt=${case#* }
    timeout 300 $MPIRUN -np $np "$T" run $args --precision $prec $opt > "$out/mpi.txt" 2>"$out/err.txt" ||
      { echo "FAIL $prec -np $np $opt: exit $?"; tail -5 "$out/err.txt"; fail=1; continue; }
    cmp -s "$out/solo.txt" "$out/mpi.txt" || { echo "FAIL $prec -np $np $opt: text differs"; fail=1; }
  done
done
# a rank that hangs: rank 0 names the rank and exits non-zero within the timeout
TSR_MPI_FAULT=rank=1,after=5,mode=hang timeout 60 $MPIRUN -np 2 "$T" run $args --mpi \
    --mpi-timeout 3000 > /dev/null 2>"$out/err.txt"
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! grep -q "rank 1 did not answer" "$out/err.txt"; then
  echo "FAIL hang fault: exit $rc"; tail -5 "$out/err.txt"; fail=1
fi
exit $fail
