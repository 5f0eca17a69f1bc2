/*
 * sched.c - the scheduler: continuous batching over the engines.
 *
 * One thread. Every step, under the lock: requests whose client left are
 * dropped; waiting requests are admitted to free sequence slots (at most
 * --parallel running) in order of effective priority (tenant priority +
 * request priority, one level better per --aging-ms waited; ties by
 * arrival); the pool's load is sampled and a device added or released; then
 * every running request gets its rows in this step's batches: one decode
 * row for each request that is generating (so a stream never waits for
 * another's prompt), then prompt chunks of at most --prefill-chunk tokens,
 * in priority order, within --step-tokens rows in all. Without the lock,
 * each engine with entries evaluates its batch in one forward pass; then,
 * under the lock again, each request that got logits samples its next
 * token, its text grows and its client is woken.
 *
 * Devices: the context's entries are the fixed --device ones and the pool
 * (--pool). What an engine may use this step follows its tenant's class:
 * premium engines get every active accelerator; standard ones only while
 * no premium request runs or waits; batch ones only while no premium or
 * standard request does. The pool's load is (running + waiting requests) /
 * (active pool devices x --pool-seqs); above --pool-high for --pool-window
 * seconds a pool device is added (its weights are uploaded to each engine
 * as it next uses it), below --pool-low for as long one is released (and
 * its weights freed), never below --pool-min, at most one event per window.
 * A device an engine gives up after failures counts as lost: its work runs
 * on the other devices or the host, with the same results.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cli/cli.h"
#include "serve.h"

double srv_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  void *p = realloc(*arr, (size_t)c * elem);
  if (!p) return false;
  *arr = p;
  *cap = c;
  return true;
}

void srv_sched_submit(srv_t *s, srv_req_t *r) {
  if (!grow((void **)&s->waiting, &s->cap_waiting, s->n_waiting + 1, sizeof(srv_req_t *)))
    abort();
  r->refs++;
  r->id = s->next_id++;
  r->state = SRV_WAITING;
  s->waiting[s->n_waiting++] = r;
  pthread_cond_signal(&s->wake);
}

static int64_t eff_priority(const srv_t *s, const srv_req_t *r, double now) {
  int64_t p = (int64_t)r->tenant->priority + r->priority;
  if (s->opt.aging_ms > 0) p -= (int64_t)((now - r->t_arrival) * 1000.0 / s->opt.aging_ms);
  return p;
}

static bool before(const srv_t *s, const srv_req_t *a, const srv_req_t *b, double now) {
  int64_t pa = eff_priority(s, a, now), pb = eff_priority(s, b, now);
  return pa != pb ? pa < pb : a->id < b->id;
}

/* ---- sequences: reused per engine ---- */

static tsr_status_t seq_get(srv_model_t *m, int e, tsr_seq_t **out) {
  if (m->n_free_seqs[e] > 0) {
    *out = m->free_seqs[e][--m->n_free_seqs[e]];
    return TSR_OK;
  }
  return tsr_seq_create(m->engines[e], out);
}

static void seq_put(srv_t *s, srv_model_t *m, int e, tsr_seq_t *q) {
  if (!q) return;
  if (m->n_free_seqs[e] < s->opt.parallel) {
    tsr_seq_reset(q);
    m->free_seqs[e][m->n_free_seqs[e]++] = q;
  } else {
    tsr_seq_destroy(q);
  }
}

/* (L) Ends `r` (done, failed or cancelled): its slot, sequence and unused
 * quota go back; its client is woken to get the answer. */
static void finish(srv_t *s, srv_req_t *r, const char *reason) {
  if (r->state == SRV_RUNNING) {
    for (int i = 0; i < s->n_running; i++)
      if (s->running[i] == r) {
        memmove(&s->running[i], &s->running[i + 1],
                sizeof(srv_req_t *) * (size_t)(s->n_running - i - 1));
        s->n_running--;
        break;
      }
  }
  seq_put(s, r->model, r->engine, r->seq);
  r->seq = NULL;
  r->finish = reason;
  r->state = SRV_DONE;
  srv_quota_release(s, r->tenant, (int64_t)r->max_tokens - r->generated);
  srv_req_notify(s, r);
  srv_req_unref(s, r); /* the scheduler's reference */
}

