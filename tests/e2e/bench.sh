#!/bin/sh
# bench.sh BUILD - tessera bench on a generated stories260K-sized model:
#  - --peer llama-bench=PATH with a fake llama-bench written here that prints
#    llama-bench-shaped JSON with known rates: the peer's figures are those
#    rates, on the f32 file (against fp32) and the q8_0 file (against int8 on
#    that file); the printed ratios equal tessera's printed figure divided by
#    the peer's (computed here from the printed figures, table and JSON), and
#    it was called once per repetition and file with the arguments it should
#    get; with --half also fp16 and bf16 on the F16 and BF16 files;
#  - a peer that is missing, not executable, exits non-zero, dies on a
#    signal, prints garbage, JSON of another file or without the tg record:
#    the bench still exits 0, the table and the JSON state the failure with
#    the reason, the peer and the file named on stderr;
#  - bad --peer and --depths values: usage errors naming them;
#  - --depths beyond the context are skipped and counted;
#  - whole-process figures: the peak RSS of the `tessera run` child against
#    /usr/bin/time's for the same command, load times positive;
#  - --kernels: each row's percentage is its figure over its printed limit
#    (table and JSON);
#  - --plot DIR: four PNGs (magic bytes, more than 4 KiB) with their .dat and
#    .gp, the scripts regenerate them, and a directory that cannot be made
#    gives a clear error (exit 1).
set -u
BUILD=${1:-build}
T="$BUILD/bin/tessera"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
[ -x "$T" ] || { echo "SKIP $T is not built"; exit 77; }
W=$(mktemp -d /tmp/tsr_bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

Q="--models stories260K --reps 2 --no-kernels --offload-device none --dir $W/models"

# ---- the fake peer: llama-bench's JSON with known rates ----
# fake.sh MODE: ok | exit | signal | garbage | otherfile | nogen
cat > "$W/fake.sh" <<'EOF'
#!/bin/sh
mode=$(basename "$0" .sh)
echo "$*" >> "$(dirname "$0")/calls.$mode"
m= p= n=
while [ $# -gt 0 ]; do
  case $1 in -m) m=$2; shift ;; -p) p=$2; shift ;; -n) n=$2; shift ;; esac
  shift
done
case $mode in
  exit) echo "main: error: failed to load model" >&2; exit 3 ;;
  signal) ulimit -c 0; kill -s ILL $$ ;;
  garbage) echo "this is not { json"; exit 0 ;;
  otherfile) m=/elsewhere/other.gguf ;;
esac
rec() { # n_prompt n_gen avg_ts
  printf '  {\n    "model_filename": "%s",\n    "n_threads": 2,\n    "n_prompt": %s,\n' "$m" "$1"
  printf '    "n_gen": %s,\n    "avg_ns": 1000,\n    "stddev_ns": 0,\n    "avg_ts": %s,\n' "$2" "$3"
  printf '    "stddev_ts": 0.000000,\n    "samples_ts": [ %s ]\n  }' "$3"
}
echo "["
rec "$p" 0 1234.5
if [ "$mode" != nogen ]; then echo ","; rec 0 "$n" 345.25; fi
echo
echo "]"
EOF
for mode in ok exit signal garbage otherfile nogen; do
  cp "$W/fake.sh" "$W/$mode.sh" && chmod +x "$W/$mode.sh"
done
cp "$W/fake.sh" "$W/noexec.sh" && chmod 644 "$W/noexec.sh"

# ---- the peer's figures and ratios ----
if "$T" bench $Q --peer "llama-bench=$W/ok.sh" --depths none --no-process --json \
     > "$W/ok.json" 2> "$W/ok.err"; then
  if "$PY" - "$W/ok.json" "$W/models/stories260K" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
m = d["models"][0]
assert m["peer"]["name"] == "llama-bench", m["peer"]
for f, ours in (("f32", m["fp32"]), ("q8_0", m["peer"]["q8_0"].get("tessera"))):
    p = m["peer"][f]
    assert p["ok"] is True, p
    assert p["file"] == sys.argv[2] + "-" + f + "-seed1.gguf", p["file"]
    assert p["compared_with"] == ("fp32" if f == "f32" else "int8"), p
    assert p["prefill_tok_s"] == 1234.5 and p["decode_tok_s"] == 345.25, p
    assert p["reps"] == 2, p
    for what in ("prefill", "decode"):
        want = ours[what + "_tok_s"] / p[what + "_tok_s"]
        # printed to 2 and 4 decimals: the ratio within their rounding
        assert abs(p[what + "_ratio"] - want) <= 1e-4 + want * 1e-5, (f, what, p, want)
