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

# The server under load: its HTTP thread, scheduler and the engines' device
# queues, with the pool scaling up and down, under ThreadSanitizer; the
# clients are the plain build's loadgen.
M=${TSR_MODELS_DIR:-../shared/models}
TS="$BUILD-tsan/bin/tessera"
if [ ! -x "$TS" ] || [ ! -f "$M/stories260K.bin" ]; then
  echo "SKIP case serve: no $TS or no stories260K in $M"
  exit 0
fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
cat > "$out/tenants.json" <<'EOF'
{"admin_key": "admin-key-0001", "tenants": [
  {"name": "gold", "key": "gold-key-0001", "class": "premium"},
  {"name": "free", "key": "free-key-0001", "class": "standard", "priority": 5}]}
EOF
log="$BUILD/test-logs/tsan_serve.log"
"$TS" serve -m "stories=$M/stories260K.bin,$M/tok512.bin" --tenants "$out/tenants.json" \
  --pool fmodel:3 --pool-window 0.3 --pool-seqs 2 --parallel 8 -t 2 --port 0 \
  --port-file "$out/port" > "$log" 2>&1 &
spid=$!
i=0
while [ ! -s "$out/port" ] && kill -0 $spid 2> /dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
[ -s "$out/port" ] || { echo "the ThreadSanitizer server did not start:"; tail -20 "$log"; kill -KILL $spid; exit 1; }
"$BUILD/bin/tessera" loadgen --url "http://127.0.0.1:$(cat "$out/port")" --model stories \
  --steps-phase 1:1,8:3,1:2 --tenant gold-key-0001:premium --tenant free-key-0001:standard \
  --max-tokens 16,32 --metrics-key admin-key-0001 --timeline "$out/t.csv" \
  --check-run "-m $M/stories260K.bin -z $M/tok512.bin --precision int8" > "$out/lg.txt" 2>&1
lrc=$?
kill -TERM $spid
wait $spid
rc=$?
if grep -q 'WARNING: ThreadSanitizer' "$log" || [ $rc != 0 ] || [ $lrc != 0 ]; then
  echo "serve under ThreadSanitizer failed (server exit $rc, loadgen exit $lrc):"
  grep -A30 'WARNING: ThreadSanitizer' "$log" | head -60
  tail -n 5 "$out/lg.txt"
  exit 1
fi
echo "REPORT tsan serve: $(tail -n 1 "$out/lg.txt" | sed 's/^loadgen: //'), no ThreadSanitizer report"
