/*
 * tokenizer.c - SentencePiece-style BPE over a llama vocabulary, as llama2.c
 * runs it: a dummy-prefix space, one token per UTF-8 code point (bytes as
 * <0xXX> tokens when the code point is not in the vocabulary), then greedy
 * merges of the adjacent pair whose merged piece has the highest score.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* qsort/bsearch comparators need the vocabulary; pass it through a pair. */
typedef struct {
  const char *str;
  int32_t id;
} piece_key_t;

static const tsr_vocab_t *sort_vocab; /* only during tsr_tokenizer_init's qsort */

static int cmp_ids(const void *a, const void *b) {
  int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
  int c = strcmp(sort_vocab->pieces[ia], sort_vocab->pieces[ib]);
  return c ? c : (ia > ib) - (ia < ib);
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

tsr_status_t tsr_tokenizer_init(tsr_tokenizer_t *t, const tsr_vocab_t *vocab) {
  memset(t, 0, sizeof(*t));
  if (!vocab || vocab->n <= 0 || !vocab->pieces || !vocab->scores)
    return TSR_ERR(INVALID_ARGUMENT, "tokenizer: empty vocabulary");
  t->vocab = vocab;
  t->sorted = malloc(sizeof(int32_t) * (size_t)vocab->n);
  if (!t->sorted) return TSR_ERR(RESOURCE_EXHAUSTED, "tokenizer: %d ids", vocab->n);
  for (int32_t i = 0; i < vocab->n; i++) t->sorted[i] = i;
  pthread_mutex_lock(&sort_lock);
  sort_vocab = vocab;
  qsort(t->sorted, (size_t)vocab->n, sizeof(int32_t), cmp_ids);
  sort_vocab = NULL;
  pthread_mutex_unlock(&sort_lock);
  t->byte_base = -1;
  for (int i = 0; i < 256; i++) {
    t->byte_pieces[i][0] = (char)i;
    t->byte_pieces[i][1] = '\0';
  }
  /* Byte tokens must be 256 consecutive ids <0x00>..<0xFF> to be usable as
   * a fallback; otherwise bytes that match no piece become <unk>. */
  for (int32_t i = 0; i + 255 < vocab->n; i++) {
    if (strcmp(vocab->pieces[i], "<0x00>") != 0) continue;
    bool ok = true;
    char want[8];
    for (int b = 1; b < 256 && ok; b++) {
      snprintf(want, sizeof want, "<0x%02X>", b);
      ok = strcmp(vocab->pieces[i + b], want) == 0;
    }
    if (ok) t->byte_base = i;
    break;
  }
  return TSR_OK;
}

void tsr_tokenizer_free(tsr_tokenizer_t *t) {
  if (!t) return;
  free(t->sorted);
  t->sorted = NULL;
}

/* Id of the piece equal to s[0..len), or -1. */
static int32_t lookup(const tsr_tokenizer_t *t, const char *s, size_t len) {
  int32_t lo = 0, hi = t->vocab->n - 1;
  while (lo <= hi) {
    int32_t mid = lo + (hi - lo) / 2;
    const char *p = t->vocab->pieces[t->sorted[mid]];
    int c = strncmp(p, s, len);
    if (c == 0 && p[len] != '\0') c = 1; /* p is longer: p > s */
    if (c == 0) {
      /* Several ids may share a piece; take the smallest, as a linear scan
       * of the vocabulary would. */
      while (mid > 0) {
        const char *q = t->vocab->pieces[t->sorted[mid - 1]];
        if (strncmp(q, s, len) != 0 || q[len] != '\0') break;
        mid--;
      }
      return t->sorted[mid];
    }
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* The token of piece(a) + piece(b), or -1 (also when it is longer than any
 * piece). `merge` holds 2 * max_piece_len + 1 bytes. */
static int32_t pair_id(const tsr_tokenizer_t *t, int32_t a, int32_t b, char *merge) {
  const tsr_vocab_t *v = t->vocab;
  const char *pa = v->pieces[a], *pb = v->pieces[b];
  const size_t la = strlen(pa), lb = strlen(pb);
  if (la + lb > (size_t)v->max_piece_len * 2) return -1;
  memcpy(merge, pa, la);
  memcpy(merge + la, pb, lb);
  return lookup(t, merge, la + lb);
}

tsr_status_t tsr_tokenizer_encode(const tsr_tokenizer_t *t, const char *text, bool bos,
                                  bool eos, int32_t *tokens, size_t cap, size_t *n_out) {
  *n_out = 0;
  if (!text) return TSR_ERR(INVALID_ARGUMENT, "tokenize: text is NULL");
  const tsr_vocab_t *v = t->vocab;
  size_t text_len = strlen(text);
  /* Worst case: BOS + prefix + one token per byte + EOS. */
  size_t worst = text_len + 3;
  int32_t *buf = malloc(sizeof(int32_t) * worst);
  int32_t *pair = malloc(sizeof(int32_t) * worst);
  char *merge = malloc((size_t)v->max_piece_len * 2 + 3);
  if (!buf || !pair || !merge) {
    free(buf);
    free(pair);
    free(merge);
    return TSR_ERR(RESOURCE_EXHAUSTED, "tokenize: %zu bytes of text", text_len);
  }
  size_t n = 0;
  if (bos) buf[n++] = v->bos;
  if (text[0] != '\0') {
    int32_t sp = lookup(t, " ", 1);
    if (sp >= 0) buf[n++] = sp;
  }
  /* One token per UTF-8 code point (continuation bytes 10xxxxxx join the
   * code point, at most 4 bytes), with byte fallback. */
  for (size_t i = 0; i < text_len;) {
    size_t len = 1;
    while (i + len < text_len && len < 4 && ((unsigned char)text[i + len] & 0xC0) == 0x80)
      len++;
    int32_t id = lookup(t, text + i, len);
    if (id >= 0) {
      buf[n++] = id;
    } else {
      for (size_t b = 0; b < len; b++)
        buf[n++] = t->byte_base >= 0 ? t->byte_base + (unsigned char)text[i + b] : v->unk;
    }
    i += len;
  }
  /* Merge the best-scoring adjacent pair until none merges (the first one
   * on ties). The merged token of each adjacent pair is looked up once and
   * kept (pair[i]: of buf[i], buf[i+1]; -1 if the vocabulary lacks it);
   * a merge looks up only the two pairs it changes. */
  for (size_t i = 0; i + 1 < n; i++) pair[i] = pair_id(t, buf[i], buf[i + 1], merge);
  for (;;) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    size_t best_idx = 0;
    for (size_t i = 0; i + 1 < n; i++) {
      const int32_t id = pair[i];
      if (id >= 0 && v->scores[id] > best_score) {
        best_score = v->scores[id];
        best_id = id;
        best_idx = i;
      }
    }
    if (best_id < 0) break;
    buf[best_idx] = best_id;
    memmove(buf + best_idx + 1, buf + best_idx + 2, sizeof(int32_t) * (n - best_idx - 2));
    memmove(pair + best_idx + 1, pair + best_idx + 2, sizeof(int32_t) * (n - best_idx - 2));
    n--;
    if (best_idx > 0) pair[best_idx - 1] = pair_id(t, buf[best_idx - 1], buf[best_idx], merge);
    if (best_idx + 1 < n) pair[best_idx] = pair_id(t, buf[best_idx], buf[best_idx + 1], merge);
  }
  free(pair);
  if (eos) buf[n++] = v->eos;
  free(merge);
  if (n > cap) {
    free(buf);
    return TSR_ERR(OUT_OF_RANGE, "tokenize: %zu tokens do not fit in a buffer of %zu", n,
                   cap);
  }
  memcpy(tokens, buf, sizeof(int32_t) * n);
  free(buf);
  *n_out = n;
  return TSR_OK;
}

const char *tsr_tokenizer_piece(const tsr_tokenizer_t *t, int32_t prev, int32_t token) {
  if (token < 0 || token >= t->vocab->n) return NULL;
  const char *piece = t->vocab->pieces[token];
  /* SentencePiece drops the dummy-prefix space of the first word. */
  if (prev == t->vocab->bos && piece[0] == ' ') piece++;
  if (t->byte_base >= 0 && token >= t->byte_base && token < t->byte_base + 256)
    return t->byte_pieces[token - t->byte_base];
  return piece;
}