assert m["peer"]["q8_0"]["tessera"]["load_ms"] > 0, m["peer"]["q8_0"]
EOF
  then ok "peer figures and ratios in the JSON"
  else bad "peer figures and ratios in the JSON"; cat "$W/ok.json"; fi
else bad "bench --peer with a good peer exited non-zero"; cat "$W/ok.err"; fi
# called once per repetition and file, with the bench's arguments
calls=$(wc -l < "$W/calls.ok")
n_args=0
for f in f32 q8_0; do
  want_args="-m $W/models/stories260K-$f-seed1.gguf -p 128 -n 64 -t"
  n=$(grep -c -- "^$want_args [0-9]* -r 1 -o json\$" "$W/calls.ok")
  n_args=$((n_args + n))
done
if [ "$calls" = 4 ] && [ "$n_args" = 4 ]; then
  ok "the peer ran once per repetition and file with -m FILE -p 128 -n 64 -t N -r 1 -o json"
else bad "peer calls: $calls ($n_args as wanted), wanted 2 per file like -m FILE -p 128 -n 64 -t N -r 1 -o json"
  cat "$W/calls.ok"; fi

# --half: fp16 on the F16 file and bf16 on the BF16 file, the peer on those files
if "$T" bench $Q --peer "llama-bench=$W/ok.sh" --depths none --no-process --half --json \
     > "$W/half.json" 2> "$W/half.err"; then
  if "$PY" - "$W/half.json" "$W/models/stories260K" <<'EOF2'
import json, sys
m = json.load(open(sys.argv[1]))["models"][0]
for prec, f in (("fp16", "f16"), ("bf16", "bf16")):
    h = m["half"][prec]
    assert h["file"] == sys.argv[2] + "-" + f + "-seed1.gguf", h["file"]
    assert h["load_ms"] > 0 and h["prefill_tok_s"] > 0 and h["decode_tok_s"] > 0, h
    p = h["peer"]
    assert p["ok"] is True and p["prefill_tok_s"] == 1234.5, p
    for what in ("prefill", "decode"):
        want = h[what + "_tok_s"] / p[what + "_tok_s"]
        assert abs(p[what + "_ratio"] - want) <= 1e-4 + want * 1e-5, (prec, what, p, want)
EOF2
  then ok "--half: fp16 and bf16 on their files, the peer's ratios"
  else bad "--half JSON"; cat "$W/half.json"; fi
else bad "bench --half exited non-zero"; cat "$W/half.err"; fi
# the table: the peer's line, ratio = tessera's printed figure / the peer's
if "$T" bench $Q --peer "llama-bench=$W/ok.sh" --depths none --no-process \
     > "$W/ok.txt" 2>&1; then
  lines=$(awk '/^peer llama-bench/ { on = 1 } on && $1 == "stories260K" { print }' "$W/ok.txt")
  if [ "$(echo "$lines" | awk '{ print $2 }' | tr '\n' ' ')" = "f32 q8_0 " ] &&
     echo "$lines" | "$PY" -c '
import sys
for line in sys.stdin.read().splitlines():
  f = line.split()
  # model file  pp t/s  peer t/s  ratio  tg t/s  peer t/s  ratio
  ours_pp, peer_pp, r_pp = float(f[2]), float(f[4]), float(f[6].rstrip("x"))
  ours_tg, peer_tg, r_tg = float(f[7]), float(f[9]), float(f[11].rstrip("x"))
  assert peer_pp == 1234.5 and abs(peer_tg - 345.25) <= 0.051, f
  # figures printed to 0.1 and ratios to 0.01
  for o, p, r in ((ours_pp, peer_pp, r_pp), (ours_tg, 345.25, r_tg)):
    assert abs(r - o / p) <= 0.005 + 0.05 / p + 1e-9, (r, o / p)
'; then ok "peer figures and ratios in the table (f32 and q8_0 rows)"
  else bad "peer lines of the table: '$lines'"; cat "$W/ok.txt"; fi
else bad "bench --peer (table) exited non-zero"; cat "$W/ok.txt"; fi