static void fail(srv_t *s, srv_req_t *r, int status, const char *msg) {
  free(r->error);
  r->error = strdup(msg ? msg : "internal error");
  r->error_status = status;
  finish(s, r, NULL);
}

/* (L) Drops cancelled requests, admits waiting ones by priority. */
static void admit(srv_t *s, double now) {
  for (int i = 0; i < s->n_running;) {
    srv_req_t *r = s->running[i];
    if (r->cancelled) finish(s, r, NULL); /* removes it from running */
    else i++;
  }
  for (int i = 0; i < s->n_waiting;) {
    srv_req_t *r = s->waiting[i];
    if (r->cancelled) {
      s->waiting[i] = s->waiting[--s->n_waiting];
      finish(s, r, NULL);
    } else {
      i++;
    }
  }
  while (s->n_running < s->opt.parallel && s->n_waiting > 0) {
    int best = 0;
    for (int i = 1; i < s->n_waiting; i++)
      if (before(s, s->waiting[i], s->waiting[best], now)) best = i;
    srv_req_t *r = s->waiting[best];
    memmove(&s->waiting[best], &s->waiting[best + 1],
            sizeof(srv_req_t *) * (size_t)(s->n_waiting - best - 1));
    s->n_waiting--;
    tsr_status_t st = seq_get(r->model, r->engine, &r->seq);
    if (st) {
      r->state = SRV_WAITING;
      char msg[512];
      snprintf(msg, sizeof msg, "no sequence for the request: %s", tsr_status_message(st));
      tsr_status_free(st);
      fail(s, r, 503, msg);
      continue;
    }
    if (!grow((void **)&s->running, &s->cap_running, s->n_running + 1, sizeof(srv_req_t *)))
      abort();
    r->state = SRV_RUNNING;
    s->running[s->n_running++] = r;
  }
}

/* (L) Samples the pool's load; adds or releases one device. */
static void scale(srv_t *s, double now) {
  if (!s->pool_mask) {
    s->load = 0;
    return;
  }
  uint64_t usable = s->pool_mask & ~s->lost_mask;
  int active = __builtin_popcountll(s->pool_active & usable);
  int demand = s->n_running + s->n_waiting;
  s->load = (double)demand / ((double)(active > 0 ? active : 1) * s->opt.pool_seqs);
  double win = s->opt.pool_window_s;
  bool cooled = now - s->last_scale_t >= win;
  if (s->load > s->opt.pool_high) {
    s->below_since = -1;
    if (s->above_since < 0) s->above_since = now;
    uint64_t idle = usable & ~s->pool_active;
    if (idle && now - s->above_since >= win && cooled) {
      int e = __builtin_ctzll(idle);
      s->pool_active |= 1ull << e;
      s->m.scale_up++;
      s->last_scale_t = now;
      s->above_since = now;
      fprintf(stderr, "tessera serve: load %.2f > %.2f: pool device %d (%s) added, %d active\n",
              s->load, s->opt.pool_high, e, s->entry_names[e], active + 1);
    }
  } else if (s->load < s->opt.pool_low) {
    s->above_since = -1;
    if (s->below_since < 0) s->below_since = now;
    uint64_t on = s->pool_active & usable;
    if (active > s->opt.pool_min && now - s->below_since >= win && cooled) {
      int e = 63 - __builtin_clzll(on);
      s->pool_active &= ~(1ull << e);
      s->m.scale_down++;
      s->last_scale_t = now;
      s->below_since = now;
      fprintf(stderr, "tessera serve: load %.2f < %.2f: pool device %d (%s) released, %d active\n",
              s->load, s->opt.pool_low, e, s->entry_names[e], active - 1);
    }
  } else {
    s->above_since = s->below_since = -1;
  }
}

