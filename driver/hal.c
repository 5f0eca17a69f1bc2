/* hal.c - the backend registry, open-spec parsing and shared helpers. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/hal_impl.h"
#include "base/status.h"
#include "driver/tsr_regmap.h"

/* Preference order: real devices first, the functional model last. */
static const tsr_hal_vtable_t *const backends[] = {
    &tsr_hal_sim_vtable,
    &tsr_hal_opencl_vtable,
    &tsr_hal_usb_vtable,
    &tsr_hal_xrt_vtable,
    &tsr_hal_fmodel_vtable,
};

const tsr_hal_vtable_t *const *tsr_hal_backends(size_t *count) {
  *count = sizeof backends / sizeof backends[0];
  return backends;
}

const tsr_hal_vtable_t *tsr_hal_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
    if (!strcmp(backends[i]->name, name)) return backends[i];
  return NULL;
}

tsr_status_t tsr_hal_open(const char *spec, tsr_hal_device_t **out) {
  *out = NULL;
  if (!spec || !*spec) return TSR_ERR(INVALID_ARGUMENT, "empty device name");
  const char *colon = strchr(spec, ':');
  size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
  char name[32];
  if (name_len == 0 || name_len >= sizeof name)
    return TSR_ERR(INVALID_ARGUMENT, "device spec '%s': bad backend name", spec);
  memcpy(name, spec, name_len);
  name[name_len] = '\0';
  const tsr_hal_vtable_t *vt = tsr_hal_find(name);
  if (!vt && !strcmp(name, "cpu"))
    return TSR_ERR(NOT_FOUND, "device spec '%s': 'cpu' is the host, not a HAL backend; the "
                   "kernel's functional model is 'fmodel' (e.g. 'fmodel%s')", spec,
                   colon ? colon : "");
  if (!vt) {
    char known[128] = "";
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
      if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
      strncat(known, backends[i]->name, sizeof known - strlen(known) - 1);
    }
    return TSR_ERR(NOT_FOUND, "unknown device backend '%s' (known: %s)", name, known);
  }
  tsr_hal_open_params_t params = {.index = 0, .options = colon ? colon + 1 : NULL};
  TSR_RETURN_IF_ERROR(vt->open(&params, out), "opening device '%s'", spec);
  return TSR_OK;
}

const char *tsr_hal_hwerr_name(uint32_t code) {
  switch (code) {
#define TSR_REG(name, off, acc, desc)
#define TSR_ARG(name, off, bits, kind, desc)
#define TSR_STAT(name, off, bits, desc)
#define TSR_DESC(name, off, bits, desc)
#define TSR_CONST(name, val, desc)
#define TSR_OP(name, val, desc)
#define TSR_HWERR(name, val, desc) \
  case val:                      \
    return #name " (" desc ")";
#include "../hw/regmap.def"
#undef TSR_REG
#undef TSR_ARG
#undef TSR_STAT
#undef TSR_DESC
#undef TSR_CONST
#undef TSR_OP
#undef TSR_HWERR
    default:
      return "unknown hardware error code";
  }
}

bool tsr_hal_opt_next(const char **cursor, char *key, size_t key_cap, char *val,
                      size_t val_cap, tsr_status_t *err) {
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

tsr_status_t tsr_hal_opt_u64(const char *backend, const char *key, const char *val,
                             uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (!val[0] || val[0] == '-')
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s='%s' needs an unsigned integer",
                   backend, key, val);
  unsigned long long v = strtoull(val, &end, 0);
  uint64_t mul = 1;
  if (end && *end) {
    switch (toupper((unsigned char)*end)) {
      case 'K': mul = 1ull << 10; break;
      case 'M': mul = 1ull << 20; break;
      case 'G': mul = 1ull << 30; break;
      default: mul = 0;
    }
    if (mul && end[1] != '\0' && !(toupper((unsigned char)end[1]) == 'I' &&
                                   toupper((unsigned char)end[2]) == 'B' && !end[3]) &&
        !(toupper((unsigned char)end[1]) == 'B' && !end[2]))
      mul = 0;
  }
  if (errno || end == val || mul == 0)
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s='%s' is not an unsigned integer",
                   backend, key, val);
  if (v > UINT64_MAX / mul)
    return TSR_ERR(OUT_OF_RANGE, "%s: option %s='%s' overflows", backend, key, val);
  uint64_t r = (uint64_t)v * mul;
  if (r < lo || r > hi)
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: option %s=%" PRIu64 " is outside [%" PRIu64 ", %" PRIu64 "]", backend,
                   key, r, lo, hi);
  *out = r;
  return TSR_OK;
}

tsr_status_t tsr_hal_opt_f64(const char *backend, const char *key, const char *val,
                             double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(val, &end);
  if (errno || end == val || *end || !isfinite(v))
    return TSR_ERR(INVALID_ARGUMENT, "%s: option %s='%s' is not a number", backend, key,
                   val);
  if (v < lo || v > hi)
    return TSR_ERR(OUT_OF_RANGE, "%s: option %s=%g is outside [%g, %g]", backend, key, v,
                   lo, hi);
  *out = v;
  return TSR_OK;
}

void tsr_hal_caps_pcie_defaults(tsr_hal_caps_t *caps) {
  caps->link_bytes_per_s = 12e9;
  caps->link_latency_s = 25e-6;
  caps->launch_latency_s = 70e-6;
}

uint64_t tsr_hal_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
