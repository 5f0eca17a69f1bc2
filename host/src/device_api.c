/*
 * device_api.c - the offload API of tessera.h ("Offload"): devices opened
 * through a context, buffers with a host shadow, int8 GEMM commands queued
 * as descriptor rings, events, and the runtime's failure policy (reset,
 * retry, host fallback) applied per command.
 *
 * One tsr_device_t per HAL device, reference-counted: opening a spec the
 * context's device list holds borrows that entry's HAL device and lock (one
 * board, one memory budget, and the context's sessions and this API never
 * talk to it at the same time); any other spec opens an instance of its own.
 * Every HAL call and every field of a device, its buffers and its events is
 * touched with the device's lock held.
 *
 * Commands finish in queue order: whoever waits (an event wait, a copy, a
 * close) works on the oldest unfinished command, the head, in short slices
 * so other threads get the lock in between. The watchdog of a command
 * counts the time waited on it while it is the head (a simulated device
 * only runs inside waits, so time nobody waited is not the device's). A failure of the head is
 * recovered with the lock held: reset (which drops every queued launch),
 * retry the head, then compute it on the host; the other queued commands
 * are submitted again afterwards, in order.
 *
 * Host shadow and coherence. Each buffer has a host copy of its bytes.
 * A and W (int8) are only written by tsr_buffer_write, so their shadow is
 * always current. An int32 buffer written by a device launch has a stale
 * shadow (host_stale) until it is read back whole; one written by a host
 * fallback has a stale device copy (dev_stale) until it is uploaded, which
 * happens before any launch that uses it. At most one of the two is set.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "driver/tsr_regmap.h"
#include "internal.h"
#include "recover.h"

#define DEV_MAX_INFLIGHT 128 /* queued commands per device (the HAL keeps 1024 results) */
#define DEV_SLICE_NS 5000000ull /* longest HAL wait with the lock held, outside recovery */

struct tsr_buffer {
  tsr_device_t *dev;
  char label[48];
  tsr_buffer_type_t type;
  size_t rows, cols, elem, bytes;
  uint8_t *shadow;        /* (bytes) host copy, owned                      */
  tsr_hal_buffer_t hal;   /* device copy; size 0 when host-only            */
  bool on_device;
  bool host_stale;        /* a launch wrote it; the shadow is older        */
  bool dev_stale;         /* a host fallback wrote it; the device is older */
  uint32_t users;         /* queued commands that use it                   */
  uint32_t writers;       /* queued commands that write it (as C)          */
};

struct tsr_event {
  tsr_device_t *dev;
  tsr_event_t *next;      /* queue of unfinished commands                 */
  uint64_t id;
  tsr_event_state_t state;
  bool released;          /* the owner destroyed it while queued           */
  bool need_submit;       /* a reset dropped its launch                    */
  tsr_status_t submit_err;/* why the last submission failed                */
  tsr_status_t err;       /* final failure (FAILED)                        */
  tsr_gemm_t g;           /* ld* filled in                                 */
  tsr_hal_buffer_t ring;  /* its descriptors in device memory              */
  tsr_hal_command_t cmd;
  uint64_t fence;
  uint64_t waited_ns;     /* watchdog: time waited on it as the head       */
  uint64_t cycles;
  uint32_t retries;
};

struct tsr_device {
  tsr_device_t *next_open;    /* registry of open devices                  */
  int refs;
  tsr_context_t *ctx;         /* borrowed, must outlive                    */
  char spec[160];
  tsr_hal_device_t *hal;      /* owned unless shared                       */
  tsr_ctx_device_t *shared;   /* the context's entry whose device this is  */
  pthread_mutex_t own_lock;
  pthread_mutex_t *lock;      /* &own_lock or &shared->lock                */
  tsr_hal_caps_t caps;
  tsr_recover_state_t rs;     /* usable, gone, resets, retries, fallbacks  */
  tsr_event_t *head, *tail;   /* unfinished commands, oldest first         */
  uint32_t n_inflight;
  uint64_t next_event_id, next_buffer_id;
  uint32_t n_buffers, n_events;
  tsr_device_stats_t stats;
};

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static tsr_device_t *g_open;

static uint64_t now_ns(void) { return (uint64_t)(tsr_now_s() * 1e9); }

static const char *type_name(tsr_buffer_type_t t) {
  switch (t) {
    case TSR_BUFFER_BYTES: return "bytes";
    case TSR_BUFFER_I8: return "int8";
    case TSR_BUFFER_I32: return "int32";
  }
  return "unknown";
}

/* "buffer 'A' (int8 64x32, 2048 bytes)" for messages. */
static const char *buf_what(const tsr_buffer_t *b, char *out, size_t cap) {
  snprintf(out, cap, "buffer '%s' (%s %zux%zu, %zu bytes)", b->label, type_name(b->type),
           b->rows, b->cols, b->bytes);
  return out;
}

/* ---- names: the user-facing spec and the HAL's ---- */

/* The HAL spec for a user spec: "fmodel..." names the functional model,
 * registered as "fmodel" (or "cpu" in older registries). */
static void hal_spec_of(const char *spec, char *out, size_t cap) {
  if (!strncmp(spec, "fmodel", 6) && (spec[6] == '\0' || spec[6] == ':') &&
      !tsr_hal_find("fmodel") && tsr_hal_find("cpu"))
    snprintf(out, cap, "cpu%s", spec + 6);
  else
    snprintf(out, cap, "%s", spec);
}

