/*
 * hal_impl.h - what backends share with the registry (driver/hal.c).
 *
 * Internal to driver/: the backend vtables the registry lists, and a small
 * parser for the "key=value,key=value" option strings of open().
 */
#ifndef TSR_HAL_IMPL_H
#define TSR_HAL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/hal.h"

/* Backends compiled into the library (driver/<name>/<name>_backend.c). */
extern const tsr_hal_vtable_t tsr_hal_sim_vtable;
extern const tsr_hal_vtable_t tsr_hal_opencl_vtable;
extern const tsr_hal_vtable_t tsr_hal_usb_vtable;
extern const tsr_hal_vtable_t tsr_hal_xrt_vtable;
extern const tsr_hal_vtable_t tsr_hal_fmodel_vtable;

/* Iterates an option string. Start with *cursor = options (NULL or "" is an
 * empty list). Each call copies the next key and value (value "" for a bare
 * "key") and returns true; returns false at the end. A key or value too long
 * for its buffer gives *err (INVALID_ARGUMENT) and false. */
bool tsr_hal_opt_next(const char **cursor, char *key, size_t key_cap, char *val,
                      size_t val_cap, tsr_status_t *err);

/* Parses an unsigned integer option value with an optional K/M/G suffix
 * (powers of 1024) into [lo, hi]. Messages name the backend and key. */
tsr_status_t tsr_hal_opt_u64(const char *backend, const char *key, const char *val,
                             uint64_t lo, uint64_t hi, uint64_t *out);
/* Parses a floating-point option value into [lo, hi]. */
tsr_status_t tsr_hal_opt_f64(const char *backend, const char *key, const char *val,
                             double lo, double hi, double *out);

/* Sets the link and launch costs of caps (link_bytes_per_s, link_latency_s,
 * launch_latency_s) to those of a PCIe Gen3 x16 board as measured with XRT:
 * ~12 GB/s, 19-32 us per buffer sync, 45-100 us per launch. For the xrt
 * backend and for the models that stand for such a board (fmodel, sim). */
void tsr_hal_caps_pcie_defaults(tsr_hal_caps_t *caps);

/* Monotonic clock in nanoseconds. */
uint64_t tsr_hal_now_ns(void);

#endif /* TSR_HAL_IMPL_H */
