/* usb_board.c - protocol engine, launch queue and fault injection of the
 * emulated USB board. */
#include "usb_board.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/tsr_regmap.h"

#include "driver/hal.h"
#include "driver/kernel_model.h"
#include "driver/hal_impl.h"
#include "base/options.h"
#include "base/status.h"
#include "driver/usb/usb_proto.h"

#define BOARD_REPLAY 1024u     /* answers kept for resent commands      */
#define BOARD_TAGS 4096u       /* launch results kept for STATUS        */
#define BOARD_SMALL 128u       /* largest cached answer payload         */
#define BOARD_MAX_AT 16u

typedef struct fault_cfg {
  double p_drop, p_corrupt, p_dup, p_delay;
  uint64_t at_drop[BOARD_MAX_AT], at_corrupt[BOARD_MAX_AT], at_dup[BOARD_MAX_AT],
      at_delay[BOARD_MAX_AT];
  unsigned n_drop, n_corrupt, n_dup, n_delay;
  uint64_t delay_ms, unplug_at, seed;
  bool rate_out, rate_in;
} fault_cfg_t;

typedef struct tx_frame {
  struct tx_frame *next;
  uint64_t ready_ns;
  bool faulted; /* faults already decided for this frame */
  size_t len;
  uint8_t data[];
} tx_frame_t;

typedef struct replay {
  bool valid;
  uint32_t seq;
  size_t len;
  uint8_t frame[TSR_USB_HDR_BYTES + BOARD_SMALL];
} replay_t;

typedef struct launch {
  uint32_t tag;
  uint32_t state; /* TSR_USB_L_* or 0 for an unused entry */
  tsr_hal_command_t cmd;
  tsr_hal_result_t res;
} launch_t;

struct tsr_usb_board {
  tsr_usb_board_config_t cfg;
  char kind[20];
  fault_cfg_t f;
  uint64_t rng;

  /* the kernel behind the board; dev_mu serializes HAL calls */
  tsr_hal_device_t *dev;
  tsr_hal_buffer_t mem;
  tsr_hal_caps_t caps;
  pthread_mutex_t dev_mu;

  pthread_mutex_t mu; /* everything below */
  pthread_cond_t cv;
  pthread_t worker;
  bool worker_started, stop, unplugged;
  uint64_t frames; /* both directions, for *_at faults */
  tx_frame_t *tx_head, *tx_tail;
  replay_t *replay;  /* (BOARD_REPLAY) */
  launch_t *launches;/* (BOARD_TAGS) indexed by tag % BOARD_TAGS */
  uint32_t next_tag;
  uint32_t *queue;   /* (queue_depth) tags waiting to run */
  uint32_t q_head, q_len;
  uint32_t regs[TSR_HW_CTRL_BYTES / 4];
  uint32_t last_tag; /* last finished launch, for the register view */
  uint32_t reg_tag;  /* launch started through ap_start, until its ap_done is read */
  tsr_usb_board_stats_t st;
};

static uint64_t now_ns(void) { return tsr_hal_now_ns(); }

static uint64_t rnd(tsr_usb_board_t *b) {
  uint64_t x = b->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  b->rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static bool chance(tsr_usb_board_t *b, double p) {
  return p > 0 && (double)(rnd(b) >> 11) * (1.0 / 9007199254740992.0) < p;
}

static bool at(const uint64_t *list, unsigned n, uint64_t frame) {
  for (unsigned i = 0; i < n; i++)
    if (list[i] == frame) return true;
  return false;
}

static tsr_status_t parse_at(const char *key, const char *val, uint64_t *list, unsigned *n) {
  const char *p = val;
  while (*p) {
    char *end = NULL;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || v == 0 || *n >= BOARD_MAX_AT)
      return TSR_ERR(INVALID_ARGUMENT, "usb board: fault %s='%s' needs up to %u frame numbers "
                     ">= 1 separated by ':'", key, val, BOARD_MAX_AT);
    list[(*n)++] = v;
    p = *end == ':' ? end + 1 : end;
    if (*end && *end != ':')
      return TSR_ERR(INVALID_ARGUMENT, "usb board: fault %s='%s' is malformed", key, val);
  }
  return TSR_OK;
}

