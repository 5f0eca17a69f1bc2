/* llama2c.c - llama2.c legacy checkpoints (.bin) and tokenizer files.
 *
 * Checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 * vocab_size, seq_len), then fp32 arrays back to back (see model_file.h for
 * the shapes). A negative vocab_size means the classifier is not shared and
 * is stored last. The file has no other framing, so its size must match the
 * header exactly: that is the only check that catches a wrong or truncated
 * file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_file.h"
#include "base/status.h"

#define HEADER_BYTES 28
/* The versioned llama2.c export (export.py --version 1/2) starts with this
 * magic ("ak42"); it is a different layout. */
#define LLAMA2C_V1_MAGIC 0x616b3432u

static const char *const header_fields[7] = {"dim",        "hidden_dim", "n_layers",
                                             "n_heads",    "n_kv_heads", "vocab_size",
                                             "seq_len"};

/* One fp32 array of the checkpoint, in file order. */
typedef struct segment {
  const char *name; /* GGUF-style name, for the tensor table */
  int per_layer;    /* stored as n_layers consecutive matrices */
  int64_t rows, cols;
} segment_t;

static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static bool add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

static void set_view(tsr_tensor_view_t *v, const uint8_t *p, int64_t rows, int64_t cols) {
  v->type = TSR_DTYPE_F32;
  v->rows = rows;
  v->cols = cols;
  v->data = p;
}

static void set_info(tsr_tensor_info_t *t, const char *name, int64_t rows, int64_t cols,
                     uint64_t offset) {
  snprintf(t->name, sizeof t->name, "%s", name);
  t->type = TSR_DTYPE_F32;
  t->n_dims = rows == 1 ? 1 : 2;
  t->ne[0] = cols;
  t->ne[1] = rows;
  t->ne[2] = t->ne[3] = 1;
  t->offset = offset;
  t->nbytes = (uint64_t)rows * (uint64_t)cols * 4;
}

