/* queue.c - the command queue the backends share (see queue.h). */
#include "driver/queue.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "driver/hal_impl.h"

/* Worker spin before sleeping: ~20-50 us of pause instructions. */
#define QUEUE_SPIN 4096

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static bool finished(tsr_queue_state_t st) {
  return st == TSR_QUEUE_DONE || st == TSR_QUEUE_FAILED || st == TSR_QUEUE_ABORTED;
}

static struct timespec abs_time(uint64_t ns) {
  return (struct timespec){.tv_sec = (time_t)(ns / 1000000000ull),
                           .tv_nsec = (long)(ns % 1000000000ull)};
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = abs_time(ns);
  nanosleep(&ts, NULL);
}

tsr_status_t tsr_queue_init(tsr_queue_t *q, const tsr_queue_config_t *cfg) {
  memset(q, 0, sizeof *q);
  q->cfg = *cfg;
  if (!q->cfg.poll_first_ns) q->cfg.poll_first_ns = 20000;
  if (!q->cfg.poll_max_ns) q->cfg.poll_max_ns = 1000000;
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca))
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: cannot create the queue", cfg->name);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  bool ok = !pthread_mutex_init(&q->mu, NULL);
  if (ok && pthread_cond_init(&q->cv_done, &ca)) {
    pthread_mutex_destroy(&q->mu);
    ok = false;
  }
  if (ok && pthread_cond_init(&q->cv_work, &ca)) {
    pthread_cond_destroy(&q->cv_done);
    pthread_mutex_destroy(&q->mu);
    ok = false;
  }
  pthread_condattr_destroy(&ca);
  if (!ok) return TSR_ERR(RESOURCE_EXHAUSTED, "%s: cannot create the queue", cfg->name);
  atomic_init(&q->published, 0);
  q->ready = true;
  return TSR_OK;
}

static void release(tsr_queue_t *q, tsr_queue_cmd_t *c) {
  if (c->priv && q->cfg.ops && q->cfg.ops->release) q->cfg.ops->release(q->cfg.impl, c);
  c->priv = NULL;
}

void tsr_queue_destroy(tsr_queue_t *q) {
  if (!q || !q->ready) return;
  for (uint64_t i = 0; i < q->n; i++) release(q, &q->cmds[i]);
  free(q->cmds);
  q->cmds = NULL;
  pthread_cond_destroy(&q->cv_work);
  pthread_cond_destroy(&q->cv_done);
  pthread_mutex_destroy(&q->mu);
  q->ready = false;
}

void tsr_queue_lock(tsr_queue_t *q) { pthread_mutex_lock(&q->mu); }
void tsr_queue_unlock(tsr_queue_t *q) { pthread_mutex_unlock(&q->mu); }

tsr_queue_cmd_t *tsr_queue_cmd(tsr_queue_t *q, uint64_t fence) {
  if (fence <= q->base_fence || fence > q->base_fence + q->n) return NULL;
  return &q->cmds[fence - 1 - q->base_fence];
}

uint64_t tsr_queue_oldest_pending(const tsr_queue_t *q) {
  return q->head < q->n ? q->base_fence + q->head + 1 : 0;
}

uint64_t tsr_queue_last_fence(const tsr_queue_t *q) { return q->base_fence + q->n; }

static void advance_head(tsr_queue_t *q) {
  while (q->head < q->n && finished(q->cmds[q->head].state)) q->head++;
}

void tsr_queue_complete(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *res) {
  tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (!c || finished(c->state)) return;
  if (res) c->res = *res;
  else memset(&c->res, 0, sizeof c->res);
  c->state = TSR_QUEUE_DONE;
  advance_head(q);
  pthread_cond_broadcast(&q->cv_done);
}

