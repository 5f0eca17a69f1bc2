/* test_gguf.c - the GGUF reader: the reference stories260K.gguf against the
 * llama2.c files it was converted from, and every malformed case on a small
 * GGUF built in memory with the library's writer. */
#include <stdlib.h>
#include <string.h>

#include "host/src/gguf.h"
#include "host/src/model_file.h"
#include "tsr_test.h"

/* ---- a small GGUF built in memory ---- */

#define T_DIM 32
#define T_HID 64
#define T_LAYERS 2
#define T_HEADS 4
#define T_KV_HEADS 2
#define T_VOCAB 260
#define T_SEQ 16
#define T_HEAD_DIM (T_DIM / T_HEADS)

/* What to break in the built file. Zero = a valid file. */
typedef struct knobs {
  uint32_t version;            /* 0 = 3 */
  int64_t alignment;           /* 0 = no key (default 32); else written */
  const char *skip_key;        /* key not written */
  const char *skip_tensor;     /* tensor not written */
  const char *bad_shape;       /* tensor whose ne[1] gets +1 */
  const char *type_tensor;     /* tensor whose type becomes `type` */
  uint32_t type;
  int n_tokens;                /* 0 = T_VOCAB */
  const char *arch;            /* NULL = "llama" */
  uint32_t rope_dims;          /* 0 = head_dim */
  bool duplicate_key;
  bool nul_token;
} knobs_t;

typedef struct buf {
  uint8_t *data;
  size_t size;
} buf_t;

static const char *layer_suffix[9] = {"attn_norm", "attn_q",   "attn_k",   "attn_v", "attn_output",
                                      "ffn_norm",  "ffn_gate", "ffn_down", "ffn_up"};

static void tensor_shape(const char *suffix, int64_t ne[2], uint32_t *n_dims) {
  *n_dims = 2;
  if (!strcmp(suffix, "attn_norm") || !strcmp(suffix, "ffn_norm")) {
    ne[0] = T_DIM;
    ne[1] = 1;
    *n_dims = 1;
  } else if (!strcmp(suffix, "attn_q") || !strcmp(suffix, "attn_output")) {
    ne[0] = T_DIM;
    ne[1] = T_DIM;
  } else if (!strcmp(suffix, "attn_k") || !strcmp(suffix, "attn_v")) {
    ne[0] = T_DIM;
    ne[1] = T_KV_HEADS * T_HEAD_DIM;
  } else if (!strcmp(suffix, "ffn_down")) {
    ne[0] = T_HID;
    ne[1] = T_DIM;
  } else {
    ne[0] = T_DIM;
    ne[1] = T_HID;
  }
}

