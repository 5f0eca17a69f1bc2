/* fuzz_llama2c.c - llama2.c checkpoints (.bin): the parser over memory,
 * then, for inputs that parse, the whole load with a generated tokenizer of
 * the checkpoint's vocabulary size and one evaluated token. The last byte
 * of the input picks the precision and the attention path. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz/util.h"
#include "host/src/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_model_file_t mf = {0};
  tsr_status_t s = tsr_llama2c_parse(data, size, "fuzz.bin", &mf);
  if (s) {
    tsr_status_free(s);
    return 0;
  }
  const int32_t vocab = mf.config.vocab_size;
  tsr_model_file_clear(&mf);
  if (vocab < 3) return 0; /* a llama2.c tokenizer has <unk>, BOS and EOS */

  size_t tok_size = 0;
  uint8_t *tok = fz_llama2c_tokenizer(vocab, &tok_size);
  if (!tok) return 0;
  fz_file_t f, t;
  bool ok = fz_file_create(&f, data, size);
  bool tok_ok = ok && fz_file_create(&t, tok, tok_size);
  free(tok);
  if (!tok_ok) {
    if (ok) fz_file_close(&f);
    return 0;
  }
  tsr_model_t *m = NULL;
  s = tsr_model_load(fz_context(), f.path, t.path, &m);
  fz_file_close(&f);
  fz_file_close(&t);
  if (s) {
    tsr_status_free(s);
    return 0;
  }
  fz_exercise_model(m, size ? data[size - 1] : 0);
  tsr_model_destroy(m);
  return 0;
}
