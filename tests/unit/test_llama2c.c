/* test_llama2c.c - llama2.c checkpoints and tokenizer files: the reference
 * stories260K.bin / tok512.bin, a synthetic checkpoint with a separate
 * classifier, and malformed headers, sizes and vocabulary records. */
#include <stdlib.h>
#include <string.h>

#include "host/src/model_file.h"
#include "tsr_test.h"

static void test_reference_bin(void) {
  if (!tsr_test_need_reference_models()) return;
  tsr_model_file_t *mf = NULL;
  TSR_ASSERT_OK(tsr_model_file_open(tsr_test_model_path("stories260K.bin"),
                                    tsr_test_model_path("tok512.bin"), &mf));
  CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
  const tsr_model_config_t *c = &mf->config;
  CU_ASSERT_EQUAL(c->dim, 64);
  CU_ASSERT_EQUAL(c->hidden_dim, 172);
  CU_ASSERT_EQUAL(c->n_layers, 5);
  CU_ASSERT_EQUAL(c->n_heads, 8);
  CU_ASSERT_EQUAL(c->n_kv_heads, 4);
  CU_ASSERT_EQUAL(c->head_dim, 8);
  CU_ASSERT_EQUAL(c->vocab_size, 512);
  CU_ASSERT_EQUAL(c->seq_len, 512);
  CU_ASSERT_EQUAL(c->rms_eps, 1e-5f);
  CU_ASSERT_EQUAL(c->rope_theta, 10000.0f);
  CU_ASSERT_TRUE(c->shared_classifier);
  CU_ASSERT_EQUAL(c->format, TSR_MODEL_FORMAT_LLAMA2C);
  CU_ASSERT_EQUAL(mf->gguf_version, 0);
  /* token_embd, 9 per layer, rms_final, 2 freq_cis tables. */
  CU_ASSERT_EQUAL(mf->n_tensors, 1 + 9 * 5 + 1 + 2);
  const uint8_t *base = mf->file.data;
  CU_ASSERT_PTR_EQUAL(mf->tok_embd.data, base + 28);
  CU_ASSERT_PTR_EQUAL(mf->output.data, mf->tok_embd.data);
  /* rms_att follows the embedding: (512*64) floats after the header. */
  CU_ASSERT_PTR_EQUAL(mf->layers[0].rms_att.data, base + 28 + 512 * 64 * 4);
  CU_ASSERT_PTR_EQUAL(mf->layers[1].rms_att.data, base + 28 + (512 * 64 + 64) * 4);
  CU_ASSERT_EQUAL(mf->layers[2].wk.rows, 32);
  CU_ASSERT_EQUAL(mf->layers[2].wk.cols, 64);
  CU_ASSERT_EQUAL(mf->layers[3].w2.rows, 64);
  CU_ASSERT_EQUAL(mf->layers[3].w2.cols, 172);
  /* rms_final is the 64 floats right before the freq_cis tables. */
  CU_ASSERT_PTR_EQUAL((const uint8_t *)mf->rms_final.data + 64 * 4 + 2 * 512 * 4 * 4,
                      base + mf->file.size);
  const tsr_tensor_info_t *last = &mf->tensors[mf->n_tensors - 1];
  CU_ASSERT_STRING_EQUAL(last->name, "freq_cis_imag");
  CU_ASSERT_EQUAL(last->offset + last->nbytes, mf->file.size);

  const tsr_vocab_t *v = &mf->vocab;
  CU_ASSERT_EQUAL(v->n, 512);
  CU_ASSERT_EQUAL(v->max_piece_len, 7);
  CU_ASSERT_EQUAL(v->bos, 1);
  CU_ASSERT_EQUAL(v->eos, 2);
  CU_ASSERT_EQUAL(v->unk, 0);
  CU_ASSERT_STRING_EQUAL(v->pieces[0], "<unk>");
  CU_ASSERT_STRING_EQUAL(v->pieces[1], "\n<s>\n");
  CU_ASSERT_STRING_EQUAL(v->pieces[2], "\n</s>\n");
  CU_ASSERT_STRING_EQUAL(v->pieces[3], "<0x00>");
  CU_ASSERT_STRING_EQUAL(v->pieces[258], "<0xFF>");
  for (int i = 259; i < 512; i++) CU_ASSERT_EQUAL(v->scores[i], (float)-(i - 259));
  tsr_model_file_close(mf);
}

