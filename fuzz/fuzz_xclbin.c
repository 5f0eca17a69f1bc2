/* fuzz_xclbin.c - xclbin (axlf) files: the reader's validation, then what
 * the XRT backend and `tessera xclbin` do with a file that passes (find the
 * kernel, its control protocol, the register-map check, the listing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver/xrt/tsr_xclbin.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!sink) sink = fopen("/dev/null", "w");
  tsr_xclbin_info_t *info = NULL;
  tsr_status_t s = tsr_xclbin_parse(data, size, "fuzz.xclbin", &info);
  if (s) {
    tsr_status_free(s);
    if (info) abort(); /* an error leaves *out NULL */
    return 0;
  }
  const tsr_xclbin_kernel_t *k = tsr_xclbin_find_kernel(info, NULL);
  if (!k) k = tsr_xclbin_find_kernel(info, TSR_XCLBIN_KERNEL_NAME);
  if (k) {
    (void)tsr_xclbin_kernel_ctrl(info, k);
    tsr_status_free(tsr_xclbin_check_regmap(k));
  }
  if (sink) tsr_xclbin_print(info, sink);
  tsr_xclbin_info_free(info);
  return 0;
}
