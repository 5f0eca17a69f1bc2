#!/bin/sh
# serve-bench.sh BUILD [OUTDIR] - what `tessera serve` sustains.
#
#  1. Aggregate tokens/s at CLIENTS (default 1 4 16 64) closed-loop clients,
#     on the CPU alone and with every matmul offloaded to a device
#     (DEVICE, default fmodel: the kernel's functional model, which counts
#     the kernel's cycles). The offload figure is projected: the run's wall
#     time with the forward passes' measured time replaced by their host ops
#     plus the devices' work as their boards would take it (cycles at the
#     stated clock, launch latency, copies over the link; /metrics'
#     tessera_*_seconds_total). Every greedy answer is checked against
#     `tessera run`. Each point is the median of REPS (3) runs.
#  2. TTFT and inter-token latency by tenant class at 16 clients (premium and
#     standard, 1:3), CPU plus a pool of two devices.
#  3. A load step (1, 16, then 1 client) with a pool of POOL (default
#     fmodel:3): timeline CSV and PNG of load, pool devices and scaling
#     events (scripts/plot-timeline.sh).
# Models: the real stories260K when ../shared/models holds it, and a
# generated stories15M-shaped Q8_0 model (random weights). The machine must
# be otherwise idle; results go to OUTDIR (default BUILD/serve-bench).
set -eu
BUILD=${1:-build}
OUT=${2:-$BUILD/serve-bench}
T="$BUILD/bin/tessera"
M=${TSR_MODELS_DIR:-../shared/models}
CLIENTS=${CLIENTS:-1 4 16 64}
MAX_TOKENS=${MAX_TOKENS:-64}
DEVICE=${DEVICE:-fmodel}
POOL=${POOL:-fmodel:3}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
mkdir -p "$OUT"
SPID=
trap '[ -n "$SPID" ] && kill -KILL $SPID 2> /dev/null; true' EXIT

gen="$OUT/stories15M-q8_0.gguf"
[ -f "$gen" ] || "$T" gen-model -o "$gen" --preset stories15M --type q8_0 --seed 1 > /dev/null
set --
if [ -f "$M/stories260K.bin" ] && [ -f "$M/tok512.bin" ]; then
  set -- "stories260K|$M/stories260K.bin,$M/tok512.bin|-m $M/stories260K.bin -z $M/tok512.bin"
fi
set -- "$@" "stories15M-q8_0|$gen|-m $gen"

start() { # serve options...
  rm -f "$OUT/port"
  "$T" serve "$@" --port 0 --port-file "$OUT/port" -t "$THREADS" > "$OUT/serve.log" 2>&1 &
  SPID=$!
  while [ ! -s "$OUT/port" ]; do
    kill -0 $SPID 2> /dev/null || { cat "$OUT/serve.log"; exit 1; }
    sleep 0.1
  done
  URL="http://127.0.0.1:$(cat "$OUT/port")"
}
stop() { kill -TERM $SPID; wait $SPID; SPID=; }
metric() { curl -s ${KEY:+-H "Authorization: Bearer $KEY"} "$URL/metrics" | sed -n "s/^$1 //p"; }

