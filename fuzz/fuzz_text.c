/* fuzz_text.c - arbitrary text through a generated model: tokenized (with
 * BOS and EOS), every token decoded, and the first tokens evaluated. The
 * model is fz_tiny_model's (a llama vocabulary of 600 pieces, tiny
 * weights), made once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/util.h"

static tsr_model_t *model;
static tsr_session_t *session;
static tsr_model_config_t cfg;

static void die(const char *what, tsr_status_t s) {
  fprintf(stderr, "fuzz_text: %s: %s\n", what, tsr_status_message(s));
  abort();
}

static void setup(void) {
  model = fz_tiny_model("fuzz_text", 64);
  tsr_model_config(model, &cfg);
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.max_seq = 8;
  so.max_batch_rows = 8;
  tsr_status_t s = tsr_session_create(model, &so, &session);
  if (s) die("session", s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!model) setup();
  char *text = fz_strdup(data, size);
  if (!text) return 0;
  size_t cap = size + 3, n = 0;
  int32_t *toks = malloc(sizeof(int32_t) * cap);
  if (!toks) {
    free(text);
    return 0;
  }
  tsr_status_t s = tsr_model_tokenize(model, text, true, true, toks, cap, &n);
  if (s) die("tokenize with room for the worst case", s);
  for (size_t i = 0; i < n; i++) {
    if (toks[i] < 0 || toks[i] >= cfg.vocab_size) {
      fprintf(stderr, "fuzz_text: token %d outside [0, %d)\n", toks[i], cfg.vocab_size);
      abort();
    }
    if (!tsr_model_token_piece(model, i ? toks[i - 1] : -1, toks[i])) abort();
  }
  /* Too small a buffer is an error, never an overflow. */
  if (n > 1) {
    size_t m = 0;
    s = tsr_model_tokenize(model, text, true, true, toks, n - 1, &m);
    if (!s) abort();
    tsr_status_free(s);
  }
  tsr_session_reset(session);
  const float *logits = NULL;
  s = tsr_session_eval(session, toks, n < 8 ? n : 8, &logits);
  if (s) die("eval", s);
  free(toks);
  free(text);
  return 0;
}
