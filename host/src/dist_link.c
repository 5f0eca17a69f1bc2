/*
 * dist_link.c - the MPI transport of a distributed context: non-blocking
 * sends and receives waited for with a deadline, accounting, faults.
 *
 * Waits poll (MPI_Test / MPI_Improbe) and sleep between polls, backing off
 * from 20 us to 1 ms: ranks usually share cores with each other, and a
 * rank spinning in a wait would take the core its peer computes on.
 */
#include <inttypes.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/threadpool.h"
#include "dist.h"

struct tsr_dist {
  int rank, size;
  MPI_Comm comm;
  bool finalize;      /* this context initialized MPI */
  tsr_split_t split;
  double timeout_s;
  pthread_mutex_t lock; /* counters, ids, broken */
  char broken[400];
  uint32_t next_id;
  tsr_rank_stats_t c;
  /* TSR_MPI_FAULT */
  int fault_rank;
  uint64_t fault_after;
  char fault_mode[8];
};

#define MPI_OK(call, what)                                                           \
  do {                                                                               \
    int rc_ = (call);                                                                \
    if (rc_ != MPI_SUCCESS) {                                                        \
      char msg_[MPI_MAX_ERROR_STRING];                                               \
      int len_ = 0;                                                                  \
      MPI_Error_string(rc_, msg_, &len_);                                            \
      return tsr_dist_break(d, TSR_ERR(UNAVAILABLE, "mpi: rank %d: %s: %.*s", d->rank, \
                                       what, len_, msg_));                           \
    }                                                                                \
  } while (0)

void tsr_dist_buf_free(tsr_dist_buf_t *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

tsr_status_t tsr_dist_buf_reserve(tsr_dist_buf_t *b, size_t n) {
  if (n <= b->cap) return TSR_OK;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < n) cap *= 2;
  void *p = realloc(b->p, cap);
  if (!p) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi: a message buffer of %zu bytes", n);
  b->p = p;
  b->cap = cap;
  return TSR_OK;
}

/* TSR_MPI_FAULT=rank=R,after=N,mode=exit|kill|hang */
static tsr_status_t parse_fault(tsr_dist_t *d, const char *spec) {
  d->fault_rank = -1;
  if (!spec || !*spec) return TSR_OK;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", spec);
  long rank = -1;
  unsigned long long after = 0;
  char mode[8] = "exit";
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *end = NULL;
    if (!strncmp(t, "rank=", 5)) {
      rank = strtol(t + 5, &end, 10);
    } else if (!strncmp(t, "after=", 6)) {
      after = strtoull(t + 6, &end, 10);
    } else if (!strncmp(t, "mode=", 5) &&
               (!strcmp(t + 5, "exit") || !strcmp(t + 5, "kill") || !strcmp(t + 5, "hang"))) {
      snprintf(mode, sizeof mode, "%s", t + 5);
      continue;
    }
    if (!end || *end)
      return TSR_ERR(INVALID_ARGUMENT, "TSR_MPI_FAULT: '%s' in '%s' is not rank=R, after=N "
                                       "or mode=exit|kill|hang", t, spec);
  }
  if (rank < 1)
    return TSR_ERR(INVALID_ARGUMENT, "TSR_MPI_FAULT '%s': rank=R (R >= 1) is required", spec);
  d->fault_rank = (int)rank;
  d->fault_after = after;
  snprintf(d->fault_mode, sizeof d->fault_mode, "%s", mode);
  return TSR_OK;
}