static tsr_status_t parse_faults(const char *spec, fault_cfg_t *f) {
  memset(f, 0, sizeof *f);
  f->delay_ms = 20;
  f->seed = 1;
  f->rate_in = f->rate_out = true;
  const char *cur = spec;
  char key[32], val[128];
  tsr_status_t err = TSR_OK;
  const char *who = "usb board faults";
  while (tsr_opt_next(&cur, key, sizeof key, val, sizeof val, &err)) {
    if (!strcmp(key, "drop")) TSR_RETURN_IF(tsr_opt_f64(who, key, val, 0, 1, &f->p_drop));
    else if (!strcmp(key, "corrupt"))
      TSR_RETURN_IF(tsr_opt_f64(who, key, val, 0, 1, &f->p_corrupt));
    else if (!strcmp(key, "dup")) TSR_RETURN_IF(tsr_opt_f64(who, key, val, 0, 1, &f->p_dup));
    else if (!strcmp(key, "delay"))
      TSR_RETURN_IF(tsr_opt_f64(who, key, val, 0, 1, &f->p_delay));
    else if (!strcmp(key, "drop_at")) TSR_RETURN_IF(parse_at(key, val, f->at_drop, &f->n_drop));
    else if (!strcmp(key, "corrupt_at"))
      TSR_RETURN_IF(parse_at(key, val, f->at_corrupt, &f->n_corrupt));
    else if (!strcmp(key, "dup_at")) TSR_RETURN_IF(parse_at(key, val, f->at_dup, &f->n_dup));
    else if (!strcmp(key, "delay_at"))
      TSR_RETURN_IF(parse_at(key, val, f->at_delay, &f->n_delay));
    else if (!strcmp(key, "delay_ms"))
      TSR_RETURN_IF(tsr_opt_u64(who, key, val, 0, 60000, &f->delay_ms));
    else if (!strcmp(key, "unplug_at"))
      TSR_RETURN_IF(tsr_opt_u64(who, key, val, 1, UINT64_MAX, &f->unplug_at));
    else if (!strcmp(key, "seed"))
      TSR_RETURN_IF(tsr_opt_u64(who, key, val, 0, UINT64_MAX, &f->seed));
    else if (!strcmp(key, "dir")) {
      if (!strcmp(val, "both")) f->rate_in = f->rate_out = true;
      else if (!strcmp(val, "out")) f->rate_in = false, f->rate_out = true;
      else if (!strcmp(val, "in")) f->rate_in = true, f->rate_out = false;
      else return TSR_ERR(INVALID_ARGUMENT, "usb board: fault dir='%s' (both, out, in)", val);
    } else {
      return TSR_ERR(INVALID_ARGUMENT, "usb board: unknown fault '%s' (known: drop, corrupt, dup, "
                     "delay, drop_at, corrupt_at, dup_at, delay_at, delay_ms, unplug_at, dir, "
                     "seed)", key);
    }
  }
  return err;
}

/* ---- launches -------------------------------------------------------- */

static launch_t *find_launch(tsr_usb_board_t *b, uint32_t tag) {
  launch_t *l = &b->launches[tag % BOARD_TAGS];
  return l->state && l->tag == tag ? l : NULL;
}

static void *worker_main(void *arg) {
  tsr_usb_board_t *b = arg;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->stop && b->q_len == 0) pthread_cond_wait(&b->cv, &b->mu);
    if (b->stop) break;
    uint32_t tag = b->queue[b->q_head];
    launch_t *l = find_launch(b, tag);
    if (!l || l->state != TSR_USB_L_QUEUED) { /* aborted meanwhile */
      b->q_head = (b->q_head + 1) % b->cfg.queue_depth;
      b->q_len--;
      continue;
    }
    l->state = TSR_USB_L_RUNNING;
    tsr_hal_command_t cmd = l->cmd;
    pthread_mutex_unlock(&b->mu);

    tsr_hal_result_t res;
    memset(&res, 0, sizeof res);
    pthread_mutex_lock(&b->dev_mu);
    uint64_t fence = 0;
    tsr_status_t s = b->dev->vt->submit(b->dev, &cmd, &fence);
    if (!s) s = b->dev->vt->wait(b->dev, fence, UINT64_MAX, &res);
    pthread_mutex_unlock(&b->dev_mu);
    if (s) { /* the engine failed: the kernel reports a bus error */
      fprintf(stderr, "usb board: launch %" PRIu32 " failed: %s\n", tag, tsr_status_message(s));
      tsr_status_free(s);
      memset(&res, 0, sizeof res);
      res.hw_status = TSR_HWERR_AXI_ERROR;
    }

    pthread_mutex_lock(&b->mu);
    l = find_launch(b, tag);
    if (l && l->state == TSR_USB_L_RUNNING) {
      l->res = res;
      l->state = TSR_USB_L_DONE;
      b->last_tag = tag;
      b->st.launches++;
    }
    if (b->q_len && b->queue[b->q_head] == tag) {
      b->q_head = (b->q_head + 1) % b->cfg.queue_depth;
      b->q_len--;
    }
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

