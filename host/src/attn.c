/*
 * attn.c - int8 block-sparse attention (see attn.h): the KV cache, the
 * per-call pipeline, the host backend and the standalone device harness of
 * `tessera attn`.
 */
#include "attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Host GEMM lists below this many multiply-adds run on the caller. */
#define TSR_ATTN_POOL_MIN 65536.0

/* ---- cache ---- */

tsr_status_t tsr_attn_cache_init(tsr_attn_cache_t *c, const tsr_attn_dims_t *d) {
  memset(c, 0, sizeof *c);
  const size_t kv = (size_t)d->n_kv_heads, seq = (size_t)d->max_seq, hs = (size_t)d->head_dim;
  const size_t nkb = (size_t)tsr_attn_n_kb(d);
  c->k = calloc(kv * seq * hs, 1);
  c->vt = calloc(kv * nkb * (size_t)d->block * hs, 1);
  c->k_scale = calloc(kv * seq, sizeof(float));
  c->v_scale = calloc(kv * seq, sizeof(float));
  c->kmin = calloc(kv * nkb * hs, 1);
  c->kmax = calloc(kv * nkb * hs, 1);
  if (!c->k || !c->vt || !c->k_scale || !c->v_scale || !c->kmin || !c->kmax) {
    tsr_attn_cache_free(c);
    return TSR_ERR(RESOURCE_EXHAUSTED, "attn: int8 KV cache of %zu bytes", 2 * kv * seq * hs);
  }
  return TSR_OK;
}

void tsr_attn_cache_free(tsr_attn_cache_t *c) {
  if (!c) return;
  free(c->k);
  free(c->vt);
  free(c->k_scale);
  free(c->v_scale);
  free(c->kmin);
  free(c->kmax);
  memset(c, 0, sizeof *c);
}

void tsr_attn_cache_append(tsr_attn_cache_t *c, const tsr_attn_dims_t *d, const float *k,
                           const float *v, int32_t pos0, int32_t T) {
  const int32_t hs = d->head_dim, kvh = d->n_kv_heads, B = d->block, nkb = tsr_attn_n_kb(d);
  const size_t seq = (size_t)d->max_seq, kv_dim = (size_t)kvh * hs;
  int8_t vq[4096]; /* head_dim <= 4096 (tsr_attn_work_init) */
  for (int32_t t = 0; t < T; t++) {
    const int32_t p = pos0 + t, kb = p / B;
    for (int32_t g = 0; g < kvh; g++) {
      int8_t *kr = c->k + ((size_t)g * seq + (size_t)p) * hs;
      tsr_quantize_rows(kr, c->k_scale + (size_t)g * seq + p, k + (size_t)t * kv_dim +
                        (size_t)g * hs, 1, hs);
      int8_t *mn = c->kmin + ((size_t)g * nkb + kb) * hs, *mx = c->kmax + ((size_t)g * nkb + kb) * hs;
      for (int32_t i = 0; i < hs; i++) {
        if (p % B == 0 || kr[i] < mn[i]) mn[i] = kr[i];
        if (p % B == 0 || kr[i] > mx[i]) mx[i] = kr[i];
      }
      /* V: quantized as a row, stored as a column of V^T */
      tsr_quantize_rows(vq, c->v_scale + (size_t)g * seq + p, v + (size_t)t * kv_dim +
                        (size_t)g * hs, 1, hs);
      int8_t *col = c->vt + ((size_t)g * nkb + kb) * (size_t)hs * B + (size_t)(p % B);
      for (int32_t i = 0; i < hs; i++) col[(size_t)i * B] = vq[i];
    }
  }
}