/* One row group of a step: request r gets n tokens in engine (m, e)'s
 * batch as entry `index`. */
typedef struct step_entry {
  srv_req_t *r;
  size_t n;
  size_t index;
  bool logits;
} step_entry_t;

typedef struct sched {
  step_entry_t *entries;
  int n_entries, cap_entries;
  float *scratch;
  double *busy_dt;
} sched_t;

static uint64_t grant(const srv_t *s, srv_class_t cls, bool premium_wants, bool standard_wants) {
  uint64_t offer = (s->fixed_mask | s->pool_active) & ~s->lost_mask;
  switch (cls) {
    case SRV_PREMIUM: return offer;
    case SRV_STANDARD: return premium_wants ? 0 : offer;
    default: return premium_wants || standard_wants ? 0 : offer;
  }
}

/* (L) Fills the batches for this step; returns the rows. */
static int plan_step(srv_t *s, sched_t *k, double now) {
  for (int mi = 0; mi < s->n_models; mi++)
    for (int t = 0; t < s->n_tenants; t++) tsr_batch_clear(s->models[mi].batches[t]);
  k->n_entries = 0;
  /* running requests in priority order */
  for (int i = 1; i < s->n_running; i++) {
    srv_req_t *r = s->running[i];
    int j = i - 1;
    while (j >= 0 && before(s, r, s->running[j], now)) {
      s->running[j + 1] = s->running[j];
      j--;
    }
    s->running[j + 1] = r;
  }
  int rows = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < s->n_running; i++) {
      srv_req_t *r = s->running[i];
      bool decoding = r->prefilled == r->n_prompt;
      if ((pass == 0) != decoding) continue;
      size_t n = 1;
      const int32_t *tok = &r->last_token;
      if (!decoding) {
        size_t left = r->n_prompt - r->prefilled;
        int budget = s->opt.step_tokens - rows;
        if (budget <= 0) break;
        n = left;
        if (n > (size_t)s->opt.prefill_chunk) n = (size_t)s->opt.prefill_chunk;
        if (n > (size_t)budget) n = (size_t)budget;
        tok = r->prompt + r->prefilled;
      }
      bool want = decoding || r->prefilled + n == r->n_prompt;
      if (!grow((void **)&k->entries, &k->cap_entries, k->n_entries + 1, sizeof(step_entry_t)))
        abort();
      step_entry_t *en = &k->entries[k->n_entries];
      tsr_status_t st = tsr_batch_add(r->model->batches[r->engine], r->seq, tok, n, want,
                                      &en->index);
      if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tsr_status_message(st));
        tsr_status_free(st);
        fail(s, r, 500, msg);
        i--; /* finish removed it from running */
        continue;
      }
      en->r = r;
      en->n = n;
      en->logits = want;
      r->refs++; /* held until the results are applied */
      k->n_entries++;
      rows += (int)n;
    }
  }
  return rows;
}

/* Without the lock: evaluates every engine's batch. Returns per engine the
 * status (NULL ok) in `sts` and its wall time in busy_dt. */
static void eval_step(srv_t *s, sched_t *k, const uint64_t *want_mask, tsr_status_t *sts) {
  for (int mi = 0; mi < s->n_models; mi++) {
    srv_model_t *m = &s->models[mi];
    for (int t = 0; t < s->n_tenants; t++) {
      int idx = mi * s->n_tenants + t;
      sts[idx] = TSR_OK;
      k->busy_dt[idx] = 0;
      uint64_t keep = s->fixed_mask | s->pool_active;
      if (want_mask[idx] != m->engine_mask[t]) {
        tsr_status_t st = tsr_engine_set_devices(m->engines[t], want_mask[idx], keep);
        if (st) {
          /* the engine keeps its previous devices: the results are the same */
          fprintf(stderr, "tessera serve: %s/%s: devices not changed: %s\n", m->name,
                  s->tenants[t].name, tsr_status_message(st));
          tsr_status_free(st);
        }
        m->engine_mask[t] = want_mask[idx];
      }
      if (tsr_batch_size(m->batches[t]) == 0) continue;
      double t0 = srv_now();
      sts[idx] = tsr_engine_eval(m->engines[t], m->batches[t]);
      k->busy_dt[idx] = srv_now() - t0;
    }
  }
}

