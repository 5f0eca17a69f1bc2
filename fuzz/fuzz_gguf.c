/* fuzz_gguf.c - GGUF model files: the parser over memory, then, for inputs
 * that parse, the whole load (file mapping, fp32 conversion, tokenizer) and
 * one evaluated token. The last byte of the input picks the precision and
 * the attention path (fuzz/util.h, fz_exercise_model). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz/util.h"
#include "host/src/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_model_file_t mf = {0};
  tsr_status_t s = tsr_gguf_parse(data, size, "fuzz.gguf", &mf);
  if (s) {
    tsr_status_free(s);
    return 0;
  }
  tsr_model_file_clear(&mf);

  fz_file_t f;
  if (!fz_file_create(&f, data, size)) return 0;
  tsr_model_t *m = NULL;
  s = tsr_model_load(fz_context(), f.path, NULL, &m);
  fz_file_close(&f); /* the mapping keeps the contents */
  if (s) {
    tsr_status_free(s);
    return 0;
  }
  fz_exercise_model(m, size ? data[size - 1] : 0);
  tsr_model_destroy(m);
  return 0;
}