tsr_status_t tsr_attn_cache_ranges(const tsr_attn_cache_t *c, const tsr_attn_dims_t *d,
                                   int32_t pos0, int32_t T, tsr_attn_emit_fn emit, void *arg) {
  const size_t seq = (size_t)d->max_seq, hs = (size_t)d->head_dim, kvh = (size_t)d->n_kv_heads;
  const size_t B = (size_t)d->block, nkb = (size_t)tsr_attn_n_kb(d);
  const size_t vt_base = kvh * seq * hs;
  const size_t kb0 = (size_t)pos0 / B, kb1 = (size_t)(pos0 + T - 1) / B;
  for (size_t g = 0; g < kvh; g++) {
    size_t off = (g * seq + (size_t)pos0) * hs;
    TSR_RETURN_IF(emit(arg, off, c->k + off, (size_t)T * hs));
  }
  /* V^T: the tiles of the blocks the new keys fall in, one range per kv head */
  for (size_t g = 0; g < kvh; g++) {
    size_t off = (g * nkb + kb0) * hs * B;
    TSR_RETURN_IF(emit(arg, vt_base + off, c->vt + off, (kb1 - kb0 + 1) * hs * B));
  }
  return TSR_OK;
}

/* ---- work ---- */

tsr_status_t tsr_attn_work_init(tsr_attn_work_t *w, const tsr_attn_dims_t *d,
                                const tsr_attn_pattern_t *pat, int32_t max_rows,
                                int n_threads) {
  memset(w, 0, sizeof *w);
  TSR_RETURN_IF(tsr_attn_pattern_check(pat));
  if (pat->kind == TSR_ATTN_REFERENCE)
    return TSR_ERR(INVALID_ARGUMENT, "attn: the reference pattern has no int8 work");
  if (d->n_heads < 1 || d->n_kv_heads < 1 || d->n_heads % d->n_kv_heads)
    return TSR_ERR(INVALID_ARGUMENT, "attn: heads %d not a multiple of kv heads %d", d->n_heads,
                   d->n_kv_heads);
  if (d->head_dim < 1 || d->head_dim > 4096)
    return TSR_ERR(OUT_OF_RANGE, "attn: head_dim %d outside [1, 4096]", d->head_dim);
  if (d->max_seq < 1 || d->max_seq >= (1 << 17))
    return TSR_ERR(OUT_OF_RANGE, "attn: max_seq %d outside [1, 131071]", d->max_seq);
  if (max_rows < 1 || max_rows > d->max_seq)
    return TSR_ERR(OUT_OF_RANGE, "attn: max_rows %d outside [1, max_seq %d]", max_rows,
                   d->max_seq);
  w->d = *d;
  w->d.block = pat->block;
  w->pat = *pat;
  w->max_rows = max_rows;
  w->n_threads = n_threads < 1 ? 1 : n_threads;
  const size_t H = (size_t)d->n_heads, R = (size_t)max_rows, hs = (size_t)d->head_dim;
  const size_t seq = (size_t)d->max_seq, nkb = (size_t)tsr_attn_n_kb(&w->d);
  const size_t nth = (size_t)w->n_threads;
  /* Segments per call: at most R / B + 2 query blocks. */
  const size_t segs = R / (size_t)w->d.block + 2;
  w->cap_pairs = (int32_t)(H * segs * nkb);
  /* Each row sees at most max_seq keys; the pairs of a segment cover at
   * most its rows x (its last position + 1) keys. */
  w->s_cap = H * R * seq;
  w->o_cap = (uint64_t)w->cap_pairs * (uint64_t)w->d.block * hs;
  if (w->o_cap > H * R * nkb * hs) w->o_cap = H * R * nkb * hs;
  w->pairs = malloc(sizeof(tsr_attn_pair_t) * (size_t)w->cap_pairs);
  w->head_first = malloc(sizeof(int32_t) * (H + 1));
  w->qq = malloc(H * R * hs);
  w->sq = malloc(sizeof(float) * H * R);
  w->sp = malloc(sizeof(float) * H * R);
  w->s = malloc(sizeof(int32_t) * w->s_cap);
  w->sf = malloc(sizeof(float) * w->s_cap);
  w->p = malloc(w->s_cap);
  w->o = malloc(sizeof(int32_t) * w->o_cap);
  w->row_f = malloc(sizeof(float) * nth * seq);
  w->row_q = malloc(nth * seq);
  w->acc = malloc(sizeof(int32_t) * nth * hs);
  w->ones = malloc(sizeof(float) * hs);
  w->kb_tmp = malloc(sizeof(int32_t) * 2 * nkb);
  w->bound_tmp = malloc(sizeof(int64_t) * nkb);
  if (!w->pairs || !w->head_first || !w->qq || !w->sq || !w->sp || !w->s || !w->sf || !w->p ||
      !w->o || !w->row_f || !w->row_q || !w->acc || !w->ones || !w->kb_tmp || !w->bound_tmp) {
    tsr_attn_work_free(w);
    return TSR_ERR(RESOURCE_EXHAUSTED, "attn: scratch for %d rows x %d keys x %d heads",
                   max_rows, d->max_seq, d->n_heads);
  }
  for (size_t i = 0; i < hs; i++) w->ones[i] = 1.0f;
  return TSR_OK;
}

