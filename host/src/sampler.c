/*
 * sampler.c - greedy, temperature and top-p (nucleus) sampling.
 *
 * The RNG is xorshift64* with llama2.c's output mapping, so a seed gives the
 * same token sequence as that reference for the same logits.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

typedef struct {
  float prob;
  int32_t index;
} prob_index_t;

struct tsr_sampler {
  int32_t vocab_size;
  float temperature;
  float top_p;
  uint64_t state;
  prob_index_t *scratch; /* (vocab_size) for top-p */
};

tsr_status_t tsr_sampler_create(int32_t vocab_size, float temperature, float top_p,
                                uint64_t seed, tsr_sampler_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "sampler: out is NULL");
  *out = NULL;
  if (vocab_size <= 0) return TSR_ERR(INVALID_ARGUMENT, "sampler: vocab_size %d", vocab_size);
  if (!(temperature >= 0.0f) || !isfinite(temperature))
    return TSR_ERR(INVALID_ARGUMENT, "sampler: temperature %g must be >= 0",
                   (double)temperature);
  if (!(top_p >= 0.0f && top_p <= 1.0f))
    return TSR_ERR(INVALID_ARGUMENT, "sampler: top_p %g must be in [0, 1]", (double)top_p);
  tsr_sampler_t *s = calloc(1, sizeof(*s));
  if (!s) return TSR_ERR(RESOURCE_EXHAUSTED, "sampler");
  s->scratch = malloc(sizeof(prob_index_t) * (size_t)vocab_size);
  if (!s->scratch) {
    free(s);
    return TSR_ERR(RESOURCE_EXHAUSTED, "sampler: %d entries", vocab_size);
  }
  s->vocab_size = vocab_size;
  s->temperature = temperature;
  s->top_p = top_p;
  s->state = seed ? seed : 0x9E3779B97F4A7C15ull; /* xorshift must not start at 0 */
  *out = s;
  return TSR_OK;
}

void tsr_sampler_destroy(tsr_sampler_t *s) {
  if (!s) return;
  free(s->scratch);
  free(s);
}

static uint32_t random_u32(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

static float random_f32(uint64_t *state) { return (float)(random_u32(state) >> 8) / 16777216.0f; }

static int32_t argmax(const float *p, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (p[i] > p[best]) best = i;
  return best;
}

static int32_t sample_mult(const float *p, int32_t n, float coin) {
  float cdf = 0.0f;
  for (int32_t i = 0; i < n; i++) {
    cdf += p[i];
    if (coin < cdf) return i;
  }
  return n - 1; /* rounding left the cdf just below 1 */
}

static int cmp_desc(const void *a, const void *b) {
  float pa = ((const prob_index_t *)a)->prob, pb = ((const prob_index_t *)b)->prob;
  return (pa < pb) - (pa > pb);
}

static int32_t sample_topp(const float *p, int32_t n, float top_p, prob_index_t *pi,
                           float coin) {
  /* Tokens below (1 - top_p) / (n - 1) cannot be in the nucleus: dropping
   * them first keeps the sort short. */
  const float cutoff = (1.0f - top_p) / (float)(n - 1);
  int32_t n0 = 0;
  for (int32_t i = 0; i < n; i++)
    if (p[i] >= cutoff) pi[n0++] = (prob_index_t){p[i], i};
  qsort(pi, (size_t)n0, sizeof(*pi), cmp_desc);
  float cum = 0.0f;
  int32_t last = n0 - 1;
  for (int32_t i = 0; i < n0; i++) {
    cum += pi[i].prob;
    if (cum > top_p) {
      last = i;
      break;
    }
  }
  float r = coin * cum;
  float cdf = 0.0f;
  for (int32_t i = 0; i <= last; i++) {
    cdf += pi[i].prob;
    if (r < cdf) return pi[i].index;
  }
  return pi[last].index;
}

int32_t tsr_sampler_sample(tsr_sampler_t *s, float *logits) {
  if (s->temperature == 0.0f) return argmax(logits, s->vocab_size);
  for (int32_t i = 0; i < s->vocab_size; i++) logits[i] /= s->temperature;
  tsr_softmax(logits, s->vocab_size);
  float coin = random_f32(&s->state);
  if (s->top_p <= 0.0f || s->top_p >= 1.0f) return sample_mult(logits, s->vocab_size, coin);
  return sample_topp(logits, s->vocab_size, s->top_p, s->scratch, coin);
}