static const char *user_name_of(const char *hal_name) {
  return !strcmp(hal_name, "cpu") ? "fmodel" : hal_name;
}

tsr_status_t tsr_device_list(tsr_device_info_t *infos, size_t cap, size_t *out_count) {
  if (!out_count) return TSR_ERR(INVALID_ARGUMENT, "device list: out_count is NULL");
  *out_count = 0;
  if (cap && !infos) return TSR_ERR(INVALID_ARGUMENT, "device list: infos is NULL, cap %zu", cap);
  size_t n = 0;
  const tsr_hal_vtable_t *const *vts = tsr_hal_backends(&n);
  for (size_t i = 0; i < n && i < cap; i++) {
    tsr_device_info_t *d = &infos[i];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", user_name_of(vts[i]->name));
    tsr_hal_device_t *h = NULL;
    tsr_status_t s = tsr_hal_open(vts[i]->name, &h);
    if (s) {
      snprintf(d->reason, sizeof d->reason, "%s: %s", tsr_status_code_name(tsr_status_code(s)),
               tsr_status_message(s));
      tsr_status_free(s);
      continue;
    }
    tsr_hal_caps_t c;
    memset(&c, 0, sizeof c);
    h->vt->query_caps(h, &c);
    snprintf(d->description, sizeof d->description, "%s", c.name);
    if (c.flags & TSR_HAL_CAP_NO_COMPUTE)
      snprintf(d->reason, sizeof d->reason, "%s opens, but computes nothing", c.name);
    else
      d->available = true;
    tsr_hal_close(h);
  }
  *out_count = n;
  return TSR_OK;
}

/* ---- devices ---- */

tsr_status_t tsr_device_open(tsr_context_t *ctx, const char *spec, tsr_device_t **out_dev) {
  if (!out_dev) return TSR_ERR(INVALID_ARGUMENT, "device open: out_dev is NULL");
  *out_dev = NULL;
  if (!ctx) return TSR_ERR(INVALID_ARGUMENT, "device open: ctx is NULL");
  if (!spec || !*spec) return TSR_ERR(INVALID_ARGUMENT, "device open: spec is NULL or empty");
  if (strlen(spec) >= sizeof(((tsr_device_t *)0)->spec))
    return TSR_ERR(INVALID_ARGUMENT, "device open: spec '%.40s...' is longer than %zu bytes",
                   spec, sizeof(((tsr_device_t *)0)->spec) - 1);
  if (!strncmp(spec, "cpu", 3) && (spec[3] == '\0' || spec[3] == ':'))
    return TSR_ERR(INVALID_ARGUMENT, "device open: '%s': cpu is the host, not a device (the "
                   "kernel's functional model is 'fmodel')", spec);
  pthread_mutex_lock(&g_open_lock);
  for (tsr_device_t *d = g_open; d; d = d->next_open) {
    if (d->ctx == ctx && !strcmp(d->spec, spec)) {
      d->refs++;
      pthread_mutex_unlock(&g_open_lock);
      *out_dev = d;
      return TSR_OK;
    }
  }
  tsr_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) {
    pthread_mutex_unlock(&g_open_lock);
    return TSR_ERR(RESOURCE_EXHAUSTED, "device open: '%s'", spec);
  }
  dev->refs = 1;
  dev->ctx = ctx;
  dev->rs.usable = true;
  snprintf(dev->spec, sizeof dev->spec, "%s", spec);
  pthread_mutex_init(&dev->own_lock, NULL);
  dev->lock = &dev->own_lock;
  tsr_status_t s = TSR_OK;
  for (int i = 0; i < ctx->n_devs; i++) {
    tsr_ctx_device_t *cd = &ctx->devs[i];
    if (cd->host || strcmp(cd->spec, spec)) continue;
    if (!cd->hal)
      s = TSR_ERR(UNAVAILABLE, "device open: '%s' (in the context's device list): %s", spec,
                  cd->unavailable[0] ? cd->unavailable : "it did not open");
    dev->shared = cd;
    break;
  }
  if (!s && dev->shared) {
    dev->hal = dev->shared->hal;
    dev->lock = &dev->shared->lock;
    pthread_mutex_lock(dev->lock);
    dev->hal->vt->query_caps(dev->hal, &dev->caps);
    pthread_mutex_unlock(dev->lock);
  } else if (!s) {
    char hal_spec[sizeof dev->spec + 8];
    hal_spec_of(spec, hal_spec, sizeof hal_spec);
    s = tsr_hal_open(hal_spec, &dev->hal);
    if (s) s = tsr_status_annotate(s, "device open");
    else dev->hal->vt->query_caps(dev->hal, &dev->caps);
  }
  if (!s && (dev->caps.flags & TSR_HAL_CAP_NO_COMPUTE))
    s = TSR_ERR(UNAVAILABLE, "device open: '%s' (%s) computes nothing: its results would not "
                "be results", spec, dev->caps.name);
  if (s) {
    if (!dev->shared) tsr_hal_close(dev->hal);
    pthread_mutex_destroy(&dev->own_lock);
    free(dev);
    pthread_mutex_unlock(&g_open_lock);
    return s;
  }
  dev->next_open = g_open;
  g_open = dev;
  pthread_mutex_unlock(&g_open_lock);
  *out_dev = dev;
  return TSR_OK;
}

const char *tsr_device_name(const tsr_device_t *dev) { return dev ? dev->spec : "(null)"; }