static buf_t build(const knobs_t *k) {
  tsr_gguf_writer_t w;
  tsr_gguf_writer_init(&w);
  if (k->version) w.version = k->version;
  if (k->alignment > 0 && (k->alignment & (k->alignment - 1)) == 0)
    w.alignment = (uint64_t)k->alignment;
#define KV(fn, key, ...) \
  if (!k->skip_key || strcmp(k->skip_key, key)) fn(&w, key, __VA_ARGS__)
  KV(tsr_gguf_kv_str, "general.architecture", k->arch ? k->arch : "llama");
  if (k->alignment) KV(tsr_gguf_kv_u32, "general.alignment", (uint32_t)k->alignment);
  KV(tsr_gguf_kv_u32, "llama.context_length", T_SEQ);
  KV(tsr_gguf_kv_u32, "llama.embedding_length", T_DIM);
  KV(tsr_gguf_kv_u32, "llama.feed_forward_length", T_HID);
  KV(tsr_gguf_kv_u32, "llama.block_count", T_LAYERS);
  KV(tsr_gguf_kv_u32, "llama.attention.head_count", T_HEADS);
  KV(tsr_gguf_kv_u32, "llama.attention.head_count_kv", T_KV_HEADS);
  KV(tsr_gguf_kv_f32, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
  KV(tsr_gguf_kv_u32, "llama.rope.dimension_count", k->rope_dims ? k->rope_dims : T_HEAD_DIM);
  KV(tsr_gguf_kv_u32, "llama.vocab_size", T_VOCAB);
  KV(tsr_gguf_kv_str, "tokenizer.ggml.model", "llama");
  if (k->duplicate_key) KV(tsr_gguf_kv_u32, "llama.block_count", T_LAYERS);
  int n_tok = k->n_tokens ? k->n_tokens : T_VOCAB;
  char **toks = calloc((size_t)n_tok, sizeof *toks);
  float *scores = calloc((size_t)n_tok, sizeof *scores);
  for (int i = 0; i < n_tok; i++) {
    toks[i] = malloc(16);
    if (i < 3)
      strcpy(toks[i], i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
    else if (i < 259)
      snprintf(toks[i], 16, "<0x%02X>", i - 3);
    else
      strcpy(toks[i], "\xe2\x96\x81" "a");
    scores[i] = (float)-i;
  }
  KV(tsr_gguf_kv_arr_str, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n_tok);
  KV(tsr_gguf_kv_arr_f32, "tokenizer.ggml.scores", scores, (uint64_t)n_tok);
  KV(tsr_gguf_kv_u32, "tokenizer.ggml.bos_token_id", 1);
  KV(tsr_gguf_kv_u32, "tokenizer.ggml.eos_token_id", 2);
#undef KV
  for (int i = 0; i < n_tok; i++) free(toks[i]);
  free(toks);
  free(scores);

  /* Tensor list: globals, then each block. Types vary to cover F16/Q8_0. */
  char names[3 + 9 * T_LAYERS][48];
  int64_t nes[3 + 9 * T_LAYERS][2];
  uint32_t nds[3 + 9 * T_LAYERS], types[3 + 9 * T_LAYERS];
  uint64_t sizes[3 + 9 * T_LAYERS];
  int n = 0;
  strcpy(names[n], "token_embd.weight");
  nes[n][0] = T_DIM, nes[n][1] = T_VOCAB, nds[n] = 2, types[n++] = TSR_DTYPE_F32;
  strcpy(names[n], "output_norm.weight");
  nes[n][0] = T_DIM, nes[n][1] = 1, nds[n] = 1, types[n++] = TSR_DTYPE_F32;
  strcpy(names[n], "output.weight");
  nes[n][0] = T_DIM, nes[n][1] = T_VOCAB, nds[n] = 2, types[n++] = TSR_DTYPE_F16;
  for (int l = 0; l < T_LAYERS; l++)
    for (int j = 0; j < 9; j++) {
      snprintf(names[n], sizeof names[n], "blk.%d.%s.weight", l, layer_suffix[j]);
      tensor_shape(layer_suffix[j], nes[n], &nds[n]);
      types[n++] = j == 1 ? TSR_DTYPE_Q8_0 : j == 2 ? TSR_DTYPE_F16 : TSR_DTYPE_F32;
    }
  int n_written = 0;
  int written[3 + 9 * T_LAYERS];
  for (int i = 0; i < n; i++) {
    if (k->skip_tensor && !strcmp(k->skip_tensor, names[i])) continue;
    int64_t ne[2] = {nes[i][0], nes[i][1]};
    uint32_t type = types[i];
    if (k->bad_shape && !strcmp(k->bad_shape, names[i])) {
      ne[1] += 1;
      if (nds[i] == 1) nds[i] = 2;
    }
    if (k->type_tensor && !strcmp(k->type_tensor, names[i])) type = k->type;
    sizes[i] = tsr_gguf_writer_add_tensor(&w, names[i], type, nds[i], ne);
    written[n_written++] = i;
  }
  buf_t b = {0};
  FILE *f = open_memstream((char **)&b.data, &b.size);
  tsr_status_t s = tsr_gguf_writer_begin(&w, f, "memory");
  for (int wi = 0; wi < n_written && !s; wi++) {
    int i = written[wi];
    uint8_t *d = malloc(sizes[i] + 1);
    for (uint64_t j = 0; j < sizes[i]; j++) d[j] = (uint8_t)(j * 7 + (uint64_t)i * 13);
    /* F32 tensors get finite values, so the views can be checked. */
    if (types[i] == TSR_DTYPE_F32)
      for (uint64_t j = 0; j + 4 <= sizes[i]; j += 4) {
        float v = (float)i + (float)j * 1e-3f;
        memcpy(d + j, &v, 4);
      }
    s = tsr_gguf_writer_tensor_data(&w, f, d, (size_t)sizes[i], true, "memory");
    free(d);
  }
  fclose(f);
  tsr_gguf_writer_free(&w);
  if (s) {
    fprintf(stderr, "build: %s\n", tsr_status_message(s));
    tsr_status_free(s);
  }
  if (k->nul_token) {
    /* The last token is "\xe2\x96\x81a": turn its 'a' into NUL. */
    uint8_t *p = memmem(b.data, b.size, "\xe2\x96\x81" "a", 4);
    if (p) p[3] = 0;
  }
  return b;
}

/* Parses `b` (copied to an exact-size heap block so ASan sees overreads). */
static tsr_status_t parse(const buf_t *b, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (size) memcpy(copy, b->data, size);
  tsr_model_file_t *mf = calloc(1, sizeof *mf);
  tsr_status_t s = tsr_gguf_parse(copy, size, "t.gguf", mf);
  tsr_model_file_close(mf);
  free(copy);
  return s;
}

static tsr_status_t parse_knobs(const knobs_t *k) {
  buf_t b = build(k);
  tsr_status_t s = parse(&b, b.size);
  free(b.data);
  return s;
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Offset just past a length-prefixed string `s` in `b` (finds "len, s"). */
static size_t after_string(const buf_t *b, const char *s) {
  size_t n = strlen(s);
  uint8_t pat[128];
  put_u64(pat, n);
  memcpy(pat + 8, s, n);
  uint8_t *p = memmem(b->data, b->size, pat, n + 8);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  return (size_t)(p - b->data) + 8 + n;
}

/* ---- the reference files ---- */

static void test_reference_gguf(void) {
  if (!tsr_test_need_reference_models()) return;
  tsr_model_file_t *mf = NULL;
  TSR_ASSERT_OK(tsr_model_file_open(tsr_test_model_path("stories260K.gguf"), NULL, &mf));
  CU_ASSERT_PTR_NOT_NULL_FATAL(mf);
  const tsr_model_config_t *c = &mf->config;
  CU_ASSERT_EQUAL(c->dim, 64);
  CU_ASSERT_EQUAL(c->hidden_dim, 172);
  CU_ASSERT_EQUAL(c->n_layers, 5);
  CU_ASSERT_EQUAL(c->n_heads, 8);
  CU_ASSERT_EQUAL(c->n_kv_heads, 4);
  CU_ASSERT_EQUAL(c->head_dim, 8);
  CU_ASSERT_EQUAL(c->vocab_size, 512);
  CU_ASSERT_EQUAL(c->seq_len, 2048);
  CU_ASSERT_EQUAL(c->rms_eps, 1e-5f);
  CU_ASSERT_EQUAL(c->rope_theta, 10000.0f);
  CU_ASSERT_TRUE(c->shared_classifier); /* output.weight is a byte copy */
  CU_ASSERT_EQUAL(c->format, TSR_MODEL_FORMAT_GGUF);
  CU_ASSERT_EQUAL(mf->gguf_version, 3);
  CU_ASSERT_EQUAL(mf->gguf_alignment, 32);
  CU_ASSERT_EQUAL(mf->n_tensors, 48);
  CU_ASSERT_STRING_EQUAL(mf->tensors[0].name, "token_embd.weight");
  CU_ASSERT_EQUAL(mf->tensors[0].ne[0], 64);
  CU_ASSERT_EQUAL(mf->tensors[0].ne[1], 512);
  CU_ASSERT_EQUAL(mf->tensors[0].offset % 32, 0);
  CU_ASSERT_EQUAL(mf->layers[4].w2.rows, 64);
  CU_ASSERT_EQUAL(mf->layers[4].w2.cols, 172);
  CU_ASSERT_EQUAL(mf->layers[0].wk.rows, 32);
  CU_ASSERT_EQUAL(mf->vocab.n, 512);
  CU_ASSERT_EQUAL(mf->vocab.bos, 1);
  CU_ASSERT_EQUAL(mf->vocab.eos, 2);
  CU_ASSERT_EQUAL(mf->vocab.unk, 0);
  CU_ASSERT_STRING_EQUAL(mf->vocab.pieces[1], "\n<s>\n");
  CU_ASSERT_STRING_EQUAL(mf->vocab.pieces[3], "<0x00>");
  tsr_model_file_close(mf);
}

static int64_t view_bytes(const tsr_tensor_view_t *v) { return v->rows * v->cols * 4; }

static void assert_same_view(const tsr_tensor_view_t *a, const tsr_tensor_view_t *b) {
  CU_ASSERT_EQUAL(a->type, TSR_DTYPE_F32);
  CU_ASSERT_EQUAL(b->type, TSR_DTYPE_F32);
  CU_ASSERT_EQUAL(a->rows, b->rows);
  CU_ASSERT_EQUAL(a->cols, b->cols);
  if (a->rows == b->rows && a->cols == b->cols)
    CU_ASSERT_EQUAL(memcmp(a->data, b->data, (size_t)view_bytes(a)), 0);
}

/* The GGUF is a conversion of the .bin: every tensor is bit-identical. */
static void test_gguf_equals_bin(void) {
  if (!tsr_test_need_reference_models()) return;
  tsr_model_file_t *g = NULL, *b = NULL;
  TSR_ASSERT_OK(tsr_model_file_open(tsr_test_model_path("stories260K.gguf"), NULL, &g));
  TSR_ASSERT_OK(tsr_model_file_open(tsr_test_model_path("stories260K.bin"),
                                    tsr_test_model_path("tok512.bin"), &b));
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  assert_same_view(&g->tok_embd, &b->tok_embd);
  assert_same_view(&g->rms_final, &b->rms_final);
  assert_same_view(&g->output, &b->output);
  for (int l = 0; l < 5; l++) {
    const tsr_layer_views_t *x = &g->layers[l], *y = &b->layers[l];
    assert_same_view(&x->rms_att, &y->rms_att);
    assert_same_view(&x->wq, &y->wq);
    assert_same_view(&x->wk, &y->wk);
    assert_same_view(&x->wv, &y->wv);
    assert_same_view(&x->wo, &y->wo);
    assert_same_view(&x->rms_ffn, &y->rms_ffn);
    assert_same_view(&x->w1, &y->w1);
    assert_same_view(&x->w2, &y->w2);
    assert_same_view(&x->w3, &y->w3);
  }
  tsr_model_file_close(g);
  tsr_model_file_close(b);
}

/* The GGUF vocabulary, converted by llama2.c's export rules, is tok512.bin:
 * same pieces and scores, and serialized back it is the same bytes. */
static void test_gguf_vocab_equals_tok512(void) {
  if (!tsr_test_need_reference_models()) return;
  tsr_model_file_t *g = NULL;
  TSR_ASSERT_OK(tsr_model_file_open(tsr_test_model_path("stories260K.gguf"), NULL, &g));
  tsr_mapped_file_t tf;
  TSR_ASSERT_OK(tsr_file_map(tsr_test_model_path("tok512.bin"), &tf));
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_PTR_NOT_NULL_FATAL(tf.data);
  tsr_vocab_t t;
  TSR_ASSERT_OK(tsr_llama2c_vocab_parse(tf.data, tf.size, 512, "tok512.bin", &t));
  CU_ASSERT_EQUAL_FATAL(g->vocab.n, t.n);
  int diffs = 0;
  for (int i = 0; i < t.n; i++) {
    if (strcmp(g->vocab.pieces[i], t.pieces[i]) || g->vocab.scores[i] != t.scores[i]) diffs++;
  }
  CU_ASSERT_EQUAL(diffs, 0);
  CU_ASSERT_EQUAL(g->vocab.max_piece_len, t.max_piece_len);
  CU_ASSERT_EQUAL(g->vocab.bos, t.bos);
  CU_ASSERT_EQUAL(g->vocab.eos, t.eos);

  /* Serialize as llama2.c does: u32 max_len, then {f32 score, i32 len, bytes}. */
  size_t cap = 4, off = 0;
  for (int i = 0; i < g->vocab.n; i++) cap += 8 + strlen(g->vocab.pieces[i]);
  uint8_t *out = malloc(cap);
  uint32_t ml = (uint32_t)g->vocab.max_piece_len;
  memcpy(out, &ml, 4);
  off = 4;
  for (int i = 0; i < g->vocab.n; i++) {
    int32_t len = (int32_t)strlen(g->vocab.pieces[i]);
    memcpy(out + off, &g->vocab.scores[i], 4);
    memcpy(out + off + 4, &len, 4);
    memcpy(out + off + 8, g->vocab.pieces[i], (size_t)len);
    off += 8 + (size_t)len;
  }
  CU_ASSERT_EQUAL(off, tf.size);
  if (off == tf.size) CU_ASSERT_EQUAL(memcmp(out, tf.data, off), 0);
  free(out);
  tsr_vocab_free(&t);
  tsr_file_unmap(&tf);
  tsr_model_file_close(g);
}

/* An external llama2.c tokenizer replaces the embedded vocabulary. */
static void test_gguf_external_tokenizer(void) {
  if (!tsr_test_need_reference_models()) return;
  tsr_model_file_t *g = NULL;
  TSR_ASSERT_OK(tsr_model_file_open(tsr_test_model_path("stories260K.gguf"),
                                    tsr_test_model_path("tok512.bin"), &g));
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(g->vocab.n, 512);
  CU_ASSERT_EQUAL(g->vocab.max_piece_len, 7);
  tsr_model_file_close(g);
  /* A missing tokenizer file names its path. */
  TSR_ASSERT_ERR(tsr_model_file_open(tsr_test_model_path("stories260K.gguf"),
                                     "no/such/tok.bin", &g),
                 TSR_STATUS_NOT_FOUND, "no/such/tok.bin");
  CU_ASSERT_PTR_NULL(g);
}

/* ---- the built file ---- */

static void test_built_valid(void) {
  knobs_t k = {0};
  buf_t b = build(&k);
  tsr_model_file_t *mf = calloc(1, sizeof *mf);
  TSR_ASSERT_OK(tsr_gguf_parse(b.data, b.size, "t.gguf", mf));
  CU_ASSERT_EQUAL(mf->config.dim, T_DIM);
  CU_ASSERT_EQUAL(mf->config.n_kv_heads, T_KV_HEADS);
  CU_ASSERT_EQUAL(mf->config.rms_eps, 1e-6f);
  CU_ASSERT_FALSE(mf->config.shared_classifier);
  CU_ASSERT_EQUAL(mf->output.type, TSR_DTYPE_F16);
  CU_ASSERT_EQUAL(mf->layers[1].wq.type, TSR_DTYPE_Q8_0);
  CU_ASSERT_EQUAL(mf->layers[1].wk.type, TSR_DTYPE_F16);
  CU_ASSERT_EQUAL(mf->layers[1].wk.rows, T_KV_HEADS * T_HEAD_DIM);
  CU_ASSERT_EQUAL(mf->n_tensors, 3 + 9 * T_LAYERS);
  /* Q8_0: 32 x 32 in blocks of 34 bytes. */
  CU_ASSERT_EQUAL(mf->tensors[3 + 9 + 1].nbytes, (uint64_t)T_DIM * T_DIM / 32 * 34);
  /* rms_final holds tensor #1's pattern: value 1.0 at j = 0. */
  CU_ASSERT_EQUAL(((const float *)mf->rms_final.data)[0], 1.0f);
  CU_ASSERT_STRING_EQUAL(mf->vocab.pieces[259], " a");
  CU_ASSERT_EQUAL(mf->vocab.scores[259], -259.0f);
  CU_ASSERT_STRING_EQUAL(mf->vocab.pieces[2], "\n</s>\n");
  tsr_model_file_close(mf);
  free(b.data);
}

static void test_bad_magic_and_version(void) {
  knobs_t k = {0};
  buf_t b = build(&k);
  b.data[0] = 'X';
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "magic at offset 0x0");
  free(b.data);
  k.version = 4;
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "version at offset 0x4: 4");
  k.version = 1;
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "version at offset 0x4: 1");
  k.version = 0x03000000; /* big-endian file */
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "big-endian");
  k.version = 2; /* same layout as v3 */
  TSR_ASSERT_OK(parse_knobs(&k));
  buf_t empty = {0};
  TSR_ASSERT_ERR(parse(&empty, 0), TSR_STATUS_FORMAT, "empty");
}

