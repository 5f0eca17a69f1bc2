/*
 * clock.h - the monotonic clock every layer reads host wall time from.
 *
 * Internal header (base layer). Host wall time only: device time is cycles,
 * reported by the devices themselves.
 */
#ifndef TSR_CLOCK_H
#define TSR_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (arbitrary origin). */
double tsr_now_s(void);

#endif
