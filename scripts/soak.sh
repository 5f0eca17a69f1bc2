#!/bin/sh
# soak.sh BUILD [SECONDS] - the bounded soak (`make soak`, not in `make test`).
#
# For SECONDS (default 300), in rounds until the time is up:
#   - the server (stories260K, or a generated model without the reference
#     models; a premium and a standard tenant; a pool of three functional-
#     model devices, two of which fail launches at random, fail_rate) under
#     `tessera loadgen` with a client count drawn for the round, every
#     answer checked against `tessera run`;
#   - `tessera run` with every matmul on a device failing at random, its text
#     compared with the CPU's;
#   - the fuzz targets' corpora replayed once each, when `make fuzz` has
#     built them (FUZZ_DIR, default BUILD-fuzz/bin).
# One server runs through the whole soak; its resident memory is sampled
# every second. Fails if a round loses or changes an answer, a run's text
# differs, a corpus input crashes, the server dies, or its RSS grows: the
# mean of the last third of the samples (after a warm-up fifth) above the
# first third's by more than 10 % + 8 MiB. Prints the figures.
set -u
BUILD=${1:-build}
SECONDS_TOTAL=${2:-${SOAK_SECONDS:-300}}
T="$BUILD/bin/tessera"
M=${TSR_MODELS_DIR:-../shared/models}
FUZZ_DIR=${FUZZ_DIR:-$BUILD-fuzz/bin}
out=$(mktemp -d)
SPID=
RPID=
cleanup() {
  [ -n "$RPID" ] && kill "$RPID" 2> /dev/null
  [ -n "$SPID" ] && kill -KILL "$SPID" 2> /dev/null
  rm -rf "$out"
}
trap cleanup EXIT
fail=0
seed=${SOAK_SEED:-$(date +%s)}
rand() { # prints a pseudo-random integer in [0, $1) and advances the seed
  seed=$(( (seed * 1103515245 + 12345) % 2147483648 ))
  echo $(( seed / 65536 % $1 ))
}

if [ -f "$M/stories260K.bin" ] && [ -f "$M/tok512.bin" ]; then
  MODEL="$M/stories260K.bin,$M/tok512.bin"
  RUN_ARGS="-m $M/stories260K.bin -z $M/tok512.bin --precision int8"
else
  "$T" gen-model -o "$out/gen.gguf" --preset stories260K --seed 5 --type q8_0 > /dev/null || exit 1
  MODEL="$out/gen.gguf"
  RUN_ARGS="-m $out/gen.gguf --precision int8"
fi
cat > "$out/tenants.json" <<'EOF'
{"admin_key": "soak-admin-001", "tenants": [
  {"name": "gold", "key": "soak-gold-001", "class": "premium"},
  {"name": "free", "key": "soak-free-001", "class": "standard", "priority": 5}]}
EOF
"$T" serve -m "soak=$MODEL" --tenants "$out/tenants.json" --quiet \
  --pool "fmodel:fail_rate=0.002,seed=$(rand 1000),fmodel:fail_rate=0.002,seed=$(rand 1000),fmodel" \
  --pool-window 1 --pool-seqs 2 --parallel 8 -t 2 --port 0 --port-file "$out/port" \
  > "$out/serve.log" 2>&1 &
SPID=$!
i=0
while [ ! -s "$out/port" ]; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 $SPID 2> /dev/null; then echo "FAIL the server did not start"; cat "$out/serve.log"; exit 1; fi
  sleep 0.1
done
URL="http://127.0.0.1:$(cat "$out/port")"
(while kill -0 $SPID 2> /dev/null; do
   sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$SPID/status
   sleep 1
 done) > "$out/rss.txt" &
RPID=$!

