#!/bin/sh
# gemm.sh BUILD - `tessera gemm` checksums of the host kernel (cpu), the
# functional model (fmodel) and the RTL (sim), each against an independent
# computation written from the CLI contract (splitmix64 operands, FNV-1a 64
# over C's int32 little-endian bytes): BUILD/tests/tools/ref_gemm (a naive
# loop in C), and a second one in Python when python3 is there.
set -u
BUILD=${1:-build}
CLI="$BUILD/bin/tessera"
[ -x "$CLI" ] || { echo "no $CLI"; exit 1; }
REF="$BUILD/tests/tools/ref_gemm"
[ -x "$REF" ] || { echo "no $REF (make tests builds it)"; exit 1; }
PY=$(command -v python3 || true)
[ -n "$PY" ] || echo "SKIP case Python checksums (the second independent reference): python3 is not installed"
fail=0

ref_checksum() { # M N K SEED
  "$PY" - "$@" <<'PYEOF'
import sys
M, N, K, S = (int(x) for x in sys.argv[1:5])
MASK = (1 << 64) - 1
state = S
def nxt():
    global state
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)
def i8(x):
    b = x >> 56
    return b - 256 if b >= 128 else b
A = [[i8(nxt()) for _ in range(K)] for _ in range(M)]
W = [[i8(nxt()) for _ in range(K)] for _ in range(N)]
h = 0xcbf29ce484222325
for m in range(M):
    for n in range(N):
        v = sum(a * w for a, w in zip(A[m], W[n])) & 0xFFFFFFFF
        for b in range(4):
            h ^= (v >> (8 * b)) & 0xFF
            h = (h * 0x100000001b3) & MASK
print("checksum 0x%016x" % h)
PYEOF
}

checksum_of() { # device args...
  dev=$1; shift
  "$CLI" gemm --device "$dev" "$@" > "$tmp" 2>&1 || { echo "FAIL: tessera gemm --device $dev $*:"; cat "$tmp"; return 1; }
  grep '^checksum 0x' "$tmp"
}

tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
sim_ok=1
if ! "$CLI" gemm --device sim -M 1 -N 1 -K 1 --seed 1 > "$tmp" 2>&1; then
  sim_ok=0
  echo "SKIP case sim checksums: $(head -n 1 "$tmp")"
fi

agree() { # name checksum: compared with $ref; extends $line
  if [ "$2" = "$ref" ]; then line="$line, $1 ok"
  else line="$line, $1 DIFFERS"; echo "FAIL: $1 $2 != naive $ref ($args)"; fail=1; fi
}

# M N K SEED
for shape in "1 1 1 1" "37 45 19 7" "16 16 16 3" "17 33 1 9" "100 70 300 1" "1 64 1000 5" \
             "64 64 64 42" "3 200 77 11" "3 5 70000 9"; do
  set -- $shape
  args="-M $1 -N $2 -K $3 --seed $4"
  ref=$("$REF" "$1" "$2" "$3" "$4") || { echo "FAIL: $REF $*"; fail=1; continue; }
  line="M=$1 N=$2 K=$3 seed=$4: naive $ref"
  [ -n "$PY" ] && agree python "$(ref_checksum "$1" "$2" "$3" "$4")"
  cpu=$(checksum_of cpu $args --check) || { fail=1; continue; }
  agree cpu "$cpu"
  tiled=$(checksum_of cpu $args --tile-m 16 --tile-n 32 --tile-k 64) || { fail=1; continue; }
  agree "tiled cpu" "$tiled"
  fm=$(checksum_of fmodel $args) || { fail=1; continue; }
  agree fmodel "$fm"
  if [ $sim_ok = 1 ]; then
    sim=$(checksum_of sim $args --check) || { fail=1; continue; }
    agree sim "$sim"
  fi
  echo "$line"
done

# A shape that needs several descriptors per dimension on the device.
a=$("$REF" 40 40 150 2)
b=$(checksum_of fmodel -M 40 -N 40 -K 150 --seed 2 --tile-m 16 --tile-n 16 --tile-k 50) && \
[ "$a" = "$b" ] || { echo "FAIL: tiled fmodel $b != naive $a"; fail=1; }
if [ $sim_ok = 1 ]; then
  b=$(checksum_of sim -M 40 -N 40 -K 150 --seed 2 --tile-m 16 --tile-n 16 --tile-k 50) && \
  [ "$a" = "$b" ] || { echo "FAIL: tiled sim $b != naive $a"; fail=1; }
fi

# Refusals on the command line: bad options are usage errors, not crashes.
"$CLI" gemm --device cpu -M 0 -N 1 -K 1 > "$tmp" 2>&1; rc=$?
[ $rc = 2 ] || { echo "FAIL: -M 0 gave exit $rc, expected 2"; fail=1; }
TSR_RTL_LIB=/nonexistent/libtessera_rtl.so "$CLI" gemm --device sim -M 2 -N 2 -K 2 > "$tmp" 2>&1; rc=$?
[ $rc = 1 ] && grep -q UNAVAILABLE "$tmp" || { echo "FAIL: missing RTL library gave exit $rc:"; cat "$tmp"; fail=1; }
"$CLI" devices > "$tmp" 2>&1 || { echo "FAIL: tessera devices"; cat "$tmp"; fail=1; }
grep -q '^cpu *available' "$tmp" || { echo "FAIL: devices does not list cpu as available"; cat "$tmp"; fail=1; }

[ $fail = 0 ] && echo "gemm e2e: all checksums agree"
exit $fail