static void test_bin_needs_tokenizer(void) {
  if (!tsr_test_need_reference_models()) return;
  tsr_model_file_t *mf = (tsr_model_file_t *)1;
  TSR_ASSERT_ERR(tsr_model_file_open(tsr_test_model_path("stories260K.bin"), NULL, &mf),
                 TSR_STATUS_INVALID_ARGUMENT, "tokenizer");
  CU_ASSERT_PTR_NULL(mf);
  /* A tokenizer for another vocabulary size. */
  TSR_ASSERT_ERR(tsr_model_file_open(tsr_test_model_path("stories260K.bin"),
                                     tsr_test_model_path("stories260K.gguf"), &mf),
                 TSR_STATUS_FORMAT, "stories260K.gguf: max_token_length");
  CU_ASSERT_PTR_NULL(mf);
}

/* ---- synthetic checkpoints ---- */

typedef struct cfg {
  int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
} cfg_t;

static size_t n_floats(const cfg_t *c) {
  size_t dim = (size_t)c->dim, hid = (size_t)c->hidden, L = (size_t)c->layers;
  size_t V = (size_t)abs(c->vocab), kv = dim * (size_t)c->kv_heads / (size_t)c->heads;
  size_t hs = dim / (size_t)c->heads;
  size_t n = V * dim + L * dim * 2 + L * (2 * dim * dim + 2 * kv * dim) + 3 * L * hid * dim +
             dim + (size_t)c->seq * hs;
  if (c->vocab < 0) n += V * dim;
  return n;
}

/* Header + floats 0, 1, 2, ... so every view can be located by value. */
static uint8_t *make_bin(const cfg_t *c, size_t *size) {
  size_t nf = n_floats(c);
  *size = 28 + nf * 4;
  uint8_t *b = malloc(*size);
  int32_t h[7] = {c->dim, c->hidden, c->layers, c->heads, c->kv_heads, c->vocab, c->seq};
  memcpy(b, h, 28);
  for (size_t i = 0; i < nf; i++) {
    float f = (float)i;
    memcpy(b + 28 + 4 * i, &f, 4);
  }
  return b;
}

static tsr_status_t parse_bin(const uint8_t *b, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  memcpy(copy, b, size);
  tsr_model_file_t *mf = calloc(1, sizeof *mf);
  tsr_status_t s = tsr_llama2c_parse(copy, size, "t.bin", mf);
  tsr_model_file_close(mf);
  free(copy);
  return s;
}

static float first(const tsr_tensor_view_t *v) {
  float f;
  memcpy(&f, v->data, 4);
  return f;
}

