/* options.c - table-driven parsing of "key=value,..." option strings. */
#include "base/options.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"

bool tsr_opt_next(const char **cursor, char *key, size_t key_cap, char *val, size_t val_cap,
                  tsr_status_t *err) {
  *err = TSR_OK;
  const char *p = *cursor;
  if (!p) return false;
  while (*p == ',') p++;
  if (!*p) {
    *cursor = p;
    return false;
  }
  const char *end = strchr(p, ',');
  if (!end) end = p + strlen(p);
  const char *eq = memchr(p, '=', (size_t)(end - p));
  const char *kend = eq ? eq : end;
  size_t klen = (size_t)(kend - p);
  size_t vlen = eq ? (size_t)(end - eq - 1) : 0;
  if (klen == 0 || klen >= key_cap || vlen >= val_cap) {
    *err = TSR_ERR(INVALID_ARGUMENT, "option '%.*s' is malformed or too long",
                   (int)(end - p), p);
    return false;
  }
  memcpy(key, p, klen);
  key[klen] = '\0';
  if (eq) memcpy(val, eq + 1, vlen);
  val[vlen] = '\0';
  *cursor = end;
  return true;
}

/* The multiplier of a size suffix ("K", "KB", "KiB", ...); 0 if malformed. */
static uint64_t suffix_mul(const char *end) {
  if (!*end) return 1;
  uint64_t mul;
  switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1ull << 10; break;
    case 'M': mul = 1ull << 20; break;
    case 'G': mul = 1ull << 30; break;
    default: return 0;
  }
  const char *rest = end + 1;
  if (!*rest || !strcasecmp(rest, "B") || !strcasecmp(rest, "iB")) return mul;
  return 0;
}

tsr_status_t tsr_opt_u64(const char *what, const char *key, const char *val, uint64_t lo,
                         uint64_t hi, uint64_t *out) {
  if (!val[0])
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s needs an unsigned integer value "
                   "(range [%" PRIu64 ", %" PRIu64 "])", what, key, lo, hi);
  if (val[0] == '-') {
    /* A negative number is a number outside the range, not a typo. */
    char *e = NULL;
    errno = 0;
    strtod(val, &e);
    if (e != val && !*e)
      return TSR_ERR(OUT_OF_RANGE, "%s: option %s=%s is outside [%" PRIu64 ", %" PRIu64 "]",
                     what, key, val, lo, hi);
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s='%s' is not an unsigned integer", what,
                   key, val);
  }
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(val, &end, 0);
  uint64_t mul = end && end != val ? suffix_mul(end) : 0;
  if (errno == ERANGE)
    return TSR_ERR(OUT_OF_RANGE, "%s: option %s=%s is outside [%" PRIu64 ", %" PRIu64 "]", what,
                   key, val, lo, hi);
  if (errno || end == val || mul == 0)
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s='%s' is not an unsigned integer", what,
                   key, val);
  if (v > UINT64_MAX / mul)
    return TSR_ERR(OUT_OF_RANGE, "%s: option %s=%s overflows (range [%" PRIu64 ", %" PRIu64
                   "])", what, key, val, lo, hi);
  uint64_t r = (uint64_t)v * mul;
  if (r < lo || r > hi)
    return TSR_ERR(OUT_OF_RANGE, "%s: option %s=%s is outside [%" PRIu64 ", %" PRIu64 "]", what,
                   key, val, lo, hi);
  *out = r;
  return TSR_OK;
}

tsr_status_t tsr_opt_f64(const char *what, const char *key, const char *val, double lo,
                         double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(val, &end);
  if (errno || end == val || *end || !isfinite(v))
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s='%s' is not a number (range [%g, %g])",
                   what, key, val, lo, hi);
  if (v < lo || v > hi)
    return TSR_ERR(OUT_OF_RANGE, "%s: option %s=%s is outside [%g, %g]", what, key, val, lo,
                   hi);
  *out = v;
  return TSR_OK;
}

static tsr_status_t parse_bool(const char *what, const char *key, const char *val, bool *out) {
  if (!val[0] || !strcmp(val, "1") || !strcasecmp(val, "true") || !strcasecmp(val, "yes")) {
    *out = true;
  } else if (!strcmp(val, "0") || !strcasecmp(val, "false") || !strcasecmp(val, "no")) {
    *out = false;
  } else {
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s='%s' is not a switch (give '%s' alone, or "
                   "%s=1 / %s=0)", what, key, val, key, key, key);
  }
  return TSR_OK;
}

