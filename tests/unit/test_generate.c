/*
 * test_generate.c - greedy generation through the public API: int8 (W8A8)
 * against fp32 on the real stories260K model, and the same tokens whatever
 * the thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "tsr_test.h"

#define STEPS 200

static tsr_context_t *ctx1, *ctx2;
static tsr_model_t *model;

static int setup(void) {
  tsr_context_options_t o;
  tsr_context_options_init(&o);
  o.n_threads = 1;
  tsr_status_t s = tsr_context_create(&o, &ctx1);
  o.n_threads = 2;
  if (!s) s = tsr_context_create(&o, &ctx2);
  if (!s) s = tsr_model_load(ctx2, tsr_test_model_path("stories260K.bin"),
                             tsr_test_model_path("tok512.bin"), &model);
  if (s) fprintf(stderr, "setup: %s\n", tsr_status_message(s));
  tsr_status_free(s);
  return s ? 1 : 0;
}
static int teardown(void) {
  tsr_model_destroy(model);
  tsr_context_destroy(ctx1);
  tsr_context_destroy(ctx2);
  return 0;
}

/* Greedy tokens at positions n_prompt..STEPS-1 (as `tessera run -n STEPS`);
 * returns how many were produced. */
static int generate(tsr_model_t *m, tsr_precision_t prec, const char *prompt, int32_t *out) {
  tsr_session_options_t o;
  tsr_session_options_init(&o);
  o.precision = prec;
  tsr_session_t *s = NULL;
  tsr_sampler_t *smp = NULL;
  TSR_ASSERT_OK(tsr_session_create(m, &o, &s));
  TSR_ASSERT_OK(tsr_sampler_create(512, 0.0f, 0.9f, 1, &smp));
  int32_t toks[64];
  size_t n = 0;
  TSR_ASSERT_OK(tsr_model_tokenize(m, prompt, true, false, toks, 64, &n));
  const float *logits = NULL;
  TSR_ASSERT_OK(tsr_session_eval(s, toks, n, &logits));
  float scratch[512];
  int count = 0;
  for (int pos = (int)n; pos < STEPS; pos++) {
    memcpy(scratch, logits, sizeof scratch);
    int32_t next = tsr_sampler_sample(smp, scratch);
    out[count++] = next;
    if (pos + 1 < STEPS) TSR_ASSERT_OK(tsr_session_eval(s, &next, 1, &logits));
  }
  tsr_sampler_destroy(smp);
  tsr_session_destroy(s);
  return count;
}

static void test_int8_agrees_with_fp32(void) {
  const char *prompts[] = {"Once upon a time", "The little dog", "Lily and Ben"};
  int total = 0, total_prefix = 0, total_same = 0;
  for (int p = 0; p < 3; p++) {
    int32_t f[STEPS], q[STEPS];
    int nf = generate(model, TSR_PRECISION_FP32, prompts[p], f);
    int nq = generate(model, TSR_PRECISION_INT8, prompts[p], q);
    CU_ASSERT_EQUAL_FATAL(nf, nq);
    int prefix = 0, same = 0;
    while (prefix < nf && f[prefix] == q[prefix]) prefix++;
    for (int i = 0; i < nf; i++) same += f[i] == q[i];
    printf("REPORT int8 vs fp32 greedy, '%s': first %d of %d generated tokens identical, "
           "%d of %d positions equal\n", prompts[p], prefix, nf, same, nf);
    CU_ASSERT_TRUE(prefix >= 24);
    total += nf;
    total_prefix += prefix;
    total_same += same;
  }
  printf("REPORT int8 vs fp32 greedy overall: %d of %d tokens before divergence (%.0f %%; "
         "floors 24 per story, 28 %% overall)\n", total_prefix, total,
         100.0 * total_prefix / total);
  /* Floor: W8A8 on a 260K-parameter model perturbs logits by a few percent,
   * enough to flip a near-tie within a story; what must hold is that the
   * int8 path tracks fp32 for the opening of every story and for a good
   * part of all tokens. Measured when the floors were set: 57, 109 and 34
   * tokens before divergence, 200 of 585 (34 %); floors: 24 per story (10
   * below the shortest) and 28 % overall (164 tokens). */
  CU_ASSERT_TRUE(100 * total_prefix >= 28 * total);
  (void)total_same;
}

/* Results do not depend on the thread count (the int8 kernel is exact and
 * the split over threads never changes the fp32 attention order). */
static void test_threads_do_not_change_tokens(void) {
  tsr_model_t *m1 = NULL;
  TSR_ASSERT_OK(tsr_model_load(ctx1, tsr_test_model_path("stories260K.bin"),
                               tsr_test_model_path("tok512.bin"), &m1));
  if (!m1) return;
  int32_t a[STEPS], b[STEPS];
  int na = generate(m1, TSR_PRECISION_INT8, "Once upon a time", a);
  int nb = generate(model, TSR_PRECISION_INT8, "Once upon a time", b);
  CU_ASSERT_EQUAL(na, nb);
  CU_ASSERT_EQUAL(memcmp(a, b, sizeof(int32_t) * (size_t)na), 0);
  tsr_model_destroy(m1);
}

int main(void) {
  const char *missing = tsr_test_missing_reference_model();
  if (missing)
    return tsr_test_skip_program("no %s in %s: nothing to test", missing, tsr_test_models_dir());
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("generate", setup, teardown);
  CU_add_test(s, "int8 greedy agrees with fp32", test_int8_agrees_with_fp32);
  CU_add_test(s, "thread count does not change tokens", test_threads_do_not_change_tokens);
  return tsr_test_run_all();
}
