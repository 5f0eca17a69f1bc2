/* gguf.c - GGUF v3 (and v2) reader for the llama architecture, and the
 * streaming writer used by gen-model.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, the
 * KV pairs, the tensor infos, padding to general.alignment, the data section.
 * Parsing runs in two passes: first the generic container (every length and
 * offset checked against the file size), then the llama interpretation
 * (config keys, tensor names and shapes, vocabulary).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_file.h"
#include "base/status.h"

/* Byte size of a fixed-size value type; 0 for string, array, unknown. */
static size_t gguf_type_size(uint32_t t) {
  static const size_t sz[TSR_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return t < TSR_GGUF_TYPE_COUNT ? sz[t] : 0;
}

static const char *gguf_type_name(uint32_t t) {
  static const char *const names[TSR_GGUF_TYPE_COUNT] = {
      "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
      "u64", "i64", "f64"};
  return t < TSR_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

/* Names of GGML types we do not load, for clearer messages. */
static const char *ggml_type_name(uint32_t t) {
  static const char *const names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3",
                                      "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K",
                                      "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  if (t < sizeof names / sizeof names[0]) return names[t];
  if (t == 30) return "BF16";
  return "unknown";
}

typedef struct gguf_kv {
  const char *key; /* not NUL-terminated: key_len bytes in the file */
  size_t key_len;
  size_t off;      /* offset of the pair (its key length) */
  uint32_t type;
  size_t val_off;  /* offset of the value; for arrays, of the first item */
  uint32_t arr_type;
  uint64_t arr_n;
} gguf_kv_t;

typedef struct gguf_ti {
  const char *name;
  size_t name_len;
  size_t off;      /* offset of the info */
  uint32_t n_dims;
  int64_t ne[4];
  uint32_t type;
  uint64_t rel;    /* offset relative to the data section */
  uint64_t nbytes;
} gguf_ti_t;

typedef struct gguf_ctx {
  const uint8_t *data;
  size_t size;
  const char *what;
  uint32_t version;
  uint64_t n_kv, n_tensors;
  gguf_kv_t *kv;
  gguf_ti_t *ti;
  gguf_kv_t **kv_sorted; /* by key, for lookup and duplicate detection */
  gguf_ti_t **ti_sorted; /* by name */
  uint64_t alignment;
  size_t data_start;
} gguf_ctx_t;

/* ---- generic container ---- */

static tsr_status_t read_string(tsr_reader_t *r, const char *field, const char **s,
                                size_t *len) {
  uint64_t n;
  size_t at = r->off;
  TSR_RETURN_IF(tsr_reader_u64(r, field, &n));
  if (n > tsr_reader_left(r))
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: %s at offset 0x%zx: string length %" PRIu64
                   " exceeds the %zu bytes left in the file",
                   r->what, field, at, n, tsr_reader_left(r));
  const uint8_t *p;
  TSR_RETURN_IF(tsr_reader_bytes(r, (size_t)n, field, &p));
  *s = (const char *)p;
  *len = (size_t)n;
  return TSR_OK;
}

/* Skips one value of `type` (not an array) at the cursor. */
static tsr_status_t skip_value(tsr_reader_t *r, uint32_t type, const char *field) {
  if (type == TSR_GGUF_STRING) {
    const char *s;
    size_t n;
    return read_string(r, field, &s, &n);
  }
  const uint8_t *p;
  return tsr_reader_bytes(r, gguf_type_size(type), field, &p);
}

static tsr_status_t parse_kv(gguf_ctx_t *g, tsr_reader_t *r, uint64_t i, gguf_kv_t *kv) {
  char field[160];
  snprintf(field, sizeof field, "KV pair %" PRIu64 " key", i);
  kv->off = r->off;
  TSR_RETURN_IF(read_string(r, field, &kv->key, &kv->key_len));
  if (kv->key_len == 0)
    return TSR_ERR(FORMAT, "%s: KV pair %" PRIu64 " at offset 0x%zx: empty key", g->what, i,
                   kv->off);
  /* Later messages quote the key, truncated to keep them readable. */
  int kl = kv->key_len > 100 ? 100 : (int)kv->key_len;
  snprintf(field, sizeof field, "key '%.*s' value type", kl, kv->key);
  size_t type_off = r->off;
  TSR_RETURN_IF(tsr_reader_u32(r, field, &kv->type));
  if (kv->type >= TSR_GGUF_TYPE_COUNT)
    return TSR_ERR(FORMAT, "%s: key '%.*s' value type at offset 0x%zx: unknown type %u",
                   g->what, kl, kv->key, type_off, kv->type);
  snprintf(field, sizeof field, "key '%.*s' value", kl, kv->key);
  if (kv->type != TSR_GGUF_ARRAY) {
    kv->val_off = r->off;
    return skip_value(r, kv->type, field);
  }
  size_t at = r->off;
  snprintf(field, sizeof field, "key '%.*s' array type", kl, kv->key);
  TSR_RETURN_IF(tsr_reader_u32(r, field, &kv->arr_type));
  if (kv->arr_type >= TSR_GGUF_TYPE_COUNT || kv->arr_type == TSR_GGUF_ARRAY)
    return TSR_ERR(FORMAT, "%s: key '%.*s' array type at offset 0x%zx: %s %u", g->what, kl,
                   kv->key, at,
                   kv->arr_type == TSR_GGUF_ARRAY ? "nested arrays are not supported:"
                                                  : "unknown type",
                   kv->arr_type);
  snprintf(field, sizeof field, "key '%.*s' array count", kl, kv->key);
  at = r->off;
  TSR_RETURN_IF(tsr_reader_u64(r, field, &kv->arr_n));
  /* Every item takes at least its fixed size (8 bytes for a string's length),
   * so a count the rest of the file cannot hold is rejected before looping. */
  size_t item_min = kv->arr_type == TSR_GGUF_STRING ? 8 : gguf_type_size(kv->arr_type);
  if (kv->arr_n > tsr_reader_left(r) / item_min)
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: key '%.*s' array count at offset 0x%zx: %" PRIu64
                   " items of %s cannot fit in the %zu bytes left",
                   g->what, kl, kv->key, at, kv->arr_n, gguf_type_name(kv->arr_type),
                   tsr_reader_left(r));
  kv->val_off = r->off;
  if (kv->arr_type != TSR_GGUF_STRING) {
    const uint8_t *p;
    return tsr_reader_bytes(r, (size_t)kv->arr_n * item_min, field, &p);
  }
  for (uint64_t j = 0; j < kv->arr_n; j++) {
    snprintf(field, sizeof field, "key '%.*s' item %" PRIu64, kl, kv->key, j);
    TSR_RETURN_IF(skip_value(r, TSR_GGUF_STRING, field));
  }
  return TSR_OK;
}

