/* model_file.c - opening a model file (format by magic) and the checks the
 * llama2.c and GGUF parsers share. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "compute/dtype.h"
#include "model_file.h"

/* ---- shared checks ---- */

const char *tsr_dtype_name(tsr_dtype_t t) {
  switch (t) {
    case TSR_DTYPE_F32: return "F32";
    case TSR_DTYPE_F16: return "F16";
    case TSR_DTYPE_Q8_0: return "Q8_0";
    case TSR_DTYPE_BF16: return "BF16";
  }
  return "?";
}

bool tsr_dtype_supported(uint32_t t) {
  return t == TSR_DTYPE_F32 || t == TSR_DTYPE_F16 || t == TSR_DTYPE_Q8_0 ||
         t == TSR_DTYPE_BF16;
}

bool tsr_dtype_nbytes(tsr_dtype_t type, uint64_t n, uint64_t *out) {
  switch (type) {
    case TSR_DTYPE_F32:
      if (n > UINT64_MAX / 4) return false;
      *out = n * 4;
      return true;
    case TSR_DTYPE_F16:
    case TSR_DTYPE_BF16:
      if (n > UINT64_MAX / 2) return false;
      *out = n * 2;
      return true;
    case TSR_DTYPE_Q8_0:
      if (n % TSR_Q8_0_BLOCK) return false;
      *out = n / TSR_Q8_0_BLOCK * TSR_Q8_0_BYTES;
      return true;
  }
  return false;
}

static tsr_status_t check_range(const char *what, const char *field, int64_t v) {
  if (v < 1 || v > TSR_MODEL_MAX_DIM)
    return TSR_ERR(OUT_OF_RANGE, "%s: %s = %lld is outside [1, %d]", what, field,
                   (long long)v, TSR_MODEL_MAX_DIM);
  return TSR_OK;
}

tsr_status_t tsr_model_config_check(tsr_model_config_t *c, const char *what) {
  TSR_RETURN_IF(check_range(what, "dim", c->dim));
  TSR_RETURN_IF(check_range(what, "hidden_dim", c->hidden_dim));
  TSR_RETURN_IF(check_range(what, "n_layers", c->n_layers));
  TSR_RETURN_IF(check_range(what, "n_heads", c->n_heads));
  TSR_RETURN_IF(check_range(what, "n_kv_heads", c->n_kv_heads));
  TSR_RETURN_IF(check_range(what, "vocab_size", c->vocab_size));
  TSR_RETURN_IF(check_range(what, "seq_len", c->seq_len));
  if (c->dim % c->n_heads)
    return TSR_ERR(FORMAT, "%s: dim %d is not a multiple of n_heads %d", what, c->dim,
                   c->n_heads);
  if (c->n_heads % c->n_kv_heads)
    return TSR_ERR(FORMAT, "%s: n_heads %d is not a multiple of n_kv_heads %d", what,
                   c->n_heads, c->n_kv_heads);
  c->head_dim = c->dim / c->n_heads;
  /* RoPE rotates pairs of values within a head. */
  if (c->head_dim % 2)
    return TSR_ERR(FORMAT, "%s: head_dim %d (dim %d / n_heads %d) is odd", what,
                   c->head_dim, c->dim, c->n_heads);
  return TSR_OK;
}

char *tsr_piece_from_spm(const uint8_t *s, size_t len) {
  char *out = malloc(len + 1);
  if (!out) return NULL;
  size_t j = 0;
  for (size_t i = 0; i < len;) {
    if (i + 2 < len && s[i] == 0xe2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
      out[j++] = ' ';
      i += 3;
    } else {
      out[j++] = (char)s[i++];
    }
  }
  out[j] = '\0';
  return out;
}

void tsr_vocab_free(tsr_vocab_t *v) {
  if (!v) return;
  if (v->pieces)
    for (int32_t i = 0; i < v->n; i++) free(v->pieces[i]);
  free(v->pieces);
  free(v->scores);
  memset(v, 0, sizeof *v);
}

void tsr_model_file_clear(tsr_model_file_t *mf) {
  if (!mf) return;
  free(mf->layers);
  free(mf->tensors);
  tsr_vocab_free(&mf->vocab);
  tsr_mapped_file_t keep = mf->file;
  memset(mf, 0, sizeof *mf);
  mf->file = keep;
}

/* ---- open / close ---- */

void tsr_model_file_close(tsr_model_file_t *mf) {
  if (!mf) return;
  tsr_model_file_clear(mf);
  tsr_file_unmap(&mf->file);
  free(mf);
}

static tsr_status_t load_tokenizer(tsr_model_file_t *mf, const char *tokenizer_path) {
  tsr_mapped_file_t tf;
  TSR_RETURN_IF(tsr_file_map(tokenizer_path, &tf));
  tsr_vocab_t v;
  tsr_status_t s = tsr_llama2c_vocab_parse(tf.data, tf.size, mf->config.vocab_size,
                                           tokenizer_path, &v);
  /* The vocabulary owns copies of its strings; the file is not needed. */
  tsr_file_unmap(&tf);
  if (s) return s;
  tsr_vocab_free(&mf->vocab);
  mf->vocab = v;
  return TSR_OK;
}

tsr_status_t tsr_model_file_open(const char *path, const char *tokenizer_path,
                                 tsr_model_file_t **out) {
  *out = NULL;
  tsr_model_file_t *mf = calloc(1, sizeof *mf);
  if (!mf) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path ? path : "model");
  tsr_status_t s = tsr_file_map(path, &mf->file);
  if (s) {
    free(mf);
    return s;
  }
  const uint8_t *d = mf->file.data;
  size_t n = mf->file.size;
  bool gguf = n >= 4 && memcmp(d, TSR_GGUF_MAGIC, 4) == 0;
  if (gguf) {
    s = tsr_gguf_parse(d, n, path, mf);
  } else {
    s = tsr_llama2c_parse(d, n, path, mf);
    if (!s && !tokenizer_path)
      s = TSR_ERR(INVALID_ARGUMENT,
                  "%s: a llama2.c checkpoint has no vocabulary: give a tokenizer file "
                  "(e.g. tok512.bin)",
                  path);
  }
  if (!s && tokenizer_path) s = load_tokenizer(mf, tokenizer_path);
  if (s) {
    tsr_model_file_close(mf);
    return s;
  }
  *out = mf;
  return TSR_OK;
}