void tsr_attn_work_free(tsr_attn_work_t *w) {
  if (!w) return;
  free(w->pairs);
  free(w->head_first);
  free(w->qq);
  free(w->sq);
  free(w->sp);
  free(w->s);
  free(w->sf);
  free(w->p);
  free(w->o);
  free(w->row_f);
  free(w->row_q);
  free(w->acc);
  free(w->ones);
  free(w->kb_tmp);
  free(w->bound_tmp);
  memset(w, 0, sizeof *w);
}

/* Quest upper bound of q (hs int8) against key block kb of kv head g:
 * sum_d max(q_d * min_d, q_d * max_d), exact in int64. */
static int64_t quest_bound(const int8_t *q, const int8_t *mn, const int8_t *mx, int32_t hs) {
  int64_t b = 0;
  for (int32_t i = 0; i < hs; i++) {
    int32_t lo = (int32_t)q[i] * mn[i], hi = (int32_t)q[i] * mx[i];
    b += lo > hi ? lo : hi;
  }
  return b;
}

/* Active key blocks of head h, segment (qb, rows r0..r0+m): writes them
 * ascending into kbs, returns the count. */
static int32_t segment_blocks(const tsr_attn_work_t *w, const tsr_attn_cache_t *c, int32_t h,
                              int32_t qb, int32_t r0, int32_t m, int32_t *kbs, int64_t *bound,
                              int32_t *tmp) {
  const tsr_attn_pattern_t *p = &w->pat;
  int32_t n = 0;
  if (w->mask_fn) {
    for (int32_t kb = 0; kb <= qb; kb++)
      if (w->mask_fn(w->mask_arg, h, qb, kb)) kbs[n++] = kb;
    return n;
  }
  if (p->kind != TSR_ATTN_TOPK || p->topk >= qb + 1) {
    for (int32_t kb = 0; kb <= qb; kb++)
      if (p->kind == TSR_ATTN_TOPK || tsr_attn_static_active(p, qb, kb)) kbs[n++] = kb;
    return n;
  }
  /* topk: the diagonal, then the topk - 1 highest bounds among kb < qb
   * (bound = the largest over the segment's rows; ties: the later block). */
  const int32_t hs = w->d.head_dim, nkb = tsr_attn_n_kb(&w->d);
  const int32_t g = h / (w->d.n_heads / w->d.n_kv_heads);
  for (int32_t kb = 0; kb < qb; kb++) {
    const int8_t *mn = c->kmin + ((size_t)g * nkb + kb) * hs;
    const int8_t *mx = c->kmax + ((size_t)g * nkb + kb) * hs;
    int64_t best = INT64_MIN;
    for (int32_t r = r0; r < r0 + m; r++) {
      int64_t b = quest_bound(w->qq + ((size_t)h * w->T + r) * hs, mn, mx, hs);
      if (b > best) best = b;
    }
    bound[kb] = best;
    tmp[kb] = 0;
  }
  for (int32_t sel = 0; sel < p->topk - 1; sel++) {
    int32_t arg = -1;
    for (int32_t kb = qb - 1; kb >= 0; kb--)
      if (!tmp[kb] && (arg < 0 || bound[kb] > bound[arg])) arg = kb;
    if (arg < 0) break;
    tmp[arg] = 1;
  }
  for (int32_t kb = 0; kb < qb; kb++)
    if (tmp[kb]) kbs[n++] = kb;
  kbs[n++] = qb;
  return n;
}