tsr_status_t tsr_dist_create(const tsr_context_options_t *opts, tsr_dist_t **out) {
  *out = NULL;
  if (!opts->mpi) return TSR_OK;
  if ((unsigned)opts->mpi_split > TSR_SPLIT_ROWS)
    return TSR_ERR(INVALID_ARGUMENT, "mpi: unknown split %d (layers 0, rows 1)",
                   (int)opts->mpi_split);
  tsr_dist_t *d = calloc(1, sizeof *d);
  if (!d) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi");
  pthread_mutex_init(&d->lock, NULL);
  d->split = opts->mpi_split;
  d->timeout_s = (opts->mpi_timeout_ms ? opts->mpi_timeout_ms : 60000) / 1000.0;
  d->comm = MPI_COMM_NULL;
  tsr_status_t s = parse_fault(d, getenv("TSR_MPI_FAULT"));
  int inited = 0;
  MPI_Initialized(&inited);
  if (!s && !inited) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      s = TSR_ERR(UNAVAILABLE, "mpi: MPI_Init_thread failed");
    else if (provided < MPI_THREAD_MULTIPLE)
      s = TSR_ERR(UNAVAILABLE, "mpi: the MPI library gives thread level %d, tessera needs "
                               "MPI_THREAD_MULTIPLE (%d)", provided, MPI_THREAD_MULTIPLE);
    d->finalize = true;
  }
  if (!s && MPI_Comm_dup(MPI_COMM_WORLD, &d->comm) != MPI_SUCCESS)
    s = TSR_ERR(UNAVAILABLE, "mpi: MPI_Comm_dup failed");
  if (!s) {
    /* errors come back as codes, reported with the rank they concern */
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    d->c.rank = d->rank;
    if (d->fault_rank >= d->size)
      s = TSR_ERR(INVALID_ARGUMENT, "TSR_MPI_FAULT: rank %d of a job of %d ranks",
                  d->fault_rank, d->size);
  }
  if (s) {
    tsr_dist_destroy(d);
    return s;
  }
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* the polling sleeps stay short */
  /* mpirun binds each rank to one core when it starts one or two of them:
   * a rank then computes on that core alone */
  const int usable = tsr_cpu_count(), online = tsr_cpu_online();
  if (usable < online && !opts->quiet)
    fprintf(stderr, "tessera: rank %d may run on %d of this host's %d cores (mpirun "
                    "--bind-to none lets it use all)\n", d->rank, usable, online);
  *out = d;
  return TSR_OK;
}

void tsr_dist_destroy(tsr_dist_t *d) {
  if (!d) return;
  if (d->comm != MPI_COMM_NULL && d->rank == 0) {
    if (d->broken[0]) {
      /* a rank is gone or stuck: nothing can be finalized cleanly */
      fflush(stdout);
      fflush(stderr);
      MPI_Abort(d->comm, 3);
    }
    const tsr_dist_hdr_t h = {.op = TSR_DIST_SHUTDOWN};
    const int last = d->split == TSR_SPLIT_ROWS ? d->size - 1 : (d->size > 1 ? 1 : 0);
    for (int k = 1; k <= last; k++) {
      tsr_status_t s = tsr_dist_send(d, k, TSR_DIST_TAG_DOWN, &h, NULL, 0, false, "shutdown");
      if (s) {
        fprintf(stderr, "tessera: error: %s\n", tsr_status_message(s));
        tsr_status_free(s);
        fflush(stderr);
        MPI_Abort(d->comm, 3);
      }
    }
  }
  if (d->comm != MPI_COMM_NULL) MPI_Comm_free(&d->comm);
  if (d->finalize) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  pthread_mutex_destroy(&d->lock);
  free(d);
}

int tsr_dist_rank(const tsr_dist_t *d) { return d ? d->rank : 0; }
int tsr_dist_size(const tsr_dist_t *d) { return d ? d->size : 1; }
tsr_split_t tsr_dist_split(const tsr_dist_t *d) { return d->split; }

const char *tsr_dist_broken(const tsr_dist_t *d) { return d->broken[0] ? d->broken : NULL; }

uint32_t tsr_dist_next_id(tsr_dist_t *d) {
  pthread_mutex_lock(&d->lock);
  uint32_t id = ++d->next_id;
  pthread_mutex_unlock(&d->lock);
  return id;
}

tsr_status_t tsr_dist_break(tsr_dist_t *d, tsr_status_t st) {
  pthread_mutex_lock(&d->lock);
  if (!d->broken[0]) snprintf(d->broken, sizeof d->broken, "%s", tsr_status_message(st));
  pthread_mutex_unlock(&d->lock);
  return st;
}

static tsr_status_t check_broken(tsr_dist_t *d) {
  pthread_mutex_lock(&d->lock);
  tsr_status_t s = d->broken[0]
                       ? TSR_ERR(UNAVAILABLE, "mpi: the job is broken: %s", d->broken)
                       : TSR_OK;
  pthread_mutex_unlock(&d->lock);
  return s;
}

