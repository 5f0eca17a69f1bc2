/* usb_link.c - pipelined requests with retransmission over two bulk pipes. */
#include "usb_link.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/tsr_regmap.h"

#include "driver/hal_impl.h"
#include "base/status.h"
#include "usb_proto.h"

#define LINK_MAX_WINDOW 64u

typedef struct link_slot {
  int64_t req;       /* index into the running batch, -1 when free        */
  uint32_t seq;
  uint8_t *buf;      /* header + max_payload                              */
  size_t frame_len;
  bool out_busy;     /* the transport still owns buf                      */
  bool resend;       /* send again as soon as out_busy clears             */
  unsigned tries;    /* transmissions so far                              */
  uint64_t sent_ns;  /* when the last transmission completed or started   */
  uint64_t tx_order; /* position of the last transmission on the pipe     */
} link_slot_t;

typedef struct link_rx {
  uint8_t *buf;
  bool posted;
} link_rx_t;

struct tsr_usb_link {
  tsr_usb_link_config_t cfg;
  tsr_usb_transport_t tr;
  link_slot_t slots[LINK_MAX_WINDOW];
  link_rx_t rx[LINK_MAX_WINDOW];
  size_t buf_cap;
  uint32_t next_seq;
  uint64_t tx_counter;
  bool lost;
  tsr_status_t fatal;    /* first error seen inside a completion          */
  tsr_usb_req_t *reqs;   /* the running batch (borrowed during run)       */
  size_t n_done;
  tsr_usb_stats_t st;
};

void tsr_usb_link_config_init(tsr_usb_link_config_t *cfg) {
  cfg->window = 8;
  cfg->max_payload = 64u << 10;
  cfg->timeout_ms = 100;
  cfg->max_retries = 10;
  cfg->first_seq = 1;
}

static void post_rx(tsr_usb_link_t *l, unsigned i) {
  if (l->lost) return;
  tsr_status_t s = l->tr.recv(l->tr.impl, i, l->rx[i].buf, l->buf_cap);
  if (s) {
    if (tsr_status_code(s) == TSR_STATUS_UNAVAILABLE) l->lost = true;
    if (!l->fatal) l->fatal = s; else tsr_status_free(s);
    return;
  }
  l->rx[i].posted = true;
}

tsr_status_t tsr_usb_link_create(const tsr_usb_link_config_t *cfg,
                                 const tsr_usb_transport_t *tr, tsr_usb_link_t **out) {
  *out = NULL;
  if (cfg->window < 1 || cfg->window > LINK_MAX_WINDOW)
    return TSR_ERR(INVALID_ARGUMENT, "usb: window %u outside [1, %u]", cfg->window,
                   LINK_MAX_WINDOW);
  if (cfg->max_payload < 64 || cfg->max_payload > TSR_USB_MAX_PAYLOAD)
    return TSR_ERR(INVALID_ARGUMENT, "usb: chunk %u outside [64, %u]", cfg->max_payload,
                   TSR_USB_MAX_PAYLOAD);
  tsr_usb_link_t *l = calloc(1, sizeof *l);
  if (!l) return TSR_ERR(RESOURCE_EXHAUSTED, "usb: out of host memory for the link");
  l->cfg = *cfg;
  l->tr = *tr;
  if (tr->bind) tr->bind(tr->impl, l);
  l->next_seq = cfg->first_seq;
  l->buf_cap = TSR_USB_HDR_BYTES + cfg->max_payload;
  for (unsigned i = 0; i < cfg->window; i++) {
    l->slots[i].req = -1;
    l->slots[i].buf = malloc(l->buf_cap);
    l->rx[i].buf = malloc(l->buf_cap);
    if (!l->slots[i].buf || !l->rx[i].buf) {
      tsr_usb_link_destroy(l);
      return TSR_ERR(RESOURCE_EXHAUSTED, "usb: out of host memory for %u buffers of %zu bytes",
                     2 * cfg->window, l->buf_cap);
    }
  }
  for (unsigned i = 0; i < cfg->window; i++) post_rx(l, i);
  if (l->fatal) {
    tsr_status_t s = l->fatal;
    l->fatal = TSR_OK;
    tsr_usb_link_destroy(l);
    return tsr_status_annotate(s, "usb: posting receive buffers");
  }
  *out = l;
  return TSR_OK;
}

void tsr_usb_link_destroy(tsr_usb_link_t *l) {
  if (!l) return;
  if (l->tr.cancel_all) l->tr.cancel_all(l->tr.impl);
  /* Wait (bounded) for the transport to hand every buffer back. */
  uint64_t deadline = tsr_hal_now_ns() + 1000000000ull;
  bool busy = true;
  while (busy && tsr_hal_now_ns() < deadline) {
    busy = false;
    for (unsigned i = 0; i < l->cfg.window; i++)
      if (l->rx[i].posted || l->slots[i].out_busy) busy = true;
    if (busy) {
      tsr_status_t s = l->tr.pump(l->tr.impl, 1000000);
      if (s) {
        tsr_status_free(s);
        break;
      }
    }
  }
  for (unsigned i = 0; i < l->cfg.window; i++) {
    /* A buffer the transport still owns is leaked rather than freed. */
    if (!l->rx[i].posted) free(l->rx[i].buf);
    if (!l->slots[i].out_busy) free(l->slots[i].buf);
  }
  tsr_status_free(l->fatal);
  free(l);
}