static void test_separate_classifier(void) {
  cfg_t c = {16, 40, 2, 4, 2, -20, 8};
  size_t size;
  uint8_t *b = make_bin(&c, &size);
  tsr_model_file_t *mf = calloc(1, sizeof *mf);
  TSR_ASSERT_OK(tsr_llama2c_parse(b, size, "t.bin", mf));
  CU_ASSERT_FALSE(mf->config.shared_classifier);
  CU_ASSERT_EQUAL(mf->config.vocab_size, 20);
  CU_ASSERT_EQUAL(mf->config.head_dim, 4);
  CU_ASSERT_PTR_NOT_EQUAL(mf->output.data, mf->tok_embd.data);
  CU_ASSERT_EQUAL(mf->output.rows, 20);
  CU_ASSERT_EQUAL(mf->output.cols, 16);
  /* wcls is the last vocab*dim floats of the file. */
  CU_ASSERT_EQUAL(first(&mf->output), (float)(n_floats(&c) - 20 * 16));
  CU_ASSERT_PTR_EQUAL((const uint8_t *)mf->output.data + 20 * 16 * 4, b + size);
  /* Float indices of a few views, from the llama2.c layout. */
  const size_t emb = 20 * 16, kv = 8;
  CU_ASSERT_EQUAL(first(&mf->layers[1].rms_att), (float)(emb + 16));
  CU_ASSERT_EQUAL(first(&mf->layers[0].wq), (float)(emb + 2 * 16));
  CU_ASSERT_EQUAL(first(&mf->layers[1].wk), (float)(emb + 32 + 2 * 256 + kv * 16));
  CU_ASSERT_EQUAL(mf->layers[1].wk.rows, 8);
  CU_ASSERT_EQUAL(mf->layers[1].w2.rows, 16);
  CU_ASSERT_EQUAL(mf->layers[1].w2.cols, 40);
  CU_ASSERT_EQUAL(mf->n_tensors, 1 + 9 * 2 + 1 + 2 + 1);
  CU_ASSERT_STRING_EQUAL(mf->tensors[mf->n_tensors - 1].name, "output.weight");
  tsr_model_file_close(mf);

  /* The same file with a positive vocab_size has vocab*dim floats too many. */
  int32_t v = 20;
  memcpy(b + 20, &v, 4);
  TSR_ASSERT_ERR(parse_bin(b, size), TSR_STATUS_FORMAT, "does not match the header");
  free(b);
}

static void test_header_errors(void) {
  const cfg_t good = {16, 40, 2, 4, 2, 20, 8};
  size_t size;
  uint8_t *b = make_bin(&good, &size);
  TSR_ASSERT_OK(parse_bin(b, size));
  struct {
    int field;
    int32_t value;
    tsr_status_code_t code;
    const char *needle;
  } cases[] = {
      {0, 0, TSR_STATUS_OUT_OF_RANGE, "dim = 0"},
      {0, -16, TSR_STATUS_OUT_OF_RANGE, "dim = -16"},
      {1, 1 << 21, TSR_STATUS_OUT_OF_RANGE, "hidden_dim = 2097152"},
      {2, 0, TSR_STATUS_OUT_OF_RANGE, "n_layers"},
      {3, 5, TSR_STATUS_FORMAT, "not a multiple of n_heads 5"},
      {4, 3, TSR_STATUS_FORMAT, "not a multiple of n_kv_heads 3"},
      {4, 0, TSR_STATUS_OUT_OF_RANGE, "n_kv_heads = 0"},
      {3, 16, TSR_STATUS_FORMAT, "head_dim 1"},
      {5, INT32_MIN, TSR_STATUS_OUT_OF_RANGE, "vocab_size = 0"},
      {6, 0x7fffffff, TSR_STATUS_OUT_OF_RANGE, "seq_len"},
      /* In range but the file is much smaller. */
      {2, 1 << 20, TSR_STATUS_FORMAT, "n_layers=1048576"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint8_t *m = malloc(size);
    memcpy(m, b, size);
    memcpy(m + 4 * cases[i].field, &cases[i].value, 4);
    TSR_ASSERT_ERR(parse_bin(m, size), cases[i].code, cases[i].needle);
    free(m);
  }
  /* Largest in-range dimensions: the expected size is computed without
   * overflow and compared, not allocated. */
  uint8_t *m = malloc(size);
  memcpy(m, b, size);
  int32_t huge[7] = {1 << 20, 1 << 20, 1 << 20, 1 << 10, 1 << 10, -(1 << 20), 1 << 20};
  memcpy(m, huge, 28);
  TSR_ASSERT_ERR(parse_bin(m, size), TSR_STATUS_FORMAT, "expected more than 2^64 bytes");
  /* The versioned llama2.c export: u32 0x616b3432 ("ak42"). */
  memcpy(m, "24ka", 4);
  TSR_ASSERT_ERR(parse_bin(m, size), TSR_STATUS_UNIMPLEMENTED, "ak42");
  free(m);
  /* Size off by one float either way. */
  TSR_ASSERT_ERR(parse_bin(b, size - 4), TSR_STATUS_FORMAT, "file size");
  uint8_t *bigger = calloc(1, size + 4);
  memcpy(bigger, b, size);
  TSR_ASSERT_ERR(parse_bin(bigger, size + 4), TSR_STATUS_FORMAT, "expected");
  free(bigger);
  /* Every cut inside the header names the field. */
  static const char *const fields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                        "n_kv_heads", "vocab_size", "seq_len"};
  for (size_t cut = 0; cut < 28; cut++) {
    char needle[64];
    snprintf(needle, sizeof needle, "header field %s at offset 0x%zx: truncated",
             fields[cut / 4], cut / 4 * 4);
    if (cut == 0)
      TSR_ASSERT_ERR(parse_bin(b, cut), TSR_STATUS_FORMAT, "empty");
    else
      TSR_ASSERT_ERR(parse_bin(b, cut), TSR_STATUS_FORMAT, needle);
  }
  /* And every cut in the body is a size mismatch. */
  int bad = 0;
  for (size_t cut = 28; cut < size; cut += 13) {
    tsr_status_t s = parse_bin(b, cut);
    if (!s || tsr_status_code(s) != TSR_STATUS_FORMAT || !strstr(tsr_status_message(s), "t.bin"))
      bad++;
    tsr_status_free(s);
  }
  CU_ASSERT_EQUAL(bad, 0);
  free(b);
}