tsr_status_t tsr_attn_prepare(tsr_attn_work_t *w, const tsr_attn_cache_t *c, const float *q,
                              int32_t pos0, int32_t T) {
  const tsr_attn_dims_t *d = &w->d;
  if (T < 1 || T > w->max_rows)
    return TSR_ERR(OUT_OF_RANGE, "attn: %d query rows outside [1, %d]", T, w->max_rows);
  if (pos0 < 0 || pos0 + T > d->max_seq)
    return TSR_ERR(OUT_OF_RANGE, "attn: positions %d..%d outside the context of %d", pos0,
                   pos0 + T - 1, d->max_seq);
  const int32_t H = d->n_heads, hs = d->head_dim, B = d->block, R = w->max_rows;
  const size_t q_dim = (size_t)H * hs;
  w->T = T;
  w->pos0 = pos0;
  for (int32_t h = 0; h < H; h++)
    for (int32_t t = 0; t < T; t++)
      tsr_quantize_rows(w->qq + ((size_t)h * T + t) * hs, w->sq + (size_t)h * R + t,
                        q + (size_t)t * q_dim + (size_t)h * hs, 1, hs);
  int32_t *kbs = w->kb_tmp, *sel = w->kb_tmp + tsr_attn_n_kb(d);
  uint64_t s_off = 0, p_off = 0, o_off = 0;
  int32_t n = 0;
  w->dense_pairs = 0;
  for (int32_t h = 0; h < H; h++) {
    w->head_first[h] = n;
    for (int32_t r0 = 0; r0 < T;) {
      const int32_t qb = (pos0 + r0) / B;
      int32_t m = (qb + 1) * B - (pos0 + r0);
      if (m > T - r0) m = T - r0;
      const int32_t last = pos0 + r0 + m - 1; /* last position of the segment */
      int32_t cnt = segment_blocks(w, c, h, qb, r0, m, kbs, w->bound_tmp, sel);
      w->dense_pairs += (uint64_t)qb + 1;
      for (int32_t i = 0; i < cnt; i++) {
        if (n >= w->cap_pairs) return TSR_ERR(INTERNAL, "attn: more than %d pairs", w->cap_pairs);
        tsr_attn_pair_t *pr = &w->pairs[n++];
        pr->h = h;
        pr->r0 = r0;
        pr->m = m;
        pr->qb = qb;
        pr->kb = kbs[i];
        int32_t end = (kbs[i] + 1) * B;
        if (end > last + 1) end = last + 1;
        pr->nk = end - kbs[i] * B;
        pr->s_off = s_off;
        pr->p_off = p_off;
        pr->o_off = o_off;
        s_off += (uint64_t)m * (uint64_t)pr->nk;
        p_off += (uint64_t)m * (uint64_t)pr->nk;
        o_off += (uint64_t)m * (uint64_t)hs;
      }
      r0 += m;
    }
  }
  w->head_first[H] = n;
  w->n_pairs = n;
  w->s_len = s_off;
  w->o_len = o_off;
  if (s_off > w->s_cap || o_off > w->o_cap)
    return TSR_ERR(INTERNAL, "attn: scratch overflow (%llu scores, %llu partials)",
                   (unsigned long long)s_off, (unsigned long long)o_off);
  return TSR_OK;
}

/* ---- host backend ---- */

typedef struct {
  tsr_attn_work_t *w;
  const tsr_attn_cache_t *c;
  int phase;
  tsr_isa_t isa;
} gemm_args_t;

static void pair_gemm(const tsr_attn_work_t *w, const tsr_attn_cache_t *c, int phase,
                      const tsr_attn_pair_t *pr, tsr_isa_t isa) {
  const tsr_attn_dims_t *d = &w->d;
  const size_t hs = (size_t)d->head_dim, seq = (size_t)d->max_seq, B = (size_t)d->block;
  const size_t g = (size_t)(pr->h / (d->n_heads / d->n_kv_heads));
  if (phase == 0) {
    const int8_t *a = w->qq + ((size_t)pr->h * w->T + pr->r0) * hs;
    const int8_t *k = c->k + (g * seq + (size_t)pr->kb * B) * hs;
    tsr_qgemm_strided(NULL, isa, w->s + pr->s_off, (size_t)pr->nk, a, hs, k, hs, pr->m, pr->nk,
                      (int32_t)hs);
  } else {
    const int8_t *a = w->p + pr->p_off;
    const size_t nkb = (size_t)tsr_attn_n_kb(d);
    const int8_t *vt = c->vt + (g * nkb + (size_t)pr->kb) * hs * B;
    tsr_qgemm_strided(NULL, isa, w->o + pr->o_off, hs, a, (size_t)pr->nk, vt, B, pr->m,
                      (int32_t)hs, pr->nk);
  }
}

