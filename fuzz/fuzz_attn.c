/* fuzz_attn.c - attention-pattern strings (--attn): parsing, and for a
 * pattern that parses, the canonical form round trip parse(format(p)) == p
 * and the static block selection on a few query blocks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/util.h"
#include "host/src/attn.h"

static bool same(const tsr_attn_pattern_t *a, const tsr_attn_pattern_t *b) {
  return a->kind == b->kind && a->block == b->block && a->window == b->window &&
         a->sinks == b->sinks && a->stride == b->stride && a->local == b->local &&
         a->topk == b->topk;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *spec = fz_strdup(data, size);
  if (!spec) return 0;
  tsr_attn_pattern_t p;
  tsr_status_t s = tsr_attn_pattern_parse(spec, &p);
  if (s) {
    tsr_status_free(s);
    free(spec);
    return 0;
  }
  char canon[256];
  tsr_attn_pattern_format(&p, canon, sizeof canon);
  tsr_attn_pattern_t q;
  s = tsr_attn_pattern_parse(canon, &q);
  if (s) {
    fprintf(stderr, "fuzz_attn: '%s' parses, its canonical form '%s' does not: %s\n", spec,
            canon, tsr_status_message(s));
    abort();
  }
  if (!same(&p, &q)) {
    fprintf(stderr, "fuzz_attn: '%s' and its canonical form '%s' differ\n", spec, canon);
    abort();
  }
  char again[256];
  tsr_attn_pattern_format(&q, again, sizeof again);
  if (strcmp(canon, again)) abort();
  if (p.kind != TSR_ATTN_REFERENCE)
    for (int32_t qb = 0; qb < 40; qb++) {
      int32_t n = tsr_attn_static_count(&p, qb);
      if (n < 1 || n > qb + 1) {
        fprintf(stderr, "fuzz_attn: '%s': query block %d keeps %d blocks\n", spec, qb, n);
        abort();
      }
    }
  free(spec);
  return 0;
}