void tsr_device_get_caps(const tsr_device_t *dev, tsr_device_caps_t *out) {
  memset(out, 0, sizeof *out);
  if (!dev) return;
  snprintf(out->name, sizeof out->name, "%s", dev->caps.name);
  out->array_rows = dev->caps.array_rows;
  out->array_cols = dev->caps.array_cols;
  out->max_dim = dev->caps.max_dim;
  out->mem_size = dev->caps.mem_size;
  out->clock_hz = dev->caps.clock_hz;
}

void tsr_device_get_stats(tsr_device_t *dev, tsr_device_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!dev) return;
  pthread_mutex_lock(dev->lock);
  *out = dev->stats;
  out->fallbacks = dev->rs.fallbacks;
  out->retries = dev->rs.retries;
  out->resets = dev->rs.resets;
  pthread_mutex_unlock(dev->lock);
}

/* ---- coherence between a buffer's shadow and its device copy ---- */

/* Brings the device copy up to date (before a launch uses it). */
static tsr_status_t sync_to_device(tsr_device_t *dev, tsr_buffer_t *b) {
  if (!b->on_device || !b->dev_stale) return TSR_OK;
  char what[128];
  TSR_RETURN_IF_ERROR(dev->hal->vt->write(dev->hal, &b->hal, 0, b->shadow, b->bytes),
                      "uploading %s", buf_what(b, what, sizeof what));
  dev->stats.bytes_to_device += b->bytes;
  b->dev_stale = false;
  return TSR_OK;
}

/* Brings the shadow up to date (before the host writes or reads it). */
static tsr_status_t sync_to_host(tsr_device_t *dev, tsr_buffer_t *b) {
  if (!b->host_stale) return TSR_OK;
  char what[128];
  TSR_RETURN_IF_ERROR(dev->hal->vt->read(dev->hal, &b->hal, 0, b->shadow, b->bytes),
                      "reading back %s", buf_what(b, what, sizeof what));
  dev->stats.bytes_from_device += b->bytes;
  b->host_stale = false;
  return TSR_OK;
}

/* ---- the host path ---- */

/* Computes the command on the host from the shadows into C's shadow. */
static void host_compute(tsr_device_t *dev, tsr_event_t *ev) {
  const tsr_gemm_t *g = &ev->g;
  tsr_buffer_t *c = g->c;
  tsr_status_t s = sync_to_host(dev, c);
  if (s) {
    char what[128];
    tsr_ctx_warn(dev->ctx, "%s: %s; the parts of %s written on the device are lost",
                 dev->spec, tsr_status_message(s), buf_what(c, what, sizeof what));
    tsr_status_free(s);
    c->host_stale = false;
  }
  tsr_qgemm_strided(dev->ctx->pool, dev->ctx->isa, (int32_t *)c->shadow + g->c_offset, g->ldc,
                    (const int8_t *)g->a->shadow + g->a_offset, g->lda,
                    (const int8_t *)g->w->shadow + g->w_offset, g->ldw, (int32_t)g->m,
                    (int32_t)g->n, (int32_t)g->k);
  if (c->on_device) c->dev_stale = true;
}

/* ---- the queue ---- */

static void ring_free(tsr_device_t *dev, tsr_event_t *ev) {
  if (ev->ring.size) dev->hal->vt->free(dev->hal, &ev->ring);
  memset(&ev->ring, 0, sizeof ev->ring);
}

static void event_free(tsr_event_t *ev) {
  tsr_status_free(ev->submit_err);
  tsr_status_free(ev->err);
  ev->dev->n_events--;
  free(ev);
}

/* Submits (again) the launch of ev: uploads stale operands first. */
static void submit(tsr_device_t *dev, tsr_event_t *ev) {
  tsr_status_free(ev->submit_err);
  ev->submit_err = TSR_OK;
  ev->need_submit = false;
  tsr_status_t s = TSR_OK;
  if (!dev->rs.usable) s = TSR_ERR(UNAVAILABLE, "%s is not usable any more", dev->spec);
  if (!s) s = sync_to_device(dev, ev->g.a);
  if (!s) s = sync_to_device(dev, ev->g.w);
  if (!s) s = sync_to_device(dev, ev->g.c);
  /* an engine's queue-mode launch on the shared device ends first */
  if (!s && dev->shared) s = tsr_ctx_device_claim(dev->shared, NULL);
  if (!s) s = dev->hal->vt->submit(dev->hal, &ev->cmd, &ev->fence);
  ev->submit_err = s;
  ev->waited_ns = 0;
}

/* Takes the finished head off the queue. */
static void pop_head(tsr_device_t *dev, tsr_event_t *ev, tsr_event_state_t state) {
  ev->state = state;
  ring_free(dev, ev);
  ev->g.a->users--;
  ev->g.w->users--;
  ev->g.c->users--;
  ev->g.c->writers--;
  dev->head = ev->next;
  if (!dev->head) dev->tail = NULL;
  ev->next = NULL;
  dev->n_inflight--;
  if (ev->released) event_free(ev);
}

/* The head finished on the device with result `res`. */
static void head_done(tsr_device_t *dev, tsr_event_t *ev, const tsr_hal_result_t *res) {
  dev->stats.launches++;
  dev->stats.descriptors += res->desc_done;
  dev->stats.cycles += res->cycles;
  tsr_recover_ok(&dev->rs);
  ev->cycles = res->cycles;
  ev->g.c->host_stale = true;
  ev->g.c->dev_stale = false;
  pop_head(dev, ev, TSR_EVENT_DONE);
}