/* Every prefix of a valid file must fail cleanly (ASan checks the reads). */
static void test_truncated_everywhere(void) {
  knobs_t k = {0};
  buf_t b = build(&k);
  int fails = 0, oks = 0, checked = 0;
  for (size_t cut = 0; cut < b.size; cut += cut < 9000 ? 1 : 97) {
    tsr_status_t s = parse(&b, cut);
    checked++;
    if (!s) {
      oks++;
      continue;
    }
    if (!strstr(tsr_status_message(s), "t.gguf")) fails++;
    if (tsr_status_code(s) != TSR_STATUS_FORMAT && tsr_status_code(s) != TSR_STATUS_OUT_OF_RANGE)
      fails++;
    tsr_status_free(s);
  }
  CU_ASSERT_EQUAL(oks, 0);
  CU_ASSERT_EQUAL(fails, 0);
  printf("REPORT gguf truncation: %d prefixes of a %zu-byte file rejected\n", checked, b.size);
  free(b.data);
}

static void test_tensor_data_past_end(void) {
  knobs_t k = {0};
  buf_t b = build(&k);
  /* Dropping the last bytes leaves the last tensor's data incomplete. */
  TSR_ASSERT_ERR(parse(&b, b.size - 40), TSR_STATUS_OUT_OF_RANGE,
                 "tensor 'blk.1.ffn_up.weight': data [offset 0x");
  TSR_ASSERT_ERR(parse(&b, b.size - 40), TSR_STATUS_OUT_OF_RANGE, "runs past end of file");
  /* An offset far beyond the file, and one that overflows when added. */
  size_t at = after_string(&b, "blk.0.attn_v.weight") + 4 + 16 + 4;
  put_u64(b.data + at, (uint64_t)1 << 40);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE, "blk.0.attn_v.weight");
  put_u64(b.data + at, UINT64_MAX - 31);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE, "runs past end of file");
  free(b.data);
}

