#!/bin/sh
# example.sh BUILD - examples/gemm_offload.c as an application builds it:
# a staged `make install` (DESTDIR), the installed tessera.pc giving the
# -I/-L of that tree, `cc` against it, and a run with LD_LIBRARY_PATH on
# fmodel, sim and opencl (whichever open here; fmodel must) with fallback
# off, so every OK is a device result. Exits 77 (skip) when no C compiler
# or pkg-config is present.
set -u
BUILD=${1:-build}
for tool in cc pkg-config make; do
  command -v $tool > /dev/null 2>&1 || { echo "skip: no $tool on this machine"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage=$tmp/stage
prefix=/usr

# 1. a staged install of the build tree
if ! make -s BUILD="$BUILD" PREFIX=$prefix DESTDIR="$stage" install > "$tmp/install.log" 2>&1; then
  echo "FAIL make install:"; tail -n 30 "$tmp/install.log"; exit 1
fi
pc_dir=$stage$prefix/lib/pkgconfig
[ -f "$pc_dir/tessera.pc" ] || { echo "FAIL no tessera.pc in $pc_dir"; exit 1; }
[ -f "$stage$prefix/include/tessera.h" ] || { echo "FAIL tessera.h not installed"; exit 1; }

# 2. the .pc names the prefix it was installed for (pkg-config hides
# -I/usr/include and -L/usr/lib as system directories: ask for the variables) ...
for v in includedir:$prefix/include libdir:$prefix/lib; do
  got=$(PKG_CONFIG_PATH=$pc_dir pkg-config --variable=${v%%:*} tessera) ||
    { echo "FAIL pkg-config tessera"; exit 1; }
  [ "$got" = "${v#*:}" ] || { echo "FAIL tessera.pc: ${v%%:*} is '$got', want '${v#*:}'"; exit 1; }
done
# ... and relocates to the staged tree
flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --define-variable=prefix="$stage$prefix" \
        --cflags --libs tessera)
case "$flags" in
  *"-I$stage$prefix/include"*"-L$stage$prefix/lib"*) ;;
  *) echo "FAIL relocated flags lack the staged include dir: $flags"; exit 1 ;;
esac
echo "pkg-config: $flags"

# 3. the example against the installed header and shared library only
exe=$tmp/gemm_offload
if ! cc -std=c11 -Wall -Wextra -Werror -o "$exe" examples/gemm_offload.c $flags \
     > "$tmp/cc.log" 2>&1; then
  echo "FAIL compiling examples/gemm_offload.c against the install:"; cat "$tmp/cc.log"; exit 1
fi

# 4. runs: fallback off, so a device failure is a failure
export LD_LIBRARY_PATH="$stage$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset TSR_RTL_LIB
ldd "$exe" | grep -q "$stage$prefix/lib/libtessera.so" ||
  { echo "FAIL the example does not load the installed libtessera:"; ldd "$exe"; exit 1; }
fail=0
run() { # expected-devices args...
  want=$1; shift
  "$exe" --no-fallback "$@" > "$tmp/run.log" 2>&1
  rc=$?
  cat "$tmp/run.log"
  if [ $rc != 0 ]; then echo "FAIL gemm_offload $* (exit $rc)"; fail=1; return; fi
  for d in $want; do
    grep -q "^$d .* fallbacks 0  OK$" "$tmp/run.log" ||
      { echo "FAIL gemm_offload $*: no OK line for $d"; fail=1; }
  done
}
# every available one of the three; fmodel is always there
run fmodel
summary=""
for d in fmodel sim opencl; do
  if grep -q "^$d .*unavailable" "$tmp/run.log"; then
    echo "SKIP case example on $d: $(grep "^$d .*unavailable" "$tmp/run.log" | cut -c 1-200)"
    summary="$summary $d skipped,"
  elif grep -q "^$d .* OK$" "$tmp/run.log"; then summary="$summary $d OK,"
  else echo "FAIL $d missing"; fail=1; fi
done
# chosen on the command line, odd shapes, options
run "fmodel sim:latency=80" -M 37 -N 5 -K 129 --seed 7 fmodel sim:latency=80
grep -q "^sim:latency=80 .*unavailable" "$tmp/run.log" && echo "note: sim not available here"
run "" -M 1 -N 300 -K 77 --seed 3 opencl fmodel:rows=32,cols=32

# 5. no requested device available: 77
"$exe" usb:vid=0x1,pid=0x1 > "$tmp/none.log" 2>&1
rc=$?
if [ $rc != 77 ]; then echo "FAIL no device available should exit 77, got $rc:"; cat "$tmp/none.log"; fail=1; fi
[ $fail = 0 ] && echo "REPORT example: gemm_offload built against the installed tree (pkg-config):${summary%,}"
exit $fail