/* Turns a finished wait into a status: a refused launch is an error. */
static tsr_status_t result_status(const tsr_device_t *dev, const tsr_event_t *ev,
                                  const tsr_hal_result_t *res) {
  if (res->hw_status == TSR_HWERR_OK) return TSR_OK;
  return TSR_ERR(DEVICE, "%s refused descriptor %u of command %" PRIu64 ": %s", dev->spec,
                 res->err_index, ev->id, tsr_hal_hwerr_name(res->hw_status));
}

/* A failed head under the shared policy (recover.h): a retry resubmits it
 * and waits; every reset drops the other queued launches, which are
 * resubmitted afterwards in order. The lock is held throughout. */
typedef struct {
  tsr_device_t *dev;
  tsr_event_t *ev;
} head_retry_t;

static tsr_status_t head_retry(void *arg) {
  head_retry_t *r = arg;
  tsr_device_t *dev = r->dev;
  tsr_event_t *ev = r->ev;
  submit(dev, ev);
  tsr_status_t s = ev->submit_err;
  ev->submit_err = TSR_OK;
  tsr_hal_result_t res;
  memset(&res, 0, sizeof res);
  if (!s)
    s = dev->hal->vt->wait(dev->hal, ev->fence,
                           (uint64_t)dev->ctx->opts.device_timeout_ms * 1000000ull, &res);
  if (!s) s = result_status(dev, ev, &res);
  if (!s) head_done(dev, ev, &res);
  return s;
}

static void head_after_reset(void *arg) {
  head_retry_t *r = arg;
  for (tsr_event_t *e = r->dev->head; e; e = e->next) e->need_submit = true;
}

/* Consumes `first`. */
static void recover_head(tsr_device_t *dev, tsr_event_t *ev, tsr_status_t first) {
  head_retry_t arg = {dev, ev};
  const tsr_recover_ops_t ops = {head_retry, head_after_reset, &arg};
  char what[96];
  snprintf(what, sizeof what, "command %" PRIu64 " (gemm %zux%zux%zu)", ev->id, ev->g.m,
           ev->g.n, ev->g.k);
  bool host = false;
  tsr_status_t err = tsr_recover(dev->ctx, dev->hal, dev->spec, &dev->rs, first, &ops, what,
                                 &host, &ev->retries);
  if (err) {
    ev->err = tsr_status_annotate(err, "command %" PRIu64, ev->id);
    pop_head(dev, ev, TSR_EVENT_FAILED);
  } else if (host) {
    host_compute(dev, ev);
    pop_head(dev, ev, TSR_EVENT_DONE_HOST);
  } /* else a retry finished it (head_done) */
  /* after the result, so a later launch on the same C uploads it */
  for (tsr_event_t *e = dev->head; e; e = e->next)
    if (e->need_submit) submit(dev, e);
}

/* One step on the head, lock held: finishes it, recovers it, or waits for
 * it at most until `deadline_ns` and a slice. Returns false when the
 * deadline passed with the head still running. The lock may be dropped
 * and taken again: callers re-read the queue after it. */
static bool step_head(tsr_device_t *dev, uint64_t deadline_ns) {
  tsr_event_t *ev = dev->head;
  if (!ev) return true;
  if (ev->need_submit) submit(dev, ev);
  if (ev->submit_err) {
    tsr_status_t s = ev->submit_err;
    ev->submit_err = TSR_OK;
    recover_head(dev, ev, s);
    return true;
  }
  uint64_t now = now_ns();
  const uint64_t limit = (uint64_t)dev->ctx->opts.device_timeout_ms * 1000000ull;
  uint64_t wd = now + (ev->waited_ns < limit ? limit - ev->waited_ns : 0);
  uint64_t until = wd < deadline_ns ? wd : deadline_ns;
  if (until > now + DEV_SLICE_NS) until = now + DEV_SLICE_NS;
  tsr_hal_result_t res;
  memset(&res, 0, sizeof res);
  tsr_status_t s = dev->hal->vt->wait(dev->hal, ev->fence, until > now ? until - now : 0, &res);
  if (!s) {
    s = result_status(dev, ev, &res);
    if (!s) head_done(dev, ev, &res);
    else recover_head(dev, ev, s);
    return true;
  }
  if (tsr_status_code(s) != TSR_STATUS_DEADLINE_EXCEEDED) {
    recover_head(dev, ev, s);
    return true;
  }
  uint64_t after = now_ns();
  ev->waited_ns += after - now;
  now = after;
  if (ev->waited_ns >= limit) {
    recover_head(dev, ev,
                 tsr_status_annotate(s, "watchdog: command %" PRIu64 " not done within "
                                     "device_timeout_ms %u", ev->id,
                                     dev->ctx->opts.device_timeout_ms));
    return true;
  }
  tsr_status_free(s);
  if (now >= deadline_ns) return false;
  /* let other threads' calls in between slices */
  pthread_mutex_unlock(dev->lock);
  sched_yield();
  pthread_mutex_lock(dev->lock);
  return true;
}

/* Finishes queued commands until pred(arg) holds (lock held). */
static void drain_until(tsr_device_t *dev, bool (*pred)(const void *arg), const void *arg) {
  while (dev->head && !pred(arg)) step_head(dev, UINT64_MAX);
}

static bool queue_empty(const void *arg) { return ((const tsr_device_t *)arg)->head == NULL; }
static bool no_users(const void *arg) { return ((const tsr_buffer_t *)arg)->users == 0; }
static bool no_writers(const void *arg) { return ((const tsr_buffer_t *)arg)->writers == 0; }