/* (L) Samples, appends text, ends requests. */
static void apply_step(srv_t *s, sched_t *k, tsr_status_t *sts, double now) {
  uint64_t cpu_mask = s->cpu_mask;
  for (int mi = 0; mi < s->n_models; mi++)
    for (int t = 0; t < s->n_tenants; t++) {
      int idx = mi * s->n_tenants + t;
      tsr_engine_t *en = s->models[mi].engines[t];
      if (k->busy_dt[idx] > 0) {
        uint64_t live = tsr_engine_devices(en) & ~cpu_mask;
        for (int e = 0; e < s->n_entries && e < 64; e++)
          if (live >> e & 1) s->m.dev_busy_s[e] += k->busy_dt[idx];
      }
      uint64_t gone = s->models[mi].engine_mask[t] & ~tsr_engine_devices(en) & ~cpu_mask;
      if (gone & ~s->lost_mask) {
        for (int e = 0; e < s->n_entries && e < 64; e++)
          if ((gone & ~s->lost_mask) >> e & 1)
            fprintf(stderr, "tessera serve: device %d (%s) lost; its work runs elsewhere\n", e,
                    s->entry_names[e]);
        s->lost_mask |= gone;
      }
    }
  for (int i = 0; i < k->n_entries; i++) {
    step_entry_t *en = &k->entries[i];
    srv_req_t *r = en->r;
    int idx = (int)(r->model - s->models) * s->n_tenants + r->engine;
    if (r->state != SRV_RUNNING) {
      srv_req_unref(s, r);
      continue;
    }
    if (sts[idx]) {
      char msg[600];
      snprintf(msg, sizeof msg, "evaluation failed: %s", tsr_status_message(sts[idx]));
      fail(s, r, 500, msg);
      srv_req_unref(s, r);
      continue;
    }
    bool decoding = r->prefilled == r->n_prompt;
    if (!decoding) {
      r->prefilled += en->n;
      if (r->prefilled == r->n_prompt) s->m.prompt_tokens[r->tenant->index] += r->n_prompt;
    }
    if (en->logits && !r->cancelled) {
      const float *lg = tsr_batch_logits(r->model->batches[r->engine], en->index);
      int32_t vocab = r->model->cfg.vocab_size;
      memcpy(k->scratch, lg, sizeof(float) * (size_t)vocab);
      int32_t next = tsr_sampler_sample(r->sampler, k->scratch);
      if (next == tsr_model_bos(r->model->model)) {
        finish(s, r, "stop"); /* BOS ends a sequence, as in `tessera run` */
      } else {
        const char *piece = tsr_model_token_piece(r->model->model, r->last_token, next);
        if (!cli_piece_shown(piece)) piece = ""; /* a token all the same */
        if (!srv_req_append(r, piece, strlen(piece))) {
          fail(s, r, 500, "out of memory for the completion text");
        } else {
          r->last_token = next;
          r->generated++;
          s->m.generated_tokens[r->tenant->index]++;
          srv_class_t c = r->tenant->cls;
          if (r->generated == 1) {
            srv_hist_add(&s->m.ttft[c], srv_ttft_bounds, now - r->t_arrival);
          } else {
            srv_hist_add(&s->m.itl[c], srv_itl_bounds, now - r->t_last);
          }
          r->t_last = now;
          if (r->generated >= r->max_tokens) finish(s, r, "length");
          else srv_req_notify(s, r);
        }
      }
    }
    srv_req_unref(s, r);
  }
  /* time: measured, and the devices' share as their boards would take it */
  double host_op = 0, board = 0;
  for (int mi = 0; mi < s->n_models; mi++)
    for (int t = 0; t < s->n_tenants; t++) {
      tsr_session_stats_t st;
      tsr_engine_get_stats(s->models[mi].engines[t], &st);
      host_op += st.cpu_s;
      board += st.board_projected_s;
      s->m.eval_s += k->busy_dt[mi * s->n_tenants + t];
    }
  s->m.host_op_s = host_op;
  s->m.board_s = board;
  /* the devices' counters, for /metrics */
  for (int e = 0; e < s->n_entries; e++) {
    uint64_t acc[4] = {0};
    for (int mi = 0; mi < s->n_models; mi++)
      for (int t = 0; t < s->n_tenants; t++) {
        tsr_device_stats_t st;
        if (!tsr_engine_device_stats(s->models[mi].engines[t], e, &st)) continue;
        acc[0] += st.launches;
        acc[1] += st.fallbacks;
        acc[2] += st.retries;
        acc[3] += st.cycles;
      }
    memcpy(s->m.dev[e], acc, sizeof acc);
  }
}