static void test_misaligned_offset(void) {
  knobs_t k = {0};
  buf_t b = build(&k);
  size_t at = after_string(&b, "blk.0.ffn_norm.weight") + 4 + 8 + 4;
  uint64_t off = 0;
  for (int i = 7; i >= 0; i--) off = off << 8 | b.data[at + i];
  put_u64(b.data + at, off + 4);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT,
                 "'blk.0.ffn_norm.weight' data offset");
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "not a multiple of the alignment 32");
  free(b.data);
}

static void test_alignment_values(void) {
  knobs_t k = {.alignment = 48};
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "'general.alignment' value at offset");
  k.alignment = 3;
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "3 is not a power of two");
  /* A non-default power of two is honoured. */
  k.alignment = 64;
  buf_t b = build(&k);
  tsr_model_file_t *mf = calloc(1, sizeof *mf);
  TSR_ASSERT_OK(tsr_gguf_parse(b.data, b.size, "t.gguf", mf));
  CU_ASSERT_EQUAL(mf->gguf_alignment, 64);
  for (int i = 0; i < mf->n_tensors; i++) CU_ASSERT_EQUAL(mf->tensors[i].offset % 64, 0);
  tsr_model_file_close(mf);
  free(b.data);
  /* Alignment 0 is written by patching the u32 value of a valid file. */
  k.alignment = 32;
  b = build(&k);
  size_t at = after_string(&b, "general.alignment") + 4;
  put_u32(b.data + at, 0);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "0 is not a power of two");
  free(b.data);
}