void tsr_device_close(tsr_device_t *dev) {
  if (!dev) return;
  pthread_mutex_lock(&g_open_lock);
  if (--dev->refs > 0) {
    pthread_mutex_unlock(&g_open_lock);
    return;
  }
  for (tsr_device_t **p = &g_open; *p; p = &(*p)->next_open)
    if (*p == dev) {
      *p = dev->next_open;
      break;
    }
  pthread_mutex_unlock(&g_open_lock);
  pthread_mutex_lock(dev->lock);
  drain_until(dev, queue_empty, dev);
  if (dev->n_buffers || dev->n_events)
    tsr_ctx_warn(dev->ctx, "%s closed with %u buffer(s) and %u event(s) still alive", dev->spec,
                 dev->n_buffers, dev->n_events);
  pthread_mutex_unlock(dev->lock);
  if (!dev->shared) tsr_hal_close(dev->hal);
  pthread_mutex_destroy(&dev->own_lock);
  free(dev);
}

/* ---- buffers ---- */

tsr_status_t tsr_buffer_create(tsr_device_t *dev, tsr_buffer_type_t type, size_t rows,
                               size_t cols, const char *label, tsr_buffer_t **out_buf) {
  if (!out_buf) return TSR_ERR(INVALID_ARGUMENT, "buffer create: out_buf is NULL");
  *out_buf = NULL;
  if (!dev) return TSR_ERR(INVALID_ARGUMENT, "buffer create: dev is NULL");
  const char *lab = label ? label : "";
  size_t elem = type == TSR_BUFFER_I32 ? 4 : 1;
  if ((unsigned)type > TSR_BUFFER_I32)
    return TSR_ERR(INVALID_ARGUMENT, "buffer create '%s': unknown type %d (bytes, int8, int32)",
                   lab, (int)type);
  if (rows == 0 || cols == 0)
    return TSR_ERR(INVALID_ARGUMENT, "buffer create '%s': rows %zu x cols %zu: both must be >= 1",
                   lab, rows, cols);
  if (cols > SIZE_MAX / elem / rows || rows * cols * elem > dev->caps.mem_size)
    return TSR_ERR(OUT_OF_RANGE, "buffer create '%s': %zu x %zu %s elements exceed the memory "
                   "of %s (%" PRIu64 " bytes)", lab, rows, cols, type_name(type), dev->spec,
                   dev->caps.mem_size);
  tsr_buffer_t *b = calloc(1, sizeof *b);
  if (!b) return TSR_ERR(RESOURCE_EXHAUSTED, "buffer create '%s'", lab);
  b->dev = dev;
  b->type = type;
  b->rows = rows;
  b->cols = cols;
  b->elem = elem;
  b->bytes = rows * cols * elem;
  b->shadow = calloc(b->bytes, 1);
  if (!b->shadow) {
    free(b);
    return TSR_ERR(RESOURCE_EXHAUSTED, "buffer create '%s': %zu bytes of host shadow", lab,
                   rows * cols * elem);
  }
  pthread_mutex_lock(dev->lock);
  uint64_t id = dev->next_buffer_id++;
  if (label) snprintf(b->label, sizeof b->label, "%s", label);
  else snprintf(b->label, sizeof b->label, "buffer %" PRIu64, id);
  tsr_status_t s = dev->rs.usable ? TSR_OK : TSR_ERR(UNAVAILABLE, "%s is not usable", dev->spec);
  if (!s) s = dev->hal->vt->alloc(dev->hal, b->bytes, 64, &b->hal);
  if (!s) {
    b->on_device = true;
    b->dev_stale = true; /* zeroed by the first whole write or upload */
  }
  if (s) tsr_recover_note(dev->ctx, dev->spec, &dev->rs, s);
  if (s && !dev->ctx->opts.fallback) {
    pthread_mutex_unlock(dev->lock);
    char what[128];
    s = tsr_status_annotate(s, "buffer create: %s on %s (fallback is off)",
                            buf_what(b, what, sizeof what), dev->spec);
    free(b->shadow);
    free(b);
    return s;
  }
  if (s) {
    char what[128];
    tsr_ctx_warn(dev->ctx, "%s: %s; %s lives on the host, its commands run on the CPU",
                 dev->spec, tsr_status_message(s), buf_what(b, what, sizeof what));
    tsr_status_free(s);
    memset(&b->hal, 0, sizeof b->hal);
  }
  dev->n_buffers++;
  pthread_mutex_unlock(dev->lock);
  *out_buf = b;
  return TSR_OK;
}

void tsr_buffer_destroy(tsr_buffer_t *b) {
  if (!b) return;
  tsr_device_t *dev = b->dev;
  pthread_mutex_lock(dev->lock);
  drain_until(dev, no_users, b);
  if (b->on_device) dev->hal->vt->free(dev->hal, &b->hal);
  dev->n_buffers--;
  pthread_mutex_unlock(dev->lock);
  free(b->shadow);
  free(b);
}

size_t tsr_buffer_size(const tsr_buffer_t *b) { return b ? b->bytes : 0; }

static tsr_status_t check_range(const tsr_buffer_t *b, const char *op, size_t offset,
                                const void *p, size_t bytes) {
  char what[128];
  if (!p)
    return TSR_ERR(INVALID_ARGUMENT, "%s %s: the host pointer is NULL", op,
                   buf_what(b, what, sizeof what));
  if (offset > b->bytes || bytes > b->bytes - offset)
    return TSR_ERR(OUT_OF_RANGE, "%s %s: %zu bytes at offset %zu reach past its end", op,
                   buf_what(b, what, sizeof what), bytes, offset);
  if (b->elem > 1 && (offset % b->elem || bytes % b->elem))
    return TSR_ERR(INVALID_ARGUMENT, "%s %s: offset %zu and size %zu must be multiples of %zu "
                   "(whole %s elements)", op, buf_what(b, what, sizeof what), offset, bytes,
                   b->elem, type_name(b->type));
  return TSR_OK;
}

