#!/bin/sh
# boards.sh BUILD - board profiles end to end: bad board specs and profile
# files give named errors; `tessera devices` lists the boards; the auto
# policy of `tessera plan` places every matmul group of a layer and the
# classifier on the device exactly where `tessera bench --boards` projects
# that it pays, for every built-in board, on the layer shapes of
# stories15M, stories110M, large and the 7B shape, at 1 and 64 rows; both
# use the fixed CPU profile 40 GB/s, 300 GMAC/s (TSR_CPU_PROFILE /
# --cpu-profile), so the decisions do not depend on timing. Models: one
# layer of each shape, generated here (a group's decision does not depend
# on the number of layers).
set -u
BUILD=${1:-build}
T="$BUILD/bin/tessera"
[ -x "$T" ] || { echo "$T is not built"; exit 77; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
PROFILE=40,300

# ---- named errors -------------------------------------------------------
expect_err() { # name expected-substring cmd...
  name=$1; want=$2; shift 2
  if "$@" > "$out/err.out" 2> "$out/err.txt"; then
    echo "FAIL $name: succeeded"; fail=1; return
  fi
  if grep -qF -- "$want" "$out/err.txt"; then echo "ok   $name: $(head -c 200 "$out/err.txt")"
  else echo "FAIL $name: message lacks '$want':"; cat "$out/err.txt"; fail=1; fi
}
expect_err "unknown board" "board 'nope' unknown (built-in: pcie-ddr4, u250, u280, usb3-artix7" \
  "$T" gemm --device fmodel:board=nope -M 1 -N 16 -K 16 --seed 1
printf 'name = bad\ntitle = x\nmem_channels = 0\n' > "$out/zero.board"
expect_err "zero channels" "$out/zero.board:3: key 'mem_channels'" \
  "$T" gemm --device "fmodel:board=$out/zero.board" -M 1 -N 16 -K 16 --seed 1
printf 'name = bad\nclock = 300\n' > "$out/key.board"
expect_err "unknown key" "$out/key.board:2: unknown key 'clock'" \
  "$T" gemm --device "fmodel:board=$out/key.board" -M 1 -N 16 -K 16 --seed 1
printf 'name = bad\ntitle = x\n' > "$out/missing.board"
expect_err "missing key" "required key 'mem_channels' missing" \
  "$T" gemm --device "fmodel:board=$out/missing.board" -M 1 -N 16 -K 16 --seed 1
sed 's/^channel_gbps = .*/channel_gbps = fast/' driver/boards/u280.board > "$out/num.board"
expect_err "bad number" "key 'channel_gbps': 'fast' is not a number" \
  "$T" gemm --device "fmodel:board=$out/num.board" -M 1 -N 16 -K 16 --seed 1
expect_err "no such file" "cannot open '$out/none.board'" \
  "$T" gemm --device "fmodel:board=$out/none.board" -M 1 -N 16 -K 16 --seed 1
expect_err "bench bad board" "board 'nope' unknown" "$T" bench --boards nope --no-measure \
  --cpu-profile $PROFILE --models 7B
expect_err "bench bad profile" "--cpu-profile: 'x' is not GBPS,GMACS" "$T" bench --boards all \
  --cpu-profile x

# ---- devices lists the boards; a profile file works like a built-in ----
if "$T" devices > "$out/devices.txt" 2>&1 && grep -q '^  u280  *AMD Alveo U280' "$out/devices.txt" \
   && grep -q '^  usb3-artix7 ' "$out/devices.txt"; then echo "ok   devices lists the boards"
else echo "FAIL devices does not list the boards"; tail -8 "$out/devices.txt"; fail=1; fi
cp driver/boards/u250.board "$out/copy.board"
if "$T" gemm --device "fmodel:board=$out/copy.board" -M 3 -N 70 -K 300 --seed 2 --check \
     > "$out/g.txt" 2>&1 && grep -q 'check *OK' "$out/g.txt" && grep -q '128x32' "$out/g.txt"
then echo "ok   fmodel:board=FILE: 128x32 array, bit-exact"
else echo "FAIL fmodel:board=FILE"; cat "$out/g.txt"; fail=1; fi
if [ -f "$BUILD/lib/libtessera_rtl.so" ]; then
  if "$T" gemm --device sim:board=u280 -M 3 -N 70 -K 300 --seed 2 --check > "$out/s.txt" 2>&1 \
     && grep -q 'check *OK' "$out/s.txt"; then echo "ok   sim:board=u280: bit-exact"
  else echo "FAIL sim:board=u280"; cat "$out/s.txt"; fail=1; fi
else
  echo "SKIP case sim:board=u280: $BUILD/lib/libtessera_rtl.so is not built"
fi

# ---- contract 1 on the boards: every matmul on a board with several read
# ports (weights striped over its channels) gives the CPU's text ----------
M=${TSR_MODELS_DIR:-../shared/models}
if [ -f "$M/stories260K.gguf" ]; then
  "$T" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 120 --temp 0 --precision int8 \
    --device cpu > "$out/cpu.txt" 2> /dev/null || { echo "FAIL stories260K on the cpu"; fail=1; }
  for board in u280 u250 pcie-ddr4 usb3-artix7; do
    if "$T" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 120 --temp 0 --precision int8 \
         --device "fmodel:board=$board" --offload all --no-fallback --stats \
         > "$out/b.txt" 2> "$out/b.err" && cmp -s "$out/cpu.txt" "$out/b.txt"; then
      echo "ok   stories260K int8 on fmodel:board=$board: the CPU's text; $(grep -m1 '^  launches:' "$out/b.err" | cut -c3-90)"
    else
      echo "FAIL stories260K int8 on fmodel:board=$board differs from the CPU"; tail -3 "$out/b.err"; fail=1
    fi
  done
else
  echo "SKIP case stories260K on the boards: no $M/stories260K.gguf"
fi

# ---- plan agrees with the projected crossover ----------------------------
# name and gen-model sizes of one layer of each shape (7B: dim 4096, hidden
# 11008, 32 heads; vocab 32000 as the others)
gen() { # name args...
  n=$1; shift
  "$T" gen-model -o "$out/$n.gguf" --type q8_0 --layers 1 --seq 128 "$@" > /dev/null 2>&1 ||
    { echo "FAIL gen-model $n"; fail=1; }
}
gen stories15M --preset stories15M
gen stories110M --preset stories110M
gen large --preset large
gen 7B --preset large --dim 4096 --hidden 11008 --heads 32 --kv-heads 32

expect_err "plan bad TSR_CPU_PROFILE" "TSR_CPU_PROFILE '1,': expected GBPS,GMACS" \
  env TSR_CPU_PROFILE=1, "$T" plan -m "$out/stories15M.gguf" --device fmodel:board=u280 \
  --precision int8

"$T" bench --boards all --no-measure --cpu-profile $PROFILE --batch 1,64 \
  --models stories15M,stories110M,large,7B > "$out/bench.txt" 2> "$out/bench.err" ||
  { echo "FAIL bench --boards"; cat "$out/bench.err"; exit 1; }

# projected: "board model B -> groups" from the decode rows (B rows a pass)
awk '/^board /{b=$2} $3=="decode"{print b, $1, $4, $NF}' "$out/bench.txt" > "$out/proj.txt"
[ "$(wc -l < "$out/proj.txt")" = 32 ] ||
  { echo "FAIL bench printed $(wc -l < "$out/proj.txt") decode rows, not 32"; cat "$out/bench.txt"; exit 1; }

checked=0
for board in pcie-ddr4 u250 u280 usb3-artix7; do
  for m in stories15M stories110M large 7B; do
    [ -f "$out/$m.gguf" ] || continue
    if ! TSR_CPU_PROFILE=$PROFILE "$T" plan -m "$out/$m.gguf" --device "fmodel:board=$board" \
         --precision int8 > "$out/plan.txt" 2>&1; then
      echo "FAIL plan $m on $board"; tail -3 "$out/plan.txt"; fail=1; continue
    fi
    # the plan's groups on the device per table (1 row, 64 rows), in the
    # bench's names, as "rows groups"
    awk '
      /^batch of/ { rows = $3 }
      $1 == "0" && $2 == "attn_q"   { g[rows] = g[rows] ($4 != "cpu" ? ",qkv" : "") }
      $1 == "0" && $2 == "attn_out" { g[rows] = g[rows] ($4 != "cpu" ? ",o" : "") }
      $1 == "0" && $2 == "ffn_gate" { g[rows] = g[rows] ($4 != "cpu" ? ",gate_up" : "") }
      $1 == "0" && $2 == "ffn_down" { g[rows] = g[rows] ($4 != "cpu" ? ",down" : "") }
      $1 == "-" && $2 == "output"   { g[rows] = g[rows] ($4 != "cpu" ? ",classifier" : "") }
      END { for (r in g) { s = substr(g[r], 2); print r, (s == "" ? "none" : s) } }
    ' "$out/plan.txt" | sort -n > "$out/placed.txt"
    for rows in 1 64; do
      want=$(awk -v b="$board" -v m="$m" -v r="$rows" '$1==b && $2==m && $3==r {print $4}' "$out/proj.txt")
      got=$(awk -v r="$rows" '$1==r {print $2}' "$out/placed.txt")
      checked=$((checked + 1))
      if [ -n "$want" ] && [ "$want" = "$got" ]; then
        echo "ok   $board $m rows=$rows: plan = projection ($got)"
      else
        echo "FAIL $board $m rows=$rows: plan places '$got', the projection says '$want'"; fail=1
      fi
    done
  done
done
[ $checked = 32 ] || { echo "FAIL only $checked of 32 placements compared"; fail=1; }

# Independent of the cost code: one DDR4 bank (19.2 GB/s) streams weights
# slower than the CPU profile's 40 GB/s, so at one row nothing pays there;
# the U280's 460 GB/s makes every group of the 7B shape pay at one row.
grep -q '^pcie-ddr4 7B 1 none$' "$out/proj.txt" && grep -q '^pcie-ddr4 large 1 none$' "$out/proj.txt" ||
  { echo "FAIL pcie-ddr4 places work at one row"; fail=1; }
grep -q '^u280 7B 1 qkv,o,gate_up,down,classifier$' "$out/proj.txt" ||
  { echo "FAIL u280 does not take every group of the 7B shape at one row"; fail=1; }
exit $fail
