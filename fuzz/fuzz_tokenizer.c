/* fuzz_tokenizer.c - llama2.c tokenizer files. The first two bytes of the
 * input (little-endian) choose the vocabulary size the model would ask for
 * (3 + value % 4094); the rest is the file. For files that parse, the
 * tokenizer is built and encodes and decodes a few texts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/util.h"
#include "host/src/internal.h"

static const char *const texts[] = {
    "", " ", "Once upon a time", "a\xe2\x96\x81\x62 \xf0\x9f\x98\x80 <0x41>", "\xff\xfe\x80",
    "\n<s>\n",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  const int32_t vocab = 3 + (int32_t)((data[0] | data[1] << 8) % 4094);
  tsr_vocab_t v;
  tsr_status_t s = tsr_llama2c_vocab_parse(data + 2, size - 2, vocab, "fuzz.tok", &v);
  if (s) {
    tsr_status_free(s);
    return 0;
  }
  tsr_tokenizer_t t;
  s = tsr_tokenizer_init(&t, &v);
  if (s) {
    tsr_status_free(s);
    tsr_vocab_free(&v);
    return 0;
  }
  int32_t toks[64];
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    size_t n = 0;
    s = tsr_tokenizer_encode(&t, texts[i], true, true, toks, sizeof toks / sizeof toks[0], &n);
    tsr_status_free(s);
    for (size_t j = 0; j < n; j++) {
      if (toks[j] < 0 || toks[j] >= vocab) {
        fprintf(stderr, "fuzz: token %d outside [0, %d)\n", toks[j], vocab);
        abort();
      }
      if (!tsr_tokenizer_piece(&t, j ? toks[j - 1] : v.bos, toks[j])) abort();
    }
  }
  for (int32_t id = 0; id < vocab; id++)
    if (!tsr_tokenizer_piece(&t, v.bos, id)) abort();
  tsr_tokenizer_free(&t);
  tsr_vocab_free(&v);
  return 0;
}
