#!/bin/sh
# run.sh BUILD - runs every test program and end-to-end script, then prints
# one closing line "N passed, N failed".
#   unit:  BUILD/tests/test_*        (CUnit programs; exit status decides)
#   e2e:   tests/e2e/*.sh BUILD       (shell; exit status decides, 77 = skip)
BUILD=${1:-build}
pass=0; fail=0; skip=0; failed=""
log_dir="$BUILD/test-logs"; mkdir -p "$log_dir"
run_one() { # name cmd...
  name=$1; shift
  start=$(date +%s)
  "$@" > "$log_dir/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc = 0 ]; then pass=$((pass+1)); echo "PASS  $name (${secs}s)"
  elif [ $rc = 77 ]; then skip=$((skip+1)); echo "SKIP  $name: $(tail -n 1 "$log_dir/$name.log")"
  else fail=$((fail+1)); failed="$failed $name"; echo "FAIL  $name (exit $rc), last lines:"
       tail -n 25 "$log_dir/$name.log" | sed 's/^/    /'; fi
  # Summaries that tests print for the record ("REPORT ..." lines).
  grep -o 'REPORT.*' "$log_dir/$name.log" | sed 's/^/    /'
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "$(basename "$t")" "$t"
done
for t in tests/e2e/*.sh; do
  [ -f "$t" ] || continue
  run_one "e2e_$(basename "$t" .sh)" sh "$t" "$BUILD"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
