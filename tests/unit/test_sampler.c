/* test_sampler.c - greedy, temperature and top-p sampling: determinism per
 * seed, the nucleus bound, and frequencies against the distribution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tsr_test.h"

#define V 64

static void fill_logits(float *l, uint64_t seed) {
  for (int i = 0; i < V; i++)
    l[i] = (float)((int64_t)(tsr_test_splitmix64(&seed) >> 40) % 2000) / 300.0f;
}

static void test_greedy_is_argmax(void) {
  tsr_sampler_t *s = NULL;
  TSR_ASSERT_OK(tsr_sampler_create(V, 0.0f, 0.9f, 7, &s));
  float l[V];
  for (uint64_t seed = 1; seed < 50; seed++) {
    fill_logits(l, seed);
    int best = 0;
    for (int i = 1; i < V; i++)
      if (l[i] > l[best]) best = i;
    CU_ASSERT_EQUAL(tsr_sampler_sample(s, l), best);
  }
  tsr_sampler_destroy(s);
}

static void draw(uint64_t seed, float temp, float topp, int32_t *out, int n) {
  tsr_sampler_t *s = NULL;
  TSR_ASSERT_OK(tsr_sampler_create(V, temp, topp, seed, &s));
  float l[V];
  for (int i = 0; i < n; i++) {
    fill_logits(l, 1000 + (uint64_t)i);
    out[i] = tsr_sampler_sample(s, l);
  }
  tsr_sampler_destroy(s);
}

static void test_seed_determinism(void) {
  int32_t a[200], b[200], c[200];
  draw(42, 1.0f, 0.9f, a, 200);
  draw(42, 1.0f, 0.9f, b, 200);
  draw(43, 1.0f, 0.9f, c, 200);
  CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
  CU_ASSERT_NOT_EQUAL(memcmp(a, c, sizeof a), 0);
  draw(42, 0.8f, 1.0f, a, 200);
  draw(42, 0.8f, 1.0f, b, 200);
  CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
}

/* Every top-p sample lies in the smallest prefix of the sorted
 * distribution whose mass exceeds p. */
static void test_topp_stays_in_nucleus(void) {
  const float topp = 0.5f;
  tsr_sampler_t *s = NULL;
  TSR_ASSERT_OK(tsr_sampler_create(V, 1.0f, topp, 9, &s));
  for (int trial = 0; trial < 300; trial++) {
    float l[V], p[V];
    fill_logits(l, 5000 + (uint64_t)trial);
    double mx = l[0], sum = 0;
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) sum += exp(l[i] - mx);
    for (int i = 0; i < V; i++) p[i] = (float)(exp(l[i] - mx) / sum);
    int32_t tok = tsr_sampler_sample(s, l);
    /* mass strictly above p[tok] must be below topp, else tok is outside */
    double above = 0;
    for (int i = 0; i < V; i++)
      if (p[i] > p[tok]) above += p[i];
    CU_ASSERT_TRUE(above < topp + 1e-5);
  }
  tsr_sampler_destroy(s);
}

/* With temperature 1 and no nucleus, frequencies follow softmax(logits). */
static void test_frequencies(void) {
  const int N = 200000;
  float base[V];
  for (int i = 0; i < V; i++) base[i] = (i % 8) * 0.25f;
  double mx = 1.75, sum = 0, p[V];
  for (int i = 0; i < V; i++) sum += exp(base[i] - mx);
  for (int i = 0; i < V; i++) p[i] = exp(base[i] - mx) / sum;
  tsr_sampler_t *s = NULL;
  TSR_ASSERT_OK(tsr_sampler_create(V, 1.0f, 1.0f, 1234, &s));
  static int count[V];
  float l[V];
  for (int n = 0; n < N; n++) {
    memcpy(l, base, sizeof l);
    count[tsr_sampler_sample(s, l)]++;
  }
  tsr_sampler_destroy(s);
  for (int i = 0; i < V; i++) {
    double expect = p[i] * N, sd = sqrt(expect * (1 - p[i]));
    CU_ASSERT_TRUE(fabs(count[i] - expect) < 5 * sd);
  }
}

static void test_bad_arguments(void) {
  tsr_sampler_t *s = (tsr_sampler_t *)&s;
  TSR_ASSERT_ERR(tsr_sampler_create(0, 1.0f, 0.9f, 1, &s), TSR_STATUS_INVALID_ARGUMENT,
                 "vocab_size");
  CU_ASSERT_PTR_NULL(s);
  TSR_ASSERT_ERR(tsr_sampler_create(V, -1.0f, 0.9f, 1, &s), TSR_STATUS_INVALID_ARGUMENT,
                 "temperature");
  TSR_ASSERT_ERR(tsr_sampler_create(V, NAN, 0.9f, 1, &s), TSR_STATUS_INVALID_ARGUMENT,
                 "temperature");
  TSR_ASSERT_ERR(tsr_sampler_create(V, 1.0f, 1.5f, 1, &s), TSR_STATUS_INVALID_ARGUMENT, "top_p");
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("sampler", NULL, NULL);
  CU_add_test(s, "greedy is argmax", test_greedy_is_argmax);
  CU_add_test(s, "same seed, same tokens", test_seed_determinism);
  CU_add_test(s, "top-p stays in the nucleus", test_topp_stays_in_nucleus);
  CU_add_test(s, "frequencies follow softmax", test_frequencies);
  CU_add_test(s, "bad arguments", test_bad_arguments);
  return tsr_test_run_all();
}