static void test_shape_mismatch(void) {
  const char *names[] = {"blk.0.attn_k.weight", "blk.1.ffn_down.weight", "token_embd.weight",
                         "output_norm.weight", "output.weight", "blk.1.attn_norm.weight"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    knobs_t k = {.bad_shape = names[i]};
    tsr_status_t s = parse_knobs(&k);
    CU_ASSERT_PTR_NOT_NULL(s);
    CU_ASSERT_EQUAL(tsr_status_code(s), TSR_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(tsr_status_message(s), names[i]));
    CU_ASSERT_PTR_NOT_NULL(strstr(tsr_status_message(s), "does not match the config"));
    tsr_status_free(s);
  }
  /* Config keys that disagree with each other. */
  knobs_t k = {.rope_dims = 4};
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_UNIMPLEMENTED, "llama.rope.dimension_count");
}

static void test_absurd_counts(void) {
  knobs_t k = {0};
  buf_t b = build(&k);
  uint8_t save[8];
  memcpy(save, b.data + 8, 8);
  put_u64(b.data + 8, (uint64_t)1 << 62);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE, "n_tensors at offset 0x8");
  memcpy(b.data + 8, save, 8);
  memcpy(save, b.data + 16, 8);
  put_u64(b.data + 16, UINT64_MAX);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE, "n_kv at offset 0x10");
  memcpy(b.data + 16, save, 8);
  /* The first key's length. */
  memcpy(save, b.data + 24, 8);
  put_u64(b.data + 24, (uint64_t)1 << 60);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE, "KV pair 0 key at offset 0x18");
  memcpy(b.data + 24, save, 8);
  /* A string value's length. */
  size_t at = after_string(&b, "general.architecture") + 4;
  memcpy(save, b.data + at, 8);
  put_u64(b.data + at, UINT64_MAX);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE,
                 "key 'general.architecture' value at offset");
  memcpy(b.data + at, save, 8);
  /* An array's count. */
  at = after_string(&b, "tokenizer.ggml.scores") + 8;
  memcpy(save, b.data + at, 8);
  put_u64(b.data + at, (uint64_t)1 << 61);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE,
                 "key 'tokenizer.ggml.scores' array count at offset");
  memcpy(b.data + at, save, 8);
  /* One string inside the token array. */
  at = after_string(&b, "<0x41>");
  memcpy(save, b.data + at, 8);
  put_u64(b.data + at, (uint64_t)1 << 50);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE,
                 "key 'tokenizer.ggml.tokens' item 69");
  memcpy(b.data + at, save, 8);
  /* A tensor dimension and n_dims. */
  at = after_string(&b, "blk.0.attn_q.weight");
  put_u64(b.data + at + 4, (uint64_t)1 << 41);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE, "'blk.0.attn_q.weight' ne[0]");
  put_u64(b.data + at + 4, T_DIM);
  put_u32(b.data + at, 5);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "'blk.0.attn_q.weight' n_dims");
  put_u32(b.data + at, 2);
  TSR_ASSERT_OK(parse(&b, b.size)); /* every patch undone */
  free(b.data);
}

