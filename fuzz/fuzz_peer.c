/* fuzz_peer.c - the output of a benchmark peer (`tessera bench --peer`):
 * cli_peer_parse_llama_bench on any bytes. Output it accepts has positive,
 * finite prefill and decode rates; output it refuses has a reason, printable
 * ASCII, and no rates. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/cli/bench_cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  double pp = -1, tg = -1;
  char why[512];
  memset(why, 'x', sizeof why);
  const bool ok = cli_peer_parse_llama_bench((const char *)data, size, "/m/stories15M-f32.gguf",
                                             128, 64, &pp, &tg, why, sizeof why);
  if (ok) {
    if (!(pp > 0) || !(tg > 0) || !isfinite(pp) || !isfinite(tg)) {
      fprintf(stderr, "fuzz_peer: accepted rates %g %g\n", pp, tg);
      abort();
    }
    return 0;
  }
  const size_t n = strnlen(why, sizeof why);
  if (n == 0 || n == sizeof why) {
    fprintf(stderr, "fuzz_peer: a refusal without a terminated reason\n");
    abort();
  }
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)why[i] < 0x20 || (unsigned char)why[i] >= 0x7f) {
      fprintf(stderr, "fuzz_peer: unprintable byte %u in the reason\n", (unsigned char)why[i]);
      abort();
    }
  return 0;
}
