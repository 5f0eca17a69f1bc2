#!/bin/sh
# run.sh BUILD - runs every test program and end-to-end script, then prints
# one closing line "N passed, N failed, N skipped" (programs).
#   unit:  BUILD/tests/test_*        (CUnit programs)
#   e2e:   tests/e2e/*.sh BUILD       (shell)
# The exit status decides: 0 pass, 77 skip (the program could not run here:
# a library, model or backend is missing; its last output line says why),
# anything else fail. A program that passed but could not run some of its
# cases prints "SKIP case NAME: REASON" lines; they are shown under its PASS
# line, which counts them, so a skipped case never reads as a passed one.
BUILD=${1:-build}
pass=0; fail=0; skip=0; skipped_cases=0; failed=""
log_dir="$BUILD/test-logs"; mkdir -p "$log_dir"
run_one() { # name cmd...
  name=$1; shift
  start=$(date +%s)
  "$@" > "$log_dir/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc = 0 ]; then
    pass=$((pass+1))
    n_skip=$(grep -c '^SKIP case ' "$log_dir/$name.log")
    if [ "$n_skip" = 0 ]; then echo "PASS  $name (${secs}s)"
    else
      skipped_cases=$((skipped_cases+n_skip))
      echo "PASS  $name (${secs}s), $n_skip case(s) SKIPPED:"
      grep '^SKIP case ' "$log_dir/$name.log" | sed 's/^/    /'
    fi
  elif [ $rc = 77 ]; then skip=$((skip+1)); echo "SKIP  $name: $(tail -n 1 "$log_dir/$name.log")"
       [ "$(grep -c '^SKIP case ' "$log_dir/$name.log")" -gt 1 ] &&
         grep '^SKIP case ' "$log_dir/$name.log" | sed 's/^/    /'
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
[ $skipped_cases = 0 ] || echo "skipped cases in passing programs: $skipped_cases (SKIP case lines above)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
