/* fuzz_usb_host.c - what the host link (driver/usb/usb_link.c) does with
 * the frames a board sends back. A transport stands in for libusb: every
 * frame the link sends must decode; each receive it posts is completed
 * with the next frame of the input (fuzz/frames.h); when the input runs out
 * the device is gone. Byte 0 of the input picks the batch of requests (as
 * the backend issues them: HELLO, register and memory access, RUN, STATUS,
 * RESET), byte 1 the window; the answers are then unpacked as the backend
 * does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/usb/usb_link.h"
#include "driver/usb/usb_proto.h"
#include "fuzz/frames.h"

#define MAX_PAYLOAD 4096u
#define WINDOW_MAX 8u

typedef struct fake {
  tsr_usb_link_t *link;
  fz_frames_t in;
  bool sent[WINDOW_MAX];
  uint8_t *rx[WINDOW_MAX];
  size_t rx_cap[WINDOW_MAX];
  bool cancelled;
} fake_t;

static void tr_bind(void *impl, tsr_usb_link_t *l) { ((fake_t *)impl)->link = l; }

static tsr_status_t tr_send(void *impl, unsigned slot, uint8_t *buf, size_t n,
                            uint32_t timeout_ms) {
  fake_t *f = impl;
  tsr_usb_hdr_t h;
  const uint8_t *payload;
  if (slot >= WINDOW_MAX || tsr_usb_frame_decode(buf, n, &h, &payload) != TSR_USB_D_OK) {
    fprintf(stderr, "fuzz_usb_host: the link sent a frame that does not decode\n");
    abort();
  }
  f->sent[slot] = true;
  return TSR_OK;
}

static tsr_status_t tr_recv(void *impl, unsigned slot, uint8_t *buf, size_t cap) {
  fake_t *f = impl;
  if (slot >= WINDOW_MAX) abort();
  f->rx[slot] = buf;
  f->rx_cap[slot] = cap;
  return TSR_OK;
}

static tsr_status_t tr_pump(void *impl, uint64_t timeout_ns) {
  fake_t *f = impl;
  for (unsigned i = 0; i < WINDOW_MAX; i++)
    if (f->sent[i]) {
      f->sent[i] = false;
      tsr_usb_link_sent(f->link, i, TSR_USB_X_OK);
    }
  for (unsigned i = 0; i < WINDOW_MAX; i++) {
    if (!f->rx[i]) continue;
    uint8_t *buf = f->rx[i];
    f->rx[i] = NULL;
    if (f->cancelled) {
      tsr_usb_link_received(f->link, i, 0, TSR_USB_X_CANCELLED);
      continue;
    }
    const uint8_t *frame;
    size_t n;
    unsigned flags;
    if (!fz_next_frame(&f->in, &frame, &n, &flags)) {
      tsr_usb_link_received(f->link, i, 0, TSR_USB_X_GONE);
      return TSR_OK;
    }
    n = fz_copy_frame(buf, f->rx_cap[i], frame, n, flags);
    tsr_usb_link_received(f->link, i, n,
                          (flags & FZ_XFER_ERROR) ? TSR_USB_X_ERROR : TSR_USB_X_OK);
    return TSR_OK;
  }
  return TSR_OK;
}

static void tr_cancel_all(void *impl) { ((fake_t *)impl)->cancelled = true; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  fake_t f = {.in = {data + 2, data + size}};
  tsr_usb_transport_t tr = {.impl = &f, .bind = tr_bind, .send = tr_send, .recv = tr_recv,
                            .pump = tr_pump, .cancel_all = tr_cancel_all};
  tsr_usb_link_config_t cfg;
  tsr_usb_link_config_init(&cfg);
  cfg.window = 1 + data[1] % WINDOW_MAX;
  cfg.max_payload = MAX_PAYLOAD;
  cfg.timeout_ms = 1;
  cfg.max_retries = 3;
  tsr_usb_link_t *l = NULL;
  tsr_status_t s = tsr_usb_link_create(&cfg, &tr, &l);
  if (s) {
    fprintf(stderr, "fuzz_usb_host: link: %s\n", tsr_status_message(s));
    abort();
  }

  static uint8_t info[TSR_USB_INFO_BYTES], res[TSR_USB_RESULT_BYTES], mem[256], wr[128],
      run[TSR_USB_RUN_BYTES];
  tsr_hal_command_t cmd = {.window_base = 0x80000000u, .window_size = 1u << 20,
                           .ring = 0x80000000u, .n_desc = 1};
  tsr_usb_run_pack(run, &cmd);
  const tsr_usb_req_t all[] = {
      {.type = TSR_USB_T_HELLO, .arg0 = 0x1234, .in = info, .in_cap = sizeof info},
      {.type = TSR_USB_T_REG_READ, .addr = 0x10},
      {.type = TSR_USB_T_MEM_READ, .addr = 0x80000000u, .arg0 = sizeof mem, .in = mem,
       .in_cap = sizeof mem},
      {.type = TSR_USB_T_MEM_WRITE, .addr = 0x80000000u, .out = wr, .out_len = sizeof wr},
      {.type = TSR_USB_T_RUN, .out = run, .out_len = sizeof run},
      {.type = TSR_USB_T_STATUS, .arg0 = 1, .in = res, .in_cap = sizeof res},
      {.type = TSR_USB_T_REG_WRITE, .addr = 0x00, .arg0 = 1},
      {.type = TSR_USB_T_RESET},
  };
  tsr_usb_req_t reqs[8];
  size_t n = 0;
  for (unsigned i = 0; i < 8; i++)
    if (data[0] >> i & 1) reqs[n++] = all[i];
  if (!n) reqs[n++] = all[0];
  /* Two batches: the second starts where the first left the sequence. */
  for (int batch = 0; batch < 2; batch++) {
    s = tsr_usb_link_run(l, reqs, n, 0);
    if (s) {
      tsr_status_free(s);
      break;
    }
    for (size_t i = 0; i < n; i++) {
      if (reqs[i].r_len > reqs[i].in_cap) {
        fprintf(stderr, "fuzz_usb_host: %u bytes copied into %u\n", reqs[i].r_len,
                reqs[i].in_cap);
        abort();
      }
      if (reqs[i].type == TSR_USB_T_HELLO && reqs[i].r_len == TSR_USB_INFO_BYTES) {
        tsr_usb_info_t in;
        tsr_usb_info_unpack(&in, info);
        if (memchr(in.kind, 0, sizeof in.kind) == NULL) abort();
      }
      if (reqs[i].type == TSR_USB_T_STATUS && reqs[i].r_len == TSR_USB_RESULT_BYTES) {
        tsr_hal_result_t hr;
        tsr_usb_result_unpack(&hr, res);
      }
      reqs[i].r_flags = 0;
      reqs[i].r_len = 0;
    }
  }
  tsr_usb_stats_t st;
  tsr_usb_link_stats(l, &st);
  tsr_usb_link_destroy(l);
  return 0;
}