bool tsr_usb_link_lost(const tsr_usb_link_t *l) { return l->lost; }
void tsr_usb_link_stats(const tsr_usb_link_t *l, tsr_usb_stats_t *out) { *out = l->st; }
uint32_t tsr_usb_link_max_payload(const tsr_usb_link_t *l) { return l->cfg.max_payload; }

static tsr_status_t lost_status(void) {
  return TSR_ERR(UNAVAILABLE, "usb: the board is gone (unplugged, or it stopped answering the bus)");
}

/* Starts a (re)transmission of slot i. */
static tsr_status_t transmit(tsr_usb_link_t *l, unsigned i) {
  link_slot_t *s = &l->slots[i];
  const tsr_usb_req_t *r = &l->reqs[s->req];
  if (s->tries > l->cfg.max_retries)
    return TSR_ERR(DEVICE, "usb: %s (seq %" PRIu32 ", addr 0x%" PRIx64 ") unanswered after %u "
                   "transmissions", tsr_usb_type_name(r->type), s->seq, r->addr, s->tries);
  s->tries++;
  s->resend = false;
  s->out_busy = true;
  s->sent_ns = tsr_hal_now_ns();
  s->tx_order = ++l->tx_counter;
  l->st.frames_out++;
  l->st.wire_bytes += s->frame_len;
  tsr_status_t st = l->tr.send(l->tr.impl, i, s->buf, s->frame_len, l->cfg.timeout_ms * 4);
  if (st) {
    s->out_busy = false;
    if (tsr_status_code(st) == TSR_STATUS_UNAVAILABLE) l->lost = true;
    return tsr_status_annotate(st, "usb: sending %s", tsr_usb_type_name(r->type));
  }
  return TSR_OK;
}

void tsr_usb_link_sent(tsr_usb_link_t *l, unsigned slot, tsr_usb_xfer_status_t st) {
  link_slot_t *s = &l->slots[slot];
  s->out_busy = false;
  s->sent_ns = tsr_hal_now_ns();
  if (st == TSR_USB_X_GONE) {
    l->lost = true;
  } else if (st != TSR_USB_X_OK && s->req >= 0) {
    /* A frame that did not leave (timeout, stall) is sent again. */
    l->st.xfer_errors++;
    s->resend = true;
    l->st.retries++;
    l->st.retry_timeout++;
  }
}

static int find_slot(tsr_usb_link_t *l, uint32_t seq) {
  for (unsigned i = 0; i < l->cfg.window; i++)
    if (l->slots[i].req >= 0 && l->slots[i].seq == seq) return (int)i;
  return -1;
}

static void mark_resend(tsr_usb_link_t *l, int i, uint64_t *counter) {
  if (i < 0 || l->slots[i].resend) return;
  l->slots[i].resend = true;
  l->st.retries++;
  (*counter)++;
}

static void handle_frame(tsr_usb_link_t *l, const uint8_t *buf, size_t n) {
  tsr_usb_hdr_t h;
  const uint8_t *payload = NULL;
  tsr_usb_decode_t d = tsr_usb_frame_decode(buf, n, &h, &payload);
  if (d != TSR_USB_D_OK) {
    l->st.bad_in++;
    /* An intact header names the request whose answer was damaged. */
    if (d == TSR_USB_D_PAYLOAD_CRC || d == TSR_USB_D_LENGTH)
      mark_resend(l, find_slot(l, h.seq), &l->st.retry_nak);
    return;
  }
  if (h.type == TSR_USB_T_NAK) {
    mark_resend(l, find_slot(l, h.seq), &l->st.retry_nak);
    return;
  }
  int i = (h.flags & TSR_USB_F_RESP) ? find_slot(l, h.seq) : -1;
  if (i < 0) {
    l->st.dup_in++;
    return;
  }
  link_slot_t *s = &l->slots[i];
  tsr_usb_req_t *r = &l->reqs[s->req];
  if (h.type != r->type) { /* answers another command: not ours */
    l->st.bad_in++;
    return;
  }
  if (h.len > r->in_cap && !(h.flags & TSR_USB_F_ERR)) {
    if (!l->fatal)
      l->fatal = TSR_ERR(DEVICE, "usb: %s answer carries %" PRIu32 " bytes, expected at most %"
                         PRIu32, tsr_usb_type_name(r->type), h.len, r->in_cap);
    return;
  }
  r->r_flags = h.flags;
  r->r_arg0 = h.arg0;
  r->r_arg1 = h.arg1;
  r->r_len = (h.flags & TSR_USB_F_ERR) ? 0 : h.len;
  if (r->r_len) memcpy(r->in, payload, r->r_len);
  uint64_t order = s->tx_order;
  s->req = -1;
  l->n_done++;
  /* The board answers in order: an older request still unanswered was
   * lost (or its answer was), so send it again now instead of waiting. */
  for (unsigned j = 0; j < l->cfg.window; j++) {
    link_slot_t *o = &l->slots[j];
    if (o->req >= 0 && !o->out_busy && !o->resend && o->tx_order < order)
      mark_resend(l, (int)j, &l->st.retry_seq);
  }
}

