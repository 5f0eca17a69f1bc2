/*
 * model_file.h - what the model loaders (llama2.c .bin, GGUF) produce.
 *
 * Internal header. A loader parses and validates a file and describes its
 * tensors as views into the memory-mapped file (no copy). Converting F16 or
 * Q8_0 views to fp32, and quantizing to int8, is the model's job (model.c),
 * not the loader's.
 */
#ifndef TSR_MODEL_FILE_H
#define TSR_MODEL_FILE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "tessera.h"

/* Tensor element types; values are GGML's type ids. */
typedef enum tsr_dtype {
  TSR_DTYPE_F32 = 0,
  TSR_DTYPE_F16 = 1,
  TSR_DTYPE_Q8_0 = 8, /* blocks of 32: fp16 scale d, then 32 int8 */
  TSR_DTYPE_BF16 = 30,
} tsr_dtype_t;

const char *tsr_dtype_name(tsr_dtype_t t);

/* A read-only memory-mapped file, and its descriptor kept open (has_fd) for
 * rows read one at a time with pread, which puts no page in the process's
 * resident set (a fault on the mapping maps its neighbours too). */
typedef struct tsr_mapped_file {
  const uint8_t *data;
  size_t size;
  int fd;
  bool has_fd;
} tsr_mapped_file_t;

/* Maps `path` read-only. NOT_FOUND / IO statuses name the path. */
tsr_status_t tsr_file_map(const char *path, tsr_mapped_file_t *out);
void tsr_file_unmap(tsr_mapped_file_t *f);
/* Reads the n bytes at `at` (inside the mapping) with pread into dst; false
 * when the file has no descriptor, the range is outside it, or the read
 * fails (the caller reads the mapping instead). */
bool tsr_file_pread(const tsr_mapped_file_t *f, const void *at, size_t n, void *dst);

/* A matrix (rows x cols, row-major, a row is contiguous) or vector
 * (rows == 1) inside the mapped file. For Q8_0, cols % 32 == 0. */
typedef struct tsr_tensor_view {
  tsr_dtype_t type;
  int64_t rows, cols;
  const void *data; /* borrowed from the mapping */
} tsr_tensor_view_t;

/* One row of `tsr info`'s tensor table. */
typedef struct tsr_tensor_info {
  char name[96];
  tsr_dtype_t type;
  int n_dims;
  int64_t ne[4];    /* GGUF order: ne[0] is the contiguous dimension */
  uint64_t offset;  /* byte offset of the data in the file */
  uint64_t nbytes;
} tsr_tensor_info_t;

/* Per-layer weights. Shapes (rows, cols) in the comments. */
typedef struct tsr_layer_views {
  tsr_tensor_view_t rms_att; /* (1, dim)                       */
  tsr_tensor_view_t wq;      /* (n_heads*head_dim, dim)        */
  tsr_tensor_view_t wk;      /* (n_kv_heads*head_dim, dim)     */
  tsr_tensor_view_t wv;      /* (n_kv_heads*head_dim, dim)     */
  tsr_tensor_view_t wo;      /* (dim, n_heads*head_dim)        */
  tsr_tensor_view_t rms_ffn; /* (1, dim)                       */
  tsr_tensor_view_t w1;      /* gate (hidden_dim, dim)         */
  tsr_tensor_view_t w2;      /* down (dim, hidden_dim)         */
  tsr_tensor_view_t w3;      /* up   (hidden_dim, dim)         */
  /* Mixture of experts (n_experts > 0): w1, w2, w3 hold the experts
   * stacked, expert e's rows at [e * rows, (e + 1) * rows) of each
   * (n_experts * hidden_dim or n_experts * dim rows); the router: */
  tsr_tensor_view_t router;  /* (n_experts, dim)               */
} tsr_layer_views_t;

/* The vocabulary, in llama2.c's form: pieces with "\xe2\x96\x81" already
 * turned into ' ', byte tokens kept as "<0xXX>", BOS/EOS pieces as in the
 * source file. */
typedef struct tsr_vocab {
  int32_t n;
  char **pieces;   /* n NUL-terminated strings (owned) */
  float *scores;   /* n merge scores (owned)           */
  int32_t max_piece_len;
  int32_t bos, eos, unk;
} tsr_vocab_t;

void tsr_vocab_free(tsr_vocab_t *v);

