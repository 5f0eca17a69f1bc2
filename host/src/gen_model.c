/* gen_model.c - synthetic llama models written as standard GGUF v3.
 *
 * The project ships no model weights; demos and benchmarks generate them.
 * A generated file is an ordinary llama GGUF (llama.cpp loads it): the
 * standard general.* / llama.* / tokenizer.ggml.* keys, a SentencePiece-style
 * vocabulary and deterministic random weights.
 *
 * Weights. Tensor NAME gets its own splitmix64 stream seeded with
 * seed ^ fnv1a64(NAME); element i (row-major, ne[0] contiguous) is
 *     u = splitmix64() >> 40                      (24 random bits)
 *     x = (u * 2^-24 * 2 - 1) * sqrt(3 / fan_in)  (fan_in = ne[0])
 * i.e. uniform with standard deviation 1/sqrt(fan_in), which keeps
 * activations near unit scale through the layers. Norm weights are 1.0.
 * 2-D weights are stored as F32, F16 or Q8_0; norms always F32. A Q8_0
 * tensor whose rows are not a multiple of 32 (stories260K's hidden_dim 172)
 * is stored as F16 instead, as llama.cpp's quantizer also falls back.
 * The classifier is tied to token_embd.weight (no output.weight).
 *
 * Presets (dim, hidden, layers, heads, kv heads, vocab, seq):
 *   stories260K   64,  172,  5,  8, 4,   512,  512   llama2.c's TinyStories shapes
 *   stories15M   288,  768,  6,  6, 6, 32000,  256
 *   stories110M  768, 2048, 12, 12, 12, 32000, 1024
 *   large       2048, 5632,  8, 32, 4, 32000, 2048   TinyLlama-1.1B's layer shape
 *               with 8 of its 22 layers: ~0.42B parameters (tied classifier), so
 *               the big-matrix paths see realistic sizes while the file still
 *               generates in seconds (Q8_0: ~0.45 GB, F32: ~1.7 GB).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_file.h"
#include "base/splitmix.h"
#include "base/status.h"

static const struct {
  const char *name;
  int32_t dim, hidden, layers, heads, kv_heads, vocab, seq, experts, experts_used;
} presets[] = {
    {"stories260K", 64, 172, 5, 8, 4, 512, 512, 0, 0},
    {"stories15M", 288, 768, 6, 6, 6, 32000, 256, 0, 0},
    {"stories110M", 768, 2048, 12, 12, 12, 32000, 1024, 0, 0},
    {"large", 2048, 5632, 8, 32, 4, 32000, 2048, 0, 0},
    /* Mixture of experts: stories shapes, 4 experts of 96 (top 2) and 8 of
     * 768 (top 2: a token computes 2/8 of the FFN weights) */
    {"moe260K", 64, 96, 3, 8, 4, 512, 512, 4, 2},
    {"moe15M", 288, 768, 6, 6, 6, 32000, 256, 8, 2},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

/* Byte tokens and the three specials come first, as in llama's vocab. */
#define GEN_MIN_VOCAB 259
#define GEN_MAX_VOCAB (1 << 18)

tsr_status_t tsr_gen_preset(const char *name, tsr_gen_params_t *p) {
  memset(p, 0, sizeof *p);
  for (size_t i = 0; i < N_PRESETS; i++) {
    if (name && strcmp(name, presets[i].name) == 0) {
      snprintf(p->preset, sizeof p->preset, "%s", presets[i].name);
      p->dim = presets[i].dim;
      p->hidden_dim = presets[i].hidden;
      p->n_layers = presets[i].layers;
      p->n_heads = presets[i].heads;
      p->n_kv_heads = presets[i].kv_heads;
      p->vocab_size = presets[i].vocab;
      p->seq_len = presets[i].seq;
      p->n_experts = presets[i].experts;
      p->n_experts_used = presets[i].experts_used;
      p->type = TSR_DTYPE_F32;
      p->seed = 42;
      return TSR_OK;
    }
  }
  char known[160] = "";
  for (size_t i = 0; i < N_PRESETS; i++) {
    strcat(known, i ? ", " : "");
    strcat(known, presets[i].name);
  }
  return TSR_ERR(NOT_FOUND, "unknown preset '%s' (known: %s)", name ? name : "(null)", known);
}

