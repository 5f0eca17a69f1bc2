#!/bin/sh
# prune.sh BUILD - `tessera prune` on the real stories260K: the pruned files
# load anywhere the dense one does, and a pruned model's greedy int8 text is
# the same on the CPU, the functional model, the RTL (sim) and two devices
# (contract 1); bad options are refused with the field named.
set -u
BUILD=${1:-build}
M=${TSR_MODELS_DIR:-../shared/models}
T="$BUILD/bin/tessera"
[ -f "$M/stories260K.gguf" ] || { echo "no stories260K.gguf in $M (the reference models)"; exit 77; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
for spec in "2:4" "block:16x16 --density 0.75"; do
  name=$(echo "$spec" | tr ' :' '__')
  # shellcheck disable=SC2086
  if ! "$T" prune -m "$M/stories260K.gguf" -o "$out/$name.gguf" --pattern $spec > "$out/$name.log" 2>&1; then
    echo "FAIL prune $spec: $(cat "$out/$name.log")"; fail=1; continue
  fi
  echo "ok   prune $spec: $(cat "$out/$name.log")"
  "$T" info -m "$out/$name.gguf" | grep -q '^pruned:' || { echo "FAIL info does not show the pattern"; fail=1; }
  run() { "$T" run -m "$out/$name.gguf" -p "Once upon a time" -n 80 --temp 0 --precision int8 \
            --device "$1" --offload all > "$out/$name.$2.txt" 2> "$out/$name.$2.err"; }
  run cpu cpu || { echo "FAIL $spec on cpu"; fail=1; continue; }
  devs="fmodel fmodel,fmodel"
  [ -f "$BUILD/lib/libtessera_rtl.so" ] && devs="$devs sim" || echo "SKIP sim: $BUILD/lib/libtessera_rtl.so is not built"
  for d in $devs; do
    tag=$(echo "$d" | tr ',' '_')
    if run "$d" "$tag" && cmp -s "$out/$name.cpu.txt" "$out/$name.$tag.txt"; then
      echo "ok   $spec on $d: the CPU's text"
    else
      echo "FAIL $spec on $d: differs from the CPU or failed"; tail -2 "$out/$name.$tag.err"; fail=1
    fi
  done
done
bad() { # expected-message args...
  want=$1; shift
  if "$T" prune "$@" > "$out/bad.txt" 2>&1; then echo "FAIL prune $* accepted"; fail=1
  elif grep -q -- "$want" "$out/bad.txt"; then echo "ok   prune $* refused: $(head -1 "$out/bad.txt" | cut -c1-100)"
  else echo "FAIL prune $*: message lacks '$want': $(cat "$out/bad.txt")"; fail=1; fi
}
bad "block:RxC" -m "$M/stories260K.gguf" -o "$out/x.gguf" --pattern 3:4
bad "density" -m "$M/stories260K.gguf" -o "$out/x.gguf" --pattern 2:4 --density 0.3
bad "sides" -m "$M/stories260K.gguf" -o "$out/x.gguf" --pattern block:0x8
bad "--density" -m "$M/stories260K.gguf" -o "$out/x.gguf" --pattern block:8x8 --density 2
bad "no such file" -m "$out/none.gguf" -o "$out/x.gguf" --pattern 2:4
bad "--pattern" -m "$M/stories260K.gguf" -o "$out/x.gguf"
[ -e "$out/x.gguf" ] && { echo "FAIL a refused prune left $out/x.gguf"; fail=1; }
exit $fail
