#!/bin/sh
# serve.sh BUILD - `tessera serve` end to end, on a free loopback port, with
# stories260K and a generated model, three tenants (premium, standard, and a
# batch tenant capped at one request at a time) and an accelerator pool of
# functional-model devices, one of which fails a launch mid-run and one of
# which hangs (the watchdog resets it):
#   - a load step (1 client, 16, then 1) from `tessera loadgen`: every greedy
#     answer equals `tessera run` alone (int8), none lost, no 429 for tenants
#     without quotas, premium TTFT p99 below standard's, the pool scaled up
#     and down (counters in /metrics), the device faults were met;
#   - the capped tenant gets 429s with Retry-After, and its answers are right;
#   - the generated model, served at the same time, answers as `run` does;
#   - SSE parsed as a client would, /metrics parsed as Prometheus text, a
#     tenant's key sees only its own series;
#   - bad requests get the status and the field named; bad tenants files stop
#     the server with the field named; SIGTERM finishes the request in flight.
set -u
BUILD=${1:-build}
M=${TSR_MODELS_DIR:-../shared/models}
T="$BUILD/bin/tessera"
for f in stories260K.bin tok512.bin; do
  [ -f "$M/$f" ] || { echo "no $f in $M (the reference models)"; exit 77; }
done
command -v curl > /dev/null || { echo "curl is missing (scripts/setup-deps.sh installs it)"; exit 77; }
# Debian's python3, where python3-prometheus-client is installed
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
"$PY" -c 'import prometheus_client' 2> /dev/null ||
  { echo "python3-prometheus-client is missing (scripts/setup-deps.sh installs it)"; exit 77; }
out=$(mktemp -d)
SPID=
cleanup() { [ -n "$SPID" ] && kill -KILL "$SPID" 2> /dev/null; rm -rf "$out"; }
trap cleanup EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

"$T" gen-model -o "$out/gen.gguf" --preset stories260K --seed 11 --type q8_0 > /dev/null ||
  { echo "FAIL gen-model"; exit 1; }
cat > "$out/tenants.json" <<'EOF'
{"admin_key": "admin-key-0001",
 "tenants": [
  {"name": "gold", "key": "gold-key-0001", "class": "premium", "priority": 0, "max_tokens": 256},
  {"name": "free", "key": "free-key-0001", "class": "standard", "priority": 5},
  {"name": "capped", "key": "capped-key-01", "class": "batch", "max_concurrent": 1}
 ]}
EOF

start_server() { # options...
  rm -f "$out/port"
  "$T" serve "$@" --port 0 --port-file "$out/port" > "$out/serve.log" 2>&1 &
  SPID=$!
  i=0
  while [ ! -s "$out/port" ]; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 "$SPID" 2> /dev/null; then
      echo "FAIL the server did not start:"; cat "$out/serve.log"; exit 1
    fi
    sleep 0.1
  done
  PORT=$(cat "$out/port")
  URL="http://127.0.0.1:$PORT"
}
stop_server() {
  kill -TERM "$SPID"
  wait "$SPID"
  rc=$?
  SPID=
  if [ $rc = 0 ]; then ok "SIGTERM: the server drained and exited 0"
  else bad "the server exited $rc after SIGTERM"; tail -20 "$out/serve.log"; fi
}
# code BODYFILE curl-args...: prints the HTTP status
code() { f=$1; shift; curl -s -o "$f" -w '%{http_code}' "$@"; }

RUN_ARGS="-m $M/stories260K.bin -z $M/tok512.bin --precision int8"
GEN_ARGS="-m $out/gen.gguf --precision int8"
start_server -m "stories=$M/stories260K.bin,$M/tok512.bin" -m "gen=$out/gen.gguf" \
  --tenants "$out/tenants.json" --pool "fmodel:fail=150,fmodel,fmodel:hang=900" \
  --device-timeout 300 --quiet --pool-window 0.5 --pool-seqs 2 --parallel 8 --prefill-chunk 8 \
  --max-body 8192 -t 2
grep -q "3 tenants" "$out/serve.log" && ok "tenants file read" || bad "tenants file not reported"