/* ---- tokenizer files ---- */

typedef struct tok {
  uint8_t *data;
  size_t size;
} tok_t;

/* max_len, then n records "t<i>" with score -i. */
static tok_t make_tok(int n, uint32_t max_len) {
  tok_t t = {malloc(4 + (size_t)n * 16), 4};
  memcpy(t.data, &max_len, 4);
  for (int i = 0; i < n; i++) {
    char piece[16];
    int32_t len = snprintf(piece, sizeof piece, "t%d", i);
    float score = (float)-i;
    memcpy(t.data + t.size, &score, 4);
    memcpy(t.data + t.size + 4, &len, 4);
    memcpy(t.data + t.size + 8, piece, (size_t)len);
    t.size += 8 + (size_t)len;
  }
  return t;
}

static tsr_status_t parse_tok(const uint8_t *d, size_t size, int32_t n) {
  uint8_t *copy = malloc(size ? size : 1);
  memcpy(copy, d, size);
  tsr_vocab_t v;
  tsr_status_t s = tsr_llama2c_vocab_parse(copy, size, n, "t.tok", &v);
  if (!s) tsr_vocab_free(&v);
  free(copy);
  return s;
}

static void test_tokenizer_valid(void) {
  tok_t t = make_tok(20, 3);
  tsr_vocab_t v;
  TSR_ASSERT_OK(tsr_llama2c_vocab_parse(t.data, t.size, 20, "t.tok", &v));
  CU_ASSERT_EQUAL(v.n, 20);
  CU_ASSERT_STRING_EQUAL(v.pieces[19], "t19");
  CU_ASSERT_EQUAL(v.scores[19], -19.0f);
  CU_ASSERT_EQUAL(v.max_piece_len, 3);
  CU_ASSERT_EQUAL(v.bos, 1);
  CU_ASSERT_EQUAL(v.eos, 2);
  tsr_vocab_free(&v);
  tsr_vocab_free(&v); /* idempotent */
  free(t.data);
}

