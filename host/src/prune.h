/*
 * prune.h - magnitude pruning of a model's weight matrices into a standard
 * GGUF file (`tessera prune`).
 *
 * Internal header. Patterns:
 *   2:4        in every row, of each group of 4 consecutive values along K
 *              the 2 of largest magnitude are kept (density 0.5);
 *   block:RxC  the matrix in tiles of R rows x C columns (edge tiles
 *              smaller); the tiles of largest L1 norm are kept, a fraction
 *              `density` of them (rounded to the nearest count, at least
 *              one), per matrix.
 * Ties keep the lower index. Pruned weights become exact zeros in the
 * file's own type (for Q8_0 the quantized value, the block scale stays).
 * Pruned: every matrix of a layer (attention, FFN, experts); kept whole:
 * the embedding, the classifier, the norms and the router.
 */
#ifndef TSR_PRUNE_H
#define TSR_PRUNE_H

#include <stdint.h>

#include "tessera.h"

typedef struct tsr_prune_pattern {
  int kind;       /* 0: 2:4, 1: block */
  int32_t br, bc; /* block rows and columns */
  double density; /* fraction of blocks kept (block), 0.5 for 2:4 */
} tsr_prune_pattern_t;

/* Parses "2:4" or "block:RxC" (1 <= R, C <= 4096) and a density in (0, 1]
 * (2:4 takes only 0.5; density <= 0 means its default: 0.5). */
tsr_status_t tsr_prune_pattern_parse(const char *spec, double density, tsr_prune_pattern_t *out);
/* The canonical text of a pattern ("2:4", "block:16x16"). */
void tsr_prune_pattern_format(const tsr_prune_pattern_t *p, char *buf, size_t cap);

typedef struct tsr_prune_report {
  int matrices;
  uint64_t weights, kept; /* over the pruned matrices */
} tsr_prune_report_t;

/* Writes `in` (GGUF) pruned to `out`, with tessera.prune.pattern and
 * tessera.prune.density (the fraction kept) in its metadata. */
tsr_status_t tsr_prune_file(const char *in, const char *out, const tsr_prune_pattern_t *p,
                            tsr_prune_report_t *report);

#endif /* TSR_PRUNE_H */
