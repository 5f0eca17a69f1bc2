/*
 * devmem.h - an allocator for a flat device memory.
 *
 * Internal header, shared by the backends, which all hand out device
 * addresses themselves. It only does bookkeeping over the address range
 * [base, base + size): it never touches the memory. Blocks are kept in one
 * address-ordered list of segments, each used or free; allocation is
 * best-fit (the smallest free segment that holds the request after
 * alignment padding, lowest address on ties), freeing coalesces with free
 * neighbours. Thread-safe: every call takes the allocator's own mutex, since
 * HAL calls on one device may come from any thread.
 */
#ifndef TSR_DEVMEM_H
#define TSR_DEVMEM_H

#include <stdbool.h>
#include <stdint.h>

#include "driver/hal.h"
#include "tessera.h"

typedef struct tsr_devmem tsr_devmem_t;

/* Smallest alignment any allocation gets (one descriptor, one cache line). */
#define TSR_DEVMEM_MIN_ALIGN 64u

/* Creates an allocator over [base, base + size). `base` must be a multiple
 * of TSR_DEVMEM_MIN_ALIGN and size > 0. The caller owns *out
 * (tsr_devmem_destroy). */
tsr_status_t tsr_devmem_create(uint64_t base, uint64_t size, tsr_devmem_t **out);
/* Releases the bookkeeping. NULL is accepted. */
void tsr_devmem_destroy(tsr_devmem_t *dm);

/* Reserves `size` bytes (> 0) at an address that is a multiple of `align`
 * (a power of two; 0 and values below TSR_DEVMEM_MIN_ALIGN mean
 * TSR_DEVMEM_MIN_ALIGN). Sizes are rounded up to TSR_DEVMEM_MIN_ALIGN
 * internally; *out_addr gets the address. RESOURCE_EXHAUSTED when no free
 * segment fits (the message gives the largest free block), INVALID_ARGUMENT
 * for a zero size or a bad alignment. */
tsr_status_t tsr_devmem_alloc(tsr_devmem_t *dm, uint64_t size, uint64_t align,
                              uint64_t *out_addr);
/* Releases the allocation that starts at `addr`. INVALID_ARGUMENT if no
 * allocation starts there (double free, stray address). */
tsr_status_t tsr_devmem_free(tsr_devmem_t *dm, uint64_t addr);

/* True if [addr, addr + n) lies inside one live allocation; n may be 0. */
bool tsr_devmem_contains(const tsr_devmem_t *dm, uint64_t addr, uint64_t n);
/* Size (as requested, before rounding) of the allocation starting at `addr`,
 * or 0 if none starts there. */
uint64_t tsr_devmem_size_of(const tsr_devmem_t *dm, uint64_t addr);

/* HAL buffers over the allocator: what every backend's alloc(), free() and
 * range check for write()/read() share. Messages start with `backend`
 * (e.g. "fmodel"); checks a backend needs first (a lost device) stay in the
 * backend. */

/* Allocates like tsr_devmem_alloc and fills *out (addr, size as requested,
 * impl NULL). *out is zeroed first, so it is empty on error. */
tsr_status_t tsr_devmem_buffer_alloc(tsr_devmem_t *dm, const char *backend, uint64_t size,
                                     uint64_t align, tsr_hal_buffer_t *out);
/* Releases buf's allocation and clears buf->addr and buf->size. NULL and
 * empty (size 0) buffers are ignored; a stray buffer is ignored too. */
void tsr_devmem_buffer_free(tsr_devmem_t *dm, tsr_hal_buffer_t *buf);
/* Validates a copy (`what`: "write" or "read") of n bytes at
 * buf->addr + offset: INVALID_ARGUMENT for a NULL buffer or one that is not
 * a live allocation of exactly buf->size bytes, OUT_OF_RANGE when the copy
 * overruns the buffer. */
tsr_status_t tsr_devmem_check_copy(const tsr_devmem_t *dm, const char *backend,
                                   const tsr_hal_buffer_t *buf, uint64_t offset, size_t n,
                                   const char *what);

/* Statistics: bytes in use (rounded sizes plus nothing else), bytes free,
 * the largest free segment, and the number of live allocations. */
typedef struct tsr_devmem_stats {
  uint64_t used, free, largest_free;
  uint32_t n_allocs, n_segments;
} tsr_devmem_stats_t;
void tsr_devmem_stats(const tsr_devmem_t *dm, tsr_devmem_stats_t *out);

/* Frees every allocation at once (the memory range becomes one free
 * segment). */
void tsr_devmem_reset(tsr_devmem_t *dm);

#endif /* TSR_DEVMEM_H */