void tsr_usb_link_received(tsr_usb_link_t *l, unsigned slot, size_t n,
                           tsr_usb_xfer_status_t st) {
  l->rx[slot].posted = false;
  if (st == TSR_USB_X_CANCELLED) return;
  if (st == TSR_USB_X_GONE) {
    l->lost = true;
    return;
  }
  if (st != TSR_USB_X_OK) {
    l->st.xfer_errors++;
  } else {
    l->st.frames_in++;
    l->st.wire_bytes += n;
    if (l->reqs) handle_frame(l, l->rx[slot].buf, n);
    else l->st.dup_in++; /* an answer arriving between batches */
  }
  post_rx(l, slot);
}

/* Encodes request `ri` into free slot i and sends it. */
static tsr_status_t start_request(tsr_usb_link_t *l, unsigned i, size_t ri) {
  link_slot_t *s = &l->slots[i];
  const tsr_usb_req_t *r = &l->reqs[ri];
  if (r->out_len > l->cfg.max_payload)
    return TSR_ERR(INTERNAL, "usb: %s payload of %" PRIu32 " bytes exceeds the %" PRIu32
                   "-byte chunk", tsr_usb_type_name(r->type), r->out_len, l->cfg.max_payload);
  tsr_usb_hdr_t h = {.type = r->type, .seq = l->next_seq++, .len = r->out_len,
                     .addr = r->addr, .arg0 = r->arg0, .arg1 = r->arg1};
  if (r->out_len) memcpy(s->buf + TSR_USB_HDR_BYTES, r->out, r->out_len);
  s->frame_len = tsr_usb_frame_seal(s->buf, &h);
  s->seq = h.seq;
  s->req = (int64_t)ri;
  s->tries = 0;
  return transmit(l, i);
}

static void abandon_batch(tsr_usb_link_t *l) {
  for (unsigned i = 0; i < l->cfg.window; i++) {
    l->slots[i].req = -1;
    l->slots[i].resend = false;
  }
  l->reqs = NULL;
}

tsr_status_t tsr_usb_link_run(tsr_usb_link_t *l, tsr_usb_req_t *reqs, size_t n,
                              uint64_t payload_bytes) {
  if (l->lost) return lost_status();
  l->reqs = reqs;
  l->n_done = 0;
  size_t next = 0;
  tsr_status_t s = TSR_OK;
  const uint64_t timeout_ns = (uint64_t)l->cfg.timeout_ms * 1000000ull;
  for (;;) {
    /* Resends first (oldest data), then new requests into free slots. */
    for (unsigned i = 0; !s && i < l->cfg.window; i++)
      if (l->slots[i].req >= 0 && l->slots[i].resend && !l->slots[i].out_busy)
        s = transmit(l, i);
    for (unsigned i = 0; !s && next < n && i < l->cfg.window; i++)
      if (l->slots[i].req < 0 && !l->slots[i].out_busy) s = start_request(l, i, next++);
    if (s) break;
    if (l->n_done == n) break;
    uint64_t now = tsr_hal_now_ns(), wait = 2000000;
    for (unsigned i = 0; i < l->cfg.window; i++) {
      const link_slot_t *o = &l->slots[i];
      if (o->req < 0 || o->out_busy) continue;
      uint64_t due = o->sent_ns + timeout_ns;
      uint64_t left = due > now ? due - now : 0;
      if (left < wait) wait = left;
    }
    s = l->tr.pump(l->tr.impl, wait);
    if (s) {
      if (tsr_status_code(s) == TSR_STATUS_UNAVAILABLE) l->lost = true;
      break;
    }
    if (l->fatal) {
      s = l->fatal;
      l->fatal = TSR_OK;
      break;
    }
    if (l->lost) {
      s = lost_status();
      break;
    }
    now = tsr_hal_now_ns();
    for (unsigned i = 0; i < l->cfg.window; i++) {
      link_slot_t *o = &l->slots[i];
      if (o->req >= 0 && !o->out_busy && !o->resend && now - o->sent_ns >= timeout_ns)
        mark_resend(l, (int)i, &l->st.retry_timeout);
    }
  }
  abandon_batch(l);
  if (!s) l->st.payload_bytes += payload_bytes;
  return s;
}