tsr_status_t tsr_buffer_write(tsr_buffer_t *b, size_t offset, const void *src, size_t bytes) {
  if (!b) return TSR_ERR(INVALID_ARGUMENT, "buffer write: buf is NULL");
  TSR_RETURN_IF(check_range(b, "write to", offset, src, bytes));
  tsr_device_t *dev = b->dev;
  pthread_mutex_lock(dev->lock);
  drain_until(dev, no_users, b);
  tsr_status_t s = TSR_OK;
  if (b->host_stale) {
    /* the rest of the shadow must be current before part of it changes */
    s = sync_to_host(dev, b);
    if (s && dev->ctx->opts.fallback) {
      char what[128];
      tsr_ctx_warn(dev->ctx, "%s: %s; the parts of %s written on the device are lost",
                   dev->spec, tsr_status_message(s), buf_what(b, what, sizeof what));
      tsr_status_free(s);
      s = TSR_OK;
      b->host_stale = false;
      b->dev_stale = true;
    }
  }
  if (!s) {
    memcpy(b->shadow + offset, src, bytes);
    bool whole = offset == 0 && bytes == b->bytes;
    if (b->on_device && (!b->dev_stale || whole) && bytes) {
      s = dev->hal->vt->write(dev->hal, &b->hal, offset, src, bytes);
      if (!s) {
        dev->stats.bytes_to_device += bytes;
        b->dev_stale = false;
      } else if (dev->ctx->opts.fallback) {
        /* the shadow has it; the device copy is uploaded before its next use */
        tsr_recover_note(dev->ctx, dev->spec, &dev->rs, s);
        tsr_status_free(s);
        s = TSR_OK;
        b->dev_stale = true;
      }
    }
  }
  pthread_mutex_unlock(dev->lock);
  if (s) {
    char what[128];
    return tsr_status_annotate(s, "write to %s at offset %zu", buf_what(b, what, sizeof what),
                               offset);
  }
  return TSR_OK;
}

tsr_status_t tsr_buffer_read(tsr_buffer_t *b, size_t offset, void *dst, size_t bytes) {
  if (!b) return TSR_ERR(INVALID_ARGUMENT, "buffer read: buf is NULL");
  TSR_RETURN_IF(check_range(b, "read from", offset, dst, bytes));
  tsr_device_t *dev = b->dev;
  pthread_mutex_lock(dev->lock);
  drain_until(dev, no_writers, b);
  tsr_status_t s = TSR_OK;
  if (b->on_device && !b->dev_stale && bytes) {
    s = dev->hal->vt->read(dev->hal, &b->hal, offset, dst, bytes);
    if (!s) {
      dev->stats.bytes_from_device += bytes;
      if (offset == 0 && bytes == b->bytes) {
        memcpy(b->shadow, dst, bytes);
        b->host_stale = false;
      }
    } else if (!b->host_stale && dev->ctx->opts.fallback) {
      tsr_status_free(s); /* the shadow is current: no loss */
      s = TSR_OK;
      memcpy(dst, b->shadow + offset, bytes);
    }
  } else {
    memcpy(dst, b->shadow + offset, bytes);
  }
  pthread_mutex_unlock(dev->lock);
  if (s) {
    char what[128];
    return tsr_status_annotate(s, "read from %s at offset %zu", buf_what(b, what, sizeof what),
                               offset);
  }
  return TSR_OK;
}

/* ---- commands ---- */

/* Checks one operand: type, leading dimension, and that rows x len
 * elements with stride ld from offset lie in the buffer. */
static tsr_status_t check_operand(const tsr_device_t *dev, const char *op, const tsr_buffer_t *b,
                                  bool want_i32, size_t offset, size_t ld, size_t rows,
                                  size_t len, const char *rows_name, const char *len_name,
                                  const char *ld_name) {
  char what[128];
  if (!b) return TSR_ERR(INVALID_ARGUMENT, "gemm: %s is NULL", op);
  if (b->dev != dev)
    return TSR_ERR(INVALID_ARGUMENT, "gemm: %s (%s) belongs to device %s, not %s", op,
                   buf_what(b, what, sizeof what), b->dev->spec, dev->spec);
  if (want_i32 ? b->type != TSR_BUFFER_I32 : b->type == TSR_BUFFER_I32)
    return TSR_ERR(INVALID_ARGUMENT, "gemm: %s is %s; %s must be %s", op,
                   buf_what(b, what, sizeof what), op, want_i32 ? "int32" : "int8 (or bytes)");
  if (ld < len)
    return TSR_ERR(INVALID_ARGUMENT, "gemm: %s %zu is less than %s %zu", ld_name, ld, len_name,
                   len);
  if (ld > UINT32_MAX / b->elem)
    return TSR_ERR(OUT_OF_RANGE, "gemm: %s %zu is too large for a descriptor", ld_name, ld);
  size_t elems = b->bytes / b->elem;
  /* last element: offset + (rows-1)*ld + len - 1, without overflow */
  if (offset >= elems || rows - 1 > (elems - offset) / ld ||
      (rows - 1) * ld + len > elems - offset)
    return TSR_ERR(OUT_OF_RANGE, "gemm: %s: %zu %s x %zu %s with %s %zu at offset %zu do not fit "
                   "in %s (%zu elements)", op, rows, rows_name, len, len_name, ld_name, ld,
                   offset, buf_what(b, what, sizeof what), elems);
  return TSR_OK;
}

