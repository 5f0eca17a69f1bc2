/*
 * usb_board.h - the firmware of an emulated tessera USB board.
 *
 * Not part of libtessera. A board answers the protocol of
 * driver/usb/usb_proto.h: it takes the frames the host sends on the bulk
 * OUT pipe (tsr_usb_board_receive) and hands out the frames for the bulk IN
 * pipe (tsr_usb_board_transmit). Behind it sits a HAL device used as the
 * kernel: "fmodel" (the functional model, driver/kernel_model) or "sim" (the
 * Verilator RTL), so the board computes exactly what those backends do.
 * Launches run on a worker thread of the board; STATUS reports on them.
 *
 * Fault injection (TSR_USB_FAULTS syntax, "key=value,..."):
 *   drop=P, corrupt=P, dup=P, delay=P   probability per frame (0..1)
 *   drop_at=N[:N...], corrupt_at=, dup_at=, delay_at=
 *                                       the N-th frame (1-based, counting
 *                                       frames of both directions in the
 *                                       order the board sees them)
 *   delay_ms=MS                         hold a delayed frame this long (20)
 *   unplug_at=N                         the board disappears at frame N
 *   dir=both|out|in                     which direction rates apply to
 *   seed=S                              random seed (default 1)
 * A dropped OUT frame is never processed; a dropped IN frame is never
 * delivered; a corrupted frame has one bit flipped; a duplicated OUT frame
 * is processed twice (the replay cache answers the second), a duplicated IN
 * frame delivered twice; a delayed IN frame is held while later frames pass.
 *
 * Thread-safe: receive/transmit may come from one thread while launches
 * finish on the worker.
 */
#ifndef TSR_USB_BOARD_H
#define TSR_USB_BOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

typedef struct tsr_usb_board tsr_usb_board_t;

typedef struct tsr_usb_board_config {
  const char *engine;   /* HAL spec of the kernel, e.g. "fmodel:mem=128M" */
  const char *kind;     /* reported to the host: "model" or "rtl"     */
  uint64_t mem_size;    /* device memory the board offers             */
  const char *faults;   /* fault spec as above, NULL for none         */
  uint32_t queue_depth; /* launches queued before BUSY (default 16)   */
} tsr_usb_board_config_t;

typedef struct tsr_usb_board_stats {
  uint64_t frames_rx, frames_tx;   /* frames seen on OUT / sent on IN      */
  uint64_t bad_rx;                 /* OUT frames dropped for CRC/format    */
  uint64_t naks;                   /* NAKs sent                            */
  uint64_t replays;                /* answers served from the replay cache */
  uint64_t launches;               /* launches run                         */
  uint64_t inj_drop, inj_corrupt, inj_dup, inj_delay; /* faults injected  */
} tsr_usb_board_stats_t;

/* Creates a board: opens the engine, allocates its memory, starts the
 * worker. `cfg` borrowed. The caller owns *out. */
tsr_status_t tsr_usb_board_create(const tsr_usb_board_config_t *cfg, tsr_usb_board_t **out);
/* Stops the worker and releases everything. NULL is accepted. */
void tsr_usb_board_destroy(tsr_usb_board_t *b);

/* A frame the host sent (one OUT transfer). `frame` borrowed. */
void tsr_usb_board_receive(tsr_usb_board_t *b, const uint8_t *frame, size_t n);
/* Copies the next frame for the host into `buf` (one IN transfer of `cap`
 * bytes) and returns its size, or 0 when nothing is ready. */
size_t tsr_usb_board_transmit(tsr_usb_board_t *b, uint8_t *buf, size_t cap);

/* True once the board was unplugged (fault unplug_at, or _unplug()). */
bool tsr_usb_board_unplugged(tsr_usb_board_t *b);
void tsr_usb_board_unplug(tsr_usb_board_t *b);

void tsr_usb_board_stats(tsr_usb_board_t *b, tsr_usb_board_stats_t *out);

#endif /* TSR_USB_BOARD_H */
