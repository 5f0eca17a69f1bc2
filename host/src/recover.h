/*
 * recover.h - the failure policy of device work, one for the engine
 * (exec.c) and the offload API (device_api.c).
 *
 * Internal header. A device that says it is gone (UNAVAILABLE) is not
 * retried and is given up; otherwise it is reset and the work retried up to
 * the context's `retries`; then the work falls back to the host (fallback on:
 * warned and counted) or the failure is returned. After
 * TSR_RECOVER_MAX_FAILURES failed pieces of work in a row the device is
 * given up too. The caller holds the device's lock.
 */
#ifndef TSR_RECOVER_H
#define TSR_RECOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

#define TSR_RECOVER_MAX_FAILURES 3

/* One device's standing under the policy, as one user of it sees it. */
typedef struct tsr_recover_state {
  bool usable;               /* open, and not given up                   */
  bool gone;                 /* it said it is gone (UNAVAILABLE)         */
  int consecutive_failures;
  uint64_t resets, retries, fallbacks;
} tsr_recover_state_t;

typedef struct tsr_recover_ops {
  tsr_status_t (*retry)(void *arg);  /* the work again, on the device, synchronously */
  void (*after_reset)(void *arg);    /* optional: a reset dropped the queued work     */
  void *arg;
} tsr_recover_ops_t;

/* Applies the policy to `first` (consumed), the failure of work described by
 * `what` on device `h` named `name`. Returns TSR_OK with *fall_back false when
 * a retry succeeded, TSR_OK with *fall_back true when the caller must run the
 * work on the host, or the error ("NAME failed (fallback is off): ...").
 * *retried (optional) counts the retries made. */
tsr_status_t tsr_recover(const tsr_context_t *ctx, tsr_hal_device_t *h, const char *name,
                         tsr_recover_state_t *st, tsr_status_t first,
                         const tsr_recover_ops_t *ops, const char *what, bool *fall_back,
                         uint32_t *retried);

/* The work succeeded: the failure streak ends. */
static inline void tsr_recover_ok(tsr_recover_state_t *st) { st->consecutive_failures = 0; }

/* Gives the device up if `s` says it is gone (warned once). */
void tsr_recover_note(const tsr_context_t *ctx, const char *name, tsr_recover_state_t *st,
                      const tsr_status_t s);

#endif