static tsr_status_t check_gemm(const tsr_device_t *dev, tsr_gemm_t *g) {
  if (g->m == 0 || g->n == 0 || g->k == 0)
    return TSR_ERR(INVALID_ARGUMENT, "gemm: m %zu, n %zu, k %zu: each must be >= 1", g->m, g->n,
                   g->k);
  uint32_t maxd = dev->caps.max_dim ? dev->caps.max_dim : TSR_HW_MAX_DIM;
  if (g->k > maxd)
    return TSR_ERR(OUT_OF_RANGE, "gemm: k %zu exceeds the max_dim %u of %s", g->k, maxd,
                   dev->spec);
  if (g->m > INT32_MAX || g->n > INT32_MAX)
    return TSR_ERR(OUT_OF_RANGE, "gemm: m %zu or n %zu exceeds %d", g->m, g->n, INT32_MAX);
  if (!g->lda) g->lda = g->k;
  if (!g->ldw) g->ldw = g->k;
  if (!g->ldc) g->ldc = g->n;
  TSR_RETURN_IF(check_operand(dev, "a", g->a, false, g->a_offset, g->lda, g->m, g->k, "rows (m)",
                              "columns (k)", "lda"));
  TSR_RETURN_IF(check_operand(dev, "w", g->w, false, g->w_offset, g->ldw, g->n, g->k, "rows (n)",
                              "columns (k)", "ldw"));
  TSR_RETURN_IF(check_operand(dev, "c", g->c, true, g->c_offset, g->ldc, g->m, g->n, "rows (m)",
                              "columns (n)", "ldc"));
  return TSR_OK;
}

/* Writes the command's descriptors (M and N split by max_dim) into a ring
 * in device memory and fills ev->cmd. */
static tsr_status_t build_ring(tsr_device_t *dev, tsr_event_t *ev) {
  const tsr_gemm_t *g = &ev->g;
  uint64_t maxd = dev->caps.max_dim ? dev->caps.max_dim : TSR_HW_MAX_DIM;
  uint64_t mt = (g->m + maxd - 1) / maxd, nt = (g->n + maxd - 1) / maxd;
  uint64_t nd = mt * nt;
  if (nd > UINT32_MAX / TSR_HW_DESC_BYTES)
    return TSR_ERR(OUT_OF_RANGE, "gemm %zux%zu: %" PRIu64 " descriptors", g->m, g->n, nd);
  size_t ring_bytes = (size_t)nd * TSR_HW_DESC_BYTES;
  uint8_t *host = malloc(ring_bytes);
  if (!host) return TSR_ERR(RESOURCE_EXHAUSTED, "ring of %zu bytes", ring_bytes);
  const uint64_t a0 = g->a->hal.addr + g->a_offset, w0 = g->w->hal.addr + g->w_offset;
  const uint64_t c0 = g->c->hal.addr + (uint64_t)g->c_offset * 4;
  size_t i = 0;
  for (uint64_t m0 = 0; m0 < g->m; m0 += maxd)
    for (uint64_t n0 = 0; n0 < g->n; n0 += maxd) {
      tsr_desc_t d = {
          .opcode = TSR_OP_GEMM_I8_I32,
          .m = (uint32_t)(g->m - m0 < maxd ? g->m - m0 : maxd),
          .n = (uint32_t)(g->n - n0 < maxd ? g->n - n0 : maxd),
          .k = (uint32_t)g->k,
          .lda = (uint32_t)g->lda,
          .ldw = (uint32_t)g->ldw,
          .ldc = (uint32_t)(g->ldc * 4),
          .a_addr = a0 + m0 * g->lda,
          .w_addr = w0 + n0 * g->ldw,
          .c_addr = c0 + (m0 * g->ldc + n0) * 4,
      };
      tsr_desc_pack(host + i++ * TSR_HW_DESC_BYTES, &d);
    }
  tsr_hal_device_t *h = dev->hal;
  tsr_status_t s = h->vt->alloc(h, ring_bytes, 64, &ev->ring);
  if (!s) {
    s = h->vt->write(h, &ev->ring, 0, host, ring_bytes);
    if (s) ring_free(dev, ev);
    else dev->stats.bytes_to_device += ring_bytes;
  } else {
    memset(&ev->ring, 0, sizeof ev->ring);
  }
  free(host);
  if (s) return s;
  /* the window the kernel may touch: the three buffers and the ring */
  const tsr_hal_buffer_t *bufs[4] = {&g->a->hal, &g->w->hal, &g->c->hal, &ev->ring};
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int j = 0; j < 4; j++) {
    if (bufs[j]->addr < lo) lo = bufs[j]->addr;
    if (bufs[j]->addr + bufs[j]->size > hi) hi = bufs[j]->addr + bufs[j]->size;
  }
  ev->cmd = (tsr_hal_command_t){
      .window_base = lo, .window_size = hi - lo, .ring = ev->ring.addr, .n_desc = (uint32_t)nd};
  return TSR_OK;
}

