/*
 * hal_impl.h - what backends share with the registry (driver/hal.c).
 *
 * Internal to driver/: the backend vtables the registry lists and helpers
 * they share (option strings are parsed with base/options.h).
 */
#ifndef TSR_HAL_IMPL_H
#define TSR_HAL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/options.h"
#include "driver/hal.h"

/* Backends compiled into the library (driver/<name>/<name>_backend.c). */
extern const tsr_hal_vtable_t tsr_hal_sim_vtable;
extern const tsr_hal_vtable_t tsr_hal_opencl_vtable;
extern const tsr_hal_vtable_t tsr_hal_usb_vtable;
extern const tsr_hal_vtable_t tsr_hal_xrt_vtable;
extern const tsr_hal_vtable_t tsr_hal_fmodel_vtable;

/* Sets the link and launch costs of caps (link_bytes_per_s, link_latency_s,
 * launch_latency_s) to those of a PCIe Gen3 x16 board as measured with XRT:
 * ~12 GB/s, 19-32 us per buffer sync, 45-100 us per launch. For the xrt
 * backend and for the models that stand for such a board (fmodel, sim). */
void tsr_hal_caps_pcie_defaults(tsr_hal_caps_t *caps);
/* The doorbell cost of a queue-mode device without a board profile. */
void tsr_hal_caps_queue_defaults(tsr_hal_caps_t *caps);

/* Monotonic clock in nanoseconds. */
uint64_t tsr_hal_now_ns(void);

#endif /* TSR_HAL_IMPL_H */
