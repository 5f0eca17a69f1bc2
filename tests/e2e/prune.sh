#!/bin/sh
# prune.sh BUILD - `tessera prune` on the real stories260K: the pruned files
# load anywhere the dense one does, and a pruned model's greedy int8 text is
# the same on the CPU, the functional model, the RTL (sim), OpenCL and two
# devices (contract 1); bad options are refused with the field named. The
# block:16x64 pattern leaves most 16x64 tiles zero, so the devices with the
# block-sparse opcode (fmodel, the RTL, opencl) store those weights
# compressed and run GEMM_BSR descriptors (their --stats say how many); the
# RTL reads as many bytes as the functional model and fewer than for the
# dense model's run of the same prompt.
set -u
BUILD=${1:-build}
M=${TSR_MODELS_DIR:-../shared/models}
T="$BUILD/bin/tessera"
[ -f "$M/stories260K.gguf" ] || { echo "no stories260K.gguf in $M (the reference models)"; exit 77; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
for spec in "2:4" "block:16x16 --density 0.75" "block:16x64 --density 0.5"; do
  name=$(echo "$spec" | tr ' :' '__')
  # shellcheck disable=SC2086
  if ! "$T" prune -m "$M/stories260K.gguf" -o "$out/$name.gguf" --pattern $spec > "$out/$name.log" 2>&1; then
    echo "FAIL prune $spec: $(cat "$out/$name.log")"; fail=1; continue
  fi
  echo "ok   prune $spec: $(cat "$out/$name.log")"
  "$T" info -m "$out/$name.gguf" | grep -q '^pruned:' || { echo "FAIL info does not show the pattern"; fail=1; }
  run() { "$T" run -m "$out/$name.gguf" -p "Once upon a time" -n 80 --temp 0 --precision int8 \
            --device "$1" --offload all --stats > "$out/$name.$2.txt" 2> "$out/$name.$2.err"; }
  run cpu cpu || { echo "FAIL $spec on cpu"; fail=1; continue; }
  devs="fmodel fmodel,fmodel"
  [ -f "$BUILD/lib/libtessera_rtl.so" ] && devs="$devs sim" || echo "SKIP sim: $BUILD/lib/libtessera_rtl.so is not built"
  if "$T" gemm --device opencl:mem=16M -M 1 -N 1 -K 1 > "$out/ocl.txt" 2>&1; then devs="$devs opencl"
  else echo "SKIP opencl: $(tail -n 1 "$out/ocl.txt")"; fi
  for d in $devs; do
    tag=$(echo "$d" | tr ',' '_')
    if run "$d" "$tag" && cmp -s "$out/$name.cpu.txt" "$out/$name.$tag.txt"; then
      echo "ok   $spec on $d: the CPU's text"
    else
      echo "FAIL $spec on $d: differs from the CPU or failed"; tail -2 "$out/$name.$tag.err"; fail=1
    fi
  done
  # the block-sparse opcode ran where the device has it, for the pattern
  # whose tiles at the device's shape (16 x 64 here, K = 64 or 172) are
  # mostly zero; never for 2:4
  bsr() { sed -n 's/.* \([0-9][0-9]*\) GEMM_BSR descriptors run.*/\1/p' "$out/$name.$1.err" | head -1; }
  rd() { sed -n 's/.*read by its launches: \([0-9][0-9]*\) bytes.*/\1/p' "$out/$name.$1.err" | head -1; }
  case "$spec" in
    block:16x64*)
      for d in fmodel sim opencl; do
        case " $devs " in *" $d "*) ;; *) continue ;; esac
        n=$(bsr "$d")
        if [ -n "$n" ] && [ "$n" -gt 0 ]; then
          echo "ok   $spec on $d: $n GEMM_BSR descriptors, $(rd "$d") bytes read: $(grep 'block-sparse weights' "$out/$name.$d.err" | sed 's/^ *//')"
        else
          echo "FAIL $spec on $d: no GEMM_BSR descriptor ran"; fail=1
        fi
      done
      case " $devs " in
        *" sim "*)
          "$T" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 80 --temp 0 --precision int8 \
            --device sim --offload all --stats > "$out/$name.dense.sim.txt" 2> "$out/$name.dense.sim.err"
          s=$(rd sim) f=$(rd fmodel) dn=$(rd dense.sim)
          if [ -n "$s" ] && [ "$s" = "$f" ] && [ -n "$dn" ] && [ "$s" -lt "$dn" ]; then
            echo "ok   $spec: the RTL read $s bytes (GEMM_BSR), as the functional model; the dense model's run $dn"
          else
            echo "FAIL $spec: the RTL read ${s:-?} bytes, fmodel ${f:-?}, the dense model's run ${dn:-?}"; fail=1
          fi ;;
      esac ;;
    2:4) # two of every four weights kept: no tile is zero, dense descriptors
      n=$(bsr fmodel)
      if [ -n "$n" ]; then echo "FAIL $spec: GEMM_BSR ran ($n) though no tile is zero"; fail=1
      else echo "ok   $spec: dense descriptors only (no zero tile)"; fi ;;
  esac
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