tsr_status_t tsr_llama2c_parse(const uint8_t *data, size_t size, const char *what,
                               tsr_model_file_t *out) {
  /* `out` may be uninitialized: reset it (the mapping belongs to the caller). */
  const tsr_mapped_file_t keep = out->file;
  memset(out, 0, sizeof *out);
  out->file = keep;
  what = what ? what : "llama2.c checkpoint";
  tsr_reader_t r;
  tsr_reader_init(&r, data, size, what);
  if (size == 0) return TSR_ERR(FORMAT, "%s: empty file (expected a llama2.c header)", what);
  int32_t h[7];
  for (int i = 0; i < 7; i++) {
    char field[48];
    snprintf(field, sizeof field, "header field %s", header_fields[i]);
    TSR_RETURN_IF(tsr_reader_i32(&r, field, &h[i]));
  }
  if ((uint32_t)h[0] == LLAMA2C_V1_MAGIC)
    return TSR_ERR(UNIMPLEMENTED,
                   "%s: magic 'ak42' at offset 0x0: versioned llama2.c export (v1/v2) is "
                   "not supported; use the legacy format or GGUF",
                   what);
  tsr_model_config_t *c = &out->config;
  c->dim = h[0];
  c->hidden_dim = h[1];
  c->n_layers = h[2];
  c->n_heads = h[3];
  c->n_kv_heads = h[4];
  c->shared_classifier = h[5] > 0;
  /* -INT32_MIN overflows; check_range rejects it as 0 after this guard. */
  c->vocab_size = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -h[5] : h[5]);
  c->seq_len = h[6];
  c->rms_eps = 1e-5f;
  c->rope_theta = 10000.0f;
  c->format = TSR_MODEL_FORMAT_LLAMA2C;
  char where[300];
  snprintf(where, sizeof where, "%s: header at offset 0x0", what);
  tsr_status_t s = tsr_model_config_check(c, where);
  if (s) {
    tsr_model_file_clear(out);
    return s;
  }
  const int64_t dim = c->dim, hid = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
  const int64_t kv_dim = dim * c->n_kv_heads / c->n_heads, hs = c->head_dim;

  const segment_t segs[] = {
      {"token_embd.weight", 0, V, dim},
      {"attn_norm.weight", 1, 1, dim},
      {"attn_q.weight", 1, dim, dim},
      {"attn_k.weight", 1, kv_dim, dim},
      {"attn_v.weight", 1, kv_dim, dim},
      {"attn_output.weight", 1, dim, dim},
      {"ffn_norm.weight", 1, 1, dim},
      {"ffn_gate.weight", 1, hid, dim},
      {"ffn_down.weight", 1, dim, hid},
      {"ffn_up.weight", 1, hid, dim},
      {"output_norm.weight", 0, 1, dim},
      {"freq_cis_real", 0, c->seq_len, hs / 2},
      {"freq_cis_imag", 0, c->seq_len, hs / 2},
      {"output.weight", 0, V, dim},
  };
  const int n_segs = (int)(sizeof segs / sizeof segs[0]) - (c->shared_classifier ? 1 : 0);

  /* Expected size with overflow checks: dimensions are bounded by
   * TSR_MODEL_MAX_DIM, but their products times the layer count are not. */
  uint64_t total = HEADER_BYTES;
  bool ok = true;
  for (int i = 0; i < n_segs && ok; i++) {
    uint64_t n, bytes;
    ok = mul_u64((uint64_t)segs[i].rows, (uint64_t)segs[i].cols, &n) &&
         mul_u64(n, segs[i].per_layer ? (uint64_t)L : 1, &n) && mul_u64(n, 4, &bytes) &&
         add_u64(total, bytes, &total);
  }
  if (!ok || total != size) {
    char expect[40];
    if (ok)
      snprintf(expect, sizeof expect, "%llu", (unsigned long long)total);
    else
      snprintf(expect, sizeof expect, "more than 2^64");
    tsr_model_file_clear(out);
    return TSR_ERR(FORMAT,
                   "%s: file size %zu does not match the header at offset 0x0 (dim=%d "
                   "hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d vocab_size=%d "
                   "seq_len=%d): expected %s bytes",
                   what, size, h[0], h[1], h[2], h[3], h[4], h[5], h[6], expect);
  }

  out->layers = calloc((size_t)L, sizeof *out->layers);
  int n_info = 0;
  for (int i = 0; i < n_segs; i++) n_info += segs[i].per_layer ? (int)L : 1;
  out->tensors = calloc((size_t)n_info, sizeof *out->tensors);
  if (!out->layers || !out->tensors) {
    tsr_model_file_clear(out);
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for %lld layers", what,
                   (long long)L);
  }
  out->n_tensors = n_info;

  uint64_t off = HEADER_BYTES;
  int ti = 0;
  for (int i = 0; i < n_segs; i++) {
    const segment_t *sg = &segs[i];
    const uint64_t one = (uint64_t)sg->rows * (uint64_t)sg->cols * 4;
    for (int64_t l = 0; l < (sg->per_layer ? L : 1); l++, off += one) {
      const uint8_t *p = data + off;
      char name[96];
      if (sg->per_layer)
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, sg->name);
      else
        snprintf(name, sizeof name, "%s", sg->name);
      set_info(&out->tensors[ti++], name, sg->rows, sg->cols, off);
      tsr_layer_views_t *ly = sg->per_layer ? &out->layers[l] : NULL;
      tsr_tensor_view_t *v = NULL;
      switch (i) {
        case 0: v = &out->tok_embd; break;
        case 1: v = &ly->rms_att; break;
        case 2: v = &ly->wq; break;
        case 3: v = &ly->wk; break;
        case 4: v = &ly->wv; break;
        case 5: v = &ly->wo; break;
        case 6: v = &ly->rms_ffn; break;
        case 7: v = &ly->w1; break;
        case 8: v = &ly->w2; break;
        case 9: v = &ly->w3; break;
        case 10: v = &out->rms_final; break;
        case 13: v = &out->output; break;
        default: break; /* freq_cis: precomputed RoPE tables, recomputed at run time */
      }
      if (v) set_view(v, p, sg->rows, sg->cols);
    }
  }
  if (c->shared_classifier) out->output = out->tok_embd;
  out->gguf_version = 0;
  out->gguf_alignment = 0;
  return TSR_OK;
}