# ---- the peer's failures: stated, named, not fatal ----
peer_fails() { # what peer-path reason-pattern
  what=$1; path=$2; pat=$3
  if ! "$T" bench $Q --peer "llama-bench=$path" --depths none --no-process --json \
       > "$W/f.json" 2> "$W/f.err"; then
    bad "peer $what: the bench exited non-zero"; cat "$W/f.err"; return
  fi
  if "$PY" - "$W/f.json" "$pat" <<'EOF'
import json, re, sys
m = json.load(open(sys.argv[1]))["models"][0]
for f in ("f32", "q8_0"):
    p = m["peer"][f]
    assert p["ok"] is False, p
    assert re.search(sys.argv[2].replace("FILE", f), p["error"]), p["error"]
assert m["fp32"]["prefill_tok_s"] > 0 and m["int8"]["decode_tok_s"] > 0, m
EOF
  then :
  else bad "peer $what: JSON does not state the failure (/$pat/)"; cat "$W/f.json"; return; fi
  if ! grep -Eq "peer llama-bench '$path' on '.*stories260K-f32-seed1.gguf'.*$(echo "$pat" | sed s/FILE/f32/)" "$W/f.err"; then
    bad "peer $what: stderr does not name the peer, the file and the reason"; cat "$W/f.err"
    return
  fi
  "$T" bench $Q --peer "llama-bench=$path" --depths none --no-process > "$W/f.txt" 2>&1
  if [ $? = 0 ] && grep -Eq "^stories260K *f32 *peer failed: .*$(echo "$pat" | sed s/FILE/f32/)" "$W/f.txt" &&
     grep -Eq "^stories260K *q8_0 *peer failed: .*$(echo "$pat" | sed s/FILE/q8_0/)" "$W/f.txt"; then
    ok "peer $what: stated in the table and the JSON, named on stderr, exit 0"
  else bad "peer $what: the table does not state it"; cat "$W/f.txt"; fi
}
peer_fails "missing" "$W/nothere" "No such file"
peer_fails "not executable" "$W/noexec.sh" "not executable"
peer_fails "exit status 3" "$W/exit.sh" "exited with status 3: main: error: failed to load model"
peer_fails "SIGILL" "$W/signal.sh" "died on signal 4 \\(SIGILL"
peer_fails "garbage output" "$W/garbage.sh" "not JSON \\(line 1"
peer_fails "another file's JSON" "$W/otherfile.sh" "is for '/elsewhere/other.gguf'"
peer_fails "no tg record" "$W/nogen.sh" "no record with n_prompt=0 and n_gen=64"

# ---- bad options ----
usage_err() { # what pattern args...
  what=$1; pat=$2; shift 2
  "$T" bench "$@" > "$W/u.txt" 2>&1; rc=$?
  if [ $rc = 2 ] && grep -q -- "$pat" "$W/u.txt"; then ok "$what: usage error"
  else bad "$what: exit $rc, wanted 2 and /$pat/"; cat "$W/u.txt"; fi
}
usage_err "--peer foo" "'foo' is not NAME=PATH" --peer foo
usage_err "--peer llama-bench=" "no path after '='" --peer llama-bench=
usage_err "--peer =x" "is not NAME=PATH" --peer =x
usage_err "--peer llama-cli=x" "unknown peer 'llama-cli'" --peer llama-cli=/bin/true
usage_err "--peer without a value" "peer" --peer
usage_err "--peer with --kernels" "not with --kernels" --kernels --peer "llama-bench=$W/ok.sh"
usage_err "--depths x" "entry 1 'x'" --depths x
usage_err "--depths 1,,2" "entry 2 ''" --depths 1,,2
usage_err "--depths -5" "entry 1 '-5'" --depths -5

# ---- depths, load times, whole process ----
if "$T" bench $Q --depths 1000,0,100 --json > "$W/d.json" 2> "$W/d.err"; then
  rss_time=$(/usr/bin/time -f %M "$T" run -m "$W/models/stories260K-f32-seed1.gguf" \
             -p "Once upon a time" -n 192 --temp 0 --precision fp32 --quiet \
             -t "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["threads"])' "$W/d.json")" \
             2>&1 >/dev/null | tail -n 1)
  if "$PY" - "$W/d.json" "$rss_time" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))["models"][0]
dd = m["depth_decode"]
assert dd["depths"] == [0, 100] and dd["skipped_depths"] == 1, dd
assert all(v > 0 for v in dd["fp32_tok_s"] + dd["int8_tok_s"]), dd
assert m["load_ms"]["fp32"] > 0 and m["load_ms"]["int8"] > 0, m["load_ms"]
pr = m["process"]
assert pr["command"] == "tessera run -n 192" and pr["runs"] == 2, pr
ref_mib = int(sys.argv[2]) / 1024.0
for p in ("fp32", "int8"):
    assert pr[p]["wall_s"] > 0, pr
    assert pr[p]["peak_rss_mib"] > 0, pr
# the same command under /usr/bin/time: the peak RSS within 25 %
got = pr["fp32"]["peak_rss_mib"]
assert abs(got - ref_mib) <= 0.25 * ref_mib, (got, ref_mib)
print("REPORT bench whole process: stories260K fp32 peak RSS %.1f MiB (/usr/bin/time %.1f MiB)"
      % (got, ref_mib))