/* ---- random weights ---- */


static uint64_t fnv1a64(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

void tsr_q8_0_quantize_block(const float *x, uint8_t *out) {
  float amax = 0.0f;
  for (int i = 0; i < TSR_Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t h = tsr_f32_to_f16(d);
  out[0] = (uint8_t)h;
  out[1] = (uint8_t)(h >> 8);
  for (int i = 0; i < TSR_Q8_0_BLOCK; i++) {
    float q = roundf(x[i] * id);
    q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
    out[2 + i] = (uint8_t)(int8_t)q;
  }
}

/* ---- vocabulary ---- */

typedef struct vocab_builder {
  char **pieces; /* GGUF form: U+2581 for spaces */
  float *scores;
  int32_t *types;
  int32_t n, cap;
  int32_t *table; /* open addressing: index + 1, 0 = empty */
  uint32_t mask;
  int32_t first_normal; /* scores count down from here */
} vocab_builder_t;

static bool vb_has(const vocab_builder_t *b, const char *s) {
  for (uint32_t h = (uint32_t)fnv1a64(s) & b->mask;; h = (h + 1) & b->mask) {
    if (!b->table[h]) return false;
    if (strcmp(b->pieces[b->table[h] - 1], s) == 0) return true;
  }
}

/* Adds `s` unless present or full. Returns false only when out of memory. */
static bool vb_add(vocab_builder_t *b, const char *s, int32_t type) {
  if (b->n >= b->cap || vb_has(b, s)) return true;
  char *copy = strdup(s);
  if (!copy) return false;
  int32_t i = b->n++;
  b->pieces[i] = copy;
  b->types[i] = type;
  /* Merges rank by score: earlier (shorter, commoner) pieces merge first,
   * with the -(id - first) scores llama2.c's tok512 uses. */
  b->scores[i] = type == TSR_TOKEN_TYPE_NORMAL ? (float)-(i - b->first_normal) : 0.0f;
  uint32_t h = (uint32_t)fnv1a64(s) & b->mask;
  while (b->table[h]) h = (h + 1) & b->mask;
  b->table[h] = i + 1;
  return true;
}

#define SPACE "\xe2\x96\x81"

/* Adds "▁w[0]", "▁w[0..1]", ... "▁w": each piece is a merge of the previous
 * one and a single character, so BPE can reach the whole word. */
static bool vb_add_word(vocab_builder_t *b, const char *w, bool space) {
  char buf[64];
  size_t base = 0;
  if (space) {
    memcpy(buf, SPACE, 3);
    base = 3;
  }
  size_t n = strlen(w);
  if (n + base >= sizeof buf) n = sizeof buf - base - 1;
  for (size_t k = 1; k <= n; k++) {
    memcpy(buf + base, w, k);
    buf[base + k] = '\0';
    /* Single letters without the space marker are already in the table. */
    if (!space && k == 1) continue;
    if (!vb_add(b, buf, TSR_TOKEN_TYPE_NORMAL)) return false;
  }
  return true;
}

static const char *const common_words[] = {
    "the", "and", "was", "to", "a", "he", "she", "they", "it", "of", "in", "on", "her",
    "his", "said", "with", "Lily", "Tim", "Ben", "Sue", "day", "one", "time", "upon",
    "Once", "once", "there", "little", "big", "happy", "sad", "very", "play", "played",
    "went", "saw", "had", "have", "not", "mom", "dad", "friend", "friends", "park",
    "tree", "dog", "cat", "bird", "ball", "toy", "box", "home", "house", "sun", "sky",
    "run", "ran", "jump", "look", "looked", "wanted", "want", "help", "helped", "good",
    "fun", "liked", "like", "love", "loved", "together", "after", "that", "then",
    "when", "what", "but", "so", "all", "be", "is", "are", "were", "you", "we", "I",
    "can", "could", "would", "did", "do", "made", "make", "new", "old", "red", "blue",
    "green", "small", "girl", "boy", "named", "lived", "every", "found", "from", "up",
    "down", "out", "into", "back", "too", "again", "water", "car", "book", "food",
    "eat", "ate", "cake", "tired", "smiled", "laughed", "cried", "thought", "knew",
    "because", "careful", "learned", "lesson", "important", "share", "nice", "kind",
    "scared", "excited", "surprise", "garden", "flower", "flowers", "tall", "bright",
};
static const char *const common_pieces[] = {
    "er", "in", "ed", "ing", "es", "en", "an", "on", "or", "ar", "at", "ly", "ll", "ou",
    "it", "is", "ow", "ay", "ee", "oo", "ight", "ound", "ake", "ome", "ook", "ind",
};
/* Syllables for filler pieces once the word lists are used up. */
static const char cons[] = "bcdfghjklmnprstvwyz";
static const char vows[] = "aeiou";

static tsr_status_t build_vocab(vocab_builder_t *b, int32_t n) {
  memset(b, 0, sizeof *b);
  uint32_t tsize = 1;
  while (tsize < (uint32_t)n * 2) tsize <<= 1;
  b->cap = n;
  b->mask = tsize - 1;
  b->pieces = calloc((size_t)n, sizeof *b->pieces);
  b->scores = calloc((size_t)n, sizeof *b->scores);
  b->types = calloc((size_t)n, sizeof *b->types);
  b->table = calloc(tsize, sizeof *b->table);
  if (!b->pieces || !b->scores || !b->types || !b->table) goto oom;
  bool ok = vb_add(b, "<unk>", TSR_TOKEN_TYPE_UNKNOWN) &&
            vb_add(b, "<s>", TSR_TOKEN_TYPE_CONTROL) && vb_add(b, "</s>", TSR_TOKEN_TYPE_CONTROL);
  for (int i = 0; i < 256 && ok; i++) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", i);
    ok = vb_add(b, buf, TSR_TOKEN_TYPE_BYTE);
  }
  b->first_normal = b->n;
  /* Single characters first: every longer piece is built from them. */
  ok = ok && vb_add(b, SPACE, TSR_TOKEN_TYPE_NORMAL);
  static const char singles[] =
      "etaoinshrdlucmfwypvbgkjqxzTSOLIBHWAMDCEFGJKNPQRUVXYZ0123456789.,!?'\"-:;()";
  for (const char *c = singles; *c && ok; c++) {
    char buf[2] = {*c, 0};
    ok = vb_add(b, buf, TSR_TOKEN_TYPE_NORMAL);
  }
  for (size_t i = 0; i < sizeof common_pieces / sizeof *common_pieces && ok; i++)
    ok = vb_add_word(b, common_pieces[i], false);
  for (size_t i = 0; i < sizeof common_words / sizeof *common_words && ok; i++)
    ok = vb_add_word(b, common_words[i], true);
  /* Filler: pseudo-words of 2, 3, then 4 syllables, with and without the
   * leading space. 95 syllables give ~9e3, ~8.6e5, ~8e7 words: the loop
   * always fills GEN_MAX_VOCAB. */
  const int S = (int)(sizeof cons - 1) * (int)(sizeof vows - 1);
  for (int len = 2; len <= 4 && ok && b->n < n; len++) {
    long total = 1;
    for (int k = 0; k < len; k++) total *= S;
    for (long k = 0; k < total && ok && b->n < n; k++) {
      char w[16];
      long x = k;
      for (int j = 0; j < len; j++, x /= S) {
        int syl = (int)(x % S);
        w[2 * j] = cons[syl / (int)(sizeof vows - 1)];
        w[2 * j + 1] = vows[syl % (int)(sizeof vows - 1)];
      }
      w[2 * len] = '\0';
      ok = vb_add_word(b, w, true) && vb_add_word(b, w, false);
    }
  }
  if (!ok) goto oom;
  if (b->n != n)
    return TSR_ERR(INTERNAL, "vocabulary generator produced %d of %d tokens", b->n, n);
  return TSR_OK;
oom:
  return TSR_ERR(RESOURCE_EXHAUSTED, "out of memory building a %d-token vocabulary", n);
}

static void vocab_builder_free(vocab_builder_t *b) {
  if (b->pieces)
    for (int32_t i = 0; i < b->n; i++) free(b->pieces[i]);
  free(b->pieces);
  free(b->scores);
  free(b->types);
  free(b->table);
  memset(b, 0, sizeof *b);
}

/* ---- the file ---- */

typedef struct gen_tensor {
  char name[64];
  int64_t rows, cols; /* rows of all experts for stacked experts */
  int64_t experts;    /* > 0: a 3-D tensor of that many (rows / experts, cols) */
  uint32_t type;
  bool norm;
} gen_tensor_t;

/* Writes one tensor's data, generated and converted a chunk of rows at a
 * time so memory stays small for the large preset. */
static tsr_status_t write_tensor(tsr_gguf_writer_t *w, FILE *f, const gen_tensor_t *t,
                                 uint64_t seed, const char *path, float *xbuf,
                                 uint8_t *obuf, int64_t chunk_elems) {
  uint64_t s = seed ^ fnv1a64(t->name);
  const float scale = sqrtf(3.0f / (float)t->cols);
  int64_t rows_per = chunk_elems / t->cols;
  if (rows_per < 1) rows_per = 1;
  for (int64_t r0 = 0; r0 < t->rows; r0 += rows_per) {
    int64_t nr = t->rows - r0 < rows_per ? t->rows - r0 : rows_per;
    size_t n = (size_t)(nr * t->cols), nbytes = 0;
    for (size_t i = 0; i < n; i++)
      xbuf[i] = t->norm ? 1.0f
                        : ((float)(tsr_splitmix64(&s) >> 40) * 0x1p-24f * 2.0f - 1.0f) * scale;
    const void *src = xbuf;
    if (t->type == TSR_DTYPE_F32) {
      nbytes = n * 4;
    } else if (t->type == TSR_DTYPE_F16 || t->type == TSR_DTYPE_BF16) {
      const bool bf = t->type == TSR_DTYPE_BF16;
      for (size_t i = 0; i < n; i++) {
        uint16_t h = bf ? tsr_f32_to_bf16(xbuf[i]) : tsr_f32_to_f16(xbuf[i]);
        obuf[2 * i] = (uint8_t)h;
        obuf[2 * i + 1] = (uint8_t)(h >> 8);
      }
      src = obuf;
      nbytes = n * 2;
    } else {
      for (size_t i = 0; i < n / TSR_Q8_0_BLOCK; i++)
        tsr_q8_0_quantize_block(xbuf + i * TSR_Q8_0_BLOCK, obuf + i * TSR_Q8_0_BYTES);
      src = obuf;
      nbytes = n / TSR_Q8_0_BLOCK * TSR_Q8_0_BYTES;
    }
    TSR_RETURN_IF(
        tsr_gguf_writer_tensor_data(w, f, src, nbytes, r0 + nr >= t->rows, path));
  }
  return TSR_OK;
}

static tsr_status_t check_params(const char *path, const tsr_gen_params_t *p,
                                 tsr_model_config_t *c) {
  memset(c, 0, sizeof *c);
  c->dim = p->dim;
  c->hidden_dim = p->hidden_dim;
  c->n_layers = p->n_layers;
  c->n_heads = p->n_heads;
  c->n_kv_heads = p->n_kv_heads;
  c->vocab_size = p->vocab_size;
  c->seq_len = p->seq_len;
  TSR_RETURN_IF(tsr_model_config_check(c, path));
  if (p->vocab_size < GEN_MIN_VOCAB || p->vocab_size > GEN_MAX_VOCAB)
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: vocab_size = %d is outside [%d, %d] (3 special and 256 byte "
                   "tokens come first)",
                   path, p->vocab_size, GEN_MIN_VOCAB, GEN_MAX_VOCAB);
  if (p->n_experts < 0 || p->n_experts == 1 || p->n_experts > TSR_MODEL_MAX_EXPERTS)
    return TSR_ERR(OUT_OF_RANGE, "%s: n_experts = %d is not 0 (dense) or in [2, %d]", path,
                   p->n_experts, TSR_MODEL_MAX_EXPERTS);
  if (p->n_experts && (p->n_experts_used < 1 || p->n_experts_used > p->n_experts))
    return TSR_ERR(OUT_OF_RANGE, "%s: n_experts_used = %d is outside [1, n_experts %d]", path,
                   p->n_experts_used, p->n_experts);
  if (p->type != TSR_DTYPE_F32 && p->type != TSR_DTYPE_F16 && p->type != TSR_DTYPE_BF16 &&
      p->type != TSR_DTYPE_Q8_0)
    return TSR_ERR(INVALID_ARGUMENT, "%s: type %d is not F32, F16, BF16 or Q8_0", path,
                   (int)p->type);
  return TSR_OK;
}

static tsr_status_t write_file(FILE *f, const char *path, const tsr_gen_params_t *p,
                               const tsr_model_config_t *c, const vocab_builder_t *vb,
                               tsr_gguf_writer_t *w) {
  const uint32_t ftype = p->type == TSR_DTYPE_F32   ? TSR_GGUF_FILE_TYPE_ALL_F32
                         : p->type == TSR_DTYPE_F16 ? TSR_GGUF_FILE_TYPE_MOSTLY_F16
                         : p->type == TSR_DTYPE_BF16 ? TSR_GGUF_FILE_TYPE_MOSTLY_BF16
                                                    : TSR_GGUF_FILE_TYPE_MOSTLY_Q8_0;
  tsr_gguf_kv_str(w, "general.architecture", "llama");
  tsr_gguf_kv_str(w, "general.name", p->preset[0] ? p->preset : "tessera-synthetic");
  tsr_gguf_kv_u32(w, "general.alignment", TSR_GGUF_DEFAULT_ALIGNMENT);
  tsr_gguf_kv_u32(w, "general.file_type", ftype);
  tsr_gguf_kv_u32(w, "llama.context_length", (uint32_t)c->seq_len);
  tsr_gguf_kv_u32(w, "llama.embedding_length", (uint32_t)c->dim);
  tsr_gguf_kv_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
  tsr_gguf_kv_u32(w, "llama.block_count", (uint32_t)c->n_layers);
  tsr_gguf_kv_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
  tsr_gguf_kv_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
  tsr_gguf_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  tsr_gguf_kv_f32(w, "llama.rope.freq_base", 10000.0f);
  tsr_gguf_kv_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
  tsr_gguf_kv_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
  if (p->n_experts) {
    tsr_gguf_kv_u32(w, "llama.expert_count", (uint32_t)p->n_experts);
    tsr_gguf_kv_u32(w, "llama.expert_used_count", (uint32_t)p->n_experts_used);
  }
  tsr_gguf_kv_str(w, "tokenizer.ggml.model", "llama");
  tsr_gguf_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)vb->pieces,
                      (uint64_t)vb->n);
  tsr_gguf_kv_arr_f32(w, "tokenizer.ggml.scores", vb->scores, (uint64_t)vb->n);
  tsr_gguf_kv_arr_i32(w, "tokenizer.ggml.token_type", vb->types, (uint64_t)vb->n);
  tsr_gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
  tsr_gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
  tsr_gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
  tsr_gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
  tsr_gguf_kv_bool(w, "tokenizer.ggml.add_eos_token", false);

  const int64_t dim = c->dim, hid = c->hidden_dim, V = c->vocab_size;
  const int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
  const int64_t E = p->n_experts;
  const size_t n_t = 2 + (E ? 10 : 9) * (size_t)c->n_layers;
  gen_tensor_t *ts = calloc(n_t, sizeof *ts);
  if (!ts) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
  size_t k = 0;
  for (int32_t l = -1; l < c->n_layers; l++) {
    /* l = -1: the tensors outside the blocks, then each block in order. */
    static const struct {
      const char *suffix;
      int rows, cols; /* 0 = 1, 1 = dim, 2 = kv_dim, 3 = hidden, 4 = vocab */
    } global[] = {{"token_embd", 4, 1}, {"output_norm", 0, 1}},
      block[] = {{"attn_norm", 0, 1},   {"attn_q", 1, 1},   {"attn_k", 2, 1},
                 {"attn_v", 2, 1},      {"attn_output", 1, 1}, {"ffn_norm", 0, 1},
                 {"ffn_gate", 3, 1},    {"ffn_down", 1, 3}, {"ffn_up", 3, 1}},
      moe[] = {{"attn_norm", 0, 1},      {"attn_q", 1, 1},        {"attn_k", 2, 1},
               {"attn_v", 2, 1},         {"attn_output", 1, 1},   {"ffn_norm", 0, 1},
               {"ffn_gate_inp", 5, 1},   {"ffn_gate_exps", 3, 1}, {"ffn_down_exps", 1, 3},
               {"ffn_up_exps", 3, 1}};
    const int64_t size_of[6] = {1, dim, kv_dim, hid, V, E};
    const size_t n_here = l < 0 ? 2 : E ? 10 : 9;
    for (size_t j = 0; j < n_here; j++, k++) {
      const char *suffix = l < 0 ? global[j].suffix : E ? moe[j].suffix : block[j].suffix;
      const int ri = l < 0 ? global[j].rows : E ? moe[j].rows : block[j].rows;
      const int ci = l < 0 ? global[j].cols : E ? moe[j].cols : block[j].cols;
      if (l < 0)
        snprintf(ts[k].name, sizeof ts[k].name, "%s.weight", suffix);
      else
        snprintf(ts[k].name, sizeof ts[k].name, "blk.%d.%s.weight", l, suffix);
      ts[k].rows = size_of[ri];
      ts[k].cols = size_of[ci];
      if (E && l >= 0 && j >= 7) { /* the stacked experts */
        ts[k].experts = E;
        ts[k].rows *= E;
      }
      ts[k].norm = ri == 0;
      ts[k].type = ts[k].norm ? TSR_DTYPE_F32 : (uint32_t)p->type;
      if (ts[k].type == TSR_DTYPE_Q8_0 && ts[k].cols % TSR_Q8_0_BLOCK)
        ts[k].type = TSR_DTYPE_F16;
    }
  }
  int64_t max_cols = 0;
  for (size_t i = 0; i < n_t; i++) {
    int64_t ne[3] = {ts[i].cols, ts[i].rows, 1};
    int nd = ts[i].norm ? 1 : 2;
    if (ts[i].experts) ne[1] = ts[i].rows / ts[i].experts, ne[2] = ts[i].experts, nd = 3;
    tsr_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, nd, ne);
    if (ts[i].cols > max_cols) max_cols = ts[i].cols;
  }
  const int64_t chunk = max_cols > (1 << 16) ? max_cols : (1 << 16);
  float *xbuf = malloc((size_t)chunk * sizeof *xbuf);
  uint8_t *obuf = malloc((size_t)chunk * 2);
  tsr_status_t s = xbuf && obuf ? tsr_gguf_writer_begin(w, f, path)
                                : TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", path);
  for (size_t i = 0; i < n_t && !s; i++)
    s = write_tensor(w, f, &ts[i], p->seed, path, xbuf, obuf, chunk);
  free(xbuf);
  free(obuf);
  free(ts);
  return s;
}

tsr_status_t tsr_gen_model_write(const char *path, const tsr_gen_params_t *p) {
  if (!path || !p) return TSR_ERR(INVALID_ARGUMENT, "gen-model: path and params are required");
  tsr_model_config_t c;
  TSR_RETURN_IF(check_params(path, p, &c));
  vocab_builder_t vb;
  tsr_status_t s = build_vocab(&vb, p->vocab_size);
  if (s) {
    vocab_builder_free(&vb);
    return s;
  }
  FILE *f = fopen(path, "wb");
  if (!f) {
    vocab_builder_free(&vb);
    return TSR_ERR(IO, "%s: cannot create: %m", path);
  }
  /* Large sequential writes: a big stdio buffer saves many syscalls. */
  setvbuf(f, NULL, _IOFBF, 1 << 20);
  tsr_gguf_writer_t w;
  tsr_gguf_writer_init(&w);
  s = write_file(f, path, p, &c, &vb, &w);
  if (fclose(f) != 0 && !s) s = TSR_ERR(IO, "%s: write failed on close: %m", path);
  tsr_gguf_writer_free(&w);
  vocab_builder_free(&vb);
  /* Never leave a truncated model behind. */
  if (s) remove(path);
  return s;
}