/* Between polls of a wait that began at t0: for its first 5 ms only a
 * yield of the core (a reply often comes within tens of microseconds, and
 * a rank computing on this host gets the core), then sleeps of 20 us
 * doubling to 200 us (the process's timer slack is cut to 1 us so that the
 * kernel does not stretch them by its default 50 us), and to 1 ms once the
 * wait passed a second (an idle rank wakes rarely). */
static void backoff(double t0, unsigned *us) {
  const double waited = tsr_now_s() - t0;
  if (waited < 5e-3) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, (long)*us * 1000};
  nanosleep(&ts, NULL);
  const unsigned cap = waited < 1.0 ? 200 : 1000;
  *us = *us * 2 > cap ? cap : *us * 2;
}

/* A rank other than 0, in any wait: answers rank 0's liveness probes. */
static void answer_ping(tsr_dist_t *d) {
  if (d->rank == 0) return;
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(0, TSR_DIST_TAG_PING, d->comm, &flag, &msg, &st) != MPI_SUCCESS || !flag)
      return;
    tsr_dist_hdr_t h;
    MPI_Mrecv(&h, sizeof h, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    MPI_Send(&h, sizeof h, MPI_BYTE, 0, TSR_DIST_TAG_PONG, d->comm); /* eager: 32 bytes */
  }
}

/* Rank 0, after `silent` did not answer: probes every other rank (at most
 * the timeout, 2 s at most) and names in `out` the ranks that are silent,
 * so that a pipeline stuck in the middle is not blamed on its last rank.
 * Empty when every rank answered but `silent` or when there is one other
 * rank. */
static void probe_ranks(tsr_dist_t *d, int silent, char *out, size_t cap) {
  out[0] = 0;
  if (d->size <= 2 || d->size > 1024) return;
  bool answered[1024] = {0};
  MPI_Request req[1024];
  tsr_dist_hdr_t h = {.op = TSR_DIST_STATS};
  for (int k = 1; k < d->size; k++)
    MPI_Isend(&h, sizeof h, MPI_BYTE, k, TSR_DIST_TAG_PING, d->comm, &req[k]);
  const double t0 = tsr_now_s(), limit = d->timeout_s < 2 ? d->timeout_s : 2;
  int left = d->size - 1;
  while (left && tsr_now_s() - t0 < limit) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, TSR_DIST_TAG_PONG, d->comm, &flag, &msg, &st) != MPI_SUCCESS)
      break;
    if (!flag) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
      continue;
    }
    tsr_dist_hdr_t r;
    MPI_Mrecv(&r, sizeof r, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    if (st.MPI_SOURCE > 0 && st.MPI_SOURCE < d->size && !answered[st.MPI_SOURCE]) {
      answered[st.MPI_SOURCE] = true;
      left--;
    }
  }
  /* the pings of silent ranks stay pending: the job aborts */
  if (left == 1 && silent > 0 && silent < d->size && !answered[silent]) return; /* named */
  if (!left) {
    snprintf(out, cap, "; a probe finds every rank answering within %.1f s", limit);
    return;
  }
  size_t len = (size_t)snprintf(out, cap, "; a probe finds rank%s", left > 1 ? "s" : "");
  for (int k = 1, first = 1; k < d->size && len < cap; k++)
    if (!answered[k]) {
      len += (size_t)snprintf(out + len, cap - len, "%s %d", first ? "" : ",", k);
      first = 0;
    }
  if (len < cap) snprintf(out + len, cap - len, " silent within %.1f s", limit);
}

static void count_wait(tsr_dist_t *d, double t0) {
  const double w = tsr_now_s() - t0;
  pthread_mutex_lock(&d->lock);
  d->c.wait_s += w;
  pthread_mutex_unlock(&d->lock);
}

