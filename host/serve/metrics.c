/*
 * metrics.c - the server's counters and histograms as Prometheus text
 * (exposition format 0.0.4: # HELP, # TYPE, name{labels} value).
 *
 * Everything here is read and written under srv_t.lock. The device series
 * are per context entry, labelled with the entry's index and spec; busy
 * fraction is host-observed: the share of wall time since start that the
 * scheduler spent in evaluations with that device on (device time proper
 * is in tessera_device_cycles_total, at the device's stated clock).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

const double srv_ttft_bounds[SRV_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                  1,     2.5,  5,     10,   30,  60,  120};
const double srv_itl_bounds[SRV_HIST_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                 0.1,    0.25,  0.5,    1,     2.5,  5,     10};

static const int status_codes[SRV_STATUS_SLOTS] = {200, 400, 401, 404, 405, 413, 429, 499, 500, 503};

void srv_metrics_init(srv_t *s) {
  srv_metrics_t *m = &s->m;
  m->requests = calloc((size_t)s->n_tenants, sizeof(*m->requests));
  m->prompt_tokens = calloc((size_t)s->n_tenants, sizeof(uint64_t));
  m->generated_tokens = calloc((size_t)s->n_tenants, sizeof(uint64_t));
  m->dev_busy_s = calloc((size_t)(s->n_entries > 0 ? s->n_entries : 1), sizeof(double));
  m->dev = calloc((size_t)(s->n_entries > 0 ? s->n_entries : 1), sizeof(*m->dev));
  if (!m->requests || !m->prompt_tokens || !m->generated_tokens || !m->dev_busy_s || !m->dev)
    abort();
  m->t_start = srv_now();
}

void srv_metrics_free(srv_t *s) {
  free(s->m.requests);
  free(s->m.prompt_tokens);
  free(s->m.generated_tokens);
  free(s->m.dev_busy_s);
  free(s->m.dev);
}

void srv_hist_add(srv_hist_t *h, const double *bounds, double v) {
  int b = 0;
  while (b < SRV_HIST_BUCKETS && v > bounds[b]) b++;
  h->counts[b]++;
  h->sum += v;
  h->n++;
}

void srv_metrics_request(srv_t *s, const srv_tenant_t *t, int status) {
  int slot = 8; /* other errors count as 500 */
  for (int i = 0; i < SRV_STATUS_SLOTS; i++)
    if (status_codes[i] == status) slot = i;
  s->m.requests[t->index][slot]++;
}

typedef struct buf {
  char *p;
  size_t len, cap;
  bool oom;
} buf_t;

