#!/bin/sh
# tsan.sh BUILD - the concurrency tests built with ThreadSanitizer
# (BUILD-tsan/tests/*, by `make tsan-tests`): each must pass with no report.
# A data race makes TSan exit 66 and print "WARNING: ThreadSanitizer".
BUILD=${1:-build}
TSAN_DIR="$BUILD-tsan/tests"
if [ ! -d "$TSAN_DIR" ]; then
  echo "no ThreadSanitizer build in $TSAN_DIR (make tsan-tests)"
  exit 77
fi
RTL="$(cd "$BUILD" && pwd)/lib/libtessera_rtl.so"
[ -f "$RTL" ] && export TSR_RTL_LIB="$RTL"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
n=0
for t in "$TSAN_DIR"/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  log="$BUILD/test-logs/tsan_$name.log"
  mkdir -p "$BUILD/test-logs"
  "$t" > "$log" 2>&1
  rc=$?
  if grep -q 'WARNING: ThreadSanitizer' "$log" || { [ $rc != 0 ] && [ $rc != 77 ]; }; then
    echo "$name under ThreadSanitizer failed (exit $rc):"
    grep -A30 'WARNING: ThreadSanitizer' "$log" | head -60
    tail -n 20 "$log"
    exit 1
  fi
  grep -o 'SKIP case.*' "$log" | sed "s/^/$name: /"
  echo "REPORT tsan $name: exit $rc, no ThreadSanitizer report"
  n=$((n + 1))
done
[ $n -gt 0 ] || { echo "no test programs in $TSAN_DIR"; exit 77; }