tsr_status_t tsr_llama2c_vocab_parse(const uint8_t *data, size_t size,
                                     int32_t vocab_size, const char *what,
                                     tsr_vocab_t *out) {
  memset(out, 0, sizeof *out);
  what = what ? what : "llama2.c tokenizer";
  /* BOS and EOS are ids 1 and 2 in every llama2.c tokenizer. */
  if (vocab_size < 3 || vocab_size > TSR_MODEL_MAX_DIM)
    return TSR_ERR(OUT_OF_RANGE, "%s: vocab_size %d is outside [3, %d]", what, vocab_size,
                   TSR_MODEL_MAX_DIM);
  tsr_reader_t r;
  tsr_reader_init(&r, data, size, what);
  uint32_t max_len;
  TSR_RETURN_IF(tsr_reader_u32(&r, "max_token_length", &max_len));
  if (max_len < 1 || max_len > (1u << 16))
    return TSR_ERR(FORMAT, "%s: max_token_length at offset 0x0: %u is outside [1, 65536]",
                   what, max_len);
  /* A record takes at least 9 bytes (score, length, one byte): a file that
   * cannot hold vocab_size of them is refused before the tables are. */
  if ((uint64_t)vocab_size * 9 > tsr_reader_left(&r))
    return TSR_ERR(FORMAT,
                   "%s: truncated: the %zu bytes after max_token_length cannot hold the "
                   "%d token records of the model's vocab_size (9 bytes or more each)",
                   what, tsr_reader_left(&r), vocab_size);
  tsr_vocab_t v = {0};
  v.pieces = calloc((size_t)vocab_size, sizeof *v.pieces);
  v.scores = calloc((size_t)vocab_size, sizeof *v.scores);
  if (!v.pieces || !v.scores) {
    free(v.pieces);
    free(v.scores);
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for %d tokens", what, vocab_size);
  }
  v.n = vocab_size;
  tsr_status_t s = TSR_OK;
  char field[64];
  for (int32_t i = 0; i < vocab_size && !s; i++) {
    int32_t len;
    const uint8_t *bytes;
    snprintf(field, sizeof field, "token %d score", i);
    s = tsr_reader_f32(&r, field, &v.scores[i]);
    if (s) break;
    snprintf(field, sizeof field, "token %d length", i);
    size_t len_off = r.off;
    s = tsr_reader_i32(&r, field, &len);
    if (s) break;
    if (len < 1 || (uint32_t)len > max_len) {
      s = TSR_ERR(FORMAT, "%s: token %d length at offset 0x%zx: %d is outside [1, %u] "
                          "(max_token_length)",
                  what, i, len_off, len, max_len);
      break;
    }
    snprintf(field, sizeof field, "token %d bytes", i);
    s = tsr_reader_bytes(&r, (size_t)len, field, &bytes);
    if (s) break;
    if (memchr(bytes, 0, (size_t)len)) {
      s = TSR_ERR(FORMAT, "%s: token %d bytes at offset 0x%zx contain a NUL byte", what, i,
                  r.off - (size_t)len);
      break;
    }
    v.pieces[i] = malloc((size_t)len + 1);
    if (!v.pieces[i]) {
      s = TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory at token %d", what, i);
      break;
    }
    memcpy(v.pieces[i], bytes, (size_t)len);
    v.pieces[i][len] = '\0';
  }
  if (!s && tsr_reader_left(&r) != 0)
    s = TSR_ERR(FORMAT,
                "%s: token count mismatch: %zu bytes left at offset 0x%zx after %d tokens "
                "(the model's vocab_size)",
                what, tsr_reader_left(&r), r.off, vocab_size);
  if (s) {
    tsr_vocab_free(&v);
    return s;
  }
  v.max_piece_len = (int32_t)max_len;
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  *out = v;
  return TSR_OK;
}