tsr_status_t tsr_gemm_enqueue(tsr_device_t *dev, const tsr_gemm_t *g, tsr_event_t **out_event) {
  if (!out_event) return TSR_ERR(INVALID_ARGUMENT, "gemm: out_event is NULL");
  *out_event = NULL;
  if (!dev) return TSR_ERR(INVALID_ARGUMENT, "gemm: dev is NULL");
  if (!g) return TSR_ERR(INVALID_ARGUMENT, "gemm: the command is NULL");
  tsr_event_t *ev = calloc(1, sizeof *ev);
  if (!ev) return TSR_ERR(RESOURCE_EXHAUSTED, "gemm: event");
  ev->g = *g;
  tsr_status_t s = check_gemm(dev, &ev->g);
  if (s) {
    free(ev);
    return tsr_status_annotate(s, "on %s", dev->spec);
  }
  ev->dev = dev;
  uint64_t maxd = dev->caps.max_dim ? dev->caps.max_dim : TSR_HW_MAX_DIM;
  pthread_mutex_lock(dev->lock);
  ev->id = ++dev->next_event_id;
  dev->n_events++;
  dev->stats.commands++;
  while (dev->n_inflight >= DEV_MAX_INFLIGHT) step_head(dev, UINT64_MAX);
  bool host = !dev->rs.usable || !ev->g.a->on_device || !ev->g.w->on_device || !ev->g.c->on_device;
  if (!dev->rs.usable && !dev->ctx->opts.fallback) {
    s = TSR_ERR(UNAVAILABLE, "gemm on %s: the device is gone (fallback is off)", dev->spec);
  } else if (!host) {
    s = build_ring(dev, ev);
    if (s && dev->ctx->opts.fallback) {
      tsr_ctx_warn(dev->ctx, "%s: %s; command %" PRIu64 " runs on the CPU", dev->spec,
                   tsr_status_message(s), ev->id);
      tsr_status_free(s);
      s = TSR_OK;
      host = true;
    } else if (s) {
      s = tsr_status_annotate(s, "gemm on %s (fallback is off)", dev->spec);
    }
  }
  if (s) {
    dev->n_events--;
    dev->stats.commands--;
    pthread_mutex_unlock(dev->lock);
    free(ev);
    return s;
  }
  ev->cmd.n_desc = (uint32_t)(((ev->g.m + maxd - 1) / maxd) * ((ev->g.n + maxd - 1) / maxd));
  if (host) {
    /* in queue order: the commands before it first */
    drain_until(dev, queue_empty, dev);
    dev->rs.fallbacks++;
    host_compute(dev, ev);
    ev->state = TSR_EVENT_DONE_HOST;
  } else {
    ev->g.a->users++;
    ev->g.w->users++;
    ev->g.c->users++;
    ev->g.c->writers++;
    if (dev->tail) dev->tail->next = ev;
    else dev->head = ev;
    dev->tail = ev;
    dev->n_inflight++;
    submit(dev, ev);
  }
  pthread_mutex_unlock(dev->lock);
  *out_event = ev;
  return TSR_OK;
}

/* ---- events ---- */

tsr_status_t tsr_event_wait(tsr_event_t *ev, uint32_t timeout_ms) {
  if (!ev) return TSR_ERR(INVALID_ARGUMENT, "event wait: ev is NULL");
  tsr_device_t *dev = ev->dev;
  uint64_t t0 = now_ns();
  uint64_t deadline = timeout_ms == TSR_WAIT_FOREVER ? UINT64_MAX
                                                     : t0 + (uint64_t)timeout_ms * 1000000ull;
  pthread_mutex_lock(dev->lock);
  while (ev->state == TSR_EVENT_PENDING)
    if (!step_head(dev, deadline)) break;
  tsr_status_t s = TSR_OK;
  if (ev->state == TSR_EVENT_PENDING)
    s = TSR_ERR(DEADLINE_EXCEEDED, "event of command %" PRIu64 " (gemm %zux%zux%zu on %s): not "
                "done after %u ms; it stays queued", ev->id, ev->g.m, ev->g.n, ev->g.k, dev->spec,
                timeout_ms);
  else if (ev->state == TSR_EVENT_FAILED)
    s = tsr_make_status(tsr_status_code(ev->err), "%s", tsr_status_message(ev->err));
  pthread_mutex_unlock(dev->lock);
  return s;
}

void tsr_event_query(tsr_event_t *ev, tsr_event_info_t *out) {
  memset(out, 0, sizeof *out);
  if (!ev) return;
  tsr_device_t *dev = ev->dev;
  pthread_mutex_lock(dev->lock);
  /* notice finished launches at the head without waiting */
  while (ev->state == TSR_EVENT_PENDING && dev->head && !dev->head->need_submit &&
         !dev->head->submit_err) {
    tsr_hal_result_t res;
    memset(&res, 0, sizeof res);
    tsr_status_t s = dev->hal->vt->wait(dev->hal, dev->head->fence, 0, &res);
    if (s || res.hw_status != TSR_HWERR_OK) {
      tsr_status_free(s); /* a failure is recovered by a wait */
      break;
    }
    head_done(dev, dev->head, &res);
  }
  out->state = ev->state;
  out->cycles = ev->cycles;
  out->descriptors = ev->cmd.n_desc;
  out->retries = ev->retries;
  pthread_mutex_unlock(dev->lock);
}

void tsr_event_destroy(tsr_event_t *ev) {
  if (!ev) return;
  tsr_device_t *dev = ev->dev;
  pthread_mutex_lock(dev->lock);
  if (ev->state == TSR_EVENT_PENDING) ev->released = true; /* freed when it finishes */
  else event_free(ev);
  pthread_mutex_unlock(dev->lock);
}