void tsr_queue_fail(tsr_queue_t *q, uint64_t fence, tsr_status_t err) {
  tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (c && !finished(c->state)) {
    c->err_code = err ? tsr_status_code(err) : TSR_STATUS_DEVICE;
    snprintf(c->err_msg, sizeof c->err_msg, "%s",
             err ? tsr_status_message(err) : "command failed");
    c->state = TSR_QUEUE_FAILED;
    advance_head(q);
    pthread_cond_broadcast(&q->cv_done);
  }
  tsr_status_free(err);
}

void tsr_queue_abort(tsr_queue_t *q, uint64_t fence) {
  tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (!c || finished(c->state)) return;
  c->state = TSR_QUEUE_ABORTED;
  release(q, c);
  advance_head(q);
  pthread_cond_broadcast(&q->cv_done);
}

/* Forgets finished commands beyond the last TSR_QUEUE_KEEP_DONE, so a long
 * run does not grow without bound. Only commands before `head` go. */
static void compact(tsr_queue_t *q) {
  if (q->head < 2 * TSR_QUEUE_KEEP_DONE) return;
  uint64_t drop = q->head - TSR_QUEUE_KEEP_DONE;
  for (uint64_t i = 0; i < drop; i++) release(q, &q->cmds[i]);
  memmove(q->cmds, q->cmds + drop, (q->n - drop) * sizeof *q->cmds);
  q->n -= drop;
  q->head -= drop;
  q->next = q->next > drop ? q->next - drop : 0;
  q->base_fence += drop;
}

tsr_status_t tsr_queue_submit(tsr_queue_t *q, const tsr_hal_command_t *cmd,
                              uint64_t *out_fence) {
  *out_fence = 0;
  if (!cmd) return TSR_ERR(INVALID_ARGUMENT, "%s: submit: NULL command", q->cfg.name);
  if (cmd->flags & ~(uint32_t)TSR_HAL_CMD_QUEUE)
    return TSR_ERR(INVALID_ARGUMENT, "%s: submit: unknown command flags 0x%x", q->cfg.name,
                   cmd->flags);
  if ((cmd->flags & TSR_HAL_CMD_QUEUE) && !q->cfg.queue_mode)
    return TSR_ERR(INVALID_ARGUMENT, "%s: submit: this device does not run queue mode",
                   q->cfg.name);
  if ((cmd->flags & TSR_HAL_CMD_QUEUE) && !cmd->n_desc)
    return TSR_ERR(INVALID_ARGUMENT, "%s: submit: a queue-mode launch needs at least one slot",
                   q->cfg.name);
  pthread_mutex_lock(&q->mu);
  compact(q);
  if (q->n == q->cap) {
    uint64_t cap = q->cap ? q->cap * 2 : 64;
    tsr_queue_cmd_t *p = realloc(q->cmds, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&q->mu);
      return TSR_ERR(RESOURCE_EXHAUSTED, "%s: submit: out of host memory", q->cfg.name);
    }
    q->cmds = p;
    q->cap = cap;
  }
  tsr_queue_cmd_t *c = &q->cmds[q->n++];
  memset(c, 0, sizeof *c);
  c->cmd = *cmd;
  c->state = TSR_QUEUE_QUEUED;
  const uint64_t fence = q->base_fence + q->n;
  if (q->cfg.ops && q->cfg.ops->start) {
    tsr_status_t s = q->cfg.ops->start(q->cfg.impl, q, fence, c);
    if (s) {
      release(q, &q->cmds[q->n - 1]);
      q->n--;
      if (q->head > q->n) q->head = q->n;
      if (q->next > q->n) q->next = q->n;
      pthread_mutex_unlock(&q->mu);
      return s;
    }
  }
  *out_fence = fence;
  atomic_fetch_add(&q->published, 1);
  /* A busy or spinning worker finds the command when it finishes the
   * current one: waking it is only needed when it sleeps. */
  if (q->worker_idle) pthread_cond_signal(&q->cv_work);
  pthread_mutex_unlock(&q->mu);
  return TSR_OK;
}

