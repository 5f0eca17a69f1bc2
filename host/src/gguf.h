/*
 * gguf.h - internals shared by the model-file parsers (llama2c.c, gguf.c,
 * model_file.c), the GGUF writer (gen_model.c) and their tests.
 *
 * Internal header. It holds:
 *   - GGUF constants (value types, key names);
 *   - a streaming GGUF writer (metadata built in memory, tensor data written
 *     in order), which does not validate: tests use it to write broken files;
 *   - (fp16 conversions and the Q8_0 block layout are in compute/dtype.h).
 */
#ifndef TSR_GGUF_H
#define TSR_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/reader.h"
#include "base/status.h"
#include "compute/dtype.h"
#include "model_file.h"

/* ---- GGUF ---- */

#define TSR_GGUF_VERSION 3
#define TSR_GGUF_DEFAULT_ALIGNMENT 32

typedef enum tsr_gguf_type {
  TSR_GGUF_U8 = 0,
  TSR_GGUF_I8 = 1,
  TSR_GGUF_U16 = 2,
  TSR_GGUF_I16 = 3,
  TSR_GGUF_U32 = 4,
  TSR_GGUF_I32 = 5,
  TSR_GGUF_F32 = 6,
  TSR_GGUF_BOOL = 7,
  TSR_GGUF_STRING = 8,
  TSR_GGUF_ARRAY = 9,
  TSR_GGUF_U64 = 10,
  TSR_GGUF_I64 = 11,
  TSR_GGUF_F64 = 12,
  TSR_GGUF_TYPE_COUNT = 13,
} tsr_gguf_type_t;

/* llama.cpp's `general.file_type` values for the types we write. */
#define TSR_GGUF_FILE_TYPE_ALL_F32 0
#define TSR_GGUF_FILE_TYPE_MOSTLY_F16 1
#define TSR_GGUF_FILE_TYPE_MOSTLY_Q8_0 7
#define TSR_GGUF_FILE_TYPE_MOSTLY_BF16 32

/* SentencePiece token types (tokenizer.ggml.token_type). */
#define TSR_TOKEN_TYPE_NORMAL 1
#define TSR_TOKEN_TYPE_UNKNOWN 2
#define TSR_TOKEN_TYPE_CONTROL 3
#define TSR_TOKEN_TYPE_BYTE 6

/* Streaming writer. Usage: init; add KVs and tensor infos in file order;
 * tsr_gguf_writer_begin() writes header, KVs, infos and padding; then one
 * tsr_gguf_writer_tensor_data() per tensor in the order they were added
 * (each may be split in several calls: pass `last` on the final piece);
 * free. Offsets are assigned at tsr_gguf_writer_add_tensor(). */
typedef struct tsr_gguf_writer {
  uint8_t *kv;          /* serialized KV pairs (owned) */
  size_t kv_len, kv_cap;
  uint8_t *ti;          /* serialized tensor infos (owned) */
  size_t ti_len, ti_cap;
  uint64_t n_kv, n_tensors;
  uint32_t version;     /* written as is (tests write bad versions) */
  uint64_t alignment;   /* padding unit of the data section */
  uint64_t data_size;   /* data section bytes assigned so far */
  uint64_t written;     /* data bytes written so far by tensor_data */
  bool oom;             /* a growth failed; begin() reports it */
} tsr_gguf_writer_t;

void tsr_gguf_writer_init(tsr_gguf_writer_t *w);
void tsr_gguf_writer_free(tsr_gguf_writer_t *w);
void tsr_gguf_kv_u32(tsr_gguf_writer_t *w, const char *key, uint32_t v);
void tsr_gguf_kv_i32(tsr_gguf_writer_t *w, const char *key, int32_t v);
void tsr_gguf_kv_f32(tsr_gguf_writer_t *w, const char *key, float v);
void tsr_gguf_kv_bool(tsr_gguf_writer_t *w, const char *key, bool v);
void tsr_gguf_kv_str(tsr_gguf_writer_t *w, const char *key, const char *v);
/* Arrays: strings (n pointers to NUL-terminated strings), f32, i32. */
void tsr_gguf_kv_arr_str(tsr_gguf_writer_t *w, const char *key, const char *const *v,
                         uint64_t n);
void tsr_gguf_kv_arr_f32(tsr_gguf_writer_t *w, const char *key, const float *v,
                         uint64_t n);
void tsr_gguf_kv_arr_i32(tsr_gguf_writer_t *w, const char *key, const int32_t *v,
                         uint64_t n);
/* Appends raw bytes to the KV section (tests forge odd values with it); the
 * caller counts the pair with `count_as_kv`. */
void tsr_gguf_kv_raw(tsr_gguf_writer_t *w, const void *bytes, size_t n, bool count_as_kv);
/* Declares a tensor; its data offset is the next aligned position. Returns
 * the byte size of its data (0 for an unsupported type; the info is still
 * written, with size 0, so tests can forge unknown types). */
uint64_t tsr_gguf_writer_add_tensor(tsr_gguf_writer_t *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne);
/* Writes header, KVs, tensor infos and the padding before the data. */
tsr_status_t tsr_gguf_writer_begin(tsr_gguf_writer_t *w, FILE *f, const char *what);
/* Writes `n` bytes of the current tensor's data; with `last`, pads to the
 * alignment. */
tsr_status_t tsr_gguf_writer_tensor_data(tsr_gguf_writer_t *w, FILE *f, const void *data,
                                         size_t n, bool last, const char *what);

/* Called by tsr_gguf_rewrite() with each tensor's data (a private copy it
 * may change in place, not resize). */
typedef tsr_status_t (*tsr_gguf_tensor_fn)(void *arg, const char *name, uint32_t type,
                                           uint32_t n_dims, const int64_t *ne, uint8_t *data,
                                           uint64_t nbytes);

/* Writes the GGUF file `in` (validated as a llama model first) to `out`:
 * the same version, alignment, keys and tensors in the same order, except
 * source keys starting with `drop_prefix` (NULL: none), then the pairs
 * already added to `extra` (a writer used for KVs only); each tensor's data
 * goes through `fn` (NULL: copied). On error `out` is removed. */
tsr_status_t tsr_gguf_rewrite(const char *in, const char *out, const tsr_gguf_writer_t *extra,
                              const char *drop_prefix, tsr_gguf_tensor_fn fn, void *arg);

#endif /* TSR_GGUF_H */
