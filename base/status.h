/*
 * status.h - building and propagating tsr_status_t inside the library.
 *
 * Internal header. A status is created where an error is found, with a
 * message naming what was wrong and where; callers on the way up may add
 * context with TSR_RETURN_IF_ERROR. Vendor error codes are converted at the
 * edge of each backend.
 */
#ifndef TSR_STATUS_H
#define TSR_STATUS_H

#include "tessera.h"

#if defined(__GNUC__)
#define TSR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TSR_PRINTF(a, b)
#endif

/* New status with a printf-style message. Never returns NULL: if memory is
 * exhausted, a static RESOURCE_EXHAUSTED status is returned (freeing it is a
 * no-op). `code` must not be TSR_STATUS_OK. */
tsr_status_t tsr_make_status(tsr_status_code_t code, const char *fmt, ...)
    TSR_PRINTF(2, 3);

/* Prefixes the message of `s` with "context: ". Returns `s` (possibly
 * reallocated). NULL stays NULL. Consumes `s`. */
tsr_status_t tsr_status_annotate(tsr_status_t s, const char *fmt, ...)
    TSR_PRINTF(2, 3);

/* Keeps the first error: returns `first` if it is an error (and frees
 * `second`), else `second`. Used on cleanup paths so a cleanup failure does
 * not hide the original error. Consumes both. */
tsr_status_t tsr_status_join(tsr_status_t first, tsr_status_t second);

#define TSR_ERR(code, ...) tsr_make_status(TSR_STATUS_##code, __VA_ARGS__)

/* Evaluates `expr`; on error returns it with the context message prefixed. */
#define TSR_RETURN_IF_ERROR(expr, ...)                                       \
  do {                                                                       \
    tsr_status_t tsr_status_tmp_ = (expr);                                   \
    if (tsr_status_tmp_ != TSR_OK)                                           \
      return tsr_status_annotate(tsr_status_tmp_, __VA_ARGS__);              \
  } while (0)

/* Evaluates `expr`; on error returns it unchanged. */
#define TSR_RETURN_IF(expr)                                                  \
  do {                                                                       \
    tsr_status_t tsr_status_tmp_ = (expr);                                   \
    if (tsr_status_tmp_ != TSR_OK) return tsr_status_tmp_;                   \
  } while (0)

#endif /* TSR_STATUS_H */