/* The final outcome of command `c` (`fence`) as wait() reports it. */
static tsr_status_t outcome(const tsr_queue_t *q, const tsr_queue_cmd_t *c, uint64_t fence,
                            tsr_hal_result_t *out) {
  if (c->state == TSR_QUEUE_DONE) {
    if (out) *out = c->res;
    return TSR_OK;
  }
  if (c->state == TSR_QUEUE_FAILED) return tsr_make_status(c->err_code, "%s", c->err_msg);
  return TSR_ERR(DEVICE, "%s: command %" PRIu64 " was aborted by a reset", q->cfg.name, fence);
}

/* wait() and progress(): until `fence` ends, or (done_target below 2^32)
 * has done that many descriptors. */
static tsr_status_t wait_for(tsr_queue_t *q, uint64_t fence, uint64_t timeout_ns,
                             tsr_hal_result_t *out, uint64_t done_target) {
  if (out) memset(out, 0, sizeof *out);
  const tsr_queue_ops_t *ops = q->cfg.ops;
  const bool polling = ops && ops->poll;
  pthread_mutex_lock(&q->mu);
  if (fence == 0 || fence > q->base_fence + q->n) {
    uint64_t last = q->base_fence + q->n;
    pthread_mutex_unlock(&q->mu);
    return TSR_ERR(INVALID_ARGUMENT, "%s: wait: fence %" PRIu64 " was never issued (last is %"
                   PRIu64 ")", q->cfg.name, fence, last);
  }
  const uint64_t t0 = tsr_hal_now_ns();
  const uint64_t deadline = timeout_ns > UINT64_MAX - t0 ? UINT64_MAX : t0 + timeout_ns;
  uint64_t pause = q->cfg.poll_first_ns;
  bool polled = false;
  tsr_status_t s = TSR_OK;
  for (;;) {
    tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
    if (!c) {
      /* Only a finished command is forgotten (by submits on other threads
       * while this one slept). */
      s = TSR_ERR(NOT_FOUND, "%s: wait: the result of fence %" PRIu64 " is no longer kept "
                  "(only the last %d finished commands are)", q->cfg.name, fence,
                  TSR_QUEUE_KEEP_DONE);
      break;
    }
    if (finished(c->state)) {
      s = outcome(q, c, fence, out);
      break;
    }
    if (c->live.desc_done >= done_target) {
      if (out) *out = c->live;
      break;
    }
    uint64_t now = tsr_hal_now_ns();
    bool expired = now >= deadline;
    if (polling && (!expired || !polled)) {
      /* At least one poll, even with timeout 0: a finished command is
       * reported as such. */
      bool idle = false;
      s = ops->poll(q->cfg.impl, q, fence, expired ? 0 : deadline - now, &idle);
      polled = true;
      if (s) break;
      if (!idle) {
        /* Let submits and copies of other threads in between slices. */
        pthread_mutex_unlock(&q->mu);
        sched_yield();
        pthread_mutex_lock(&q->mu);
        continue;
      }
      c = tsr_queue_cmd(q, fence);
      if (!c || finished(c->state) || c->live.desc_done >= done_target) continue;
      now = tsr_hal_now_ns();
      if (now < deadline) {
        uint64_t left = deadline - now;
        pthread_mutex_unlock(&q->mu);
        sleep_ns(pause < left ? pause : left);
        pthread_mutex_lock(&q->mu);
        if (pause < q->cfg.poll_max_ns) pause *= 2;
        if (pause > q->cfg.poll_max_ns) pause = q->cfg.poll_max_ns;
      }
      continue;
    }
    if (expired) {
      char note[160] = "";
      if (ops && ops->pending_note) ops->pending_note(q->cfg.impl, q, fence, note, sizeof note);
      s = TSR_ERR(DEADLINE_EXCEEDED, "%s: command %" PRIu64 " not done after %" PRIu64 " ns%s",
                  q->cfg.name, fence, timeout_ns, note);
      break;
    }
    if (deadline == UINT64_MAX) {
      pthread_cond_wait(&q->cv_done, &q->mu);
    } else {
      struct timespec ts = abs_time(deadline);
      pthread_cond_timedwait(&q->cv_done, &q->mu, &ts);
    }
  }
  pthread_mutex_unlock(&q->mu);
  return s;
}

