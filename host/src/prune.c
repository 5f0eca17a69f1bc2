/* prune.c - magnitude pruning into a standard GGUF file (see prune.h). */
#include "prune.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "compute/dtype.h"
#include "gguf.h"
#include "model_file.h"

tsr_status_t tsr_prune_pattern_parse(const char *spec, double density, tsr_prune_pattern_t *out) {
  memset(out, 0, sizeof *out);
  if (!spec) return TSR_ERR(INVALID_ARGUMENT, "pattern: NULL");
  if (!strcmp(spec, "2:4")) {
    if (density > 0 && density != 0.5)
      return TSR_ERR(INVALID_ARGUMENT, "pattern 2:4 keeps half the weights: density %g is not "
                     "0.5", density);
    out->kind = 0;
    out->density = 0.5;
    return TSR_OK;
  }
  int r = 0, c = 0, used = 0;
  if (sscanf(spec, "block:%dx%d%n", &r, &c, &used) != 2 || spec[used] != '\0')
    return TSR_ERR(INVALID_ARGUMENT, "pattern '%s': expected 2:4 or block:RxC", spec);
  if (r < 1 || r > 4096 || c < 1 || c > 4096)
    return TSR_ERR(OUT_OF_RANGE, "pattern '%s': block sides must be in [1, 4096]", spec);
  if (density <= 0) density = 0.5;
  if (!(density <= 1))
    return TSR_ERR(OUT_OF_RANGE, "density %g is outside (0, 1]", density);
  out->kind = 1;
  out->br = r;
  out->bc = c;
  out->density = density;
  return TSR_OK;
}

void tsr_prune_pattern_format(const tsr_prune_pattern_t *p, char *buf, size_t cap) {
  if (p->kind == 0) snprintf(buf, cap, "2:4");
  else snprintf(buf, cap, "block:%dx%d", p->br, p->bc);
}

/* The matrices pruned: a layer's, by name suffix. */
static bool prunable(const char *name) {
  static const char *const suffix[] = {".attn_q.weight",        ".attn_k.weight",
                                       ".attn_v.weight",        ".attn_output.weight",
                                       ".ffn_gate.weight",      ".ffn_down.weight",
                                       ".ffn_up.weight",        ".ffn_gate_exps.weight",
                                       ".ffn_down_exps.weight", ".ffn_up_exps.weight"};
  if (strncmp(name, "blk.", 4)) return false;
  const size_t n = strlen(name);
  for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
    const size_t k = strlen(suffix[i]);
    if (n > k && !strcmp(name + n - k, suffix[i])) return true;
  }
  return false;
}

/* |element i| of data of `type` (the magnitude that ranks it). */
static float magnitude(const uint8_t *data, uint32_t type, uint64_t i) {
  uint16_t h;
  switch (type) {
    case TSR_DTYPE_F32: {
      float f;
      memcpy(&f, data + 4 * i, 4);
      return fabsf(f);
    }
    case TSR_DTYPE_F16:
      memcpy(&h, data + 2 * i, 2);
      return fabsf(tsr_f16_to_f32(h));
    case TSR_DTYPE_BF16:
      memcpy(&h, data + 2 * i, 2);
      return fabsf(tsr_bf16_to_f32(h));
    default: { /* Q8_0 */
      const uint8_t *b = data + (i / TSR_Q8_0_BLOCK) * TSR_Q8_0_BYTES;
      memcpy(&h, b, 2);
      return fabsf(tsr_f16_to_f32(h) * (float)(int8_t)b[2 + i % TSR_Q8_0_BLOCK]);
    }
  }
}

static void zero(uint8_t *data, uint32_t type, uint64_t i) {
  switch (type) {
    case TSR_DTYPE_F32: memset(data + 4 * i, 0, 4); break;
    case TSR_DTYPE_F16:
    case TSR_DTYPE_BF16: memset(data + 2 * i, 0, 2); break;
    default: data[(i / TSR_Q8_0_BLOCK) * TSR_Q8_0_BYTES + 2 + i % TSR_Q8_0_BLOCK] = 0; break;
  }
}

typedef struct {
  const tsr_prune_pattern_t *p;
  tsr_prune_report_t *rep;
  double *score;   /* block scores, grown as needed */
  int64_t *order;
  size_t cap;
} prune_ctx_t;

