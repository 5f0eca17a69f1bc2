/* qsparse.c - block-sparse int8 weights: building the compressed form, the
 * portable kernel and the split over tile rows (compute/qsparse.h). */
#include "compute/qsparse.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

enum { T = TSR_QSPARSE_TILE };

static bool tile_nonzero(const tsr_qmatrix_t *w, int32_t tr, int32_t tc) {
  for (int32_t r = tr * T; r < w->n && r < tr * T + T; r++) {
    const int8_t *row = w->data + (size_t)r * (size_t)w->k;
    for (int32_t c = tc * T; c < w->k && c < tc * T + T; c++)
      if (row[c]) return true;
  }
  return false;
}

double tsr_qsparse_density(const tsr_qmatrix_t *w) {
  const int32_t tr = (w->n + T - 1) / T, tc = (w->k + T - 1) / T;
  int64_t nz = 0;
  for (int32_t i = 0; i < tr; i++)
    for (int32_t j = 0; j < tc; j++) nz += tile_nonzero(w, i, j);
  return tr && tc ? (double)nz / ((double)tr * (double)tc) : 1.0;
}

tsr_status_t tsr_qsparse_build(const tsr_qmatrix_t *w, tsr_qsparse_t *out) {
  memset(out, 0, sizeof *out);
  out->n = w->n;
  out->k = w->k;
  out->tile_rows = (w->n + T - 1) / T;
  out->tile_cols = (w->k + T - 1) / T;
  out->row_sum = w->row_sum;
  out->row_start = calloc((size_t)out->tile_rows + 1, sizeof(int32_t));
  if (!out->row_start) return TSR_ERR(RESOURCE_EXHAUSTED, "sparse weights: %d tile rows",
                                      out->tile_rows);
  int64_t stored = 0;
  for (int32_t i = 0; i < out->tile_rows; i++) {
    out->row_start[i] = (int32_t)stored;
    for (int32_t j = 0; j < out->tile_cols; j++) stored += tile_nonzero(w, i, j);
  }
  out->row_start[out->tile_rows] = (int32_t)stored;
  out->stored = stored;
  out->tile_col = malloc(sizeof(int32_t) * (size_t)(stored ? stored : 1));
  out->tiles = tsr_weights_alloc((size_t)(stored ? stored : 1) * T * T);
  if (!out->tile_col || !out->tiles) {
    tsr_qsparse_free(out);
    return TSR_ERR(RESOURCE_EXHAUSTED, "sparse weights: %lld tiles", (long long)stored);
  }
  int64_t s = 0;
  for (int32_t i = 0; i < out->tile_rows; i++)
    for (int32_t j = 0; j < out->tile_cols; j++) {
      if (!tile_nonzero(w, i, j)) continue;
      out->tile_col[s] = j;
      int8_t *t = out->tiles + s * T * T;
      memset(t, 0, T * T);
      /* quad q (columns 4q..4q+3), row r: bytes [q * 64 + r * 4, +4) */
      for (int32_t r = 0; r < T && i * T + r < w->n; r++)
        for (int32_t c = 0; c < T && j * T + c < w->k; c++)
          t[(c / 4) * 64 + r * 4 + c % 4] = w->data[(size_t)(i * T + r) * (size_t)w->k + j * T + c];
      s++;
    }
  return TSR_OK;
}

void tsr_qsparse_free(tsr_qsparse_t *s) {
  free(s->row_start);
  free(s->tile_col);
  free(s->tiles);
  memset(s, 0, sizeof *s);
}

/* Portable: the same tiles, signed products. */
static void rows_portable(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                          const tsr_qsparse_t *w, int32_t m, int32_t t0, int32_t t1) {
  for (int32_t i = 0; i < m; i++) {
    const int8_t *ar = a + (size_t)i * lda;
    for (int32_t tr = t0; tr < t1; tr++) {
      int32_t acc[T] = {0};
      for (int32_t s = w->row_start[tr]; s < w->row_start[tr + 1]; s++) {
        const int8_t *t = w->tiles + (int64_t)s * T * T;
        const int32_t c0 = w->tile_col[s] * T;
        for (int32_t x = 0; x < T && c0 + x < w->k; x++)
          for (int32_t r = 0; r < T; r++)
            acc[r] += (int32_t)ar[c0 + x] * t[(x / 4) * 64 + r * 4 + x % 4];
      }
      for (int32_t r = 0; r < T && tr * T + r < w->n; r++)
        c[(size_t)i * ldc + (size_t)(tr * T + r)] = acc[r];
    }
  }
}

typedef struct {
  int32_t *c;
  size_t ldc, lda, ldau;
  const int8_t *a;
  const uint8_t *au;
  const tsr_qsparse_t *w;
  int32_t m, chunk;
  bool vnni;
} qs_job_t;

static void qs_task(void *arg, int task, int thread) {
  (void)thread;
  const qs_job_t *j = arg;
  const int32_t t0 = task * j->chunk;
  const int32_t t1 = t0 + j->chunk < j->w->tile_rows ? t0 + j->chunk : j->w->tile_rows;
  if (j->vnni) tsr_qsparse_rows_avx512(j->c, j->ldc, j->au, j->ldau, j->w, j->m, t0, t1);
  else rows_portable(j->c, j->ldc, j->a, j->lda, j->w, j->m, t0, t1);
}

void tsr_qsparse_gemm(tsr_threadpool_t *pool, tsr_isa_t isa, int32_t *c, size_t ldc,
                      const int8_t *a, size_t lda, const tsr_qsparse_t *w, int32_t m) {
  qs_job_t j = {c, ldc, lda, 0, a, NULL, w, m, 0, isa >= TSR_ISA_AVX512VNNI};
  uint8_t *au = NULL;
  if (j.vnni) {
    /* A + 128 as unsigned bytes, each row padded with 128 (x = 0) to whole
     * tiles so a tile at the edge reads only zeros' partners */
    j.ldau = (size_t)w->tile_cols * T;
    au = malloc(j.ldau * (size_t)m);
    if (!au) {
      j.vnni = false;
    } else {
      for (int32_t i = 0; i < m; i++) {
        uint8_t *dst = au + (size_t)i * j.ldau;
        for (int32_t t = 0; t < w->k; t++) dst[t] = (uint8_t)(a[(size_t)i * lda + t] ^ 0x80);
        memset(dst + w->k, 0x80, j.ldau - (size_t)w->k);
      }
      j.au = au;
    }
  }
  const int threads = pool ? tsr_threadpool_size(pool) : 1;
  int32_t chunk = (w->tile_rows + 4 * threads - 1) / (4 * threads);
  if (chunk < 1) chunk = 1;
  j.chunk = chunk;
  const int tasks = (int)((w->tile_rows + chunk - 1) / chunk);
  if (!pool || tasks <= 1)
    for (int t = 0; t < tasks; t++) qs_task(&j, t, 0);
  else
    tsr_threadpool_run(pool, tasks, qs_task, &j);
  free(au);
}