tsr_status_t tsr_queue_reset(tsr_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  /* A launch a worker executes always finishes; let it, then drop the
   * queue. */
  while (q->executing) pthread_cond_wait(&q->cv_done, &q->mu);
  tsr_status_t s = TSR_OK;
  if (q->cfg.ops && q->cfg.ops->reset) s = q->cfg.ops->reset(q->cfg.impl, q);
  if (!s) {
    for (uint64_t i = q->head; i < q->n; i++) {
      tsr_queue_cmd_t *c = &q->cmds[i];
      if (finished(c->state)) continue;
      c->state = TSR_QUEUE_ABORTED;
      release(q, c);
    }
    q->head = q->n;
    q->next = q->n;
    q->stalled = false;
  }
  pthread_cond_broadcast(&q->cv_done);
  pthread_cond_broadcast(&q->cv_work);
  pthread_mutex_unlock(&q->mu);
  return s;
}

tsr_status_t tsr_queue_wait(tsr_queue_t *q, uint64_t fence, uint64_t timeout_ns,
                            tsr_hal_result_t *out) {
  return wait_for(q, fence, timeout_ns, out, UINT64_MAX);
}

tsr_status_t tsr_queue_progress(tsr_queue_t *q, uint64_t fence, uint32_t done,
                                uint64_t timeout_ns, tsr_hal_result_t *out) {
  return wait_for(q, fence, timeout_ns, out, done);
}

/* ---- queue mode ------------------------------------------------------------ */

tsr_status_t tsr_queue_doorbell(tsr_queue_t *q, uint64_t fence, uint32_t tail, int close) {
  pthread_mutex_lock(&q->mu);
  tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  tsr_status_t s = TSR_OK;
  if (!c || !(c->cmd.flags & TSR_HAL_CMD_QUEUE)) {
    s = TSR_ERR(INVALID_ARGUMENT, "%s: doorbell: fence %" PRIu64 " is not a running "
                "queue-mode launch", q->cfg.name, fence);
  } else if (finished(c->state)) {
    if (c->state == TSR_QUEUE_DONE && c->res.hw_status)
      s = TSR_ERR(DEVICE, "%s: doorbell: the queue ended at descriptor %u (status %u)",
                  q->cfg.name, c->res.err_index, c->res.hw_status);
    else if (c->state == TSR_QUEUE_DONE)
      s = TSR_ERR(INVALID_ARGUMENT, "%s: doorbell: the queue (command %" PRIu64
                  ") was closed", q->cfg.name, fence);
    else
      s = outcome(q, c, fence, NULL);
  } else if (c->q_close) {
    s = TSR_ERR(INVALID_ARGUMENT, "%s: doorbell: the queue (command %" PRIu64
                ") is closing", q->cfg.name, fence);
  } else if ((uint32_t)(tail - c->q_tail) > UINT32_MAX / 2) {
    s = TSR_ERR(INVALID_ARGUMENT, "%s: doorbell: tail %u is behind the published %u",
                q->cfg.name, tail, c->q_tail);
  } else if ((uint32_t)(tail - c->live.desc_done) > c->cmd.n_desc) {
    s = TSR_ERR(INVALID_ARGUMENT, "%s: doorbell: tail %u is more than the ring's %u slots "
                "past the %u descriptors done", q->cfg.name, tail, c->cmd.n_desc,
                c->live.desc_done);
  } else {
    c->q_tail = tail;
    c->q_close = close != 0;
    if (q->cfg.ops && q->cfg.ops->doorbell) s = q->cfg.ops->doorbell(q->cfg.impl, q, fence, c);
    pthread_cond_broadcast(&q->cv_work);
  }
  pthread_mutex_unlock(&q->mu);
  return s;
}

void tsr_queue_set_live(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *live) {
  tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (!c || finished(c->state)) return;
  c->live = *live;
  pthread_cond_broadcast(&q->cv_done);
}

