/* hal.c - the backend registry, open-spec parsing and shared helpers. */
#include <inttypes.h>
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

/* The backend a spec names ("name" or "name:options"); *options points
 * after the colon (NULL without one). */
static tsr_status_t find_spec(const char *spec, const tsr_hal_vtable_t **out_vt,
                              const char **options) {
  *out_vt = NULL;
  *options = NULL;
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
  *out_vt = vt;
  *options = colon ? colon + 1 : NULL;
  return TSR_OK;
}

tsr_status_t tsr_hal_open(const char *spec, tsr_hal_device_t **out) {
  *out = NULL;
  const tsr_hal_vtable_t *vt;
  const char *options;
  TSR_RETURN_IF(find_spec(spec, &vt, &options));
  tsr_hal_open_params_t params = {.index = 0, .options = options};
  TSR_RETURN_IF_ERROR(vt->open(&params, out), "opening device '%s'", spec);
  return TSR_OK;
}

tsr_status_t tsr_hal_check_spec(const char *spec) {
  const tsr_hal_vtable_t *vt;
  const char *options;
  TSR_RETURN_IF(find_spec(spec, &vt, &options));
  /* The values go to a scratch struct as large as the table addresses. */
  size_t need = 1;
  for (size_t i = 0; i < vt->n_options; i++) {
    size_t end = vt->options[i].offset + vt->options[i].size;
    if (end > need) need = end;
  }
  void *scratch = calloc(1, need + sizeof(uint64_t));
  if (!scratch) return TSR_ERR(RESOURCE_EXHAUSTED, "device spec '%s': out of memory", spec);
  tsr_status_t s = tsr_opts_parse(vt->name, vt->options, vt->n_options, options, scratch);
  free(scratch);
  return s ? tsr_status_annotate(s, "device spec '%s'", spec) : TSR_OK;
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

void tsr_hal_caps_pcie_defaults(tsr_hal_caps_t *caps) {
  caps->link_bytes_per_s = 12e9;
  caps->link_latency_s = 25e-6;
  caps->launch_latency_s = 70e-6;
}

void tsr_hal_caps_queue_defaults(tsr_hal_caps_t *caps) {
  caps->doorbell_latency_s = 2e-6; /* a posted register write and one read (driver/README.md) */
}

uint64_t tsr_hal_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
