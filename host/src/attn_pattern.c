/*
 * attn_pattern.c - block-sparsity patterns of the int8 attention path:
 * parsing, validation, and which key blocks a query block keeps (see
 * tessera.h, tsr_attn_kind_t). Dynamic (topk) selection is in attn.c, where
 * the queries and the cache statistics are.
 */
#include <stdlib.h>
#include <string.h>

#include "attn.h"

static const char *kind_name(tsr_attn_kind_t k) {
  switch (k) {
    case TSR_ATTN_REFERENCE: return "ref";
    case TSR_ATTN_DENSE: return "dense";
    case TSR_ATTN_WINDOW: return "window";
    case TSR_ATTN_STRIDED: return "strided";
    case TSR_ATTN_TOPK: return "topk";
  }
  return "?";
}

tsr_status_t tsr_attn_pattern_check(const tsr_attn_pattern_t *p) {
  if (!p) return TSR_ERR(INVALID_ARGUMENT, "attn pattern: NULL");
  if (p->kind == TSR_ATTN_REFERENCE) return TSR_OK;
  if (p->kind < TSR_ATTN_DENSE || p->kind > TSR_ATTN_TOPK)
    return TSR_ERR(INVALID_ARGUMENT, "attn pattern: kind: unknown value %d", (int)p->kind);
  if (p->block < 1 || p->block > TSR_HW_MAX_DIM)
    return TSR_ERR(OUT_OF_RANGE, "attn pattern: block: %d outside [1, %d]", p->block,
                   TSR_HW_MAX_DIM);
  if (p->kind == TSR_ATTN_WINDOW && p->window < 1)
    return TSR_ERR(OUT_OF_RANGE, "attn pattern: window: %d, must be >= 1 block", p->window);
  if (p->kind == TSR_ATTN_WINDOW && p->sinks < 0)
    return TSR_ERR(OUT_OF_RANGE, "attn pattern: sinks: %d, must be >= 0", p->sinks);
  if (p->kind == TSR_ATTN_STRIDED && p->stride < 1)
    return TSR_ERR(OUT_OF_RANGE, "attn pattern: stride: %d, must be >= 1", p->stride);
  if (p->kind == TSR_ATTN_STRIDED && p->local < 1)
    return TSR_ERR(OUT_OF_RANGE, "attn pattern: local: %d, must be >= 1", p->local);
  if (p->kind == TSR_ATTN_TOPK && p->topk < 1)
    return TSR_ERR(OUT_OF_RANGE, "attn pattern: topk: %d, must be >= 1", p->topk);
  return TSR_OK;
}

/* Parses a decimal int32 >= 0 for `field`. */
static tsr_status_t parse_int(const char *spec, const char *field, const char *v, int32_t *out) {
  char *end = NULL;
  if (!*v || *v == '-' || *v == '+')
    return TSR_ERR(INVALID_ARGUMENT, "attn pattern '%s': %s: '%s' is not a non-negative integer",
                   spec, field, v);
  long x = strtol(v, &end, 10);
  if (*end || x > INT32_MAX)
    return TSR_ERR(INVALID_ARGUMENT, "attn pattern '%s': %s: '%s' is not a non-negative integer",
                   spec, field, v);
  *out = (int32_t)x;
  return TSR_OK;
}