static void test_tokenizer_errors(void) {
  tok_t t = make_tok(20, 3);
  /* Count mismatch both ways. */
  TSR_ASSERT_ERR(parse_tok(t.data, t.size, 19), TSR_STATUS_FORMAT, "token count mismatch");
  TSR_ASSERT_ERR(parse_tok(t.data, t.size, 21), TSR_STATUS_FORMAT,
                 "token 20 score at offset 0x");
  TSR_ASSERT_ERR(parse_tok(t.data, t.size, 2), TSR_STATUS_OUT_OF_RANGE, "vocab_size 2");
  /* Truncated at every byte: each message names a record field. */
  int bad = 0;
  for (size_t cut = 0; cut < t.size; cut++) {
    tsr_status_t s = parse_tok(t.data, cut, 20);
    const char *m = tsr_status_message(s);
    if (!s || tsr_status_code(s) != TSR_STATUS_FORMAT || !strstr(m, "truncated") ||
        !(strstr(m, "max_token_length") || strstr(m, "token ")))
      bad++;
    tsr_status_free(s);
  }
  CU_ASSERT_EQUAL(bad, 0);
  /* Record 1 ("t1") starts at 4 + 10: score, then the length at +4. */
  const size_t len_off = 4 + 10 + 4;
  int32_t saved;
  memcpy(&saved, t.data + len_off, 4);
  int32_t lens[] = {0, -1, 4, 1 << 30};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    memcpy(t.data + len_off, &lens[i], 4);
    TSR_ASSERT_ERR(parse_tok(t.data, t.size, 20), TSR_STATUS_FORMAT,
                   "token 1 length at offset 0x12");
  }
  memcpy(t.data + len_off, &saved, 4);
  /* A NUL inside a piece cannot be represented. */
  t.data[len_off + 4 + 1] = 0;
  TSR_ASSERT_ERR(parse_tok(t.data, t.size, 20), TSR_STATUS_FORMAT, "token 1 bytes");
  t.data[len_off + 4 + 1] = '1';
  /* max_token_length 0 and absurd. */
  uint32_t ml = 0;
  memcpy(t.data, &ml, 4);
  TSR_ASSERT_ERR(parse_tok(t.data, t.size, 20), TSR_STATUS_FORMAT, "max_token_length");
  ml = 0xffffffffu;
  memcpy(t.data, &ml, 4);
  TSR_ASSERT_ERR(parse_tok(t.data, t.size, 20), TSR_STATUS_FORMAT, "max_token_length");
  ml = 3;
  memcpy(t.data, &ml, 4);
  TSR_ASSERT_OK(parse_tok(t.data, t.size, 20));
  free(t.data);

  /* The reference tokenizer, cut anywhere (the case is reported as skipped
   * without it, though the checks above ran). */
  if (!tsr_test_model_or_skip("tok512.bin")) return;
  tsr_mapped_file_t f;
  TSR_ASSERT_OK(tsr_file_map(tsr_test_model_path("tok512.bin"), &f));
  bad = 0;
  for (size_t cut = 0; cut < f.size; cut += 5) {
    tsr_status_t s = parse_tok(f.data, cut, 512);
    if (!s) bad++;
    tsr_status_free(s);
  }
  CU_ASSERT_EQUAL(bad, 0);
  TSR_ASSERT_OK(parse_tok(f.data, f.size, 512));
  tsr_file_unmap(&f);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("llama2c", NULL, NULL);
  CU_add_test(s, "reference stories260K.bin + tok512.bin", test_reference_bin);
  CU_add_test(s, "checkpoint needs a matching tokenizer", test_bin_needs_tokenizer);
  CU_add_test(s, "separate classifier (negative vocab_size)", test_separate_classifier);
  CU_add_test(s, "header and size errors", test_header_errors);
  CU_add_test(s, "tokenizer parses", test_tokenizer_valid);
  CU_add_test(s, "tokenizer errors", test_tokenizer_errors);
  return tsr_test_run_all();
}