static void gemm_task(void *arg, int task, int thread) {
  (void)thread;
  gemm_args_t *a = arg;
  pair_gemm(a->w, a->c, a->phase, &a->w->pairs[task], a->isa);
}

void tsr_attn_run_host(tsr_attn_work_t *w, const tsr_attn_cache_t *c, int phase,
                       tsr_threadpool_t *pool, tsr_isa_t isa) {
  gemm_args_t a = {w, c, phase, isa};
  double macs = (double)w->s_len * (double)w->d.head_dim;
  tsr_threadpool_run(macs >= TSR_ATTN_POOL_MIN ? pool : NULL, w->n_pairs, gemm_task, &a);
}

/* ---- softmax and output ---- */

typedef struct {
  tsr_attn_work_t *w;
  const tsr_attn_cache_t *c;
  float *out;
} head_args_t;

/* One head: dequantize its score partials, softmax each row over its active
 * keys, fold s_v into P, quantize per row into the P' blocks. */
static void softmax_head(void *arg, int h, int thread) {
  head_args_t *a = arg;
  tsr_attn_work_t *w = a->w;
  const tsr_attn_cache_t *c = a->c;
  const tsr_attn_dims_t *d = &w->d;
  const size_t seq = (size_t)d->max_seq, B = (size_t)d->block;
  const size_t g = (size_t)(h / (d->n_heads / d->n_kv_heads));
  const float inv = 1.0f / sqrtf((float)d->head_dim);
  float *row = w->row_f + (size_t)thread * seq;
  int8_t *rq = w->row_q + (size_t)thread * seq;
  const int32_t first = w->head_first[h], last = w->head_first[h + 1];
  for (int32_t i = first; i < last; i++) {
    const tsr_attn_pair_t *pr = &w->pairs[i];
    tsr_dequantize(w->sf + pr->s_off, (size_t)pr->nk, w->s + pr->s_off, (size_t)pr->nk,
                   w->sq + (size_t)h * w->max_rows + pr->r0,
                   c->k_scale + g * seq + (size_t)pr->kb * B, pr->m, pr->nk);
  }
  for (int32_t t = 0; t < w->T; t++) w->sp[(size_t)h * w->max_rows + t] = 1.0f;
  /* Rows by segment: pairs of one segment are consecutive. */
  for (int32_t i = first; i < last;) {
    int32_t j = i;
    while (j < last && w->pairs[j].r0 == w->pairs[i].r0) j++;
    const int32_t r0 = w->pairs[i].r0, m = w->pairs[i].m;
    for (int32_t r = 0; r < m; r++) {
      const int32_t pos = w->pos0 + r0 + r;
      float mx = -INFINITY;
      int32_t len = 0;
      for (int32_t x = i; x < j; x++) {
        const tsr_attn_pair_t *pr = &w->pairs[x];
        const float *sf = w->sf + pr->s_off + (size_t)r * pr->nk;
        for (int32_t k = 0; k < pr->nk; k++) {
          float v = (int32_t)(pr->kb * B) + k <= pos ? sf[k] * inv : -INFINITY;
          row[len++] = v;
          if (v > mx) mx = v;
        }
      }
      float sum = 0.0f;
      for (int32_t k = 0; k < len; k++) {
        row[k] = row[k] == -INFINITY ? 0.0f : expf(row[k] - mx);
        sum += row[k];
      }
      len = 0;
      for (int32_t x = i; x < j; x++) {
        const tsr_attn_pair_t *pr = &w->pairs[x];
        const float *sv = c->v_scale + g * seq + (size_t)pr->kb * B;
        for (int32_t k = 0; k < pr->nk; k++, len++) row[len] = row[len] / sum * sv[k];
      }
      tsr_quantize_rows(rq, w->sp + (size_t)h * w->max_rows + r0 + r, row, 1, len);
      len = 0;
      for (int32_t x = i; x < j; x++) {
        const tsr_attn_pair_t *pr = &w->pairs[x];
        memcpy(w->p + pr->p_off + (size_t)r * pr->nk, rq + len, (size_t)pr->nk);
        len += pr->nk;
      }
    }
    i = j;
  }
}