static tsr_status_t parse_tensor_info(gguf_ctx_t *g, tsr_reader_t *r, uint64_t i,
                                      gguf_ti_t *t) {
  char field[200];
  snprintf(field, sizeof field, "tensor info %" PRIu64 " name", i);
  t->off = r->off;
  TSR_RETURN_IF(read_string(r, field, &t->name, &t->name_len));
  if (t->name_len == 0 || t->name_len > TSR_MODEL_MAX_NAME)
    return TSR_ERR(FORMAT,
                   "%s: tensor info %" PRIu64 " name at offset 0x%zx: length %zu is outside "
                   "[1, %d]",
                   g->what, i, t->off, t->name_len, TSR_MODEL_MAX_NAME);
  const int nl = (int)t->name_len;
  snprintf(field, sizeof field, "tensor '%.*s' n_dims", nl, t->name);
  size_t at = r->off;
  TSR_RETURN_IF(tsr_reader_u32(r, field, &t->n_dims));
  if (t->n_dims < 1 || t->n_dims > 4)
    return TSR_ERR(FORMAT, "%s: tensor '%.*s' n_dims at offset 0x%zx: %u is outside [1, 4]",
                   g->what, nl, t->name, at, t->n_dims);
  uint64_t n = 1;
  for (uint32_t d = 0; d < 4; d++) t->ne[d] = 1;
  for (uint32_t d = 0; d < t->n_dims; d++) {
    uint64_t v;
    snprintf(field, sizeof field, "tensor '%.*s' ne[%u]", nl, t->name, d);
    at = r->off;
    TSR_RETURN_IF(tsr_reader_u64(r, field, &v));
    /* 2^40 elements per dimension is far beyond any model and keeps the
     * element count's product checks simple. */
    if (v < 1 || v > ((uint64_t)1 << 40) || __builtin_mul_overflow(n, v, &n) ||
        n > ((uint64_t)1 << 60))
      return TSR_ERR(OUT_OF_RANGE,
                     "%s: tensor '%.*s' ne[%u] at offset 0x%zx: %" PRIu64
                     " is zero or makes the element count absurd",
                     g->what, nl, t->name, d, at, v);
    t->ne[d] = (int64_t)v;
  }
  snprintf(field, sizeof field, "tensor '%.*s' type", nl, t->name);
  at = r->off;
  TSR_RETURN_IF(tsr_reader_u32(r, field, &t->type));
  if (!tsr_dtype_supported(t->type))
    return TSR_ERR(FORMAT,
                   "%s: tensor '%.*s' type at offset 0x%zx: %u (%s) is not supported "
                   "(F32, F16, BF16, Q8_0 only)",
                   g->what, nl, t->name, at, t->type, ggml_type_name(t->type));
  if (t->type == TSR_DTYPE_Q8_0 && t->ne[0] % TSR_Q8_0_BLOCK)
    return TSR_ERR(FORMAT,
                   "%s: tensor '%.*s' at offset 0x%zx: Q8_0 needs ne[0] %% 32 == 0, ne[0] is "
                   "%" PRId64,
                   g->what, nl, t->name, t->off, t->ne[0]);
  if (!tsr_dtype_nbytes((tsr_dtype_t)t->type, n, &t->nbytes))
    return TSR_ERR(OUT_OF_RANGE, "%s: tensor '%.*s' at offset 0x%zx: byte size overflows",
                   g->what, nl, t->name, t->off);
  snprintf(field, sizeof field, "tensor '%.*s' data offset", nl, t->name);
  TSR_RETURN_IF(tsr_reader_u64(r, field, &t->rel));
  return TSR_OK;
}

static int cmp_bytes(const char *a, size_t al, const char *b, size_t bl) {
  int c = memcmp(a, b, al < bl ? al : bl);
  if (c) return c;
  return al < bl ? -1 : al > bl;
}
static int cmp_kv(const void *a, const void *b) {
  const gguf_kv_t *x = *(gguf_kv_t *const *)a, *y = *(gguf_kv_t *const *)b;
  return cmp_bytes(x->key, x->key_len, y->key, y->key_len);
}
static int cmp_ti(const void *a, const void *b) {
  const gguf_ti_t *x = *(gguf_ti_t *const *)a, *y = *(gguf_ti_t *const *)b;
  return cmp_bytes(x->name, x->name_len, y->name, y->name_len);
}