# ---- the load step ----
"$T" loadgen --url "$URL" --model stories --steps-phase 1:2,16:6,1:4 \
  --tenant gold-key-0001:premium:1 --tenant free-key-0001:standard:3 \
  --prompt "Once upon a time" --prompt "Lily and Ben went to the park" --prompt "The little dog" \
  --max-tokens 16,48,96 --check-run "$RUN_ARGS" --json "$out/step.json" \
  --timeline "$out/step.csv" --timeline-ms 100 --metrics-key admin-key-0001 > "$out/step.txt" 2>&1
rc=$?
cat "$out/step.txt" | grep -v '^  ' | sed 's/^/    /'
[ $rc = 0 ] && ok "load step: loadgen exit 0" || bad "load step: loadgen exit $rc"
"$PY" - "$out/step.json" "$out/step.csv" <<'EOF' || fail=1
import csv, json, sys
r = json.load(open(sys.argv[1]))
cls = {c["class"]: c for c in r["classes"]}
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond: sys.exit(1)
check(r["requests"] > 0 and r["ok"] == r["requests"], "load step: every request answered (%d of %d)" % (r["ok"], r["requests"]))
check(r["mismatches"] == 0 and r["checked"] == r["requests"], "load step: every answer equals its solo `tessera run` (%d checked)" % r["checked"])
check(r["rate_limited_429"] == 0, "load step: no 429 for tenants without quotas")
p, s = cls["premium"]["ttft_ms"]["p99"], cls["standard"]["ttft_ms"]["p99"]
check(p < s, "load step: premium TTFT p99 %.1f ms < standard %.1f ms" % (p, s))
print("REPORT serve load step: %d requests, %.1f tok/s aggregate; TTFT p50/p99 ms premium %.1f/%.1f, standard %.1f/%.1f; ITL p50/p99 ms premium %.2f/%.2f, standard %.2f/%.2f"
      % (r["requests"], r["tok_s"], cls["premium"]["ttft_ms"]["p50"], p, cls["standard"]["ttft_ms"]["p50"], s,
         cls["premium"]["itl_ms"]["p50"], cls["premium"]["itl_ms"]["p99"], cls["standard"]["itl_ms"]["p50"], cls["standard"]["itl_ms"]["p99"]))
rows = list(csv.DictReader(open(sys.argv[2])))
check(len(rows) > 10, "timeline: %d samples" % len(rows))
up = max(int(float(x["scale_up"])) for x in rows); down = max(int(float(x["scale_down"])) for x in rows)
peak = max(int(float(x["pool_devices"])) for x in rows)
check(up >= 1 and down >= 1, "timeline: scaling events during the step: %d up, %d down (peak %d pool devices)" % (up, down, peak))
EOF

# /metrics, parsed as Prometheus text
curl -s -H "Authorization: Bearer admin-key-0001" "$URL/metrics" > "$out/metrics.txt"
"$PY" - "$out/metrics.txt" <<'EOF' || fail=1
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
def val(name, **labels):
    tot = 0
    for f in fams.values():
        for smp in f.samples:
            if smp.name == name and all(smp.labels.get(k) == v for k, v in labels.items()):
                tot += smp.value
    return tot
need = ["tessera_requests", "tessera_prompt_tokens", "tessera_generated_tokens", "tessera_queue_depth",
        "tessera_batch_rows", "tessera_device_busy_fraction", "tessera_device_launches",
        "tessera_device_fallbacks", "tessera_scaling_events", "tessera_ttft_seconds", "tessera_inter_token_seconds",
        "tessera_pool_devices", "tessera_pool_load"]
missing = [n for n in need if n not in fams]
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond: sys.exit(1)
check(not missing, "/metrics parses as Prometheus text with every family (%d families)%s" % (len(fams), " missing %s" % missing if missing else ""))
check(val("tessera_scaling_events_total", direction="up") >= 1 and val("tessera_scaling_events_total", direction="down") >= 1,
      "/metrics: scaling events up %d, down %d" % (val("tessera_scaling_events_total", direction="up"), val("tessera_scaling_events_total", direction="down")))