static void test_unknown_types(void) {
  knobs_t k = {.type_tensor = "blk.1.attn_v.weight", .type = 2};
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "tensor 'blk.1.attn_v.weight' type");
  k.type = 12;
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "Q4_K");
  k.type = 1000;
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "1000 (unknown)");
  /* Q8_0 in place of F16 is a supported type and parses. */
  k.type_tensor = "blk.0.attn_q.weight";
  k.type = TSR_DTYPE_Q8_0;
  TSR_ASSERT_OK(parse_knobs(&k));

  buf_t b = build(&(knobs_t){0});
  size_t at = after_string(&b, "llama.block_count");
  put_u32(b.data + at, 13);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT,
                 "key 'llama.block_count' value type at offset");
  put_u32(b.data + at, 200);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "unknown type 200");
  /* Same size, wrong kind: a float where an integer is needed. */
  put_u32(b.data + at, TSR_GGUF_F32);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "expected an integer");
  put_u32(b.data + at, TSR_GGUF_U32);
  /* Array item type. */
  at = after_string(&b, "tokenizer.ggml.scores") + 4;
  put_u32(b.data + at, 77);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT,
                 "key 'tokenizer.ggml.scores' array type at offset");
  put_u32(b.data + at, TSR_GGUF_ARRAY);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "nested arrays");
  put_u32(b.data + at, TSR_GGUF_I32);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_FORMAT, "expected array of f32");
  free(b.data);
}