tsr_status_t tsr_dist_send_start(tsr_dist_t *d, int dest, int tag, const tsr_dist_hdr_t *hdr,
                                 const void *payload, size_t len, bool act,
                                 tsr_dist_buf_t *staging, tsr_dist_send_t *out) {
  out->active = false;
  TSR_RETURN_IF(check_broken(d));
  const size_t total = sizeof *hdr + len;
  if (total > (size_t)INT32_MAX)
    return TSR_ERR(OUT_OF_RANGE, "mpi: a message of %zu bytes to rank %d", total, dest);
  TSR_RETURN_IF(tsr_dist_buf_reserve(staging, total));
  memcpy(staging->p, hdr, sizeof *hdr);
  if (len) memcpy((char *)staging->p + sizeof *hdr, payload, len);
  staging->len = total;
  if (!out->req) {
    out->req = malloc(sizeof(MPI_Request));
    if (!out->req) return TSR_ERR(RESOURCE_EXHAUSTED, "mpi: a request");
  }
  MPI_OK(MPI_Isend(staging->p, (int)total, MPI_BYTE, dest, tag, d->comm, out->req),
         "sending to rank");
  out->dest = dest;
  out->active = true;
  pthread_mutex_lock(&d->lock);
  d->c.msgs_sent++;
  d->c.bytes_sent += total;
  if (act) d->c.act_bytes_sent += len;
  pthread_mutex_unlock(&d->lock);
  return TSR_OK;
}

tsr_status_t tsr_dist_send_wait(tsr_dist_t *d, tsr_dist_send_t *s, const char *what) {
  if (!s->active) return TSR_OK;
  const double t0 = tsr_now_s();
  unsigned us = 20;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(s->req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      s->active = false;
      count_wait(d, t0);
      return tsr_dist_break(d, TSR_ERR(UNAVAILABLE, "mpi: rank %d: sending %s to rank %d "
                                                    "failed (the rank is gone?)",
                                       d->rank, what, s->dest));
    }
    if (done) break;
    if (tsr_now_s() - t0 > d->timeout_s) {
      count_wait(d, t0);
      /* the request stays pending: the job is broken and aborts at exit */
      s->active = false;
      return tsr_dist_break(d, TSR_ERR(DEADLINE_EXCEEDED, "mpi: rank %d did not take %s from "
                                                          "rank %d within %.1f s",
                                       s->dest, what, d->rank, d->timeout_s));
    }
    answer_ping(d);
    backoff(t0, &us);
  }
  s->active = false;
  count_wait(d, t0);
  return TSR_OK;
}

tsr_status_t tsr_dist_send(tsr_dist_t *d, int dest, int tag, const tsr_dist_hdr_t *hdr,
                           const void *payload, size_t len, bool act, const char *what) {
  tsr_dist_buf_t staging = {0};
  tsr_dist_send_t snd = {0};
  tsr_status_t s = tsr_dist_send_start(d, dest, tag, hdr, payload, len, act, &staging, &snd);
  if (!s) s = tsr_dist_send_wait(d, &snd, what);
  /* a send that timed out still points into `staging`: keep it */
  if (!s) tsr_dist_buf_free(&staging);
  free(snd.req);
  return s;
}

/* Receives a matched message into buf. */
static tsr_status_t take(tsr_dist_t *d, MPI_Message *msg, MPI_Status *st, tsr_dist_buf_t *buf) {
  int count = 0;
  MPI_Get_count(st, MPI_BYTE, &count);
  tsr_status_t s = tsr_dist_buf_reserve(buf, (size_t)count > sizeof(tsr_dist_hdr_t)
                                                 ? (size_t)count
                                                 : sizeof(tsr_dist_hdr_t));
  if (s) return tsr_dist_break(d, s);
  MPI_OK(MPI_Mrecv(buf->p, count, MPI_BYTE, msg, MPI_STATUS_IGNORE), "receiving");
  buf->len = (size_t)count;
  pthread_mutex_lock(&d->lock);
  d->c.msgs_recv++;
  d->c.bytes_recv += (uint64_t)count;
  pthread_mutex_unlock(&d->lock);
  if ((size_t)count < sizeof(tsr_dist_hdr_t))
    return tsr_dist_break(d, TSR_ERR(FORMAT, "mpi: rank %d: a message of %d bytes from rank "
                                             "%d is shorter than a header",
                                     d->rank, count, st->MPI_SOURCE));
  return TSR_OK;
}