bool tsr_queue_worker_park(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *live,
                           uint32_t *tail, int *close, uint64_t *aux1) {
  pthread_mutex_lock(&q->mu);
  tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (c && c->state == TSR_QUEUE_EXECUTING) {
    c->state = TSR_QUEUE_STARTED;
    c->live = *live;
  }
  if (q->executing) q->executing--;
  pthread_cond_broadcast(&q->cv_done);
  for (;;) {
    c = tsr_queue_cmd(q, fence);
    if (q->stop || !c || c->state != TSR_QUEUE_STARTED) {
      pthread_mutex_unlock(&q->mu);
      return false;
    }
    if (c->q_tail != c->live.desc_done || c->q_close) break;
    pthread_cond_wait(&q->cv_work, &q->mu);
  }
  c->state = TSR_QUEUE_EXECUTING;
  q->executing++;
  *tail = c->q_tail;
  *close = c->q_close;
  *aux1 = c->aux[1];
  pthread_mutex_unlock(&q->mu);
  return true;
}

/* ---- worker backends ------------------------------------------------------ */

/* A command is due unless the queue is stalled or a queue-mode command
 * before it still runs (commands run in fence order). */
static bool work_due(tsr_queue_t *q) {
  for (uint64_t i = q->head; i < q->next && i < q->n; i++)
    if ((q->cmds[i].cmd.flags & TSR_HAL_CMD_QUEUE) && !finished(q->cmds[i].state)) return false;
  while (q->next < q->n && q->cmds[q->next].state != TSR_QUEUE_QUEUED) q->next++;
  return !q->stalled && q->next < q->n;
}

bool tsr_queue_worker_next(tsr_queue_t *q, uint64_t *fence, tsr_hal_command_t *cmd) {
  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (q->stop) {
      pthread_mutex_unlock(&q->mu);
      return false;
    }
    if (work_due(q)) break;
    if (!q->stalled) {
      /* Spin a little first: a sleeping worker costs the host a futex wake
       * per launch (and the launch a scheduler round trip). */
      uint_fast64_t seen = atomic_load(&q->published);
      pthread_mutex_unlock(&q->mu);
      for (int i = 0; i < QUEUE_SPIN && atomic_load(&q->published) == seen; i++) cpu_relax();
      pthread_mutex_lock(&q->mu);
      if (q->stop || work_due(q)) continue;
    }
    q->worker_idle = true;
    pthread_cond_wait(&q->cv_work, &q->mu);
    q->worker_idle = false;
  }
  tsr_queue_cmd_t *c = &q->cmds[q->next];
  c->state = TSR_QUEUE_EXECUTING;
  q->executing++;
  *fence = q->base_fence + q->next + 1;
  *cmd = c->cmd;
  q->next++;
  pthread_mutex_unlock(&q->mu);
  return true;
}

void tsr_queue_worker_done(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *res) {
  pthread_mutex_lock(&q->mu);
  if (q->executing) q->executing--;
  tsr_queue_complete(q, fence, res);
  pthread_cond_broadcast(&q->cv_done); /* reset() may wait for `executing` */
  pthread_mutex_unlock(&q->mu);
}

void tsr_queue_worker_hang(tsr_queue_t *q, uint64_t fence) {
  pthread_mutex_lock(&q->mu);
  if (q->executing) q->executing--;
  tsr_queue_cmd_t *c = tsr_queue_cmd(q, fence);
  if (c && c->state == TSR_QUEUE_EXECUTING) c->state = TSR_QUEUE_STARTED;
  q->stalled = true;
  pthread_cond_broadcast(&q->cv_done);
  pthread_mutex_unlock(&q->mu);
}

void tsr_queue_stop(tsr_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  q->stop = true;
  pthread_cond_broadcast(&q->cv_work);
  pthread_cond_broadcast(&q->cv_done);
  pthread_mutex_unlock(&q->mu);
}