static void put(buf_t *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

static void head(buf_t *b, const char *name, const char *type, const char *help) {
  put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newline escaped. */
static void put_label(buf_t *b, const char *v) {
  for (const char *p = v; *p; p++) {
    if (*p == '\\' || *p == '"') put(b, "\\%c", *p);
    else if (*p == '\n') put(b, "\\n");
    else put(b, "%c", *p);
  }
}

static void hist(buf_t *b, const char *name, const srv_hist_t *h, const double *bounds,
                 const char *cls) {
  uint64_t cum = 0;
  for (int i = 0; i <= SRV_HIST_BUCKETS; i++) {
    cum += h->counts[i];
    if (i < SRV_HIST_BUCKETS)
      put(b, "%s_bucket{class=\"%s\",le=\"%g\"} %" PRIu64 "\n", name, cls, bounds[i], cum);
    else
      put(b, "%s_bucket{class=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", name, cls, cum);
  }
  put(b, "%s_sum{class=\"%s\"} %.9g\n%s_count{class=\"%s\"} %" PRIu64 "\n", name, cls, h->sum,
      name, cls, h->n);
}

/* A counter with one series per tenant (only `only`'s when non-NULL). */
static void tenant_counter(buf_t *b, const srv_t *s, const srv_tenant_t *only, const char *name,
                           const char *help, const uint64_t *v) {
  head(b, name, "counter", help);
  for (int t = 0; t < s->n_tenants; t++) {
    if (only && only != &s->tenants[t]) continue;
    put(b, "%s{tenant=\"", name);
    put_label(b, s->tenants[t].name);
    put(b, "\"} %" PRIu64 "\n", v[t]);
  }
}

char *srv_metrics_render(srv_t *s, const srv_tenant_t *only, size_t *len) {
  srv_metrics_t *m = &s->m;
  buf_t b = {.cap = 8192};
  b.p = malloc(b.cap);
  if (!b.p) return NULL;
  b.p[0] = '\0';

  head(&b, "tessera_requests_total", "counter", "Requests answered, by tenant and HTTP status (499: the client left first).");
  for (int t = 0; t < s->n_tenants; t++) {
    if (only && only != &s->tenants[t]) continue;
    for (int i = 0; i < SRV_STATUS_SLOTS; i++) {
      put(&b, "tessera_requests_total{tenant=\"");
      put_label(&b, s->tenants[t].name);
      put(&b, "\",status=\"%d\"} %" PRIu64 "\n", status_codes[i], m->requests[t][i]);
    }
  }
  tenant_counter(&b, s, only, "tessera_prompt_tokens_total",
                 "Prompt tokens evaluated (BOS included), by tenant.", m->prompt_tokens);
  tenant_counter(&b, s, only, "tessera_generated_tokens_total",
                 "Completion tokens generated, by tenant.", m->generated_tokens);
  head(&b, "tessera_ttft_seconds", "histogram", "Time from arrival to the first completion token, by tenant class.");
  for (int c = 0; c < SRV_CLASSES; c++)
    hist(&b, "tessera_ttft_seconds", &m->ttft[c], srv_ttft_bounds, srv_class_name((srv_class_t)c));
  head(&b, "tessera_inter_token_seconds", "histogram", "Time between successive completion tokens of a request, by tenant class.");
  for (int c = 0; c < SRV_CLASSES; c++)
    hist(&b, "tessera_inter_token_seconds", &m->itl[c], srv_itl_bounds, srv_class_name((srv_class_t)c));
  if (only) goto done; /* the rest is the server's, not one tenant's */

  head(&b, "tessera_queue_depth", "gauge", "Requests waiting for a sequence slot.");
  put(&b, "tessera_queue_depth %d\n", s->n_waiting);
  head(&b, "tessera_running_sequences", "gauge", "Requests in the running batch (prefill or decode).");
  put(&b, "tessera_running_sequences %d\n", s->n_running);
  head(&b, "tessera_batch_rows", "gauge", "Rows (tokens of all sequences) of the last step.");
  put(&b, "tessera_batch_rows %d\n", m->last_batch_rows);
  head(&b, "tessera_batch_rows_total", "counter", "Rows evaluated over all steps.");
  put(&b, "tessera_batch_rows_total %" PRIu64 "\n", m->batch_rows_total);
  head(&b, "tessera_steps_total", "counter", "Scheduler steps (one forward pass per engine with work).");
  put(&b, "tessera_steps_total %" PRIu64 "\n", m->steps);

  double up = srv_now() - m->t_start;
  head(&b, "tessera_device_busy_fraction", "gauge", "Share of wall time since start spent in evaluations using the device (host-observed).");
  for (int e = 0; e < s->n_entries; e++) {
    if (s->cpu_mask >> e & 1) continue;
    put(&b, "tessera_device_busy_fraction{device=\"%d\",spec=\"", e);
    put_label(&b, s->entry_names[e]);
    put(&b, "\"} %.6f\n", up > 0 ? m->dev_busy_s[e] / up : 0.0);
  }
  /* per-device work of every engine together (the scheduler's copy) */
  const char *names[4] = {"tessera_device_launches_total", "tessera_device_fallbacks_total",
                          "tessera_device_retries_total", "tessera_device_cycles_total"};
  const char *helps[4] = {"Device launches of all engines.", "Launches run on the host after a device failure.",
                          "Launches retried after a device reset.", "Device busy cycles (at the device's stated clock)."};
  for (int k = 0; k < 4; k++) {
    head(&b, names[k], "counter", helps[k]);
    for (int e = 0; e < s->n_entries; e++) {
      if (s->cpu_mask >> e & 1) continue;
      uint64_t v = m->dev[e][k];
      put(&b, "%s{device=\"%d\",spec=\"", names[k], e);
      put_label(&b, s->entry_names[e]);
      put(&b, "\"} %" PRIu64 "\n", v);
    }
  }
  head(&b, "tessera_eval_seconds_total", "counter", "Wall time of the forward passes.");
  put(&b, "tessera_eval_seconds_total %.6f\n", m->eval_s);
  head(&b, "tessera_host_op_seconds_total", "counter", "Of it, the ops run on the host.");
  put(&b, "tessera_host_op_seconds_total %.6f\n", m->host_op_s);
  head(&b, "tessera_board_projected_seconds_total", "counter", "The devices' work as their boards would take it: cycles at the stated clock, launch latency, copies over the link.");
  put(&b, "tessera_board_projected_seconds_total %.6f\n", m->board_s);
  head(&b, "tessera_device_active", "gauge", "1 if the device is offered to engines now (fixed, or an active pool device).");
  for (int e = 0; e < s->n_entries; e++) {
    if (s->cpu_mask >> e & 1) continue;
    bool on = ((s->fixed_mask | s->pool_active) >> e & 1) && !(s->lost_mask >> e & 1);
    put(&b, "tessera_device_active{device=\"%d\",spec=\"", e);
    put_label(&b, s->entry_names[e]);
    put(&b, "\"} %d\n", on ? 1 : 0);
  }
  int pool_n = 0, pool_on = 0, lost = 0;
  for (int e = 0; e < s->n_entries && e < 64; e++) {
    pool_n += (int)(s->pool_mask >> e & 1);
    pool_on += (int)(s->pool_active >> e & 1);
    lost += (int)(s->lost_mask >> e & 1);
  }
  head(&b, "tessera_pool_devices", "gauge", "Accelerators of the pool active now.");
  put(&b, "tessera_pool_devices %d\n", pool_on);
  head(&b, "tessera_pool_size", "gauge", "Accelerators in the pool.");
  put(&b, "tessera_pool_size %d\n", pool_n);
  head(&b, "tessera_devices_lost", "gauge", "Devices given up after failures (their work runs elsewhere).");
  put(&b, "tessera_devices_lost %d\n", lost);
  head(&b, "tessera_pool_load", "gauge", "Sequences running or waiting per active pool device's capacity.");
  put(&b, "tessera_pool_load %.6f\n", s->load);
  head(&b, "tessera_scaling_events_total", "counter", "Pool devices added (up) or released (down).");
  put(&b, "tessera_scaling_events_total{direction=\"up\"} %" PRIu64 "\n", m->scale_up);
  put(&b, "tessera_scaling_events_total{direction=\"down\"} %" PRIu64 "\n", m->scale_down);
done:
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  *len = b.len;
  return b.p;
}