EOF
  then ok "depths beyond the context skipped; load times; whole-process figures"
  else bad "depths / load / whole-process figures"; cat "$W/d.json"; fi
else bad "bench --depths exited non-zero"; cat "$W/d.err"; fi

# ---- kernels: each row's percentage follows from the figures of that row ----
if "$T" bench --kernels --reps 1 > "$W/k.txt" 2>&1 && "$T" bench --kernels --reps 1 --json > "$W/k.json" 2>&1 &&
   "$PY" - "$W/k.txt" "$W/k.json" <<'EOF'
import json, re, sys
rows = 0
for line in open(sys.argv[1]):
    m = re.match(r"\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+) (GB/s|GOPS) .*?([\d.]+)%$", line)
    if not m:
        continue
    rows += 1
    gops, gbps, limit, pct = float(m[4]), float(m[5]), float(m[6]), float(m[8])
    fig = gbps if m[7] == "GB/s" else gops
    # figures printed to 0.1, the percentage to 0.1
    tol = 0.05 + 100 * (0.05 / limit + 0.05 * fig / limit ** 2)
    assert abs(pct - 100 * fig / limit) <= tol, (line, 100 * fig / limit)
assert rows == 3, rows
for k in json.load(open(sys.argv[2]))["kernels"]["kernels"]:
    fig = k["gbps"] if k["bound"] == "read_gbps" else k["gops"]
    assert abs(k["frac"] - fig / k["limit"]) <= 1e-4 + 0.005 / k["limit"] * (1 + fig / k["limit"]), k
EOF
then ok "--kernels: the percentages follow from the figures and limits of their rows (table, JSON)"
else bad "--kernels percentages"; cat "$W/k.txt" "$W/k.json"; fi

# ---- charts ----
if ! command -v gnuplot > /dev/null 2>&1; then
  echo "SKIP case plot: gnuplot is not installed (scripts/setup-deps.sh installs gnuplot-nox)"
else
  if "$T" bench --models stories260K --reps 1 --offload-device none --dir "$W/models" \
       --no-process --plot "$W/plots/sub" > "$W/p.txt" 2>&1; then
    pngs_ok=1
    for c in models depth batch roofline; do
      f="$W/plots/sub/$c.png"
      magic=$(od -An -tx1 -N8 "$f" 2>/dev/null | tr -d ' \n')
      size=$(wc -c < "$f" 2>/dev/null || echo 0)
      if [ "$magic" != 89504e470d0a1a0a ] || [ "$size" -lt 4096 ] ||
         [ ! -s "$W/plots/sub/$c.dat" ] || [ ! -s "$W/plots/sub/$c.gp" ]; then
        bad "chart $c: magic '$magic', $size bytes, or its .dat/.gp missing"; pngs_ok=0
      fi
    done
    [ $pngs_ok = 1 ] && ok "four PNG charts with their data and scripts"
    grep -q "charts in $W/plots/sub: models.png depth.png batch.png roofline.png" "$W/p.txt" ||
      { bad "the table does not say where the charts are"; cat "$W/p.txt"; }
    rm -f "$W/plots/sub/models.png"
    if (cd "$W/plots/sub" && gnuplot models.gp) && [ -s "$W/plots/sub/models.png" ]; then
      ok "the scripts regenerate the charts from the data files"
    else bad "gnuplot models.gp did not regenerate models.png"; fi
  else bad "bench --plot exited non-zero"; cat "$W/p.txt"; fi
  # batch chart of the --batch sweep
  if "$T" bench --batch 1,4 --models stories260K --reps 1 --decode 8 --offload-device none \
       --dir "$W/models" --plot "$W/plots2" > "$W/p2.txt" 2>&1 &&
     [ "$(od -An -tx1 -N4 "$W/plots2/batch.png" | tr -d ' \n')" = 89504e47 ]; then
    ok "--batch --plot writes batch.png"
  else bad "--batch --plot"; cat "$W/p2.txt"; fi
  : > "$W/afile"
  "$T" bench $Q --plot "$W/afile" > "$W/u.txt" 2>&1; rc=$?
  if [ $rc = 1 ] && grep -q -- "--plot $W/afile: '$W/afile' is not a directory" "$W/u.txt"; then
    ok "--plot on a file: clear error"
  else bad "--plot on a file: exit $rc"; cat "$W/u.txt"; fi
  "$T" bench $Q --plot "$W/afile/charts" > "$W/u.txt" 2>&1; rc=$?
  if [ $rc = 1 ] && grep -q -- "--plot $W/afile/charts: '$W/afile' is not a directory" "$W/u.txt"; then
    ok "--plot under a file: clear error"
  else bad "--plot under a file: exit $rc"; cat "$W/u.txt"; fi
fi
exit $fail