faults = val("tessera_device_retries_total") + val("tessera_device_fallbacks_total")
check(faults >= 1, "/metrics: the injected device faults were met (%d retries + fallbacks) and every answer stayed right" % faults)
check(val("tessera_ttft_seconds_count", **{"class": "premium"}) > 0, "/metrics: premium TTFT histogram filled")
check(val("tessera_device_launches_total") > 0, "/metrics: %d device launches" % val("tessera_device_launches_total"))
EOF
curl -s -H "Authorization: Bearer free-key-0001" "$URL/metrics" > "$out/metrics_free.txt"
if grep -q 'tenant="free"' "$out/metrics_free.txt" && ! grep -q 'tenant="gold"' "$out/metrics_free.txt" &&
   ! grep -q 'tessera_pool_load' "$out/metrics_free.txt"; then ok "/metrics with a tenant's key: its own series only"
else bad "/metrics with a tenant's key shows other series"; fi
[ "$(code "$out/b" "$URL/metrics")" = 401 ] && ok "/metrics without a key: 401" || bad "/metrics without a key: not 401"

# ---- quotas: the capped tenant (max_concurrent 1) with 4 clients ----
"$T" loadgen --url "$URL" --model stories --clients 4 --requests 16 --tenant capped-key-01:batch \
  --max-tokens 64 --check-run "$RUN_ARGS" --json "$out/capped.json" > "$out/capped.txt" 2>&1
rc=$?
"$PY" - "$out/capped.json" "$rc" <<'EOF' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
ok = int(sys.argv[2]) == 0 and r["rate_limited_429"] > 0 and r["errors"] == 0 and r["mismatches"] == 0 and r["ok"] > 0
print(("ok   " if ok else "FAIL ") + "quota: max_concurrent 1 with 4 clients: %d answered (all equal to run), %d got 429" % (r["ok"], r["rate_limited_429"]))
sys.exit(0 if ok else 1)
EOF
# three at once: one runs, the others get 429 with Retry-After
pids=
for i in 1 2 3; do
  curl -s -D "$out/h$i" -o /dev/null -H "Authorization: Bearer capped-key-01" "$URL/v1/completions" \
    -d '{"model":"stories","prompt":"Once","max_tokens":500,"temperature":0}' &
  pids="$pids $!"
done
wait $pids
n429=$(grep -l '^HTTP/1.1 429' "$out/h1" "$out/h2" "$out/h3" | xargs grep -li '^retry-after: [0-9]' | wc -l)
n200=$(grep -l '^HTTP/1.1 200' "$out/h1" "$out/h2" "$out/h3" | wc -l)
if [ "$n429" -ge 1 ] && [ "$n200" -ge 1 ]; then ok "quota: 3 at once with max_concurrent 1: $n200 answered, $n429 got 429 with Retry-After"
else bad "quota: 3 at once: $n200 answered, $n429 with 429 + Retry-After"; cat "$out/h1" "$out/h2" "$out/h3"; fi

# ---- the second model, at the same time as the first ----
"$T" loadgen --url "$URL" --model gen --clients 4 --requests 12 --tenant gold-key-0001:premium \
  --tenant free-key-0001:standard --prompt "a b c" --max-tokens 24 --stream-fraction 1 \
  --check-run "$GEN_ARGS" > "$out/gen.txt" 2>&1 &
GPID=$!
"$T" loadgen --url "$URL" --model stories --clients 4 --requests 12 --tenant gold-key-0001:premium \
  --max-tokens 24 --check-run "$RUN_ARGS" > "$out/gen2.txt" 2>&1
rc2=$?
wait $GPID
rc1=$?
[ $rc1 = 0 ] && [ $rc2 = 0 ] && ok "two models at once: every answer equals run (generated model and stories260K)" ||
  { bad "two models at once: loadgen exit $rc1 / $rc2"; tail -5 "$out/gen.txt"; }