/* Stores an unsigned value in a field of `size` bytes (the range fits it). */
static void store_u64(void *field, size_t size, uint64_t v) {
  switch (size) {
    case 1: { uint8_t x = (uint8_t)v; memcpy(field, &x, 1); break; }
    case 2: { uint16_t x = (uint16_t)v; memcpy(field, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(field, &x, 4); break; }
    default: memcpy(field, &v, 8); break;
  }
}

static tsr_status_t unknown(const char *what, const char *key, const tsr_opt_spec_t *t,
                            size_t n) {
  char known[512] = "";
  size_t used = 0;
  for (size_t i = 0; i < n && used + 1 < sizeof known; i++)
    used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                             t[i].name);
  return TSR_ERR(INVALID_ARGUMENT, "%s: unknown option '%s' (known: %s)", what, key,
                 n ? known : "none");
}

tsr_status_t tsr_opts_parse(const char *what, const tsr_opt_spec_t *table, size_t n,
                            const char *options, void *out) {
  const char *cur = options;
  char key[64], val[1024];
  tsr_status_t err = TSR_OK;
  while (tsr_opt_next(&cur, key, sizeof key, val, sizeof val, &err)) {
    const tsr_opt_spec_t *o = NULL;
    for (size_t i = 0; i < n && !o; i++)
      if (!strcmp(table[i].name, key)) o = &table[i];
    if (!o) return unknown(what, key, table, n);
    void *field = (char *)out + o->offset;
    switch (o->type) {
      case TSR_OPT_U64: {
        uint64_t v = 0;
        TSR_RETURN_IF(tsr_opt_u64(what, key, val, o->umin, o->umax, &v));
        store_u64(field, o->size, v);
        break;
      }
      case TSR_OPT_F64: {
        double v = 0;
        TSR_RETURN_IF(tsr_opt_f64(what, key, val, o->fmin, o->fmax, &v));
        memcpy(field, &v, sizeof v);
        break;
      }
      case TSR_OPT_BOOL: {
        bool v = false;
        TSR_RETURN_IF(parse_bool(what, key, val, &v));
        memcpy(field, &v, sizeof v);
        break;
      }
      case TSR_OPT_STR: {
        size_t len = strlen(val);
        if ((o->flags & TSR_OPT_NONEMPTY) && len == 0)
          return TSR_ERR(INVALID_ARGUMENT, "%s: option %s needs a value (%s)", what, key,
                         o->help);
        if (len >= o->size)
          return TSR_ERR(INVALID_ARGUMENT, "%s: option %s is too long (%zu bytes, at most %zu)",
                         what, key, len, o->size - 1);
        memcpy(field, val, len + 1);
        break;
      }
    }
  }
  if (err) return tsr_status_annotate(err, "%s", what);
  return TSR_OK;
}

/* A bound as people write it: powers of two from 2^20 on as "2^N". */
static const char *fmt_u64(uint64_t v, char *buf, size_t cap) {
  if (v >= (1ull << 20) && !(v & (v - 1))) {
    int e = 0;
    while ((1ull << e) != v) e++;
    snprintf(buf, cap, "2^%d", e);
  } else {
    snprintf(buf, cap, "%" PRIu64, v);
  }
  return buf;
}

void tsr_opts_print(FILE *f, const tsr_opt_spec_t *table, size_t n, const char *indent) {
  for (size_t i = 0; i < n; i++) {
    const tsr_opt_spec_t *o = &table[i];
    char head[96];
    switch (o->type) {
      case TSR_OPT_U64:
        if (o->umax == UINT64_MAX)
          snprintf(head, sizeof head, "%s=N (u64 >= %" PRIu64 ")", o->name, o->umin);
        else
        {
          char lo[32], hi[32];
          snprintf(head, sizeof head, "%s=N (u64 %s..%s)", o->name,
                   fmt_u64(o->umin, lo, sizeof lo), fmt_u64(o->umax, hi, sizeof hi));
        }
        break;
      case TSR_OPT_F64:
        snprintf(head, sizeof head, "%s=X (f64 %g..%g)", o->name, o->fmin, o->fmax);
        break;
      case TSR_OPT_BOOL:
        snprintf(head, sizeof head, "%s (switch)", o->name);
        break;
      case TSR_OPT_STR:
        snprintf(head, sizeof head, "%s=TEXT (string)", o->name);
        break;
    }
    fprintf(f, "%s%-34s %s\n", indent, head, o->help);
  }
}