static void test_missing_keys_and_tensors(void) {
  const char *keys[] = {"general.architecture",   "llama.embedding_length",
                        "llama.feed_forward_length", "llama.block_count",
                        "llama.attention.head_count", "llama.context_length",
                        "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model",
                        "tokenizer.ggml.tokens"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    knobs_t k = {.skip_key = keys[i]};
    tsr_status_t s = parse_knobs(&k);
    CU_ASSERT_EQUAL(tsr_status_code(s), TSR_STATUS_NOT_FOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(tsr_status_message(s), keys[i]));
    if (!s || !strstr(tsr_status_message(s), keys[i]))
      fprintf(stderr, "missing %s: %s\n", keys[i], tsr_status_message(s));
    tsr_status_free(s);
  }
  /* Optional keys have defaults. */
  knobs_t k = {.skip_key = "llama.attention.head_count_kv"};
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "blk.0.attn_k.weight");
  k.skip_key = "tokenizer.ggml.scores";
  TSR_ASSERT_OK(parse_knobs(&k));
  k.skip_key = "llama.rope.dimension_count";
  TSR_ASSERT_OK(parse_knobs(&k));

  const char *tensors[] = {"token_embd.weight", "output_norm.weight", "blk.1.ffn_up.weight",
                           "blk.0.attn_norm.weight"};
  for (size_t i = 0; i < sizeof tensors / sizeof *tensors; i++) {
    knobs_t kt = {.skip_tensor = tensors[i]};
    TSR_ASSERT_ERR(parse_knobs(&kt), TSR_STATUS_NOT_FOUND, tensors[i]);
  }
  /* No output.weight: the classifier is the embedding. */
  knobs_t ko = {.skip_tensor = "output.weight"};
  buf_t b = build(&ko);
  tsr_model_file_t *mf = calloc(1, sizeof *mf);
  TSR_ASSERT_OK(tsr_gguf_parse(b.data, b.size, "t.gguf", mf));
  CU_ASSERT_TRUE(mf->config.shared_classifier);
  CU_ASSERT_PTR_EQUAL(mf->output.data, mf->tok_embd.data);
  tsr_model_file_close(mf);
  free(b.data);
}

static void test_vocab_errors(void) {
  knobs_t k = {.n_tokens = T_VOCAB - 1};
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT,
                 "key 'tokenizer.ggml.tokens' at offset");
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "259 items, expected 260");
  k.n_tokens = 0;
  k.nul_token = true;
  TSR_ASSERT_ERR(parse_knobs(&k), TSR_STATUS_FORMAT, "tokenizer.ggml.tokens item 259");
  knobs_t a = {.arch = "gpt2"};
  TSR_ASSERT_ERR(parse_knobs(&a), TSR_STATUS_UNIMPLEMENTED, "'gpt2'");
  knobs_t d = {.duplicate_key = true};
  TSR_ASSERT_ERR(parse_knobs(&d), TSR_STATUS_FORMAT, "'llama.block_count'");
  TSR_ASSERT_ERR(parse_knobs(&d), TSR_STATUS_FORMAT, "duplicate key");
  /* A BOS id outside the vocabulary. */
  buf_t b = build(&(knobs_t){0});
  size_t at = after_string(&b, "tokenizer.ggml.bos_token_id") + 4;
  put_u32(b.data + at, T_VOCAB);
  TSR_ASSERT_ERR(parse(&b, b.size), TSR_STATUS_OUT_OF_RANGE, "tokenizer.ggml.bos_token_id");
  free(b.data);
}

/* Through tsr_model_file_open: mapping, magic dispatch and cleanup. */
/* A generated MoE file with one field changed: refused with a message
 * naming it. */