static void *sched_main(void *arg) {
  srv_t *s = arg;
  sched_t k = {0};
  int32_t vocab = 0;
  int n_engines = s->n_models * s->n_tenants;
  for (int mi = 0; mi < s->n_models; mi++)
    if (s->models[mi].cfg.vocab_size > vocab) vocab = s->models[mi].cfg.vocab_size;
  k.scratch = malloc(sizeof(float) * (size_t)vocab);
  k.busy_dt = calloc((size_t)n_engines, sizeof(double));
  uint64_t *want = calloc((size_t)n_engines, sizeof(uint64_t));
  tsr_status_t *sts = calloc((size_t)n_engines, sizeof(tsr_status_t));
  if (!k.scratch || !k.busy_dt || !want || !sts) abort();

  pthread_mutex_lock(&s->lock);
  for (;;) {
    double now = srv_now();
    admit(s, now);
    scale(s, now);
    if (s->n_running == 0) {
      if (s->stopping && s->n_waiting == 0) break;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&s->wake, &s->lock, &ts);
      continue;
    }
    bool premium_wants = false, standard_wants = false;
    for (int i = 0; i < s->n_running; i++) {
      premium_wants |= s->running[i]->tenant->cls == SRV_PREMIUM;
      standard_wants |= s->running[i]->tenant->cls == SRV_STANDARD;
    }
    for (int i = 0; i < s->n_waiting; i++) {
      premium_wants |= s->waiting[i]->tenant->cls == SRV_PREMIUM;
      standard_wants |= s->waiting[i]->tenant->cls == SRV_STANDARD;
    }
    for (int mi = 0; mi < s->n_models; mi++)
      for (int t = 0; t < s->n_tenants; t++)
        want[mi * s->n_tenants + t] =
            grant(s, s->tenants[t].cls, premium_wants, standard_wants);
    int rows = plan_step(s, &k, now);
    pthread_mutex_unlock(&s->lock);

    eval_step(s, &k, want, sts);

    pthread_mutex_lock(&s->lock);
    s->m.steps++;
    s->m.last_batch_rows = rows;
    s->m.batch_rows_total += (uint64_t)rows;
    apply_step(s, &k, sts, srv_now());
    for (int i = 0; i < n_engines; i++) {
      tsr_status_free(sts[i]);
      sts[i] = TSR_OK;
    }
  }
  pthread_mutex_unlock(&s->lock);
  free(k.entries);
  free(k.scratch);
  free(k.busy_dt);
  free(want);
  free(sts);
  return NULL;
}

bool srv_sched_start(srv_t *s) {
  s->above_since = s->below_since = -1;
  s->last_scale_t = srv_now();
  return pthread_create(&s->sched_thread, NULL, sched_main, s) == 0;
}

void srv_sched_stop(srv_t *s) {
  pthread_mutex_lock(&s->lock);
  s->stopping = true;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->sched_thread, NULL);
}
