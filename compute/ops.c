/* ops.c - the light CPU ops of the llama forward pass (norms, RoPE, softmax,
 * SwiGLU). Written to follow llama2.c's arithmetic order so the fp32 path
 * reproduces its outputs; the exponential is this file's own (within 2 ulp,
 * vectorized), with which stories260K's greedy transcripts still equal
 * llama2.c's byte for byte (tests/e2e/stories.sh). */
#include "compute/ops.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "compute/qgemm.h" /* tsr_isa_detect */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TSR_OPS_X86 1
#endif

/* ---- exp ----
 * e^x for float x with one result on every machine: the portable lane and
 * the AVX2 block do the same IEEE multiplies and adds in the same order
 * (never fused), so the choice between them changes only speed.
 *   0 below x = -87.3 (e^x < 1.22e-38: results near or below the
 *       smallest normal float are flushed, so no lane ever computes a
 *       subnormal, which costs a microcode assist per vector on x86);
 *   x clamped above at 100 (e^x is +inf beyond in float);
 *   k = x * log2(e) rounded to the nearest integer, ties to even (adding and
 *       subtracting 1.5 * 2^23);
 *   r = (x - k * LN2_HI) - k * LN2_LO (LN2_HI has 15 significant bits, so
 *       k * LN2_HI is exact);
 *   e^r by its Taylor polynomial of degree 7 (|r| <= 0.347: truncation
 *       below 0.05 ulp), Horner's rule, a multiply then an add per step;
 *   times 2^k as 2^(k >> 1) * 2^(k - (k >> 1)), both normal floats (k
 *       reaches 145 before the result is +inf); NaN stays NaN.
 * Within 2 ulp of e^x above the flush (test_forward compares it with exp()
 * in double). */
#define EXP_UNDER (-87.3f)
#define EXP_HI 100.0f
#define EXP_LOG2E 1.44269502f
#define EXP_SHIFT 12582912.0f /* 1.5 * 2^23 */
#define EXP_LN2_HI 0.693145751953125f
#define EXP_LN2_LO 1.42860677e-06f

static const float exp_c[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                               1.0f / 6,    0.5f,       1.0f,       1.0f};

static inline float pow2i(int32_t k) { /* 2^k, -126 <= k <= 127 */
  uint32_t b = (uint32_t)(k + 127) << 23;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static float exp_lane(float x) {
  if (x != x) return x;
  if (x < EXP_UNDER) return 0.0f;
  float xc = x > EXP_HI ? EXP_HI : x;
  float t = xc * EXP_LOG2E;
  float kf = t + EXP_SHIFT;
  kf = kf - EXP_SHIFT;
  float hi = kf * EXP_LN2_HI;
  float lo = kf * EXP_LN2_LO;
  float r = xc - hi;
  r = r - lo;
  float p = exp_c[0];
  for (int i = 1; i < 8; i++) {
    p = p * r;
    p = p + exp_c[i];
  }
  const int32_t k = (int32_t)kf, k1 = k >> 1;
  p = p * pow2i(k1);
  return p * pow2i(k - k1);
}

typedef void (*exp_block_fn)(float *x, int32_t n, float sub);

/* x[i] = e^(x[i] - sub), lane by lane. */
static void exp_block_portable(float *x, int32_t n, float sub) {
  for (int32_t i = 0; i < n; i++) {
    float d = x[i] - sub;
    x[i] = exp_lane(d);
  }
}

#ifdef TSR_OPS_X86
/* One vector of exp lanes: the same operations as exp_lane, 8 at a time. */
__attribute__((target("avx2"))) static inline __m256 exp8(__m256 d) {
  const __m256 hi = _mm256_set1_ps(EXP_HI), shift = _mm256_set1_ps(EXP_SHIFT);
  /* flushed lanes compute e^0, NaN lanes e^100: both replaced below */
  const __m256 zero = _mm256_cmp_ps(d, _mm256_set1_ps(EXP_UNDER), _CMP_LT_OQ);
  __m256 xc = _mm256_andnot_ps(zero, _mm256_min_ps(d, hi));
  __m256 kf = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(EXP_LOG2E)), shift),
                            shift);
  __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(kf, _mm256_set1_ps(EXP_LN2_HI))),
                           _mm256_mul_ps(kf, _mm256_set1_ps(EXP_LN2_LO)));
  __m256 p = _mm256_set1_ps(exp_c[0]);
  for (int c = 1; c < 8; c++) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(exp_c[c]));
  const __m256i bias = _mm256_set1_epi32(127);
  __m256i k = _mm256_cvtps_epi32(kf), k1 = _mm256_srai_epi32(k, 1);
  __m256i k2 = _mm256_sub_epi32(k, k1);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23)));
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23)));
  p = _mm256_andnot_ps(zero, p);
  return _mm256_blendv_ps(p, d, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
}