static const gguf_kv_t *find_kv(const gguf_ctx_t *g, const char *key) {
  size_t kl = strlen(key), lo = 0, hi = (size_t)g->n_kv;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = cmp_bytes(g->kv_sorted[mid]->key, g->kv_sorted[mid]->key_len, key, kl);
    if (c == 0) return g->kv_sorted[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static const gguf_ti_t *find_ti(const gguf_ctx_t *g, const char *name) {
  size_t nl = strlen(name), lo = 0, hi = (size_t)g->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = cmp_bytes(g->ti_sorted[mid]->name, g->ti_sorted[mid]->name_len, name, nl);
    if (c == 0) return g->ti_sorted[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static void ctx_free(gguf_ctx_t *g) {
  free(g->kv);
  free(g->ti);
  free(g->kv_sorted);
  free(g->ti_sorted);
}

static tsr_status_t parse_container(gguf_ctx_t *g) {
  tsr_reader_t r;
  tsr_reader_init(&r, g->data, g->size, g->what);
  const uint8_t *magic;
  TSR_RETURN_IF(tsr_reader_bytes(&r, 4, "magic", &magic));
  if (memcmp(magic, TSR_GGUF_MAGIC, 4) != 0)
    return TSR_ERR(FORMAT,
                   "%s: magic at offset 0x0: bytes %02x %02x %02x %02x are not \"GGUF\"",
                   g->what, magic[0], magic[1], magic[2], magic[3]);
  TSR_RETURN_IF(tsr_reader_u32(&r, "version", &g->version));
  if (g->version != 2 && g->version != 3) {
    /* A big-endian GGUF reads as a huge version number. */
    const char *hint = (g->version & 0xffff) == 0 ? " (big-endian GGUF?)" : "";
    return TSR_ERR(FORMAT, "%s: version at offset 0x4: %u is not supported (2 or 3)%s",
                   g->what, g->version, hint);
  }
  TSR_RETURN_IF(tsr_reader_u64(&r, "n_tensors", &g->n_tensors));
  TSR_RETURN_IF(tsr_reader_u64(&r, "n_kv", &g->n_kv));
  /* Lower bounds on the bytes each entry takes: a KV pair has a key length,
   * a 1-byte key and a type; a tensor info a name length, 1 byte of name,
   * n_dims, one ne, the type and the offset. */
  const size_t left = tsr_reader_left(&r);
  if (g->n_kv > left / 13)
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: n_kv at offset 0x10: %" PRIu64 " KV pairs cannot fit in a file of "
                   "%zu bytes",
                   g->what, g->n_kv, g->size);
  if (g->n_tensors > left / 33 || g->n_tensors > INT32_MAX)
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: n_tensors at offset 0x8: %" PRIu64 " tensors cannot fit in a file of "
                   "%zu bytes",
                   g->what, g->n_tensors, g->size);
  g->kv = calloc((size_t)g->n_kv + 1, sizeof *g->kv);
  g->ti = calloc((size_t)g->n_tensors + 1, sizeof *g->ti);
  g->kv_sorted = calloc((size_t)g->n_kv + 1, sizeof *g->kv_sorted);
  g->ti_sorted = calloc((size_t)g->n_tensors + 1, sizeof *g->ti_sorted);
  if (!g->kv || !g->ti || !g->kv_sorted || !g->ti_sorted)
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the GGUF directory", g->what);
  for (uint64_t i = 0; i < g->n_kv; i++) {
    TSR_RETURN_IF(parse_kv(g, &r, i, &g->kv[i]));
    g->kv_sorted[i] = &g->kv[i];
  }
  qsort(g->kv_sorted, (size_t)g->n_kv, sizeof *g->kv_sorted, cmp_kv);
  for (uint64_t i = 1; i < g->n_kv; i++)
    if (cmp_kv(&g->kv_sorted[i - 1], &g->kv_sorted[i]) == 0)
      return TSR_ERR(FORMAT, "%s: key '%.*s' at offset 0x%zx: duplicate key", g->what,
                     (int)g->kv_sorted[i]->key_len, g->kv_sorted[i]->key,
                     g->kv_sorted[i]->off);

  g->alignment = TSR_GGUF_DEFAULT_ALIGNMENT;
  const gguf_kv_t *al = find_kv(g, "general.alignment");
  if (al) {
    tsr_reader_t v;
    tsr_reader_init(&v, g->data, g->size, g->what);
    v.off = al->val_off;
    uint32_t a = 0;
    if (al->type != TSR_GGUF_U32)
      return TSR_ERR(FORMAT, "%s: key 'general.alignment' at offset 0x%zx: type %s, expected u32",
                     g->what, al->off, gguf_type_name(al->type));
    TSR_RETURN_IF(tsr_reader_u32(&v, "general.alignment", &a));
    if (a == 0 || (a & (a - 1)))
      return TSR_ERR(FORMAT,
                     "%s: key 'general.alignment' value at offset 0x%zx: %u is not a power "
                     "of two",
                     g->what, al->val_off, a);
    g->alignment = a;
  }

  for (uint64_t i = 0; i < g->n_tensors; i++) {
    TSR_RETURN_IF(parse_tensor_info(g, &r, i, &g->ti[i]));
    g->ti_sorted[i] = &g->ti[i];
  }
  qsort(g->ti_sorted, (size_t)g->n_tensors, sizeof *g->ti_sorted, cmp_ti);
  for (uint64_t i = 1; i < g->n_tensors; i++)
    if (cmp_ti(&g->ti_sorted[i - 1], &g->ti_sorted[i]) == 0)
      return TSR_ERR(FORMAT, "%s: tensor '%.*s' info at offset 0x%zx: duplicate name",
                     g->what, (int)g->ti_sorted[i]->name_len, g->ti_sorted[i]->name,
                     g->ti_sorted[i]->off);

  /* The data section starts at the next multiple of the alignment. */
  size_t end = r.off, pad = (size_t)((g->alignment - end % g->alignment) % g->alignment);
  if (g->n_tensors > 0 && pad > g->size - end)
    return TSR_ERR(FORMAT,
                   "%s: data section at offset 0x%zx: truncated: padding to alignment "
                   "%" PRIu64 " runs past end of file (size %zu)",
                   g->what, end, g->alignment, g->size);
  g->data_start = end + pad;
  for (uint64_t i = 0; i < g->n_tensors; i++) {
    const gguf_ti_t *t = &g->ti[i];
    const int nl = (int)t->name_len;
    if (t->rel % g->alignment)
      return TSR_ERR(FORMAT,
                     "%s: tensor '%.*s' data offset (info at offset 0x%zx): 0x%" PRIx64
                     " is not a multiple of the alignment %" PRIu64,
                     g->what, nl, t->name, t->off, t->rel, g->alignment);
    uint64_t abs_off, abs_end;
    if (__builtin_add_overflow((uint64_t)g->data_start, t->rel, &abs_off) ||
        __builtin_add_overflow(abs_off, t->nbytes, &abs_end) || abs_end > g->size)
      return TSR_ERR(OUT_OF_RANGE,
                     "%s: tensor '%.*s': data [offset 0x%" PRIx64 ", %" PRIu64
                     " bytes] runs past end of file (size %zu)",
                     g->what, nl, t->name, (uint64_t)g->data_start + t->rel, t->nbytes,
                     g->size);
    /* Views are read as float / uint16 arrays: keep them naturally aligned
     * (only an alignment below 4 could break this). */
    size_t elem = t->type == TSR_DTYPE_F32                                ? 4
                  : t->type == TSR_DTYPE_F16 || t->type == TSR_DTYPE_BF16 ? 2
                                                                          : 1;
    if (((uintptr_t)(g->data + abs_off)) % elem)
      return TSR_ERR(FORMAT,
                     "%s: tensor '%.*s': data at offset 0x%" PRIx64
                     " is not aligned to its %zu-byte elements",
                     g->what, nl, t->name, abs_off, elem);
  }
  return TSR_OK;
}

/* ---- typed KV access ---- */

/* Reads an integer KV of any integer type into [lo, hi]. Absent: *out =
 * dflt if !required, else NOT_FOUND. */
static tsr_status_t kv_int(const gguf_ctx_t *g, const char *key, bool required,
                           int64_t dflt, int64_t lo, int64_t hi, int64_t *out) {
  const gguf_kv_t *kv = find_kv(g, key);
  if (!kv) {
    if (required) return TSR_ERR(NOT_FOUND, "%s: required key '%s' is missing", g->what, key);
    *out = dflt;
    return TSR_OK;
  }
  const uint8_t *p = g->data + kv->val_off;
  uint64_t u = 0;
  int64_t v;
  size_t n = gguf_type_size(kv->type);
  bool is_signed = kv->type == TSR_GGUF_I8 || kv->type == TSR_GGUF_I16 ||
                   kv->type == TSR_GGUF_I32 || kv->type == TSR_GGUF_I64;
  if (kv->type == TSR_GGUF_STRING || kv->type == TSR_GGUF_ARRAY || kv->type == TSR_GGUF_F32 ||
      kv->type == TSR_GGUF_F64 || kv->type == TSR_GGUF_BOOL)
    return TSR_ERR(FORMAT, "%s: key '%s' at offset 0x%zx: type %s, expected an integer",
                   g->what, key, kv->off, gguf_type_name(kv->type));
  for (size_t i = n; i-- > 0;) u = u << 8 | p[i];
  if (is_signed && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~(uint64_t)0 << (8 * n);
  if (!is_signed && u > (uint64_t)INT64_MAX)
    return TSR_ERR(OUT_OF_RANGE, "%s: key '%s' value at offset 0x%zx: %" PRIu64
                                 " is outside [%" PRId64 ", %" PRId64 "]",
                   g->what, key, kv->val_off, u, lo, hi);
  memcpy(&v, &u, 8);
  if (v < lo || v > hi)
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: key '%s' value at offset 0x%zx: %" PRId64 " is outside [%" PRId64
                   ", %" PRId64 "]",
                   g->what, key, kv->val_off, v, lo, hi);
  *out = v;
  return TSR_OK;
}

static tsr_status_t kv_float(const gguf_ctx_t *g, const char *key, bool required,
                             float dflt, float *out) {
  const gguf_kv_t *kv = find_kv(g, key);
  if (!kv) {
    if (required) return TSR_ERR(NOT_FOUND, "%s: required key '%s' is missing", g->what, key);
    *out = dflt;
    return TSR_OK;
  }
  const uint8_t *p = g->data + kv->val_off;
  if (kv->type == TSR_GGUF_F32) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    memcpy(out, &u, 4);
  } else if (kv->type == TSR_GGUF_F64) {
    uint64_t u = 0;
    double d;
    for (int i = 7; i >= 0; i--) u = u << 8 | p[i];
    memcpy(&d, &u, 8);
    *out = (float)d;
  } else {
    return TSR_ERR(FORMAT, "%s: key '%s' at offset 0x%zx: type %s, expected f32", g->what,
                   key, kv->off, gguf_type_name(kv->type));
  }
  if (!(*out > 0.0f) || *out > 1e30f)
    return TSR_ERR(OUT_OF_RANGE, "%s: key '%s' value at offset 0x%zx: %g must be positive",
                   g->what, key, kv->val_off, (double)*out);
  return TSR_OK;
}

/* A string KV's bytes (borrowed from the file). */
static tsr_status_t kv_str(const gguf_ctx_t *g, const char *key, const char **s, size_t *n) {
  const gguf_kv_t *kv = find_kv(g, key);
  if (!kv) return TSR_ERR(NOT_FOUND, "%s: required key '%s' is missing", g->what, key);
  if (kv->type != TSR_GGUF_STRING)
    return TSR_ERR(FORMAT, "%s: key '%s' at offset 0x%zx: type %s, expected string", g->what,
                   key, kv->off, gguf_type_name(kv->type));
  tsr_reader_t r;
  tsr_reader_init(&r, g->data, g->size, g->what);
  r.off = kv->val_off;
  return read_string(&r, key, s, n);
}

static bool str_is(const char *s, size_t n, const char *lit) {
  return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

/* An array KV of `arr_type` with exactly `n` items, or NULL if absent and
 * optional. */
static tsr_status_t kv_array(const gguf_ctx_t *g, const char *key, bool required,
                             uint32_t arr_type, uint64_t n, const char *n_what,
                             const gguf_kv_t **out) {
  *out = find_kv(g, key);
  if (!*out) {
    if (required) return TSR_ERR(NOT_FOUND, "%s: required key '%s' is missing", g->what, key);
    return TSR_OK;
  }
  const gguf_kv_t *kv = *out;
  if (kv->type != TSR_GGUF_ARRAY || kv->arr_type != arr_type)
    return TSR_ERR(FORMAT, "%s: key '%s' at offset 0x%zx: type %s of %s, expected array of %s",
                   g->what, key, kv->off, gguf_type_name(kv->type),
                   kv->type == TSR_GGUF_ARRAY ? gguf_type_name(kv->arr_type) : "-",
                   gguf_type_name(arr_type));
  if (kv->arr_n != n)
    return TSR_ERR(FORMAT,
                   "%s: key '%s' at offset 0x%zx: %" PRIu64 " items, expected %" PRIu64
                   " (%s)",
                   g->what, key, kv->off, kv->arr_n, n, n_what);
  return TSR_OK;
}

/* ---- llama interpretation ---- */

static tsr_status_t read_config(const gguf_ctx_t *g, tsr_model_config_t *c) {
  const char *arch;
  size_t arch_n;
  TSR_RETURN_IF(kv_str(g, "general.architecture", &arch, &arch_n));
  if (!str_is(arch, arch_n, "llama"))
    return TSR_ERR(UNIMPLEMENTED,
                   "%s: key 'general.architecture': '%.*s' is not supported (llama only)",
                   g->what, arch_n > 64 ? 64 : (int)arch_n, arch);
  const int64_t M = TSR_MODEL_MAX_DIM;
  int64_t v;
  TSR_RETURN_IF(kv_int(g, "llama.embedding_length", true, 0, 1, M, &v));
  c->dim = (int32_t)v;
  TSR_RETURN_IF(kv_int(g, "llama.feed_forward_length", true, 0, 1, M, &v));
  c->hidden_dim = (int32_t)v;
  TSR_RETURN_IF(kv_int(g, "llama.block_count", true, 0, 1, M, &v));
  c->n_layers = (int32_t)v;
  TSR_RETURN_IF(kv_int(g, "llama.attention.head_count", true, 0, 1, M, &v));
  c->n_heads = (int32_t)v;
  TSR_RETURN_IF(kv_int(g, "llama.attention.head_count_kv", false, c->n_heads, 1, M, &v));
  c->n_kv_heads = (int32_t)v;
  TSR_RETURN_IF(kv_int(g, "llama.context_length", true, 0, 1, M, &v));
  c->seq_len = (int32_t)v;
  TSR_RETURN_IF(kv_float(g, "llama.attention.layer_norm_rms_epsilon", true, 0, &c->rms_eps));
  TSR_RETURN_IF(kv_float(g, "llama.rope.freq_base", false, 10000.0f, &c->rope_theta));
  /* vocab_size: the optional key, else the token list, else the embedding. */
  const gguf_kv_t *tokens = find_kv(g, "tokenizer.ggml.tokens");
  const gguf_ti_t *embd = find_ti(g, "token_embd.weight");
  int64_t dflt_vocab = tokens && tokens->type == TSR_GGUF_ARRAY ? (int64_t)tokens->arr_n
                       : embd                                   ? embd->ne[1]
                                                                : 0;
  TSR_RETURN_IF(kv_int(g, "llama.vocab_size", false, dflt_vocab, 0, M, &v));
  c->vocab_size = (int32_t)v;
  TSR_RETURN_IF(kv_int(g, "llama.expert_count", false, 0, 0, TSR_MODEL_MAX_EXPERTS, &v));
  c->n_experts = (int32_t)v;
  if (c->n_experts == 1)
    return TSR_ERR(FORMAT, "%s: key 'llama.expert_count' at offset 0x%zx: 1 expert (0 for a "
                   "dense FFN, else 2..%d)", g->what, find_kv(g, "llama.expert_count")->off,
                   TSR_MODEL_MAX_EXPERTS);
  if (c->n_experts) {
    TSR_RETURN_IF(kv_int(g, "llama.expert_used_count", true, 0, 1, c->n_experts, &v));
    c->n_experts_used = (int32_t)v;
  } else if (find_kv(g, "llama.expert_used_count")) {
    TSR_RETURN_IF(kv_int(g, "llama.expert_used_count", true, 0, 0, 0, &v));
  }
  c->format = TSR_MODEL_FORMAT_GGUF;
  TSR_RETURN_IF(tsr_model_config_check(c, g->what));
  TSR_RETURN_IF(kv_int(g, "llama.rope.dimension_count", false, c->head_dim, 0, M, &v));
  if (v != c->head_dim)
    return TSR_ERR(UNIMPLEMENTED,
                   "%s: key 'llama.rope.dimension_count' at offset 0x%zx: %" PRId64
                   " differs from head_dim %d (partial rotary is not supported)",
                   g->what, find_kv(g, "llama.rope.dimension_count")->off, v, c->head_dim);
  return TSR_OK;
}

/* Finds tensor `name` and checks it is (rows, cols). `shape` names the
 * expected dimensions for the message. */
static tsr_status_t take_tensor(const gguf_ctx_t *g, const char *name, int64_t rows,
                                int64_t cols, const char *shape, tsr_tensor_view_t *v) {
  const gguf_ti_t *t = find_ti(g, name);
  if (!t) return TSR_ERR(NOT_FOUND, "%s: required tensor '%s' is missing", g->what, name);
  /* Trailing dimensions of 1 do not change the layout. */
  bool ok = t->ne[0] == cols && t->ne[1] * t->ne[2] * t->ne[3] == rows &&
            t->ne[2] == 1 && t->ne[3] == 1;
  if (!ok)
    return TSR_ERR(FORMAT,
                   "%s: tensor '%s' (info at offset 0x%zx): shape [%" PRId64 ", %" PRId64
                   ", %" PRId64 ", %" PRId64 "] does not match the config: expected "
                   "ne = [%" PRId64 ", %" PRId64 "] (%s)",
                   g->what, name, t->off, t->ne[0], t->ne[1], t->ne[2], t->ne[3], cols,
                   rows, shape);
  v->type = (tsr_dtype_t)t->type;
  v->rows = rows;
  v->cols = cols;
  v->data = g->data + g->data_start + t->rel;
  return TSR_OK;
}

/* Finds the stacked experts `name`: ne = [cols, rows, experts] (a view of
 * experts * rows rows). */
static tsr_status_t take_experts(const gguf_ctx_t *g, const char *name, int64_t experts,
                                 int64_t rows, int64_t cols, const char *shape,
                                 tsr_tensor_view_t *v) {
  const gguf_ti_t *t = find_ti(g, name);
  if (!t) return TSR_ERR(NOT_FOUND, "%s: required tensor '%s' is missing", g->what, name);
  if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != experts || t->ne[3] != 1)
    return TSR_ERR(FORMAT,
                   "%s: tensor '%s' (info at offset 0x%zx): shape [%" PRId64 ", %" PRId64
                   ", %" PRId64 ", %" PRId64 "] does not match the config: expected "
                   "ne = [%" PRId64 ", %" PRId64 ", %" PRId64 "] (%s, expert_count)",
                   g->what, name, t->off, t->ne[0], t->ne[1], t->ne[2], t->ne[3], cols, rows,
                   experts, shape);
  v->type = (tsr_dtype_t)t->type;
  v->rows = rows * experts;
  v->cols = cols;
  v->data = g->data + g->data_start + t->rel;
  return TSR_OK;
}

static tsr_status_t read_tensors(const gguf_ctx_t *g, tsr_model_file_t *out) {
  const tsr_model_config_t *c = &out->config;
  const int64_t dim = c->dim, hid = c->hidden_dim, V = c->vocab_size;
  const int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
  const int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
  TSR_RETURN_IF(take_tensor(g, "token_embd.weight", V, dim, "vocab_size, dim", &out->tok_embd));
  TSR_RETURN_IF(take_tensor(g, "output_norm.weight", 1, dim, "dim", &out->rms_final));
  if (find_ti(g, "output.weight")) {
    TSR_RETURN_IF(take_tensor(g, "output.weight", V, dim, "vocab_size, dim", &out->output));
    /* A converter may store the tied classifier as a copy; call it shared
     * when the bytes are the embedding's, as llama2.c would. */
    uint64_t nb = 0;
    out->config.shared_classifier =
        out->output.type == out->tok_embd.type &&
        tsr_dtype_nbytes(out->tok_embd.type, (uint64_t)(V * dim), &nb) &&
        memcmp(out->output.data, out->tok_embd.data, (size_t)nb) == 0;
  } else {
    out->output = out->tok_embd;
    out->config.shared_classifier = true;
  }
  /* Each layer needs 9 tensors: a block count the directory cannot hold is
   * refused before the per-layer table is allocated for it. */
  if (9 * (uint64_t)c->n_layers + 2 > g->n_tensors)
    return TSR_ERR(FORMAT,
                   "%s: key 'llama.block_count': %d layers need %" PRIu64
                   " tensors, the file declares %" PRIu64 " (n_tensors at offset 0x8)",
                   g->what, c->n_layers, 9 * (uint64_t)c->n_layers + 2, g->n_tensors);
  out->layers = calloc((size_t)c->n_layers, sizeof *out->layers);
  if (!out->layers)
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for %d layers", g->what, c->n_layers);
  for (int32_t l = 0; l < c->n_layers; l++) {
    tsr_layer_views_t *ly = &out->layers[l];
    struct {
      const char *suffix;
      int64_t rows, cols;
      const char *shape;
      tsr_tensor_view_t *v;
    } want[] = {
        {"attn_norm", 1, dim, "dim", &ly->rms_att},
        {"attn_q", q_dim, dim, "dim, n_heads*head_dim", &ly->wq},
        {"attn_k", kv_dim, dim, "dim, n_kv_heads*head_dim", &ly->wk},
        {"attn_v", kv_dim, dim, "dim, n_kv_heads*head_dim", &ly->wv},
        {"attn_output", dim, q_dim, "n_heads*head_dim, dim", &ly->wo},
        {"ffn_norm", 1, dim, "dim", &ly->rms_ffn},
        {"ffn_gate", hid, dim, "dim, hidden_dim", &ly->w1},
        {"ffn_down", dim, hid, "hidden_dim, dim", &ly->w2},
        {"ffn_up", hid, dim, "dim, hidden_dim", &ly->w3},
    };
    const size_t n_want = sizeof want / sizeof want[0] - (c->n_experts ? 3 : 0);
    for (size_t i = 0; i < n_want; i++) {
      char name[64];
      snprintf(name, sizeof name, "blk.%d.%s.weight", l, want[i].suffix);
      TSR_RETURN_IF(take_tensor(g, name, want[i].rows, want[i].cols, want[i].shape, want[i].v));
    }
    if (c->n_experts) {
      const int64_t E = c->n_experts;
      char name[64];
      snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
      TSR_RETURN_IF(take_tensor(g, name, E, dim, "dim, expert_count", &ly->router));
      snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
      TSR_RETURN_IF(take_experts(g, name, E, hid, dim, "dim, hidden_dim", &ly->w1));
      snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
      TSR_RETURN_IF(take_experts(g, name, E, dim, hid, "hidden_dim, dim", &ly->w2));
      snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
      TSR_RETURN_IF(take_experts(g, name, E, hid, dim, "dim, hidden_dim", &ly->w3));
    }
  }
  out->tensors = calloc((size_t)g->n_tensors + 1, sizeof *out->tensors);
  if (!out->tensors)
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the tensor table", g->what);
  for (uint64_t i = 0; i < g->n_tensors; i++) {
    const gguf_ti_t *t = &g->ti[i];
    tsr_tensor_info_t *ti = &out->tensors[i];
    memcpy(ti->name, t->name, t->name_len);
    ti->name[t->name_len] = '\0';
    ti->type = (tsr_dtype_t)t->type;
    ti->n_dims = (int)t->n_dims;
    memcpy(ti->ne, t->ne, sizeof ti->ne);
    ti->offset = g->data_start + t->rel;
    ti->nbytes = t->nbytes;
  }
  out->n_tensors = (int32_t)g->n_tensors;
  return TSR_OK;
}

static tsr_status_t read_vocab(const gguf_ctx_t *g, int32_t vocab_size, tsr_vocab_t *out) {
  const char *model;
  size_t model_n;
  TSR_RETURN_IF(kv_str(g, "tokenizer.ggml.model", &model, &model_n));
  if (!str_is(model, model_n, "llama"))
    return TSR_ERR(UNIMPLEMENTED,
                   "%s: key 'tokenizer.ggml.model': '%.*s' is not supported (llama "
                   "SentencePiece only)",
                   g->what, model_n > 64 ? 64 : (int)model_n, model);
  const gguf_kv_t *tokens, *scores, *types;
  const char *nw = "vocab_size";
  TSR_RETURN_IF(kv_array(g, "tokenizer.ggml.tokens", true, TSR_GGUF_STRING,
                         (uint64_t)vocab_size, nw, &tokens));
  TSR_RETURN_IF(kv_array(g, "tokenizer.ggml.scores", false, TSR_GGUF_F32,
                         (uint64_t)vocab_size, nw, &scores));
  TSR_RETURN_IF(kv_array(g, "tokenizer.ggml.token_type", false, TSR_GGUF_I32,
                         (uint64_t)vocab_size, nw, &types));
  int64_t bos, eos, unk;
  const int64_t last = vocab_size - 1;
  TSR_RETURN_IF(kv_int(g, "tokenizer.ggml.bos_token_id", false, 1, 0, last, &bos));
  TSR_RETURN_IF(kv_int(g, "tokenizer.ggml.eos_token_id", false, 2, 0, last, &eos));
  TSR_RETURN_IF(kv_int(g, "tokenizer.ggml.unknown_token_id", false, 0, 0, last, &unk));

  tsr_vocab_t v = {0};
  v.pieces = calloc((size_t)vocab_size, sizeof *v.pieces);
  v.scores = calloc((size_t)vocab_size, sizeof *v.scores);
  v.n = vocab_size;
  if (!v.pieces || !v.scores) {
    tsr_vocab_free(&v);
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for %d tokens", g->what, vocab_size);
  }
  tsr_reader_t r;
  tsr_reader_init(&r, g->data, g->size, g->what);
  r.off = tokens->val_off;
  tsr_status_t s = TSR_OK;
  for (int32_t i = 0; i < vocab_size && !s; i++) {
    const char *p;
    size_t n;
    char field[64];
    snprintf(field, sizeof field, "tokenizer.ggml.tokens item %d", i);
    size_t at = r.off;
    /* Already bounds-checked by the container pass; re-read safely. */
    s = read_string(&r, field, &p, &n);
    if (s) break;
    if (memchr(p, 0, n)) {
      s = TSR_ERR(FORMAT, "%s: tokenizer.ggml.tokens item %d at offset 0x%zx contains a NUL "
                          "byte",
                  g->what, i, at);
      break;
    }
    /* llama2.c's export rules: BOS/EOS become "\n<s>\n" / "\n</s>\n". */
    if (i == bos)
      v.pieces[i] = strdup("\n<s>\n");
    else if (i == eos)
      v.pieces[i] = strdup("\n</s>\n");
    else
      v.pieces[i] = tsr_piece_from_spm((const uint8_t *)p, n);
    if (!v.pieces[i]) {
      s = TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory at token %d", g->what, i);
      break;
    }
    int32_t len = (int32_t)strlen(v.pieces[i]);
    if (len > v.max_piece_len) v.max_piece_len = len;
    if (scores) {
      const uint8_t *q = g->data + scores->val_off + (size_t)i * 4;
      uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                   (uint32_t)q[3] << 24;
      memcpy(&v.scores[i], &u, 4);
    }
  }
  if (s) {
    tsr_vocab_free(&v);
    return s;
  }
  v.bos = (int32_t)bos;
  v.eos = (int32_t)eos;
  v.unk = (int32_t)unk;
  *out = v;
  return TSR_OK;
}

tsr_status_t tsr_gguf_parse(const uint8_t *data, size_t size, const char *what,
                            tsr_model_file_t *out) {
  /* `out` may be uninitialized: reset it (the mapping belongs to the caller). */
  const tsr_mapped_file_t keep = out->file;
  memset(out, 0, sizeof *out);
  out->file = keep;
  gguf_ctx_t g = {.data = data, .size = size, .what = what ? what : "GGUF"};
  tsr_status_t s = size == 0 ? TSR_ERR(FORMAT, "%s: empty file (expected \"GGUF\")", g.what)
                             : parse_container(&g);
  if (!s) s = read_config(&g, &out->config);
  if (!s) s = read_tensors(&g, out);
  if (!s) s = read_vocab(&g, out->config.vocab_size, &out->vocab);
  if (!s) {
    out->gguf_version = g.version;
    out->gguf_alignment = g.alignment;
    if (find_kv(&g, "tessera.prune.pattern")) {
      const char *ps;
      size_t pn;
      s = kv_str(&g, "tessera.prune.pattern", &ps, &pn);
      if (!s && (pn == 0 || pn >= sizeof out->prune_pattern))
        s = TSR_ERR(FORMAT, "%s: key 'tessera.prune.pattern': %zu bytes (1..%zu)", g.what, pn,
                    sizeof out->prune_pattern - 1);
      if (!s) {
        memcpy(out->prune_pattern, ps, pn);
        out->prune_pattern[pn] = '\0';
        s = kv_float(&g, "tessera.prune.density", true, 0, &out->prune_density);
      }
      if (!s && !(out->prune_density > 0 && out->prune_density <= 1))
        s = TSR_ERR(FORMAT, "%s: key 'tessera.prune.density': %g is outside (0, 1]", g.what,
                    (double)out->prune_density);
    }
  }
  ctx_free(&g);
  if (s) tsr_model_file_clear(out);
  return s;
}

/* ---- writer ---- */

void tsr_gguf_writer_init(tsr_gguf_writer_t *w) {
  memset(w, 0, sizeof *w);
  w->version = TSR_GGUF_VERSION;
  w->alignment = TSR_GGUF_DEFAULT_ALIGNMENT;
}

void tsr_gguf_writer_free(tsr_gguf_writer_t *w) {
  free(w->kv);
  free(w->ti);
  memset(w, 0, sizeof *w);
}

static void put(tsr_gguf_writer_t *w, uint8_t **buf, size_t *len, size_t *cap,
                const void *p, size_t n) {
  if (w->oom) return;
  if (*len + n > *cap) {
    size_t nc = *cap ? *cap : 4096;
    while (nc < *len + n) nc *= 2;
    uint8_t *nb = realloc(*buf, nc);
    if (!nb) {
      w->oom = true;
      return;
    }
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, p, n);
  *len += n;
}

static void put_le(tsr_gguf_writer_t *w, bool kv, uint64_t v, int n) {
  uint8_t b[8];
  for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
  if (kv)
    put(w, &w->kv, &w->kv_len, &w->kv_cap, b, (size_t)n);
  else
    put(w, &w->ti, &w->ti_len, &w->ti_cap, b, (size_t)n);
}

static void put_str(tsr_gguf_writer_t *w, bool kv, const char *s) {
  size_t n = strlen(s);
  put_le(w, kv, n, 8);
  if (kv)
    put(w, &w->kv, &w->kv_len, &w->kv_cap, s, n);
  else
    put(w, &w->ti, &w->ti_len, &w->ti_cap, s, n);
}

static void kv_head(tsr_gguf_writer_t *w, const char *key, uint32_t type) {
  put_str(w, true, key);
  put_le(w, true, type, 4);
  w->n_kv++;
}

void tsr_gguf_kv_u32(tsr_gguf_writer_t *w, const char *key, uint32_t v) {
  kv_head(w, key, TSR_GGUF_U32);
  put_le(w, true, v, 4);
}

void tsr_gguf_kv_i32(tsr_gguf_writer_t *w, const char *key, int32_t v) {
  kv_head(w, key, TSR_GGUF_I32);
  put_le(w, true, (uint32_t)v, 4);
}

void tsr_gguf_kv_f32(tsr_gguf_writer_t *w, const char *key, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  kv_head(w, key, TSR_GGUF_F32);
  put_le(w, true, u, 4);
}

void tsr_gguf_kv_bool(tsr_gguf_writer_t *w, const char *key, bool v) {
  kv_head(w, key, TSR_GGUF_BOOL);
  put_le(w, true, v ? 1 : 0, 1);
}

void tsr_gguf_kv_str(tsr_gguf_writer_t *w, const char *key, const char *v) {
  kv_head(w, key, TSR_GGUF_STRING);
  put_str(w, true, v);
}

void tsr_gguf_kv_arr_str(tsr_gguf_writer_t *w, const char *key, const char *const *v,
                         uint64_t n) {
  kv_head(w, key, TSR_GGUF_ARRAY);
  put_le(w, true, TSR_GGUF_STRING, 4);
  put_le(w, true, n, 8);
  for (uint64_t i = 0; i < n; i++) put_str(w, true, v[i]);
}

void tsr_gguf_kv_arr_f32(tsr_gguf_writer_t *w, const char *key, const float *v, uint64_t n) {
  kv_head(w, key, TSR_GGUF_ARRAY);
  put_le(w, true, TSR_GGUF_F32, 4);
  put_le(w, true, n, 8);
  for (uint64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    put_le(w, true, u, 4);
  }
}

void tsr_gguf_kv_arr_i32(tsr_gguf_writer_t *w, const char *key, const int32_t *v,
                         uint64_t n) {
  kv_head(w, key, TSR_GGUF_ARRAY);
  put_le(w, true, TSR_GGUF_I32, 4);
  put_le(w, true, n, 8);
  for (uint64_t i = 0; i < n; i++) put_le(w, true, (uint32_t)v[i], 4);
}

void tsr_gguf_kv_raw(tsr_gguf_writer_t *w, const void *bytes, size_t n, bool count_as_kv) {
  put(w, &w->kv, &w->kv_len, &w->kv_cap, bytes, n);
  if (count_as_kv) w->n_kv++;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t tsr_gguf_writer_add_tensor(tsr_gguf_writer_t *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne) {
  uint64_t n = 1, nbytes = 0;
  put_str(w, false, name);
  put_le(w, false, n_dims, 4);
  for (uint32_t d = 0; d < n_dims; d++) {
    put_le(w, false, (uint64_t)ne[d], 8);
    n *= (uint64_t)ne[d];
  }
  put_le(w, false, type, 4);
  if (!tsr_dtype_supported(type) || !tsr_dtype_nbytes((tsr_dtype_t)type, n, &nbytes))
    nbytes = 0;
  uint64_t off = align_up(w->data_size, w->alignment);
  put_le(w, false, off, 8);
  w->data_size = off + nbytes;
  w->n_tensors++;
  return nbytes;
}

static tsr_status_t write_all(FILE *f, const void *p, size_t n, const char *what) {
  if (n && fwrite(p, 1, n, f) != n)
    return TSR_ERR(IO, "%s: write failed (disk full?)", what);
  return TSR_OK;
}

static tsr_status_t write_pad(FILE *f, uint64_t pos, uint64_t alignment, const char *what) {
  static const uint8_t zeros[64];
  uint64_t pad = (alignment - pos % alignment) % alignment;
  while (pad > 0) {
    size_t n = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
    TSR_RETURN_IF(write_all(f, zeros, n, what));
    pad -= n;
  }
  return TSR_OK;
}

tsr_status_t tsr_gguf_writer_begin(tsr_gguf_writer_t *w, FILE *f, const char *what) {
  if (w->oom) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: out of memory building the header", what);
  uint8_t h[24];
  memcpy(h, TSR_GGUF_MAGIC, 4);
  for (int i = 0; i < 4; i++) h[4 + i] = (uint8_t)(w->version >> (8 * i));
  for (int i = 0; i < 8; i++) h[8 + i] = (uint8_t)(w->n_tensors >> (8 * i));
  for (int i = 0; i < 8; i++) h[16 + i] = (uint8_t)(w->n_kv >> (8 * i));
  TSR_RETURN_IF(write_all(f, h, sizeof h, what));
  TSR_RETURN_IF(write_all(f, w->kv, w->kv_len, what));
  TSR_RETURN_IF(write_all(f, w->ti, w->ti_len, what));
  w->written = 0;
  return write_pad(f, sizeof h + w->kv_len + w->ti_len, w->alignment, what);
}

tsr_status_t tsr_gguf_writer_tensor_data(tsr_gguf_writer_t *w, FILE *f, const void *data,
                                         size_t n, bool last, const char *what) {
  TSR_RETURN_IF(write_all(f, data, n, what));
  w->written += n;
  if (!last) return TSR_OK;
  TSR_RETURN_IF(write_pad(f, w->written, w->alignment, what));
  w->written = align_up(w->written, w->alignment);
  return TSR_OK;
}

/* ---- rewriting a file ---- */

tsr_status_t tsr_gguf_rewrite(const char *in, const char *out, const tsr_gguf_writer_t *extra,
                              const char *drop_prefix, tsr_gguf_tensor_fn fn, void *arg) {
  tsr_model_file_t *mf = NULL;
  TSR_RETURN_IF(tsr_model_file_open(in, NULL, &mf)); /* a whole, valid llama file */
  if (!mf->gguf_version) {
    tsr_model_file_close(mf);
    return TSR_ERR(INVALID_ARGUMENT, "%s: not a GGUF file (llama2.c checkpoints have no "
                   "metadata to carry)", in);
  }
  gguf_ctx_t g = {.data = mf->file.data, .size = mf->file.size, .what = in};
  tsr_status_t s = parse_container(&g);
  tsr_gguf_writer_t w;
  tsr_gguf_writer_init(&w);
  w.version = g.version;
  w.alignment = g.alignment;
  const size_t drop_n = drop_prefix ? strlen(drop_prefix) : 0;
  for (uint64_t i = 0; !s && i < g.n_kv; i++) {
    const gguf_kv_t *kv = &g.kv[i];
    if (drop_n && kv->key_len >= drop_n && !memcmp(kv->key, drop_prefix, drop_n)) continue;
    const size_t end = i + 1 < g.n_kv ? g.kv[i + 1].off : g.n_tensors ? g.ti[0].off : g.data_start;
    tsr_gguf_kv_raw(&w, g.data + kv->off, end - kv->off, true);
  }
  if (!s && extra) {
    tsr_gguf_kv_raw(&w, extra->kv, extra->kv_len, false);
    w.n_kv += extra->n_kv;
  }
  char name[256];
  for (uint64_t i = 0; !s && i < g.n_tensors; i++) {
    const gguf_ti_t *t = &g.ti[i];
    if (t->name_len >= sizeof name) {
      s = TSR_ERR(OUT_OF_RANGE, "%s: tensor name of %zu bytes at offset 0x%zx", in, t->name_len,
                  t->off);
      break;
    }
    memcpy(name, t->name, t->name_len);
    name[t->name_len] = '\0';
    tsr_gguf_writer_add_tensor(&w, name, t->type, t->n_dims, t->ne);
  }
  FILE *f = NULL;
  if (!s) {
    f = fopen(out, "wb");
    if (!f) s = TSR_ERR(IO, "%s: cannot create: %s", out, strerror(errno));
  }
  if (!s) s = tsr_gguf_writer_begin(&w, f, out);
  uint8_t *buf = NULL;
  for (uint64_t i = 0; !s && i < g.n_tensors; i++) {
    const gguf_ti_t *t = &g.ti[i];
    uint8_t *nb = realloc(buf, t->nbytes ? (size_t)t->nbytes : 1);
    if (!nb) {
      s = TSR_ERR(RESOURCE_EXHAUSTED, "%s: %" PRIu64 " bytes for a tensor", out, t->nbytes);
      break;
    }
    buf = nb;
    memcpy(buf, g.data + g.data_start + t->rel, (size_t)t->nbytes);
    memcpy(name, t->name, t->name_len);
    name[t->name_len] = '\0';
    if (fn) s = fn(arg, name, t->type, t->n_dims, t->ne, buf, t->nbytes);
    if (!s) s = tsr_gguf_writer_tensor_data(&w, f, buf, (size_t)t->nbytes, true, out);
  }
  free(buf);
  if (f && fclose(f) && !s) s = TSR_ERR(IO, "%s: write failed: %s", out, strerror(errno));
  if (s && f) remove(out);
  tsr_gguf_writer_free(&w);
  ctx_free(&g);
  tsr_model_file_close(mf);
  return s;
}
