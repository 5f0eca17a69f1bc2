/*
 * devio.h - the executor's calls into the HAL, wrapped with their
 * accounting and tracing.
 *
 * Internal header. Every host<->device copy, launch and wait of the engine
 * goes through these, so the data path (exec.c) never counts bytes or
 * writes trace events itself: copies are counted for the link model
 * (weights excluded by the caller's `count` flag), launches and cycles for
 * the board projection, waits as host wall time (simulation time for sim,
 * never reported as hardware time). The caller holds the device's lock.
 */
#ifndef TSR_DEVIO_H
#define TSR_DEVIO_H

#include "offload.h"

/* Host -> device copy of n bytes at buf + off. `count` adds it to the
 * device's transfer counters (false for the one-time weight upload). */
tsr_status_t tsr_dio_write(tsr_exec_t *o, tsr_exec_dev_t *d, const tsr_hal_buffer_t *buf,
                           uint64_t off, const void *src, size_t n, bool count);
/* Device -> host copy, always counted. */
tsr_status_t tsr_dio_read(tsr_exec_t *o, tsr_exec_dev_t *d, const tsr_hal_buffer_t *buf,
                          uint64_t off, void *dst, size_t n);
/* Queues a launch of cmd; *fence identifies it. `what` names it in the
 * trace. */
tsr_status_t tsr_dio_submit(tsr_exec_t *o, tsr_exec_dev_t *d, const tsr_hal_command_t *cmd,
                            uint64_t *fence);
/* Waits for `fence` (the context's device timeout); a kernel that refused
 * a descriptor is a DEVICE error naming it. On success counts the launch,
 * its cycles and descriptors, and fills *res. */
tsr_status_t tsr_dio_wait(tsr_exec_t *o, tsr_exec_dev_t *d, uint64_t fence, const char *what,
                          tsr_hal_result_t *res);
/* Queue mode: publishes the running queue's descriptors up to `tail`
 * (counts a doorbell, and the host time before it that hides its latency,
 * as tsr_dio_submit does for a launch). */
tsr_status_t tsr_dio_doorbell(tsr_exec_t *o, tsr_exec_dev_t *d, uint32_t tail);
/* Queue mode: waits until the running queue has done `done` descriptors;
 * *res gets what they did since the last progress (cycles, descriptors,
 * bytes), counted as tsr_dio_wait counts a launch's. A refusal is a DEVICE
 * error naming the descriptor, as for a launch. */
tsr_status_t tsr_dio_progress(tsr_exec_t *o, tsr_exec_dev_t *d, uint32_t done, const char *what,
                              tsr_hal_result_t *res);
/* Device memory (not counted as transfers). */
tsr_status_t tsr_dio_alloc(tsr_exec_dev_t *d, uint64_t size, tsr_hal_buffer_t *out);
void tsr_dio_free(tsr_exec_dev_t *d, tsr_hal_buffer_t *buf);

#endif
