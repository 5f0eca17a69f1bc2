/* fuzz_devspec.c - device lists and device specs (--device, the context's
 * `devices`): the list split and every entry's options checked against its
 * backend's table without opening anything (tsr_context_check_devices), the
 * raw string against every backend's option table, and, for lists with
 * host entries only, tsr_context_create itself, which must agree with the
 * check. No device (sim, opencl, xrt, usb, fmodel) is ever opened. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "driver/hal.h"
#include "fuzz/util.h"
#include "host/src/internal.h"

static uint64_t scratch[512];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *spec = fz_strdup(data, size);
  if (!spec) return 0;

  size_t nb = 0;
  const tsr_hal_vtable_t *const *be = tsr_hal_backends(&nb);
  for (size_t i = 0; i < nb; i++) {
    size_t need = 0;
    for (size_t j = 0; j < be[i]->n_options; j++)
      if (be[i]->options[j].offset + be[i]->options[j].size > need)
        need = be[i]->options[j].offset + be[i]->options[j].size;
    if (need > sizeof scratch) abort(); /* grow scratch with the tables */
    memset(scratch, 0, sizeof scratch);
    tsr_status_free(tsr_opts_parse(be[i]->name, be[i]->options, be[i]->n_options, spec, scratch));
  }

  int count = 0, backends = 0;
  tsr_status_t s = tsr_context_check_devices(spec, &count, &backends);
  bool check_ok = s == TSR_OK;
  tsr_status_free(s);
  if (check_ok && backends > count) abort();
  /* Without a backend's name in it, no entry can open a device: create the
   * context for real and compare. */
  bool host_only = true;
  for (size_t i = 0; i < nb; i++)
    if (strstr(spec, be[i]->name)) host_only = false;
  if (host_only) {
    tsr_context_options_t o;
    tsr_context_options_init(&o);
    o.n_threads = 1;
    o.devices = spec;
    o.quiet = true;
    tsr_context_t *ctx = NULL;
    s = tsr_context_create(&o, &ctx);
    if ((s == TSR_OK) != check_ok) {
      fprintf(stderr, "fuzz_devspec: '%s': the check says %s, creating the context %s\n", spec,
              check_ok ? "ok" : "error", s ? tsr_status_message(s) : "succeeds");
      abort();
    }
    if (ctx && tsr_context_device_count(ctx) != count) {
      fprintf(stderr, "fuzz_devspec: '%s': %d entries, the check counted %d\n", spec,
              tsr_context_device_count(ctx), count);
      abort();
    }
    tsr_status_free(s);
    tsr_context_destroy(ctx);
  }
  free(spec);
  return 0;
}