tsr_status_t tsr_dist_recv(tsr_dist_t *d, int src, int tag, tsr_dist_buf_t *buf, bool forever,
                           const char *what) {
  TSR_RETURN_IF(check_broken(d));
  const double t0 = tsr_now_s();
  unsigned us = 20;
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (d->rank == 0) {
      /* a worker's failure ends any wait of rank 0 */
      MPI_OK(MPI_Improbe(MPI_ANY_SOURCE, TSR_DIST_TAG_ERROR, d->comm, &flag, &msg, &st),
             "probing");
      if (flag) {
        count_wait(d, t0);
        TSR_RETURN_IF(take(d, &msg, &st, buf));
        const char *text = (const char *)buf->p + sizeof(tsr_dist_hdr_t);
        const int n = (int)(buf->len - sizeof(tsr_dist_hdr_t));
        return tsr_dist_break(d, TSR_ERR(UNAVAILABLE, "mpi: rank %d failed: %.*s",
                                         st.MPI_SOURCE, n, text));
      }
    }
    MPI_OK(MPI_Improbe(src, tag, d->comm, &flag, &msg, &st), "probing");
    if (flag) {
      count_wait(d, t0);
      return take(d, &msg, &st, buf);
    }
    if (!forever && tsr_now_s() - t0 > d->timeout_s) {
      count_wait(d, t0);
      char probe[256] = "";
      if (d->rank == 0) probe_ranks(d, src, probe, sizeof probe);
      return tsr_dist_break(d, TSR_ERR(DEADLINE_EXCEEDED, "mpi: rank %d did not answer rank %d "
                                                          "within %.1f s (waiting for %s)%s",
                                       src, d->rank, d->timeout_s, what, probe));
    }
    answer_ping(d);
    backoff(t0, &us);
  }
}

void tsr_dist_report(tsr_dist_t *d, tsr_status_t st) {
  char text[600];
  snprintf(text, sizeof text, "%s", tsr_status_message(st));
  const tsr_dist_hdr_t h = {.op = TSR_DIST_ERROR};
  tsr_status_t s = tsr_dist_send(d, 0, TSR_DIST_TAG_ERROR, &h, text, strlen(text), false,
                                 "an error report");
  if (s) {
    fprintf(stderr, "tessera: rank %d: %s (and reporting it failed: %s)\n", d->rank, text,
            tsr_status_message(s));
    tsr_status_free(s);
  }
}

void tsr_dist_counters(const tsr_dist_t *d, tsr_rank_stats_t *out) {
  pthread_mutex_lock((pthread_mutex_t *)&d->lock);
  *out = d->c;
  pthread_mutex_unlock((pthread_mutex_t *)&d->lock);
}

void tsr_dist_add_busy(tsr_dist_t *d, double s, uint64_t passes) {
  pthread_mutex_lock(&d->lock);
  d->c.busy_s += s;
  d->c.passes += passes;
  pthread_mutex_unlock(&d->lock);
}

void tsr_dist_set_layers(tsr_dist_t *d, int32_t l0, int32_t l1, bool ends) {
  pthread_mutex_lock(&d->lock);
  d->c.layer0 = l0;
  d->c.layer1 = l1;
  d->c.ends = ends;
  pthread_mutex_unlock(&d->lock);
}

void tsr_dist_set_devices(tsr_dist_t *d, const char *devices) {
  snprintf(d->c.devices, sizeof d->c.devices, "%s", devices);
}

void tsr_dist_fault_point(tsr_dist_t *d) {
  if (d->fault_rank != d->rank || d->c.passes < d->fault_after) return;
  fprintf(stderr, "tessera: rank %d: TSR_MPI_FAULT: %s after %" PRIu64 " passes\n", d->rank,
          d->fault_mode, d->c.passes);
  fflush(stderr);
  if (!strcmp(d->fault_mode, "kill")) raise(SIGKILL);
  if (!strcmp(d->fault_mode, "exit")) _exit(9);
  for (;;) pause(); /* hang: alive, never answering */
}

void tsr_dist_layers(int32_t n_layers, int r, int size, int32_t *l0, int32_t *l1) {
  /* the remainder goes to the last ranks, so rank 0 (which also runs the
   * classifier) never has more layers than another */
  const int32_t base = n_layers / size, extra = n_layers % size;
  const int32_t first_extra = size - extra;
  *l0 = r * base + (r > first_extra ? r - first_extra : 0);
  *l1 = *l0 + base + (r >= first_extra ? 1 : 0);
}