start=$(date +%s)
rounds=0 requests=0 runs=0 corpus=0
"$T" run $RUN_ARGS -p "Once upon a time" -n 120 --temp 0 > "$out/cpu.txt" 2> /dev/null
while [ $(( $(date +%s) - start )) -lt "$SECONDS_TOTAL" ]; do
  rounds=$((rounds + 1))
  case $(rand 4) in 0) c=1 ;; 1) c=4 ;; 2) c=8 ;; *) c=16 ;; esac
  "$T" loadgen --url "$URL" --model soak --clients $c --duration 10 \
    --tenant soak-gold-001:premium:1 --tenant soak-free-001:standard:3 \
    --prompt "Once upon a time" --prompt "The little dog" --prompt "Lily and Ben" \
    --max-tokens 16,48,96 --seed "$(rand 100000)" --check-run "$RUN_ARGS" \
    --json "$out/round.json" > "$out/round.txt" 2>&1
  rc=$?
  n=$(sed -n 's/^loadgen: \([0-9]*\) requests, .*/\1/p' "$out/round.txt" | tail -n 1)
  requests=$((requests + ${n:-0}))
  if [ $rc != 0 ]; then echo "FAIL round $rounds ($c clients): loadgen exit $rc"; tail -n 5 "$out/round.txt"; fail=1; break; fi
  kill -0 $SPID 2> /dev/null || { echo "FAIL the server died"; tail -n 20 "$out/serve.log"; fail=1; break; }
  # a generation on a device failing at random
  "$T" run $RUN_ARGS -p "Once upon a time" -n 120 --temp 0 --offload all --quiet \
    --device "fmodel:fail_rate=0.02,seed=$(rand 100000)" > "$out/dev.txt" 2> /dev/null
  runs=$((runs + 1))
  cmp -s "$out/cpu.txt" "$out/dev.txt" ||
    { echo "FAIL round $rounds: the text on a failing device differs from the CPU's"; fail=1; break; }
  # the fuzzers' corpora, once each
  if [ -d "$FUZZ_DIR" ]; then
    for f in "$FUZZ_DIR"/fuzz_*; do
      [ -x "$f" ] || continue
      name=$(basename "$f")
      dir="$BUILD-fuzz/corpus/$name"
      [ -d "$dir" ] || continue
      if ! "$f" -runs=0 "$dir" > "$out/fuzz.txt" 2>&1; then
        echo "FAIL round $rounds: $name crashed on its corpus"; tail -n 20 "$out/fuzz.txt"; fail=1; break 2
      fi
      corpus=$((corpus + $(ls "$dir" | wc -l)))
    done
  fi
done
elapsed=$(( $(date +%s) - start ))
metrics=$(curl -s -H "Authorization: Bearer soak-admin-001" "$URL/metrics")
kill -TERM $SPID
wait $SPID
src=$?
SPID=
[ $src = 0 ] || { echo "FAIL the server exited $src after SIGTERM"; fail=1; }
kill "$RPID" 2> /dev/null
RPID=
faults=$(echo "$metrics" | awk '/^tessera_device_(retries|fallbacks)_total/ {s += $2} END {print s + 0}')
ups=$(echo "$metrics" | sed -n 's/^tessera_scaling_events_total{direction="up"} //p')
downs=$(echo "$metrics" | sed -n 's/^tessera_scaling_events_total{direction="down"} //p')
python3 - "$out/rss.txt" <<EOF || fail=1
import sys
s = [int(x) for x in open(sys.argv[1]) if x.strip()]
if len(s) < 10:
    print("FAIL too few RSS samples (%d)" % len(s)); sys.exit(1)
s = s[len(s) // 5:]
k = len(s) // 3
first, last = sum(s[:k]) / k, sum(s[-k:]) / k
grow = last - first
ok = grow <= 0.10 * first + 8 * 1024
print("%s soak: %d s, %d rounds, %d requests all equal to run, %d runs on failing devices equal to the CPU's, %d corpus inputs replayed, %s device faults met, pool scaled up %s / down %s times" %
      ("ok  " if ok else "FAIL", $elapsed, $rounds, $requests, $runs, $corpus, "$faults", "$ups", "$downs"))
print("REPORT soak server RSS: first third %.1f MiB, last third %.1f MiB, growth %+.1f MiB (%d samples after warm-up; limit 10 %% + 8 MiB)" %
      (first / 1024, last / 1024, grow / 1024, len(s)))
sys.exit(0 if ok else 1)
EOF
exit $fail
