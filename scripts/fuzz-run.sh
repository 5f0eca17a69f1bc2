#!/bin/sh
# fuzz-run.sh - runs fuzz targets one after the other (make fuzz).
#
#   scripts/fuzz-run.sh FUZZ_BUILD SECONDS TARGET...
#
# Each target runs for SECONDS (-max_total_time) on its persistent corpus
# FUZZ_BUILD/corpus/<target>, seeded from FUZZ_BUILD/seeds/<target> and
# fuzz/corpus/<target>; crash, leak and timeout artifacts go to
# FUZZ_BUILD/artifacts/<target>/ (those of earlier runs move to previous/)
# and the log to FUZZ_BUILD/logs/<target>.log.
# Prints one line per target: "target execs crashes" (plus the coverage),
# and exits 1 when any target left an artifact. FUZZ_NICE=N runs the
# fuzzers under `nice -n N`; FUZZ_RUNS=N stops each after N executions.
set -u

[ $# -ge 3 ] || { echo "usage: $0 FUZZ_BUILD SECONDS TARGET..." >&2; exit 2; }
build=$1 seconds=$2
shift 2

# Longest input per target: model files hold a few small tensors, the
# others are strings and a few frames.
max_len() {
  case "$1" in
    fuzz_gguf|fuzz_llama2c|fuzz_xclbin) echo 65536 ;;
    fuzz_tokenizer|fuzz_usb_host|fuzz_usb_board) echo 16384 ;;
    fuzz_completion|fuzz_tenants) echo 8192 ;;
    *) echo 1024 ;;
  esac
}

nice_cmd=""
[ -n "${FUZZ_NICE:-}" ] && nice_cmd="nice -n $FUZZ_NICE"
runs=""
[ -n "${FUZZ_RUNS:-}" ] && runs="-runs=$FUZZ_RUNS"

failed=0
printf '%-18s %12s %8s %8s\n' target execs crashes cov
for t in "$@"; do
  bin="$build/bin/$t"
  corpus="$build/corpus/$t"
  art="$build/artifacts/$t"
  log="$build/logs/$t.log"
  mkdir -p "$corpus" "$art/previous" "$build/logs"
  # Artifacts of earlier runs are kept aside, not counted again.
  find "$art" -maxdepth 1 -type f -exec mv {} "$art/previous/" \;
  if [ ! -x "$bin" ]; then
    echo "fuzz-run: $bin is missing (make fuzz-build)" >&2
    failed=1
    continue
  fi
  seeds=""
  for d in "$build/seeds/$t" "fuzz/corpus/$t"; do
    [ -d "$d" ] && seeds="$seeds $d"
  done
  # The corpus dir comes first: new inputs are written there.
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
    $nice_cmd "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 \
      -max_len="$(max_len "$t")" -print_final_stats=1 $runs \
      -artifact_prefix="$art/" "$corpus" $seeds >"$log" 2>&1
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
  crashes=$(find "$art" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
             -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf '%-18s %12s %8s %8s\n' "$t" "${execs:-0}" "$crashes" "${cov:-?}"
  [ "$crashes" -gt 0 ] && failed=1
done
exit $failed
