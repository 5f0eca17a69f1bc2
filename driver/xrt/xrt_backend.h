/*
 * xrt_backend.h - what the xrt backend exposes beyond the HAL vtable, for
 * the CLI and the tests. Internal header.
 */
#ifndef TSR_XRT_BACKEND_H
#define TSR_XRT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/hal.h"

/* Number of kernel arguments, and the register offsets XRT reported for
 * them at open (xrtKernelArgOffset, regmap.def order) in out[0..cap). `dev`
 * must be an open "xrt" device. */
size_t tsr_xrt_device_arg_offsets(tsr_hal_device_t *dev, uint32_t *out, size_t cap);
/* False on XRT's noop shim: the kernel computes nothing and results read
 * back are not results. */
bool tsr_xrt_device_computes(tsr_hal_device_t *dev);
/* The xclbin that was loaded (borrowed, valid while `dev` is open). */
const char *tsr_xrt_device_xclbin(tsr_hal_device_t *dev);
/* Runs that were started on XRT and not yet waited for. */
uint32_t tsr_xrt_device_runs_in_flight(tsr_hal_device_t *dev);

#endif /* TSR_XRT_BACKEND_H */