static void test_moe_errors(void) {
  tsr_gen_params_t p;
  TSR_ASSERT_OK(tsr_gen_preset("moe260K", &p));
  p.n_layers = 2;
  char path[512];
  snprintf(path, sizeof path, "%s/moe_bad.gguf", tsr_test_tmpdir());
  TSR_ASSERT_OK(tsr_gen_model_write(path, &p));
  tsr_mapped_file_t f;
  TSR_ASSERT_OK(tsr_file_map(path, &f));
  buf_t good = {malloc(f.size), f.size};
  memcpy(good.data, f.data, f.size);
  tsr_file_unmap(&f);
  TSR_ASSERT_OK(parse(&good, good.size));
  struct {
    const char *key; /* a key (its u32 value patched) or a tensor name */
    int what;        /* 0: the key's value, 1: the tensor's ne[2], 2: rename it */
    uint32_t value;
    tsr_status_code_t code;
    const char *needle;
  } cases[] = {
      {"llama.expert_count", 0, 1, TSR_STATUS_FORMAT, "1 expert"},
      {"llama.expert_count", 0, 300, TSR_STATUS_OUT_OF_RANGE, "llama.expert_count"},
      {"llama.expert_used_count", 0, 5, TSR_STATUS_OUT_OF_RANGE, "llama.expert_used_count"},
      {"llama.expert_used_count", 0, 0, TSR_STATUS_OUT_OF_RANGE, "llama.expert_used_count"},
      {"blk.1.ffn_gate_exps.weight", 1, 3, TSR_STATUS_FORMAT, "expert_count"},
      {"blk.0.ffn_down_exps.weight", 2, 0, TSR_STATUS_NOT_FOUND, "blk.0.ffn_down_exps"},
      {"blk.1.ffn_gate_inp.weight", 2, 0, TSR_STATUS_NOT_FOUND, "blk.1.ffn_gate_inp"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    buf_t b = {malloc(good.size), good.size};
    memcpy(b.data, good.data, good.size);
    const size_t at = after_string(&b, cases[i].key);
    CU_ASSERT(at > 0);
    if (!at) {
      free(b.data);
      continue;
    }
    if (cases[i].what == 0) put_u32(b.data + at + 4, cases[i].value);    /* type, value */
    else if (cases[i].what == 1) put_u64(b.data + at + 4 + 16, cases[i].value); /* n_dims, ne */
    else b.data[at - 1] = 'X';                                              /* last char */
    TSR_ASSERT_ERR(parse(&b, b.size), cases[i].code, cases[i].needle);
    free(b.data);
  }
  free(good.data);
}

static void test_open_paths(void) {
  tsr_model_file_t *mf = (tsr_model_file_t *)1;
  TSR_ASSERT_ERR(tsr_model_file_open("build/no-such-model.gguf", NULL, &mf),
                 TSR_STATUS_NOT_FOUND, "build/no-such-model.gguf");
  CU_ASSERT_PTR_NULL(mf);
  TSR_ASSERT_ERR(tsr_model_file_open(tsr_test_tmpdir(), NULL, &mf), TSR_STATUS_IO,
                 "not a regular file");
  char path[512];
  snprintf(path, sizeof path, "%s/empty.gguf", tsr_test_tmpdir());
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fclose(f);
  TSR_ASSERT_ERR(tsr_model_file_open(path, NULL, &mf), TSR_STATUS_FORMAT, "empty file");
  /* A valid file on disk, then the same file cut short. */
  buf_t b = build(&(knobs_t){0});
  snprintf(path, sizeof path, "%s/small.gguf", tsr_test_tmpdir());
  f = fopen(path, "wb");
  fwrite(b.data, 1, b.size, f);
  fclose(f);
  TSR_ASSERT_OK(tsr_model_file_open(path, NULL, &mf));
  CU_ASSERT_PTR_NOT_NULL(mf);
  if (mf) CU_ASSERT_EQUAL(mf->file.size, b.size);
  tsr_model_file_close(mf);
  f = fopen(path, "wb");
  fwrite(b.data, 1, b.size / 2, f);
  fclose(f);
  TSR_ASSERT_ERR(tsr_model_file_open(path, NULL, &mf), TSR_STATUS_OUT_OF_RANGE, path);
  CU_ASSERT_PTR_NULL(mf);
  remove(path);
  free(b.data);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("gguf", NULL, NULL);
  CU_add_test(s, "reference stories260K.gguf loads", test_reference_gguf);
  CU_add_test(s, "gguf tensors equal the .bin bit for bit", test_gguf_equals_bin);
  CU_add_test(s, "gguf vocabulary is tok512.bin", test_gguf_vocab_equals_tok512);
  CU_add_test(s, "external tokenizer replaces the vocabulary", test_gguf_external_tokenizer);
  CU_add_test(s, "built file parses", test_built_valid);
  CU_add_test(s, "bad magic and version", test_bad_magic_and_version);
  CU_add_test(s, "truncated at every offset", test_truncated_everywhere);
  CU_add_test(s, "tensor data past end of file", test_tensor_data_past_end);
  CU_add_test(s, "misaligned tensor offset", test_misaligned_offset);
  CU_add_test(s, "alignment values", test_alignment_values);
  CU_add_test(s, "shapes inconsistent with the config", test_shape_mismatch);
  CU_add_test(s, "absurd counts and lengths", test_absurd_counts);
  CU_add_test(s, "unknown tensor and value types", test_unknown_types);
  CU_add_test(s, "missing keys and tensors", test_missing_keys_and_tensors);
  CU_add_test(s, "vocabulary errors", test_vocab_errors);
  CU_add_test(s, "open: paths, empty and short files", test_open_paths);
  CU_add_test(s, "mixture-of-experts fields refused", test_moe_errors);
  return tsr_test_run_all();
}