/* The tail too (masked), so the block never leaves the AVX registers for
 * the scalar lane. */
__attribute__((target("avx2"))) static void exp_block_avx2(float *x, int32_t n, float sub) {
  const __m256 vsub = _mm256_set1_ps(sub);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vsub)));
  if (i < n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - i), lane);
    const __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + i, m), vsub);
    _mm256_maskstore_ps(x + i, m, exp8(d));
  }
}

#endif

static exp_block_fn exp_block_impl = exp_block_portable;
static pthread_once_t exp_once = PTHREAD_ONCE_INIT;

static void exp_choose(void) {
#ifdef TSR_OPS_X86
  const tsr_isa_t isa = tsr_isa_detect();
  /* AVX2 also where AVX-512 is: 512-bit float multiplies here lowered the
   * clock of the code around them (int8 prefill 5 % slower, measured) */
  if (isa >= TSR_ISA_AVX2) exp_block_impl = exp_block_avx2;
#endif
}

static void exp_block(float *x, int32_t n, float sub) {
  pthread_once(&exp_once, exp_choose);
  exp_block_impl(x, n, sub);
}

float tsr_expf(float x) { return exp_lane(x); }

void tsr_exp_rows_isa(tsr_isa_t isa, float *x, int32_t n, float sub) {
#ifdef TSR_OPS_X86
  const tsr_isa_t have = tsr_isa_detect();
  if (isa > have) isa = have;
  if (isa >= TSR_ISA_AVX2) return exp_block_avx2(x, n, sub);
#else
  (void)isa;
#endif
  exp_block_portable(x, n, sub);
}

void tsr_rmsnorm(float *out, const float *x, const float *w, int32_t n, float eps) {
  float ss = 0.0f;
  for (int32_t i = 0; i < n; i++) ss += x[i] * x[i];
  ss /= (float)n;
  ss += eps;
  ss = 1.0f / sqrtf(ss);
  for (int32_t i = 0; i < n; i++) out[i] = w[i] * (ss * x[i]);
}

void tsr_softmax(float *x, int32_t n) {
  float max = x[0];
  for (int32_t i = 1; i < n; i++)
    if (x[i] > max) max = x[i];
  exp_block(x, n, max);
  float sum = 0.0f;
  for (int32_t i = 0; i < n; i++) sum += x[i];
  for (int32_t i = 0; i < n; i++) x[i] /= sum;
}

/* The angle of pair i at position pos: the same powf, cosf and sinf calls
 * wherever RoPE is applied. */
static void rope_pair(float *c, float *s, int32_t i, int32_t head_dim, int32_t pos,
                      float theta) {
  float freq = 1.0f / powf(theta, (float)i / (float)head_dim);
  float val = (float)pos * freq;
  *c = cosf(val);
  *s = sinf(val);
}

static void rope_rotate(float *vec, int32_t n_heads, int32_t head_dim, int32_t i, float fcr,
                        float fci) {
  for (int32_t h = 0; h < n_heads; h++) {
    float *v = vec + (size_t)h * head_dim + i;
    float v0 = v[0], v1 = v[1];
    v[0] = v0 * fcr - v1 * fci;
    v[1] = v0 * fci + v1 * fcr;
  }
}

void tsr_rope(float *vec, int32_t n_heads, int32_t head_dim, int32_t pos, float theta) {
  for (int32_t i = 0; i < head_dim; i += 2) {
    float fcr, fci;
    rope_pair(&fcr, &fci, i, head_dim, pos, theta);
    rope_rotate(vec, n_heads, head_dim, i, fcr, fci);
  }
}

void tsr_rope_angles(float *cs, int32_t head_dim, int32_t pos, float theta) {
  for (int32_t i = 0; i < head_dim; i += 2) rope_pair(&cs[i], &cs[i + 1], i, head_dim, pos, theta);
}

void tsr_rope_apply(float *vec, int32_t n_heads, int32_t head_dim, const float *cs) {
  for (int32_t i = 0; i < head_dim; i += 2) rope_rotate(vec, n_heads, head_dim, i, cs[i], cs[i + 1]);
}

void tsr_swiglu(float *gate, const float *up, int32_t n) {
  float e[256]; /* e^-gate, a block at a time */
  for (int32_t i0 = 0; i0 < n; i0 += 256) {
    const int32_t b = n - i0 < 256 ? n - i0 : 256;
    for (int32_t i = 0; i < b; i++) e[i] = -gate[i0 + i];
    exp_block(e, b, 0.0f);
    for (int32_t i = 0; i < b; i++) {
      float val = gate[i0 + i];
      val *= (1.0f / (1.0f + e[i]));
      gate[i0 + i] = val * up[i0 + i];
    }
  }
}
