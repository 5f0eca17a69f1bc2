/* util.c - helpers shared by the fuzz targets (see util.h). */
#include "fuzz/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host/src/model_file.h"

bool fz_file_create(fz_file_t *f, const void *data, size_t size) {
  f->fd = memfd_create("tsr-fuzz", MFD_CLOEXEC);
  f->path[0] = '\0';
  if (f->fd < 0) return false;
  const uint8_t *p = data;
  for (size_t done = 0; done < size;) {
    ssize_t n = write(f->fd, p + done, size - done);
    if (n <= 0) {
      fz_file_close(f);
      return false;
    }
    done += (size_t)n;
  }
  snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
  return true;
}

void fz_file_close(fz_file_t *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

char *fz_strdup(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return NULL;
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

tsr_context_t *fz_context(void) {
  static tsr_context_t *ctx;
  if (!ctx) {
    tsr_context_options_t o;
    tsr_context_options_init(&o);
    o.n_threads = 1;
    o.devices = "cpu";
    o.quiet = true;
    tsr_status_t s = tsr_context_create(&o, &ctx);
    if (s) {
      fprintf(stderr, "fuzz: cannot create the context: %s\n", tsr_status_message(s));
      abort();
    }
  }
  return ctx;
}

void fz_exercise_model(tsr_model_t *m, unsigned flags) {
  tsr_model_config_t c;
  tsr_model_config(m, &c);
  int32_t toks[64];
  size_t n = 0;
  fz_ignore(tsr_model_tokenize(m, "Once upon a time, \xc3\xa9t\xc3\xa9!", true, false, toks,
                               sizeof toks / sizeof toks[0], &n));
  for (size_t i = 0; i < n; i++)
    if (toks[i] < 0 || toks[i] >= c.vocab_size) {
      fprintf(stderr, "fuzz: tokenizer returned id %d outside [0, %d)\n", toks[i],
              c.vocab_size);
      abort();
    }

  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.max_seq = c.seq_len < 8 ? c.seq_len : 8;
  so.max_batch_rows = 1;
  if (flags & 1) so.precision = TSR_PRECISION_INT8;
  else if (flags & 4) so.precision = flags & 8 ? TSR_PRECISION_BF16 : TSR_PRECISION_FP16;
  if (flags & 16) so.kv_type = TSR_KV_Q8;
  if (flags & 2) {
    so.attn.kind = TSR_ATTN_DENSE;
    so.attn.block = 4;
  }
  tsr_session_t *sess = NULL;
  tsr_status_t s = tsr_session_create(m, &so, &sess);
  if (s) {
    tsr_status_free(s);
    return;
  }
  int32_t tok = tsr_model_bos(m);
  if (tok < 0 || tok >= c.vocab_size) tok = 0;
  const float *logits = NULL;
  s = tsr_session_eval(sess, &tok, 1, &logits);
  if (!s) {
    if (!logits) {
      fprintf(stderr, "fuzz: eval succeeded without logits\n");
      abort();
    }
    int32_t best = 0;
    for (int32_t i = 1; i < c.vocab_size; i++)
      if (logits[i] > logits[best]) best = i;
    const char *piece = tsr_model_token_piece(m, tok, best);
    if (!piece) {
      fprintf(stderr, "fuzz: no piece for token %d of %d\n", best, c.vocab_size);
      abort();
    }
  }
  tsr_status_free(s);
  tsr_session_destroy(sess);
}

uint8_t *fz_llama2c_tokenizer(int32_t vocab_size, size_t *size) {
  const uint32_t max_len = 8;
  uint8_t *buf = malloc(4 + (size_t)vocab_size * (8 + max_len));
  if (!buf) return NULL;
  size_t at = 0;
  memcpy(buf, &max_len, 4);
  at = 4;
  const bool bytes = vocab_size >= 259 + 8;
  for (int32_t i = 0; i < vocab_size; i++) {
    char piece[16];
    if (i == 0) snprintf(piece, sizeof piece, "<unk>");
    else if (i == 1) snprintf(piece, sizeof piece, "\n<s>\n");
    else if (i == 2) snprintf(piece, sizeof piece, "\n</s>\n");
    else if (bytes && i < 259) snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
    else if (i == (bytes ? 259 : 3)) snprintf(piece, sizeof piece, " ");
    else snprintf(piece, sizeof piece, "%c%d", 'a' + i % 26, i / 26);
    float score = (float)-i;
    int32_t len = (int32_t)strlen(piece);
    memcpy(buf + at, &score, 4);
    memcpy(buf + at + 4, &len, 4);
    memcpy(buf + at + 8, piece, (size_t)len);
    at += 8 + (size_t)len;
  }
  *size = at;
  return buf;
}

tsr_model_t *fz_tiny_model(const char *who, int32_t seq_len) {
  char path[] = "/tmp/tsr-fuzz-model-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) abort();
  tsr_gen_params_t p;
  tsr_model_t *m = NULL;
  tsr_status_t s = tsr_gen_preset("stories260K", &p);
  if (!s) {
    p.dim = 16;
    p.hidden_dim = 32;
    p.n_layers = 1;
    p.n_heads = 2;
    p.n_kv_heads = 1;
    p.vocab_size = 600;
    p.seq_len = seq_len;
    p.type = TSR_DTYPE_F16;
    s = tsr_gen_model_write(path, &p);
  }
  if (!s) s = tsr_model_load(fz_context(), path, NULL, &m);
  unlink(path);
  close(fd);
  if (s) {
    fprintf(stderr, "%s: the generated model: %s\n", who, tsr_status_message(s));
    abort();
  }
  return m;
}