echo "model mode clients requests tokens wall_s tok_s projected_tok_s ttft_p50_ms ttft_p99_ms itl_p50_ms itl_p99_ms" > "$OUT/runs.txt"
for spec in "$@"; do
  name=${spec%%|*}; rest=${spec#*|}; file=${rest%%|*}; runargs=${rest#*|}
  for mode in cpu offload; do
    if [ $mode = cpu ]; then start -m "$name=$file" --parallel 64
    else start -m "$name=$file" --parallel 64 --device "$DEVICE" --quiet; fi
    for c in $CLIENTS; do
      n=$((c * 8)); [ $n -lt 64 ] && n=64
      rep=0
      while [ $rep -lt "$REPS" ]; do
        rep=$((rep + 1))
        e0=$(metric tessera_eval_seconds_total); h0=$(metric tessera_host_op_seconds_total)
        b0=$(metric tessera_board_projected_seconds_total)
        "$T" loadgen --url "$URL" --model "$name" --clients "$c" --requests "$n" \
          --max-tokens "$MAX_TOKENS" --prompt "Once upon a time" --prompt "The little dog" \
          --check-run "$runargs --precision int8" --json "$OUT/run.json" > "$OUT/lg.txt" 2>&1 ||
          { echo "serve-bench: loadgen failed:"; tail -5 "$OUT/lg.txt"; exit 1; }
        e1=$(metric tessera_eval_seconds_total); h1=$(metric tessera_host_op_seconds_total)
        b1=$(metric tessera_board_projected_seconds_total)
        python3 - "$OUT/run.json" "$name" "$mode" "$c" "$e0" "$e1" "$h0" "$h1" "$b0" "$b1" \
          >> "$OUT/runs.txt" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
name, mode, c = sys.argv[2:5]
e0, e1, h0, h1, b0, b1 = map(float, sys.argv[5:11])
wall = r["seconds"]
proj = wall - (e1 - e0) + (h1 - h0) + (b1 - b0)
cls = r["classes"][0]
pt = "%.1f" % (r["tokens"] / proj) if mode == "offload" else "-"
print(name, mode, c, r["requests"], r["tokens"], "%.3f" % wall, "%.1f" % r["tok_s"], pt,
      "%.2f" % cls["ttft_ms"]["p50"], "%.2f" % cls["ttft_ms"]["p99"],
      "%.3f" % cls["itl_ms"]["p50"], "%.3f" % cls["itl_ms"]["p99"])
EOF
      done
    done
    stop
  done
done
# the median run (by tok/s) of each (model, mode, clients)
python3 - "$OUT/runs.txt" > "$OUT/throughput.txt" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
head, rows = rows[0], rows[1:]
groups = {}
for r in rows:
    groups.setdefault(tuple(r[:3]), []).append(r)
print(" ".join(head), "runs")
for k, g in groups.items():
    g.sort(key=lambda r: float(r[6]))
    print(" ".join(g[len(g) // 2]), len(g))
EOF
cat "$OUT/throughput.txt"

# ---- latency by tenant class at 16 clients, and the load step ----
cat > "$OUT/tenants.json" <<'EOF'
{"admin_key": "bench-admin-01", "tenants": [
  {"name": "gold", "key": "bench-gold-01", "class": "premium"},
  {"name": "free", "key": "bench-free-01", "class": "standard", "priority": 5}]}
EOF
first=${1%%|*}; rest=${1#*|}; file=${rest%%|*}; runargs=${rest#*|}
KEY=bench-admin-01
start -m "$first=$file" --tenants "$OUT/tenants.json" --pool "$POOL" --quiet --parallel 8
"$T" loadgen --url "$URL" --model "$first" --clients 16 --requests 320 --max-tokens 16,64,128 \
  --tenant bench-gold-01:premium:1 --tenant bench-free-01:standard:3 \
  --prompt "Once upon a time" --prompt "Lily and Ben went to the park" --prompt "The little dog" \
  --check-run "$runargs --precision int8" --json "$OUT/classes16.json" > "$OUT/classes16.txt" 2>&1 ||
  { echo "serve-bench: loadgen failed:"; tail -5 "$OUT/classes16.txt"; exit 1; }
grep -v '^loadgen: check' "$OUT/classes16.txt"
stop
start -m "$first=$file" --tenants "$OUT/tenants.json" --pool "$POOL" --quiet --parallel 8 \
  --pool-window 1 --pool-seqs 2
"$T" loadgen --url "$URL" --model "$first" --steps-phase 1:3,16:10,1:8 \
  --tenant bench-gold-01:premium:1 --tenant bench-free-01:standard:3 --max-tokens 16,64,128 \
  --prompt "Once upon a time" --prompt "The little dog" --check-run "$runargs --precision int8" \
  --timeline "$OUT/timeline.csv" --timeline-ms 100 --metrics-key bench-admin-01 \
  --json "$OUT/step.json" > "$OUT/step.txt" 2>&1 ||
  { echo "serve-bench: loadgen failed:"; tail -5 "$OUT/step.txt"; exit 1; }
tail -n 1 "$OUT/step.txt"
grep -E 'added|released' "$OUT/serve.log" || true
stop
scripts/plot-timeline.sh "$OUT/timeline.csv" "$OUT/timeline.png"
echo "serve-bench: results in $OUT (throughput.txt, classes16.txt, timeline.png)"
