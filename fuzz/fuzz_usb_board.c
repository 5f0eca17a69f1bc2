/* fuzz_usb_board.c - what the emulated board (sim/usb_board) does with the
 * frames a host sends. One board (the functional model behind it, 16 KiB
 * of device memory) serves every input; each input starts with a HELLO and
 * a RESET (a new session), then its frames (fuzz/frames.h) are received
 * one by one and every answer the board transmits must decode. At the end
 * the harness waits (bounded) until the board's launch queue is idle, so a
 * launch an input queued does not run into the next input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/tsr_regmap.h"
#include "driver/usb/usb_proto.h"
#include "fuzz/frames.h"
#include "sim/usb_board/usb_board.h"

#define BUF_BYTES (TSR_USB_HDR_BYTES + TSR_USB_MAX_PAYLOAD)

static tsr_usb_board_t *board;
static uint8_t *frame_buf, *tx_buf;

static void drain(void) {
  size_t n;
  while ((n = tsr_usb_board_transmit(board, tx_buf, BUF_BYTES)) > 0) {
    tsr_usb_hdr_t h;
    const uint8_t *payload;
    tsr_usb_decode_t d = tsr_usb_frame_decode(tx_buf, n, &h, &payload);
    if (d != TSR_USB_D_OK || !(h.flags & TSR_USB_F_RESP)) {
      fprintf(stderr, "fuzz_usb_board: the board sent a bad frame (decode %d, flags 0x%x)\n",
              (int)d, h.flags);
      abort();
    }
  }
}

static void send_cmd(uint8_t type, uint32_t seq, uint64_t addr, uint32_t arg0) {
  tsr_usb_hdr_t h = {.type = type, .seq = seq, .addr = addr, .arg0 = arg0};
  size_t n = tsr_usb_frame_encode(frame_buf, BUF_BYTES, &h, NULL);
  tsr_usb_board_receive(board, frame_buf, n);
}

/* Whether the launch queue is empty: ap_idle of the control register. */
static bool idle(void) {
  static uint32_t seq = 0x80000000u; /* fresh each time: never a replay */
  send_cmd(TSR_USB_T_REG_READ, seq++, TSR_REG_CTRL, 0);
  size_t n = tsr_usb_board_transmit(board, tx_buf, BUF_BYTES);
  tsr_usb_hdr_t h;
  const uint8_t *payload;
  if (!n || tsr_usb_frame_decode(tx_buf, n, &h, &payload) != TSR_USB_D_OK) return false;
  drain();
  return (h.arg0 & TSR_CTRL_AP_IDLE) != 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!board) {
    tsr_usb_board_config_t cfg = {.engine = "fmodel:mem=1M", .kind = "model",
                                  .mem_size = 16 << 10, .queue_depth = 4};
    tsr_status_t s = tsr_usb_board_create(&cfg, &board);
    frame_buf = malloc(BUF_BYTES);
    tx_buf = malloc(BUF_BYTES);
    if (s || !frame_buf || !tx_buf) {
      fprintf(stderr, "fuzz_usb_board: board: %s\n", s ? tsr_status_message(s) : "no memory");
      abort();
    }
  }
  send_cmd(TSR_USB_T_HELLO, 0, 0, 0);
  send_cmd(TSR_USB_T_RESET, 0x7ffffff0u, 0, 0);
  drain();

  fz_frames_t it = {data, data + size};
  const uint8_t *frame;
  size_t n;
  unsigned flags;
  while (fz_next_frame(&it, &frame, &n, &flags)) {
    n = fz_copy_frame(frame_buf, BUF_BYTES, frame, n, flags);
    tsr_usb_board_receive(board, frame_buf, n);
    drain();
  }

  for (uint32_t i = 0; i < 20000 && !idle(); i++) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return 0;
}