# ---- SSE as a client parses it ----
A="Authorization: Bearer gold-key-0001"
curl -s -H "$A" "$URL/v1/completions" -d '{"model":"stories","prompt":"The little dog","max_tokens":30,"temperature":0}' > "$out/whole.json"
curl -sN -H "$A" "$URL/v1/completions" -d '{"model":"stories","prompt":"The little dog","max_tokens":30,"temperature":0,"stream":true}' > "$out/sse.txt"
"$PY" - "$out/sse.txt" "$out/whole.json" <<'EOF' || fail=1
import json, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8")
whole = json.load(open(sys.argv[2]))
events, cur = [], []
for line in raw.split("\n"):
    if line == "":
        if cur: events.append("\n".join(cur)); cur = []
        continue
    assert line.startswith("data: "), "not a data line: %r" % line
    cur.append(line[6:])
assert not cur, "the stream ends inside an event"
assert events[-1] == "[DONE]", "no [DONE] at the end"
chunks = [json.loads(e) for e in events[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks)
assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
last = chunks[-1]
assert last["choices"][0]["finish_reason"] == "length" and last["usage"]["completion_tokens"] == 30
assert text == whole["choices"][0]["text"], (text, whole["choices"][0]["text"])
print("ok   SSE: %d events, [DONE] last, text equals the whole answer" % len(chunks))
EOF

# ---- bad requests ----
expect() { # name status param curl-args...
  name=$1; want=$2; param=$3; shift 3
  got=$(code "$out/b" "$@")
  gp=$("$PY" -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; print(e.get("param") or "-")' "$out/b" 2> /dev/null)
  if [ "$got" = "$want" ] && [ "$gp" = "$param" ]; then ok "$name: $got, param $gp"
  else bad "$name: got $got param '$gp', want $want param '$param': $(cat "$out/b")"; fi
}
C="$URL/v1/completions"
expect "no key" 401 - "$C" -d '{"prompt":"x"}'
expect "wrong key" 401 - -H "Authorization: Bearer nope-nope-nope" "$C" -d '{"prompt":"x"}'
expect "unknown field" 400 bogus -H "$A" "$C" -d '{"model":"stories","prompt":"x","bogus":1}'
expect "unsupported value" 400 n -H "$A" "$C" -d '{"model":"stories","prompt":"x","n":2}'
expect "not JSON" 400 - -H "$A" "$C" -d '{"model":'
expect "unknown model" 404 model -H "$A" "$C" -d '{"model":"nope","prompt":"x"}'
expect "model missing (two served)" 400 model -H "$A" "$C" -d '{"prompt":"x"}'
expect "max_tokens 0" 400 max_tokens -H "$A" "$C" -d '{"model":"stories","prompt":"x","max_tokens":0}'
expect "max_tokens over the tenant's" 400 max_tokens -H "$A" "$C" -d '{"model":"stories","prompt":"x","max_tokens":300}'
expect "temperature a string" 400 temperature -H "$A" "$C" -d '{"model":"stories","prompt":"x","temperature":"hot"}'
expect "top_p 0" 400 top_p -H "$A" "$C" -d '{"model":"stories","prompt":"x","top_p":0}'
long=$("$PY" -c 'print("a b " * 1000)')
printf '{"model":"stories","prompt":"%s"}' "$long" > "$out/long.json"
expect "prompt over the context" 400 prompt -H "$A" "$C" --data-binary @"$out/long.json"
"$PY" -c 'import json; print(json.dumps({"model":"stories","prompt":"x "*6000}))' > "$out/big.json"
expect "body over --max-body" 413 - -H "$A" "$C" --data-binary @"$out/big.json"
expect "GET on completions" 405 - -H "$A" "$C"
expect "unknown path" 404 - -H "$A" "$URL/v2/nothing"
st=$(code "$out/b" -H "$A" "$URL/v1/models")
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert sorted(m["id"] for m in d["data"]) == ["gen","stories"]' "$out/b" &&
  [ "$st" = 200 ] && ok "/v1/models lists both models" || bad "/v1/models: $st $(cat "$out/b")"
[ "$(code "$out/b" "$URL/health")" = 200 ] && ok "/health: 200" || bad "/health"

# ---- SIGTERM while a request runs: it is answered in full ----
curl -s -H "$A" "$C" -d '{"model":"stories","prompt":"Once upon a time","max_tokens":200,"temperature":0}' > "$out/last.json" &
CPID=$!
sleep 0.2
stop_server
wait $CPID
"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["usage"]["completion_tokens"] > 0, r' "$out/last.json" &&
  ok "SIGTERM: the request in flight was answered ($("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["completion_tokens"])' "$out/last.json") tokens)" ||
  bad "SIGTERM: the request in flight was lost: $(cat "$out/last.json")"

# ---- a device lost mid-run (the RTL when it is built), a client gone mid-stream ----
if [ -f "$BUILD/lib/libtessera_rtl.so" ]; then LOST="sim:lost_at=40"; else LOST="fmodel:lost"; fi
start_server -m "stories=$M/stories260K.bin,$M/tok512.bin" --pool "fmodel,$LOST" --pool-min 2 --quiet -t 2
"$T" loadgen --url "$URL" --model stories --clients 4 --requests 16 --max-tokens 40 \
  --check-run "$RUN_ARGS" > "$out/lost.txt" 2>&1
rc=$?
lost=$(curl -s "$URL/metrics" | sed -n 's/^tessera_devices_lost //p')
[ $rc = 0 ] && [ "$lost" = 1 ] && ok "device lost mid-run ($LOST): 16 answers equal to run, the device counted lost" ||
  { bad "device lost mid-run ($LOST): loadgen exit $rc, devices_lost '$lost'"; tail -3 "$out/lost.txt"; }
"$PY" - "$PORT" <<'EOF' || fail=1
import socket, struct, sys
body = b'{"model":"stories","prompt":"Once","max_tokens":500,"stream":true}'
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
got = b""
while b"data: " not in got:
    got += s.recv(4096)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()  # gone after the first event
EOF
sleep 1
curl -s "$URL/metrics" > "$out/m2.txt"
if grep -q '^tessera_running_sequences 0$' "$out/m2.txt" && grep -q 'status="499"} 1$' "$out/m2.txt"; then
  ok "a client gone mid-stream: its sequence freed, counted as 499"
else bad "a client gone mid-stream: $(grep -E 'running_sequences |499' "$out/m2.txt")"; fi
stop_server

# ---- bad tenants files and options stop the server with the field named ----
bad_tenants() { # name expected-text json
  printf '%s' "$3" > "$out/t.json"
  if "$T" serve -m "stories=$M/stories260K.bin,$M/tok512.bin" --tenants "$out/t.json" --port 0 > "$out/e" 2>&1; then
    bad "tenants file $1: the server started"
  elif grep -q "$2" "$out/e"; then ok "tenants file $1: refused, naming $2"
  else bad "tenants file $1: message does not name $2: $(cat "$out/e")"; fi
}
bad_tenants "short key" "tenants\[0\].key" '{"tenants":[{"name":"a","key":"short","class":"premium"}]}'
bad_tenants "bad class" "tenants\[0\].class" '{"tenants":[{"name":"a","key":"aaaaaaaaaa","class":"gold"}]}'
bad_tenants "unknown field" "quota" '{"tenants":[{"name":"a","key":"aaaaaaaaaa","class":"batch","quota":1}]}'
bad_tenants "repeated key" "tenants\[1\].key" '{"tenants":[{"name":"a","key":"aaaaaaaaaa","class":"batch"},{"name":"b","key":"aaaaaaaaaa","class":"batch"}]}'
bad_tenants "not JSON" "line 1" '{"tenants":'
bad_tenants "negative quota" "tenants\[0\].max_concurrent" '{"tenants":[{"name":"a","key":"aaaaaaaaaa","class":"batch","max_concurrent":-1}]}'
if "$T" serve -m "stories=$M/stories260K.bin,$M/tok512.bin" --pool-low 0.9 --pool-high 0.5 > "$out/e" 2>&1; then
  bad "--pool-low above --pool-high accepted"
else grep -q "pool-low" "$out/e" && ok "options: --pool-low above --pool-high refused" || bad "options message: $(cat "$out/e")"; fi

exit $fail