tsr_status_t tsr_attn_pattern_parse(const char *spec, tsr_attn_pattern_t *out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "attn pattern: out is NULL");
  memset(out, 0, sizeof *out);
  out->block = TSR_ATTN_DEFAULT_BLOCK;
  out->local = 1;
  if (!spec || !*spec) return TSR_ERR(INVALID_ARGUMENT, "attn pattern: empty");
  char buf[256];
  if (strlen(spec) >= sizeof buf)
    return TSR_ERR(INVALID_ARGUMENT, "attn pattern: longer than %zu bytes", sizeof buf - 1);
  strcpy(buf, spec);
  bool first = true;
  for (char *item = buf, *next; item; item = next, first = false) {
    next = strchr(item, ',');
    if (next) *next++ = '\0';
    char *colon = strchr(item, ':');
    const char *val = colon ? colon + 1 : NULL;
    if (colon) *colon = '\0';
    const char *key = item;
    if (!*key)
      return TSR_ERR(INVALID_ARGUMENT, "attn pattern '%s': empty field", spec);
    int32_t *dst = NULL;
    if (first) {
      if (!strcmp(key, "ref") || !strcmp(key, "dense")) {
        out->kind = key[0] == 'r' ? TSR_ATTN_REFERENCE : TSR_ATTN_DENSE;
        if (val)
          return TSR_ERR(INVALID_ARGUMENT, "attn pattern '%s': %s: takes no value", spec, key);
        continue;
      }
      if (!strcmp(key, "window")) out->kind = TSR_ATTN_WINDOW, dst = &out->window;
      else if (!strcmp(key, "strided")) out->kind = TSR_ATTN_STRIDED, dst = &out->stride;
      else if (!strcmp(key, "topk")) out->kind = TSR_ATTN_TOPK, dst = &out->topk;
      else
        return TSR_ERR(INVALID_ARGUMENT,
                       "attn pattern '%s': kind: unknown '%s' (known: ref, dense, window:W, "
                       "strided:S, topk:K)", spec, key);
    } else if (out->kind == TSR_ATTN_REFERENCE) {
      /* The fp32 reference attention has no blocks: a field here would be
       * ignored, and lost by tsr_attn_pattern_format. */
      return TSR_ERR(INVALID_ARGUMENT,
                     "attn pattern '%s': %s: ref (the fp32 reference) takes no fields", spec,
                     key);
    } else if (!strcmp(key, "block")) {
      dst = &out->block;
    } else if (!strcmp(key, "sinks") && out->kind == TSR_ATTN_WINDOW) {
      dst = &out->sinks;
    } else if (!strcmp(key, "local") && out->kind == TSR_ATTN_STRIDED) {
      dst = &out->local;
    } else {
      return TSR_ERR(INVALID_ARGUMENT,
                     "attn pattern '%s': unknown field '%s' for %s (known: block%s)", spec, key,
                     kind_name(out->kind),
                     out->kind == TSR_ATTN_WINDOW    ? ", sinks"
                     : out->kind == TSR_ATTN_STRIDED ? ", local"
                                                     : "");
    }
    if (!val || !*val)
      return TSR_ERR(INVALID_ARGUMENT, "attn pattern '%s': %s: missing value (%s:N)", spec, key,
                     key);
    TSR_RETURN_IF(parse_int(spec, key, val, dst));
  }
  tsr_status_t s = tsr_attn_pattern_check(out);
  return s ? tsr_status_annotate(s, "'%s'", spec) : TSR_OK;
}

void tsr_attn_pattern_format(const tsr_attn_pattern_t *p, char *buf, size_t cap) {
  if (!cap) return;
  switch (p->kind) {
    case TSR_ATTN_WINDOW:
      snprintf(buf, cap, "window:%d,sinks:%d,block:%d", p->window, p->sinks, p->block);
      break;
    case TSR_ATTN_STRIDED:
      snprintf(buf, cap, "strided:%d,local:%d,block:%d", p->stride, p->local, p->block);
      break;
    case TSR_ATTN_TOPK:
      snprintf(buf, cap, "topk:%d,block:%d", p->topk, p->block);
      break;
    case TSR_ATTN_DENSE:
      snprintf(buf, cap, "dense,block:%d", p->block);
      break;
    default:
      snprintf(buf, cap, "ref");
      break;
  }
}

bool tsr_attn_static_active(const tsr_attn_pattern_t *p, int32_t qb, int32_t kb) {
  if (kb > qb || kb < 0) return false;
  switch (p->kind) {
    case TSR_ATTN_WINDOW:
      return qb - kb < p->window || kb < p->sinks;
    case TSR_ATTN_STRIDED:
      return qb - kb < p->local || kb % p->stride == p->stride - 1;
    case TSR_ATTN_TOPK: /* the diagonal only; the rest is chosen per query */
      return kb == qb;
    default:
      return true;
  }
}

int32_t tsr_attn_static_count(const tsr_attn_pattern_t *p, int32_t qb) {
  if (p->kind == TSR_ATTN_TOPK) return qb + 1 < p->topk ? qb + 1 : p->topk;
  int32_t n = 0;
  for (int32_t kb = 0; kb <= qb; kb++) n += tsr_attn_static_active(p, qb, kb);
  return n;
}
