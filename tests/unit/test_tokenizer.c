/* test_tokenizer.c - BPE encode/decode on the real llama2.c and GGUF
 * vocabularies: round trips, maximal merging, byte fallback, agreement of
 * the two vocabulary sources. */
#include <stdlib.h>
#include <string.h>

#include "host/src/internal.h"
#include "tsr_test.h"

static tsr_context_t *ctx;
static tsr_model_t *bin_model, *gguf_model;

static int setup(void) {
  tsr_context_options_t o;
  tsr_context_options_init(&o);
  o.n_threads = 1;
  tsr_status_t s = tsr_context_create(&o, &ctx);
  if (!s) s = tsr_model_load(ctx, tsr_test_model_path("stories260K.bin"),
                             tsr_test_model_path("tok512.bin"), &bin_model);
  if (!s) s = tsr_model_load(ctx, tsr_test_model_path("stories260K.gguf"), NULL, &gguf_model);
  if (s) fprintf(stderr, "setup: %s\n", tsr_status_message(s));
  tsr_status_free(s);
  return s ? 1 : 0;
}

static int teardown(void) {
  tsr_model_destroy(bin_model);
  tsr_model_destroy(gguf_model);
  tsr_context_destroy(ctx);
  return 0;
}

static const char *texts[] = {
    "Once upon a time",
    "The little dog",
    "Lily's mom said, \"Let's go to the park.\"\n  Two  spaces\ttab",
    "caf\xc3\xa9 na\xc3\xafve \xe2\x9c\x93 \xf0\x9f\x98\x80 end", /* 2-, 3-, 4-byte code points */
    "a",
    "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
    "\x7f\x01 control bytes",
};

/* Decoding the tokens after BOS gives the text back exactly. */
static void check_round_trip(tsr_model_t *m, const char *text) {
  int32_t toks[512];
  size_t n = 0;
  TSR_ASSERT_OK(tsr_model_tokenize(m, text, true, false, toks, 512, &n));
  CU_ASSERT_TRUE_FATAL(n >= 1);
  CU_ASSERT_EQUAL(toks[0], tsr_model_bos(m));
  char out[2048] = {0};
  for (size_t i = 1; i < n; i++) {
    const char *p = tsr_model_token_piece(m, toks[i - 1], toks[i]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    strcat(out, p);
  }
  if (strcmp(out, text) != 0) fprintf(stderr, "round trip: '%s' -> '%s'\n", text, out);
  CU_ASSERT_STRING_EQUAL(out, text);
}

static void test_round_trip(void) {
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    check_round_trip(bin_model, texts[i]);
    check_round_trip(gguf_model, texts[i]);
  }
}

/* Greedy BPE stops only when no adjacent pair merges into a vocabulary
 * piece: check that property directly against the vocabulary. */
static void test_merges_are_maximal(void) {
  const tsr_vocab_t *v = &bin_model->file->vocab;
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    int32_t toks[512];
    size_t n = 0;
    TSR_ASSERT_OK(tsr_model_tokenize(bin_model, texts[i], false, false, toks, 512, &n));
    for (size_t j = 0; j + 1 < n; j++) {
      char merged[64];
      snprintf(merged, sizeof merged, "%s%s", v->pieces[toks[j]], v->pieces[toks[j + 1]]);
      for (int32_t id = 0; id < v->n; id++) CU_ASSERT_NOT_EQUAL(strcmp(merged, v->pieces[id]), 0);
    }
  }
}

/* Code points absent from the 512-token vocabulary fall back to byte tokens. */
static void test_byte_fallback(void) {
  int32_t toks[64];
  size_t n = 0;
  TSR_ASSERT_OK(tsr_model_tokenize(bin_model, "\xf0\x9f\x98\x80", false, false, toks, 64, &n));
  /* dummy-prefix space + 4 byte tokens <0xF0><0x9F><0x98><0x80> (ids 3 + byte) */
  CU_ASSERT_EQUAL_FATAL(n, 5);
  CU_ASSERT_EQUAL(toks[1], 3 + 0xF0);
  CU_ASSERT_EQUAL(toks[2], 3 + 0x9F);
  CU_ASSERT_EQUAL(toks[3], 3 + 0x98);
  CU_ASSERT_EQUAL(toks[4], 3 + 0x80);
  CU_ASSERT_STRING_EQUAL(tsr_model_token_piece(bin_model, 0, 3 + 0x41), "A");
}

/* The GGUF vocabulary and tok512.bin describe the same tokenizer. */
static void test_sources_agree(void) {
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    int32_t a[512], b[512];
    size_t na = 0, nb = 0;
    TSR_ASSERT_OK(tsr_model_tokenize(bin_model, texts[i], true, true, a, 512, &na));
    TSR_ASSERT_OK(tsr_model_tokenize(gguf_model, texts[i], true, true, b, 512, &nb));
    CU_ASSERT_EQUAL_FATAL(na, nb);
    CU_ASSERT_EQUAL(memcmp(a, b, na * sizeof(int32_t)), 0);
  }
}

static void test_bos_eos_and_errors(void) {
  int32_t toks[8];
  size_t n = 99;
  TSR_ASSERT_OK(tsr_model_tokenize(bin_model, "", true, true, toks, 8, &n));
  CU_ASSERT_EQUAL(n, 2);
  CU_ASSERT_EQUAL(toks[0], 1);
  CU_ASSERT_EQUAL(toks[1], 2);
  TSR_ASSERT_ERR(tsr_model_tokenize(bin_model, "a long prompt that needs many", true, false,
                                    toks, 2, &n),
                 TSR_STATUS_OUT_OF_RANGE, "do not fit");
  TSR_ASSERT_ERR(tsr_model_tokenize(bin_model, NULL, true, false, toks, 8, &n),
                 TSR_STATUS_INVALID_ARGUMENT, "NULL");
  CU_ASSERT_PTR_NULL(tsr_model_token_piece(bin_model, 1, 512));
  CU_ASSERT_PTR_NULL(tsr_model_token_piece(bin_model, 1, -1));
  /* After BOS the dummy-prefix space is dropped; elsewhere it is kept. */
  int32_t sp[4];
  TSR_ASSERT_OK(tsr_model_tokenize(bin_model, "a", false, false, sp, 4, &n));
  const char *after_bos = tsr_model_token_piece(bin_model, 1, sp[n - 1]);
  const char *mid = tsr_model_token_piece(bin_model, sp[0], sp[n - 1]);
  CU_ASSERT_TRUE(after_bos[0] != ' ' || mid[0] == ' ');
}

int main(void) {
  const char *missing = tsr_test_missing_reference_model();
  if (missing)
    return tsr_test_skip_program("no %s in %s: nothing to test", missing, tsr_test_models_dir());
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("tokenizer", setup, teardown);
  CU_add_test(s, "round trip on both vocabularies", test_round_trip);
  CU_add_test(s, "merges are maximal", test_merges_are_maximal);
  CU_add_test(s, "byte fallback", test_byte_fallback);
  CU_add_test(s, "GGUF and llama2.c vocabularies agree", test_sources_agree);
  CU_add_test(s, "BOS/EOS and errors", test_bos_eos_and_errors);
  return tsr_test_run_all();
}