void tsr_attn_softmax(tsr_attn_work_t *w, const tsr_attn_cache_t *c, tsr_threadpool_t *pool) {
  head_args_t a = {w, c, NULL};
  double work = (double)w->s_len * 8.0;
  tsr_threadpool_run(work >= TSR_ATTN_POOL_MIN ? pool : NULL, w->d.n_heads, softmax_head, &a);
}

static void output_head(void *arg, int h, int thread) {
  head_args_t *a = arg;
  tsr_attn_work_t *w = a->w;
  const int32_t hs = w->d.head_dim;
  const size_t q_dim = (size_t)w->d.n_heads * hs;
  int32_t *acc = w->acc + (size_t)thread * hs;
  const int32_t first = w->head_first[h], last = w->head_first[h + 1];
  for (int32_t t = 0; t < w->T; t++)
    memset(a->out + (size_t)t * q_dim + (size_t)h * hs, 0, sizeof(float) * (size_t)hs);
  for (int32_t i = first; i < last;) {
    int32_t j = i;
    while (j < last && w->pairs[j].r0 == w->pairs[i].r0) j++;
    const int32_t r0 = w->pairs[i].r0, m = w->pairs[i].m;
    for (int32_t r = 0; r < m; r++) {
      memset(acc, 0, sizeof(int32_t) * (size_t)hs);
      for (int32_t x = i; x < j; x++) {
        const int32_t *o = w->o + w->pairs[x].o_off + (size_t)r * hs;
        for (int32_t k = 0; k < hs; k++) acc[k] = (int32_t)((uint32_t)acc[k] + (uint32_t)o[k]);
      }
      tsr_dequantize(a->out + (size_t)(r0 + r) * q_dim + (size_t)h * hs, (size_t)hs, acc,
                     (size_t)hs, w->sp + (size_t)h * w->max_rows + r0 + r, w->ones, 1, hs);
    }
    i = j;
  }
}

void tsr_attn_output(tsr_attn_work_t *w, float *out, tsr_threadpool_t *pool) {
  head_args_t a = {w, NULL, out};
  double work = (double)w->o_len;
  tsr_threadpool_run(work >= TSR_ATTN_POOL_MIN ? pool : NULL, w->d.n_heads, output_head, &a);
}

tsr_status_t tsr_attn_forward(tsr_attn_work_t *w, const tsr_attn_cache_t *c, const float *q,
                              int32_t pos0, int32_t T, float *out,
                              const tsr_attn_backend_t *be, tsr_threadpool_t *pool,
                              tsr_isa_t isa) {
  TSR_RETURN_IF(tsr_attn_prepare(w, c, q, pos0, T));
  if (be) TSR_RETURN_IF(be->run(be->self, w, c, 0));
  else tsr_attn_run_host(w, c, 0, pool, isa);
  tsr_attn_softmax(w, c, pool);
  if (be) TSR_RETURN_IF(be->run(be->self, w, c, 1));
  else tsr_attn_run_host(w, c, 1, pool, isa);
  tsr_attn_output(w, out, pool);
  return TSR_OK;
}

/* ---- descriptors ---- */

void tsr_attn_phase_bytes(const tsr_attn_work_t *w, int phase, uint64_t *a_bytes,
                          uint64_t *c_bytes) {
  if (phase == 0) {
    *a_bytes = (uint64_t)w->d.n_heads * (uint64_t)w->T * (uint64_t)w->d.head_dim; /* Qq */
    *c_bytes = w->s_len * 4;
  } else {
    *a_bytes = w->s_len;
    *c_bytes = w->o_len * 4;
  }
}

