/*
 * gguf.h - internals shared by the model-file parsers (llama2c.c, gguf.c,
 * model_file.c), the GGUF writer (gen_model.c) and their tests.
 *
 * Internal header. It holds:
 *   - a bounds-checked little-endian reader: every read names the field and
 *     its byte offset, so a malformed file gives a precise status instead of
 *     a read past the buffer;
 *   - GGUF constants (value types, key names);
 *   - a streaming GGUF writer (metadata built in memory, tensor data written
 *     in order), which does not validate: tests use it to write broken files;
 *   - fp16 conversions and the Q8_0 block layout.
 */
#ifndef TSR_GGUF_H
#define TSR_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model_file.h"
#include "status.h"

/* ---- limits shared by both formats ---- */

/* Any single dimension above this is treated as corrupt, not as a model. */
#define TSR_MODEL_MAX_DIM (1 << 20)
/* Longest tensor name (tsr_tensor_info_t.name holds 95 chars + NUL). */
#define TSR_MODEL_MAX_NAME 95

/* ---- bounds-checked reader ---- */

typedef struct tsr_reader {
  const uint8_t *data;
  size_t size;
  size_t off;       /* next byte to read */
  const char *what; /* buffer name for messages (borrowed) */
} tsr_reader_t;

static inline void tsr_reader_init(tsr_reader_t *r, const uint8_t *data, size_t size,
                                   const char *what) {
  r->data = data;
  r->size = size;
  r->off = 0;
  r->what = what ? what : "buffer";
}

static inline size_t tsr_reader_left(const tsr_reader_t *r) { return r->size - r->off; }

/* FORMAT "what: FIELD at offset 0x..: truncated: needs N bytes, M left (file
 * size S)" unless `n` bytes remain. */
tsr_status_t tsr_reader_need(const tsr_reader_t *r, size_t n, const char *field);
/* Each reads one little-endian value, naming `field` in the error. */
tsr_status_t tsr_reader_u8(tsr_reader_t *r, const char *field, uint8_t *out);
tsr_status_t tsr_reader_u32(tsr_reader_t *r, const char *field, uint32_t *out);
tsr_status_t tsr_reader_i32(tsr_reader_t *r, const char *field, int32_t *out);
tsr_status_t tsr_reader_u64(tsr_reader_t *r, const char *field, uint64_t *out);
tsr_status_t tsr_reader_f32(tsr_reader_t *r, const char *field, float *out);
/* Returns a pointer to the next `n` bytes (borrowed) and skips them. */
tsr_status_t tsr_reader_bytes(tsr_reader_t *r, size_t n, const char *field,
                              const uint8_t **out);

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

/* ---- GGUF ---- */

#define TSR_GGUF_MAGIC "GGUF"
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

/* ---- fp16 and Q8_0 ---- */

#define TSR_Q8_0_BLOCK 32
#define TSR_Q8_0_BYTES 34 /* fp16 d + 32 int8 */

/* IEEE binary16 <-> binary32, round to nearest even; NaN/Inf kept. */
static inline float tsr_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalize */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t tsr_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00); /* overflow: inf */
  if (e <= 0) {                                   /* subnormal or zero */
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff;
  /* A carry out of the mantissa correctly bumps the exponent. */
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

/* Quantizes one block of 32 floats to Q8_0 (34 bytes at `out`): d =
 * max|x|/127 stored as fp16, q = round(x/d) with the fp32 d. */
void tsr_q8_0_quantize_block(const float *x, uint8_t *out);

#endif /* TSR_GGUF_H */