static const double *g_scores; /* qsort has no context argument */
static int by_score(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  if (g_scores[x] != g_scores[y]) return g_scores[x] > g_scores[y] ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* One (rows x cols) matrix at element offset e0 of the data. */
static tsr_status_t prune_matrix(prune_ctx_t *c, const char *name, uint8_t *data,
                                 uint32_t type, uint64_t e0, int64_t rows, int64_t cols) {
  const tsr_prune_pattern_t *p = c->p;
  uint64_t kept = 0;
  if (p->kind == 0) { /* 2:4 along K */
    if (cols % 4)
      return TSR_ERR(FORMAT, "%s: rows of %" PRId64 " values are not whole groups of 4 (2:4)",
                     name, cols);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t g = 0; g < cols; g += 4) {
        const uint64_t at = e0 + (uint64_t)(r * cols + g);
        float m[4];
        for (int j = 0; j < 4; j++) m[j] = magnitude(data, type, at + (uint64_t)j);
        int a = 0; /* the largest, then the largest of the rest: lower index on ties */
        for (int j = 1; j < 4; j++) if (m[j] > m[a]) a = j;
        int b = a == 0 ? 1 : 0;
        for (int j = 0; j < 4; j++) if (j != a && m[j] > m[b]) b = j;
        for (int j = 0; j < 4; j++)
          if (j != a && j != b) zero(data, type, at + (uint64_t)j);
        kept += 2;
      }
  } else { /* blocks of br x bc by L1 norm */
    const int64_t nbr = (rows + p->br - 1) / p->br, nbc = (cols + p->bc - 1) / p->bc;
    const size_t nb = (size_t)(nbr * nbc);
    if (nb > c->cap) {
      double *s = realloc(c->score, sizeof(double) * nb);
      int64_t *o = s ? realloc(c->order, sizeof(int64_t) * nb) : NULL;
      if (s) c->score = s;
      if (o) c->order = o;
      if (!s || !o) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: %zu blocks", name, nb);
      c->cap = nb;
    }
    memset(c->score, 0, sizeof(double) * nb);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t k = 0; k < cols; k++)
        c->score[(r / p->br) * nbc + k / p->bc] +=
            magnitude(data, type, e0 + (uint64_t)(r * cols + k));
    for (size_t i = 0; i < nb; i++) c->order[i] = (int64_t)i;
    g_scores = c->score;
    qsort(c->order, nb, sizeof(int64_t), by_score);
    size_t keep = (size_t)llround(p->density * (double)nb);
    if (keep < 1) keep = 1;
    if (keep > nb) keep = nb;
    /* mark: score < 0 = pruned */
    for (size_t i = keep; i < nb; i++) c->score[c->order[i]] = -1;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t k = 0; k < cols; k++) {
        if (c->score[(r / p->br) * nbc + k / p->bc] < 0)
          zero(data, type, e0 + (uint64_t)(r * cols + k));
        else
          kept++;
      }
  }
  c->rep->matrices++;
  c->rep->weights += (uint64_t)(rows * cols);
  c->rep->kept += kept;
  return TSR_OK;
}

static tsr_status_t prune_tensor(void *arg, const char *name, uint32_t type, uint32_t n_dims,
                                 const int64_t *ne, uint8_t *data, uint64_t nbytes) {
  (void)nbytes;
  if (!prunable(name) || n_dims < 2) return TSR_OK;
  const int64_t cols = ne[0], rows = ne[1], experts = n_dims > 2 ? ne[2] : 1;
  for (int64_t e = 0; e < experts; e++) /* each expert its own matrix */
    TSR_RETURN_IF(prune_matrix(arg, name, data, type, (uint64_t)(e * rows * cols), rows, cols));
  return TSR_OK;
}

tsr_status_t tsr_prune_file(const char *in, const char *out, const tsr_prune_pattern_t *p,
                            tsr_prune_report_t *report) {
  memset(report, 0, sizeof *report);
  /* first pass: count what is kept, to record the density */
  tsr_prune_report_t rep = {0};
  prune_ctx_t c = {p, &rep, NULL, NULL, 0};
  tsr_gguf_writer_t extra;
  tsr_gguf_writer_init(&extra);
  char pat[32];
  tsr_prune_pattern_format(p, pat, sizeof pat);
  tsr_gguf_kv_str(&extra, "tessera.prune.pattern", pat);
  /* the density is the pattern's target; the report gives what was kept */
  tsr_gguf_kv_f32(&extra, "tessera.prune.density", (float)p->density);
  tsr_status_t s = tsr_gguf_rewrite(in, out, &extra, "tessera.prune.", prune_tensor, &c);
  tsr_gguf_writer_free(&extra);
  free(c.score);
  free(c.order);
  if (!s && !rep.matrices) {
    remove(out);
    s = TSR_ERR(NOT_FOUND, "%s: no layer weight matrix to prune", in);
  }
  if (!s) *report = rep;
  return s;
}