const void *tsr_attn_phase_a(const tsr_attn_work_t *w, int phase) {
  return phase == 0 ? (const void *)w->qq : (const void *)w->p;
}

void *tsr_attn_phase_c(tsr_attn_work_t *w, int phase) {
  return phase == 0 ? (void *)w->s : (void *)w->o;
}

void tsr_attn_pack(const tsr_attn_work_t *w, int phase, uint64_t a_addr, uint64_t kv_addr,
                   uint64_t c_addr, uint8_t *ring) {
  const tsr_attn_dims_t *d = &w->d;
  const uint64_t hs = (uint64_t)d->head_dim, seq = (uint64_t)d->max_seq, B = (uint64_t)d->block;
  const uint64_t vt_base = kv_addr + (uint64_t)d->n_kv_heads * seq * hs;
  for (int32_t i = 0; i < w->n_pairs; i++) {
    const tsr_attn_pair_t *pr = &w->pairs[i];
    const uint64_t g = (uint64_t)(pr->h / (d->n_heads / d->n_kv_heads));
    tsr_desc_t desc = {.opcode = TSR_OP_GEMM_I8_I32, .m = (uint32_t)pr->m};
    if (phase == 0) {
      desc.n = (uint32_t)pr->nk;
      desc.k = (uint32_t)hs;
      desc.lda = (uint32_t)hs;
      desc.ldw = (uint32_t)hs;
      desc.ldc = (uint32_t)pr->nk * 4;
      desc.a_addr = a_addr + ((uint64_t)pr->h * (uint64_t)w->T + (uint64_t)pr->r0) * hs;
      desc.w_addr = kv_addr + (g * seq + (uint64_t)pr->kb * B) * hs;
      desc.c_addr = c_addr + pr->s_off * 4;
    } else {
      desc.n = (uint32_t)hs;
      desc.k = (uint32_t)pr->nk;
      desc.lda = (uint32_t)pr->nk;
      desc.ldw = (uint32_t)B;
      desc.ldc = (uint32_t)hs * 4;
      desc.a_addr = a_addr + pr->p_off;
      desc.w_addr = vt_base + (g * (uint64_t)tsr_attn_n_kb(d) + (uint64_t)pr->kb) * hs * B;
      desc.c_addr = c_addr + pr->o_off * 4;
    }
    tsr_desc_pack(ring + (size_t)i * TSR_HW_DESC_BYTES, &desc);
  }
}

uint64_t tsr_attn_kv_read(const tsr_attn_work_t *w, int phase) {
  (void)phase;
  uint64_t b = 0;
  for (int32_t i = 0; i < w->n_pairs; i++)
    b += (uint64_t)w->pairs[i].nk * (uint64_t)w->d.head_dim;
  return b;
}

uint64_t tsr_attn_model_cycles(const tsr_attn_work_t *w, const tsr_km_timing_t *t) {
  tsr_km_estimate_t e;
  memset(&e, 0, sizeof e);
  const uint32_t hs = (uint32_t)w->d.head_dim;
  for (int32_t i = 0; i < w->n_pairs; i++) {
    const tsr_attn_pair_t *pr = &w->pairs[i];
    tsr_km_estimate_gemm(t, (uint32_t)pr->m, (uint32_t)pr->nk, hs, &e);
    tsr_km_estimate_gemm(t, (uint32_t)pr->m, hs, (uint32_t)pr->nk, &e);
  }
  return e.cycles + 2 * tsr_km_launch_cycles(t);
}

/* ---- standalone HAL backend ---- */

static uint64_t round64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