/* A parsed model file. */
typedef struct tsr_model_file {
  tsr_model_config_t config;
  tsr_tensor_view_t tok_embd;  /* (vocab, dim) */
  tsr_tensor_view_t rms_final; /* (1, dim)     */
  tsr_tensor_view_t output;    /* (vocab, dim); same data as tok_embd when shared */
  tsr_layer_views_t *layers;   /* n_layers entries (owned) */
  tsr_vocab_t vocab;
  tsr_tensor_info_t *tensors;  /* table for `tessera info` (owned) */
  int32_t n_tensors;
  tsr_mapped_file_t file;      /* keeps the views alive */
  uint32_t gguf_version;       /* 0 for llama2.c */
  uint64_t gguf_alignment;
  /* pruned weights (`tessera prune`): the pattern ("2:4", "block:RxC") and
   * the fraction of weights kept, from tessera.prune.*; "" if none */
  char prune_pattern[32];
  float prune_density;
} tsr_model_file_t;

/* Opens a model; the format is decided by magic ("GGUF" or a llama2.c
 * header). `tokenizer_path` is required for llama2.c files and, if given for
 * a GGUF file, replaces the embedded vocabulary. On error every resource is
 * released and the status names the field and byte offset. */
tsr_status_t tsr_model_file_open(const char *path, const char *tokenizer_path,
                                 tsr_model_file_t **out);
void tsr_model_file_close(tsr_model_file_t *mf);

/* Parsers over memory (used by tsr_model_file_open and by the tests, which
 * feed them mutated buffers). `what` names the buffer in messages. The
 * returned views point into `data`, which must outlive *out. */
tsr_status_t tsr_llama2c_parse(const uint8_t *data, size_t size, const char *what,
                               tsr_model_file_t *out);
tsr_status_t tsr_gguf_parse(const uint8_t *data, size_t size, const char *what,
                            tsr_model_file_t *out);
tsr_status_t tsr_llama2c_vocab_parse(const uint8_t *data, size_t size,
                                     int32_t vocab_size, const char *what,
                                     tsr_vocab_t *out);

/* First bytes of a GGUF file (anything else is tried as llama2.c). */
#define TSR_GGUF_MAGIC "GGUF"

/* ---- limits shared by both formats ---- */

/* Experts per layer at most. */
#define TSR_MODEL_MAX_EXPERTS 256

/* Any single dimension above this is treated as corrupt, not as a model. */
#define TSR_MODEL_MAX_DIM (1 << 20)
/* Longest tensor name (tsr_tensor_info_t.name holds 95 chars + NUL). */
#define TSR_MODEL_MAX_NAME 95

/* ---- checks shared by the parsers ---- */

/* Validates a config's dimensions (positive, bounded, divisible); fills
 * head_dim. `what` prefixes the message; fields are named as in the config. */
tsr_status_t tsr_model_config_check(tsr_model_config_t *c, const char *what);
/* Bytes of a tensor of `type` with `n` elements (Q8_0: n % 32 == 0). Returns
 * false on overflow or an unsupported type. */
bool tsr_dtype_nbytes(tsr_dtype_t type, uint64_t n, uint64_t *out);
/* Whether `t` (a raw GGML type id) is one the loaders support. */
bool tsr_dtype_supported(uint32_t t);
/* Frees what a parser allocated in `mf` (views, table, vocabulary) but not
 * the mapping nor `mf` itself; zeroes those fields. */
void tsr_model_file_clear(tsr_model_file_t *mf);
/* Replaces every "\xe2\x96\x81" (U+2581) of `s` (len bytes) with ' ' and
 * returns a new NUL-terminated string, or NULL when out of memory. */
char *tsr_piece_from_spm(const uint8_t *s, size_t len);

/* ---- synthetic models (tessera gen-model) ---- */

typedef struct tsr_gen_params {
  char preset[32];
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  tsr_dtype_t type; /* F32, F16, BF16 or Q8_0 for the 2-D weights */
  uint64_t seed;
  /* > 0: a Mixture-of-Experts FFN of n_experts experts of hidden_dim each,
   * n_experts_used per token (Mixtral's tensors and keys) */
  int32_t n_experts, n_experts_used;
} tsr_gen_params_t;

/* Fills *p from a preset name: "stories260K", "stories15M", "stories110M",
 * "large", and the MoE "moe260K", "moe15M" (see gen_model.c). NOT_FOUND lists the known names. */
tsr_status_t tsr_gen_preset(const char *name, tsr_gen_params_t *p);
/* Writes a standard llama GGUF v3 file with deterministic random weights and
 * a llama (SentencePiece-style) vocabulary. Validates dimensions. */
tsr_status_t tsr_gen_model_write(const char *path, const tsr_gen_params_t *p);

#endif /* TSR_MODEL_FILE_H */