/* Queues a launch; returns its tag or 0 when the queue is full. */
static uint32_t queue_launch(tsr_usb_board_t *b, const tsr_hal_command_t *cmd) {
  pthread_mutex_lock(&b->mu);
  uint32_t tag = 0;
  if (b->q_len < b->cfg.queue_depth) {
    tag = b->next_tag++;
    if (b->next_tag == 0) b->next_tag = 1;
    launch_t *l = &b->launches[tag % BOARD_TAGS];
    memset(l, 0, sizeof *l);
    l->tag = tag;
    l->state = TSR_USB_L_QUEUED;
    l->cmd = *cmd;
    b->queue[(b->q_head + b->q_len) % b->cfg.queue_depth] = tag;
    b->q_len++;
    pthread_cond_signal(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return tag;
}

static void abort_all(tsr_usb_board_t *b) {
  pthread_mutex_lock(&b->mu);
  for (uint32_t i = 0; i < b->q_len; i++) {
    launch_t *l = find_launch(b, b->queue[(b->q_head + i) % b->cfg.queue_depth]);
    if (l && l->state == TSR_USB_L_QUEUED) l->state = TSR_USB_L_ABORTED;
  }
  pthread_mutex_unlock(&b->mu);
  /* A running launch finishes (as the cpu and sim backends do); then the
   * engine is reset. */
  pthread_mutex_lock(&b->dev_mu);
  tsr_status_free(b->dev->vt->reset(b->dev));
  pthread_mutex_unlock(&b->dev_mu);
}

/* ---- the register view (ap_ctrl_hs) --------------------------------- */

static uint64_t reg64(tsr_usb_board_t *b, uint32_t off) {
  return (uint64_t)b->regs[off / 4] | (uint64_t)b->regs[off / 4 + 1] << 32;
}

static uint32_t reg_read(tsr_usb_board_t *b, uint32_t off) {
  pthread_mutex_lock(&b->mu);
  uint32_t v = 0;
  launch_t *l = b->last_tag ? find_launch(b, b->last_tag) : NULL;
  const tsr_hal_result_t *r = l && l->state == TSR_USB_L_DONE ? &l->res : NULL;
  switch (off) {
    case TSR_REG_CTRL:
      v = b->regs[0] & TSR_CTRL_AUTO_RESTART;
      if (b->q_len == 0) v |= TSR_CTRL_AP_IDLE;
      if (b->reg_tag) {
        launch_t *rl = find_launch(b, b->reg_tag);
        if (!rl || rl->state == TSR_USB_L_DONE || rl->state == TSR_USB_L_ABORTED) {
          v |= TSR_CTRL_AP_DONE | TSR_CTRL_AP_READY;
          b->reg_tag = 0; /* clear on read */
        }
      }
      break;
    case TSR_STAT_STATUS: v = r ? r->hw_status : 0; break;
    case TSR_STAT_ERR_INDEX: v = r ? r->err_index : 0; break;
    case TSR_STAT_DESC_DONE: v = r ? r->desc_done : 0; break;
    case TSR_STAT_HW_INFO:
      v = (b->caps.array_rows & 0xff) | (b->caps.array_cols & 0xff) << 8 |
          (uint32_t)TSR_HW_IF_VERSION << 16 | 1u << 24; /* one read port */
      break;
    case TSR_STAT_HW_OPS: v = b->caps.ops; break;
#define R64(name, field)                                                        \
  case TSR_STAT_##name: v = r ? (uint32_t)r->field : 0; break;                  \
  case TSR_STAT_##name + 4: v = r ? (uint32_t)(r->field >> 32) : 0; break;
      R64(CYC_BUSY, cycles)
      R64(CYC_STALL, stall_cycles)
      R64(BYTES_RD, bytes_rd)
      R64(BYTES_WR, bytes_wr)
      R64(MACS, macs)
#undef R64
    default: v = b->regs[off / 4]; break;
  }
  pthread_mutex_unlock(&b->mu);
  return v;
}

static void reg_write(tsr_usb_board_t *b, uint32_t off, uint32_t v) {
  tsr_hal_command_t cmd = {0};
  bool start = false;
  pthread_mutex_lock(&b->mu);
  if (off == TSR_REG_CTRL) {
    b->regs[0] = (b->regs[0] & ~(uint32_t)TSR_CTRL_AUTO_RESTART) | (v & TSR_CTRL_AUTO_RESTART);
    if (v & TSR_CTRL_AP_START) {
      start = true;
      cmd.window_base = reg64(b, TSR_ARG_MEM_BASE);
      cmd.window_size = reg64(b, TSR_ARG_MEM_SIZE);
      cmd.ring = reg64(b, TSR_ARG_RING);
      cmd.n_desc = b->regs[TSR_ARG_N_DESC / 4];
    }
  } else if (off < TSR_STAT_STATUS) {
    b->regs[off / 4] = v;
  }
  pthread_mutex_unlock(&b->mu);
  uint32_t tag = start ? queue_launch(b, &cmd) : 0;
  if (tag) {
    pthread_mutex_lock(&b->mu);
    b->reg_tag = tag; /* ap_done shows once this launch is done */
    pthread_mutex_unlock(&b->mu);
  }
}

/* ---- frames ---------------------------------------------------------- */

/* Queues an answer for the IN pipe (called with mu held). */
static void push_tx(tsr_usb_board_t *b, const uint8_t *frame, size_t len, uint64_t delay_ns) {
  tx_frame_t *t = malloc(sizeof *t + len);
  if (!t) return; /* the host will resend */
  t->next = NULL;
  t->ready_ns = delay_ns ? now_ns() + delay_ns : 0;
  t->faulted = delay_ns != 0;
  t->len = len;
  memcpy(t->data, frame, len);
  if (b->tx_tail) b->tx_tail->next = t;
  else b->tx_head = t;
  b->tx_tail = t;
}

static void clear_tx(tsr_usb_board_t *b) {
  for (tx_frame_t *t = b->tx_head, *n; t; t = n) {
    n = t->next;
    free(t);
  }
  b->tx_head = b->tx_tail = NULL;
}

static bool in_memory(tsr_usb_board_t *b, uint64_t addr, uint64_t len) {
  return tsr_km_inside(addr, len, b->mem.addr, b->mem.size);
}

/* Executes one intact command; fills the answer header and payload. */
static void execute(tsr_usb_board_t *b, const tsr_usb_hdr_t *h, const uint8_t *payload,
                    tsr_usb_hdr_t *r, uint8_t *out) {
  *r = (tsr_usb_hdr_t){.type = h->type, .flags = TSR_USB_F_RESP, .seq = h->seq,
                       .addr = h->addr};
#define FAIL(code, detail) (r->flags |= TSR_USB_F_ERR, r->arg0 = (code), r->arg1 = (detail))
  switch (h->type) {
    case TSR_USB_T_HELLO: {
      tsr_usb_info_t info = {.proto_version = TSR_USB_VERSION,
                             .max_payload = TSR_USB_MAX_PAYLOAD,
                             .mem_base = b->mem.addr,
                             .mem_size = b->mem.size,
                             .rows = b->caps.array_rows,
                             .cols = b->caps.array_cols,
                             .clock_khz = (uint32_t)(b->caps.clock_hz / 1e3),
                             .queue_depth = b->cfg.queue_depth,
                             .mem_bytes_per_cycle = (uint32_t)b->caps.mem_bytes_per_cycle};
      memcpy(info.kind, b->kind, sizeof info.kind);
      tsr_usb_info_pack(out, &info);
      r->len = TSR_USB_INFO_BYTES;
      r->arg0 = h->arg0;
      break;
    }
    case TSR_USB_T_REG_WRITE:
      if (h->addr >= TSR_HW_CTRL_BYTES || h->addr % 4) FAIL(TSR_USB_E_RANGE, 0);
      else reg_write(b, (uint32_t)h->addr, h->arg0);
      break;
    case TSR_USB_T_REG_READ:
      if (h->addr >= TSR_HW_CTRL_BYTES || h->addr % 4) FAIL(TSR_USB_E_RANGE, 0);
      else r->arg0 = reg_read(b, (uint32_t)h->addr);
      break;
    case TSR_USB_T_MEM_WRITE:
    case TSR_USB_T_MEM_READ: {
      bool wr = h->type == TSR_USB_T_MEM_WRITE;
      uint32_t len = wr ? h->len : h->arg0;
      if (!wr && (h->len != 0 || len > TSR_USB_MAX_PAYLOAD)) {
        FAIL(TSR_USB_E_BAD_LEN, len);
        break;
      }
      if (!in_memory(b, h->addr, len)) {
        FAIL(TSR_USB_E_RANGE, len);
        break;
      }
      pthread_mutex_lock(&b->dev_mu);
      tsr_status_t s =
          wr ? b->dev->vt->write(b->dev, &b->mem, h->addr - b->mem.addr, payload, len)
             : b->dev->vt->read(b->dev, &b->mem, h->addr - b->mem.addr, out, len);
      pthread_mutex_unlock(&b->dev_mu);
      if (s) {
        fprintf(stderr, "usb board: %s: %s\n", tsr_usb_type_name(h->type), tsr_status_message(s));
        tsr_status_free(s);
        FAIL(TSR_USB_E_DEVICE, 0);
      } else if (!wr) {
        r->len = len;
      }
      break;
    }
    case TSR_USB_T_RUN: {
      if (h->len != TSR_USB_RUN_BYTES) {
        FAIL(TSR_USB_E_BAD_LEN, h->len);
        break;
      }
      tsr_hal_command_t cmd = {0};
      tsr_usb_run_unpack(&cmd, payload);
      uint32_t tag = queue_launch(b, &cmd);
      if (!tag) FAIL(TSR_USB_E_BUSY, b->cfg.queue_depth);
      else r->arg0 = tag;
      break;
    }
    case TSR_USB_T_STATUS: {
      pthread_mutex_lock(&b->mu);
      launch_t *l = find_launch(b, h->arg0);
      if (!l) {
        FAIL(TSR_USB_E_TAG, h->arg0);
      } else {
        r->arg0 = l->state;
        if (l->state == TSR_USB_L_DONE) {
          tsr_usb_result_pack(out, &l->res);
          r->len = TSR_USB_RESULT_BYTES;
        }
      }
      pthread_mutex_unlock(&b->mu);
      break;
    }
    case TSR_USB_T_RESET:
      abort_all(b);
      break;
    default:
      FAIL(TSR_USB_E_BAD_TYPE, h->type);
  }
#undef FAIL
}

/* Decodes and answers one OUT frame (after faults). */
static void process(tsr_usb_board_t *b, const uint8_t *frame, size_t n, uint64_t delay_ns,
                    uint8_t *scratch) {
  tsr_usb_hdr_t h, r;
  const uint8_t *payload = NULL;
  tsr_usb_decode_t d = tsr_usb_frame_decode(frame, n, &h, &payload);
  if (d == TSR_USB_D_PAYLOAD_CRC || d == TSR_USB_D_LENGTH) {
    tsr_usb_hdr_t nak = {.type = TSR_USB_T_NAK, .flags = TSR_USB_F_RESP, .seq = h.seq,
                         .arg0 = d == TSR_USB_D_LENGTH ? TSR_USB_NAK_LENGTH
                                                       : TSR_USB_NAK_PAYLOAD_CRC};
    uint8_t f[TSR_USB_HDR_BYTES];
    tsr_usb_frame_seal(f, &nak);
    pthread_mutex_lock(&b->mu);
    b->st.bad_rx++;
    b->st.naks++;
    push_tx(b, f, sizeof f, delay_ns);
    pthread_mutex_unlock(&b->mu);
    return;
  }
  if (d != TSR_USB_D_OK || (h.flags & TSR_USB_F_RESP)) {
    pthread_mutex_lock(&b->mu);
    b->st.bad_rx++; /* nothing in it can be trusted: the host will time out */
    pthread_mutex_unlock(&b->mu);
    return;
  }
  if (h.type == TSR_USB_T_HELLO) {
    /* A new session: forget answers and frames of the previous one. */
    pthread_mutex_lock(&b->mu);
    memset(b->replay, 0, BOARD_REPLAY * sizeof *b->replay);
    clear_tx(b);
    pthread_mutex_unlock(&b->mu);
  } else if (h.type != TSR_USB_T_MEM_READ) {
    /* A command seen before is answered from the cache, not run again. */
    pthread_mutex_lock(&b->mu);
    replay_t *rp = &b->replay[h.seq % BOARD_REPLAY];
    if (rp->valid && rp->seq == h.seq) {
      b->st.replays++;
      push_tx(b, rp->frame, rp->len, delay_ns);
      pthread_mutex_unlock(&b->mu);
      return;
    }
    pthread_mutex_unlock(&b->mu);
  }
  execute(b, &h, payload, &r, scratch + TSR_USB_HDR_BYTES);
  size_t len = tsr_usb_frame_seal(scratch, &r);
  pthread_mutex_lock(&b->mu);
  if (h.type != TSR_USB_T_MEM_READ && h.type != TSR_USB_T_HELLO && len <= sizeof b->replay->frame) {
    replay_t *rp = &b->replay[h.seq % BOARD_REPLAY];
    rp->valid = true;
    rp->seq = h.seq;
    rp->len = len;
    memcpy(rp->frame, scratch, len);
  }
  push_tx(b, scratch, len, delay_ns);
  pthread_mutex_unlock(&b->mu);
}

void tsr_usb_board_receive(tsr_usb_board_t *b, const uint8_t *frame, size_t n) {
  pthread_mutex_lock(&b->mu);
  if (b->unplugged) {
    pthread_mutex_unlock(&b->mu);
    return;
  }
  uint64_t no = ++b->frames;
  b->st.frames_rx++;
  const fault_cfg_t *f = &b->f;
  if (f->unplug_at && no >= f->unplug_at) b->unplugged = true;
  bool rate = f->rate_out;
  bool drop = at(f->at_drop, f->n_drop, no) || (rate && chance(b, f->p_drop));
  bool corrupt = !drop && (at(f->at_corrupt, f->n_corrupt, no) || (rate && chance(b, f->p_corrupt)));
  bool dup = !drop && (at(f->at_dup, f->n_dup, no) || (rate && chance(b, f->p_dup)));
  bool delay = !drop && (at(f->at_delay, f->n_delay, no) || (rate && chance(b, f->p_delay)));
  uint64_t flip = rnd(b);
  b->st.inj_drop += drop;
  b->st.inj_corrupt += corrupt;
  b->st.inj_dup += dup;
  b->st.inj_delay += delay;
  bool gone = b->unplugged;
  pthread_mutex_unlock(&b->mu);
  if (gone || drop || n == 0) return;

  uint8_t *scratch = malloc(TSR_USB_HDR_BYTES + TSR_USB_MAX_PAYLOAD);
  uint8_t *copy = corrupt ? malloc(n) : NULL;
  if (!scratch || (corrupt && !copy)) {
    free(scratch);
    free(copy);
    return; /* out of memory: as if the frame was lost */
  }
  if (corrupt) {
    memcpy(copy, frame, n);
    size_t bit = (size_t)(flip % (n * 8));
    copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    frame = copy;
  }
  uint64_t delay_ns = delay ? b->f.delay_ms * 1000000ull : 0;
  process(b, frame, n, delay_ns, scratch);
  if (dup) process(b, frame, n, 0, scratch);
  free(scratch);
  free(copy);
}

size_t tsr_usb_board_transmit(tsr_usb_board_t *b, uint8_t *buf, size_t cap) {
  pthread_mutex_lock(&b->mu);
  size_t out = 0;
  uint64_t now = now_ns();
  tx_frame_t *prev = NULL, *t = b->tx_head;
  while (t && !b->unplugged) {
    if (t->ready_ns > now) { /* held back (delay fault): later frames pass */
      prev = t;
      t = t->next;
      continue;
    }
    bool keep = false, drop = false, corrupt = false;
    if (!t->faulted) {
      uint64_t no = ++b->frames;
      const fault_cfg_t *f = &b->f;
      if (f->unplug_at && no >= f->unplug_at) {
        b->unplugged = true;
        break;
      }
      bool rate = f->rate_in;
      drop = at(f->at_drop, f->n_drop, no) || (rate && chance(b, f->p_drop));
      bool delay = !drop && (at(f->at_delay, f->n_delay, no) || (rate && chance(b, f->p_delay)));
      corrupt = !drop && !delay &&
                (at(f->at_corrupt, f->n_corrupt, no) || (rate && chance(b, f->p_corrupt)));
      keep = !drop && !delay && (at(f->at_dup, f->n_dup, no) || (rate && chance(b, f->p_dup)));
      b->st.inj_drop += drop;
      b->st.inj_delay += delay;
      b->st.inj_corrupt += corrupt;
      b->st.inj_dup += keep;
      t->faulted = true;
      if (delay) {
        t->ready_ns = now + f->delay_ms * 1000000ull;
        prev = t;
        t = t->next;
        continue;
      }
    }
    if (!drop && t->len <= cap) {
      memcpy(buf, t->data, t->len);
      out = t->len;
      if (corrupt) {
        size_t bit = (size_t)(rnd(b) % (t->len * 8));
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      }
      b->st.frames_tx++;
    }
    if (!keep) { /* unlink t */
      tx_frame_t *next = t->next;
      if (prev) prev->next = next;
      else b->tx_head = next;
      if (b->tx_tail == t) b->tx_tail = prev;
      free(t);
      t = next;
    }
    if (out) break;
  }
  pthread_mutex_unlock(&b->mu);
  return out;
}

bool tsr_usb_board_unplugged(tsr_usb_board_t *b) {
  pthread_mutex_lock(&b->mu);
  bool u = b->unplugged;
  pthread_mutex_unlock(&b->mu);
  return u;
}

void tsr_usb_board_unplug(tsr_usb_board_t *b) {
  pthread_mutex_lock(&b->mu);
  b->unplugged = true;
  pthread_mutex_unlock(&b->mu);
}

void tsr_usb_board_stats(tsr_usb_board_t *b, tsr_usb_board_stats_t *out) {
  pthread_mutex_lock(&b->mu);
  *out = b->st;
  pthread_mutex_unlock(&b->mu);
}

tsr_status_t tsr_usb_board_create(const tsr_usb_board_config_t *cfg, tsr_usb_board_t **out) {
  *out = NULL;
  tsr_usb_board_t *b = calloc(1, sizeof *b);
  if (!b) return TSR_ERR(RESOURCE_EXHAUSTED, "usb board: out of host memory");
  b->cfg = *cfg;
  if (!b->cfg.queue_depth) b->cfg.queue_depth = 16;
  snprintf(b->kind, sizeof b->kind, "%s", cfg->kind ? cfg->kind : "model");
  b->next_tag = 1;
  pthread_mutex_init(&b->mu, NULL);
  pthread_mutex_init(&b->dev_mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  tsr_status_t s = parse_faults(cfg->faults, &b->f);
  b->rng = b->f.seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  b->replay = calloc(BOARD_REPLAY, sizeof *b->replay);
  b->launches = calloc(BOARD_TAGS, sizeof *b->launches);
  b->queue = calloc(b->cfg.queue_depth, sizeof *b->queue);
  if (!s && (!b->replay || !b->launches || !b->queue))
    s = TSR_ERR(RESOURCE_EXHAUSTED, "usb board: out of host memory");
  if (!s) s = tsr_hal_open(cfg->engine, &b->dev);
  if (!s) {
    b->dev->vt->query_caps(b->dev, &b->caps);
    uint64_t size = cfg->mem_size ? cfg->mem_size : b->caps.mem_size;
    s = b->dev->vt->alloc(b->dev, size, 4096, &b->mem);
    if (s) s = tsr_status_annotate(s, "usb board: reserving %" PRIu64 " bytes of device memory",
                                   size);
  }
  if (!s) {
    int rc = pthread_create(&b->worker, NULL, worker_main, b);
    if (rc) s = TSR_ERR(RESOURCE_EXHAUSTED, "usb board: cannot start its worker (%s)", strerror(rc));
    else b->worker_started = true;
  }
  if (s) {
    tsr_usb_board_destroy(b);
    return s;
  }
  *out = b;
  return TSR_OK;
}

void tsr_usb_board_destroy(tsr_usb_board_t *b) {
  if (!b) return;
  if (b->worker_started) {
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->worker, NULL);
  }
  if (b->dev) {
    if (b->mem.size) b->dev->vt->free(b->dev, &b->mem);
    tsr_hal_close(b->dev);
  }
  clear_tx(b);
  free(b->replay);
  free(b->launches);
  free(b->queue);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  pthread_mutex_destroy(&b->dev_mu);
  free(b);
}