tsr_status_t tsr_attn_hal_init(tsr_attn_hal_t *h, tsr_hal_device_t *dev,
                               const tsr_attn_work_t *w, uint32_t timeout_ms) {
  memset(h, 0, sizeof *h);
  h->dev = dev;
  h->timeout_ns = (uint64_t)(timeout_ms ? timeout_ms : 10000) * 1000000ull;
  const uint64_t a = round64((uint64_t)w->d.n_heads * (uint64_t)w->max_rows *
                                 (uint64_t)w->d.head_dim > w->s_cap
                             ? (uint64_t)w->d.n_heads * (uint64_t)w->max_rows *
                                   (uint64_t)w->d.head_dim
                             : w->s_cap);
  const uint64_t cb = round64(4 * (w->s_cap > w->o_cap ? w->s_cap : w->o_cap));
  h->ring_off = 0;
  h->a_off = round64((uint64_t)w->cap_pairs * TSR_HW_DESC_BYTES);
  h->c_off = h->a_off + a;
  h->kv_off = h->c_off + cb;
  uint64_t total = h->kv_off + round64(tsr_attn_kv_bytes(&w->d));
  TSR_RETURN_IF_ERROR(dev->vt->alloc(dev, total, 4096, &h->buf),
                      "attn: device buffer of %llu bytes", (unsigned long long)total);
  return TSR_OK;
}

void tsr_attn_hal_free(tsr_attn_hal_t *h) {
  if (h->dev && h->buf.size) h->dev->vt->free(h->dev, &h->buf);
  memset(h, 0, sizeof *h);
}

static tsr_status_t hal_emit(void *arg, uint64_t off, const void *src, size_t n) {
  tsr_attn_hal_t *h = arg;
  return h->dev->vt->write(h->dev, &h->buf, h->kv_off + off, src, n);
}

tsr_status_t tsr_attn_hal_append(tsr_attn_hal_t *h, const tsr_attn_cache_t *c,
                                 const tsr_attn_dims_t *d, int32_t pos0, int32_t T) {
  return tsr_attn_cache_ranges(c, d, pos0, T, hal_emit, h);
}

static tsr_status_t hal_run(void *self, tsr_attn_work_t *w, const tsr_attn_cache_t *c,
                            int phase) {
  (void)c;
  tsr_attn_hal_t *h = self;
  tsr_hal_device_t *dev = h->dev;
  if (!w->n_pairs) return TSR_OK;
  uint64_t a_bytes, c_bytes;
  tsr_attn_phase_bytes(w, phase, &a_bytes, &c_bytes);
  size_t ring_bytes = (size_t)w->n_pairs * TSR_HW_DESC_BYTES;
  uint8_t *ring = malloc(ring_bytes);
  if (!ring) return TSR_ERR(RESOURCE_EXHAUSTED, "attn: ring of %zu bytes", ring_bytes);
  const uint64_t base = h->buf.addr;
  tsr_attn_pack(w, phase, base + h->a_off, base + h->kv_off, base + h->c_off, ring);
  tsr_status_t s = dev->vt->write(dev, &h->buf, h->ring_off, ring, ring_bytes);
  free(ring);
  if (!s) s = dev->vt->write(dev, &h->buf, h->a_off, tsr_attn_phase_a(w, phase), a_bytes);
  if (s) return s;
  tsr_hal_command_t cmd = {.window_base = base, .window_size = h->buf.size,
                           .ring = base + h->ring_off, .n_desc = (uint32_t)w->n_pairs};
  uint64_t fence = 0;
  tsr_hal_result_t res;
  memset(&res, 0, sizeof res);
  TSR_RETURN_IF(dev->vt->submit(dev, &cmd, &fence));
  TSR_RETURN_IF(dev->vt->wait(dev, fence, h->timeout_ns, &res));
  if (res.hw_status != TSR_HWERR_OK)
    return TSR_ERR(DEVICE, "attn: the kernel refused descriptor %u of phase %d: %s",
                   res.err_index, phase, tsr_hal_hwerr_name(res.hw_status));
  h->launches++;
  h->total.cycles += res.cycles;
  h->total.stall_cycles += res.stall_cycles;
  h->total.bytes_rd += res.bytes_rd;
  h->total.bytes_wr += res.bytes_wr;
  h->total.macs += res.macs;
  h->total.desc_done += res.desc_done;
  return dev->vt->read(dev, &h->buf, h->c_off, tsr_attn_phase_c(w, phase), c_bytes);
}

tsr_attn_backend_t tsr_attn_hal_backend(tsr_attn_hal_t *h) {
  tsr_attn_backend_t b = {hal_run, h};
  return b;
}
