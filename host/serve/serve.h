/*
 * serve.h - `tessera serve`: the parts of the server and what they share.
 *
 * Internal to host/serve. The server is three threads around one lock:
 *   http.c     libmicrohttpd's polling thread: parses requests, checks the
 *              tenant's key and quotas, queues completions and answers them
 *              (whole, or as Server-Sent Events) from what the scheduler
 *              produced; a request waiting on the scheduler is a suspended
 *              connection, resumed when there is something to send;
 *   sched.c    the scheduler thread: continuous batching over one engine per
 *              (model, tenant), chunked prefill, priorities with aging, the
 *              tenants' device policy and the accelerator pool's scaling;
 *   tenants.c  the tenants file, keys and quotas (token buckets);
 *   metrics.c  counters and histograms, rendered as Prometheus text;
 *   cmd_serve.c options, start-up and shutdown (SIGINT/SIGTERM drain).
 * Every field marked (L) is guarded by srv_t.lock.
 */
#ifndef TSR_SERVE_H
#define TSR_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../cli/cli.h"
#include "tessera.h"

struct MHD_Connection;
struct MHD_Daemon;

typedef enum srv_class {
  SRV_PREMIUM = 0,  /* accelerators first                         */
  SRV_STANDARD = 1, /* the CPU unless no premium work wants them  */
  SRV_BATCH = 2,    /* accelerators only when nobody else does    */
  SRV_CLASSES = 3,
} srv_class_t;

const char *srv_class_name(srv_class_t c);

typedef struct srv_tenant {
  char *name;
  char *key;            /* API key (Bearer); NULL in open mode         */
  srv_class_t cls;
  int priority;         /* added to each request's own priority        */
  int max_concurrent;   /* requests queued or running at once, 0 = any */
  int64_t tokens_per_minute; /* prompt + max_tokens charged, 0 = any   */
  int max_tokens;       /* largest max_tokens accepted, 0 = context    */
  /* (L) quota state */
  int active;           /* requests admitted and not finished           */
  double bucket;        /* tokens available now (token bucket)          */
  double bucket_t;      /* when the bucket was last refilled (s)        */
  int index;            /* position in srv_t.tenants                    */
} srv_tenant_t;

/* One loaded model: its engines, one per tenant (each with its own device
 * windows, so a tenant's buffers are out of reach of another's kernels). */
typedef struct srv_model {
  char *name;
  char *path, *tokenizer;
  tsr_model_t *model;
  tsr_model_config_t cfg;
  tsr_engine_t **engines;   /* [n_tenants]                                */
  uint64_t *engine_mask;    /* (scheduler) the devices each engine has on */
  tsr_batch_t **batches;    /* (scheduler) one per engine                 */
  tsr_seq_t ***free_seqs;   /* (scheduler) per engine, sequences to reuse */
  int *n_free_seqs;
} srv_model_t;

typedef enum srv_state {
  SRV_WAITING = 0, /* queued, no sequence yet           */
  SRV_RUNNING = 1, /* prefill or decode in the batch    */
  SRV_DONE = 2,    /* finished (or failed): answer it   */
} srv_state_t;

/* A completion request. Refcounted: the HTTP side and the scheduler each
 * hold a reference while they use it. */
typedef struct srv srv_t;

typedef struct srv_req {
  srv_t *srv;
  int refs;                   /* (L) */
  uint64_t id;                /* arrival order */
  srv_tenant_t *tenant;
  srv_model_t *model;
  int engine;                 /* index of the engine (= tenant index) */
  int32_t *prompt;            /* tokens, BOS first */
  size_t n_prompt;
  int max_tokens;             /* completion tokens at most (already capped) */
  float temperature, top_p;
  uint64_t seed;
  int priority;               /* the request's own (lower first) */
  bool stream, echo;
  int64_t charged;            /* tokens taken from the tenant's bucket */
  double t_arrival, t_last;   /* s: arrival, last token */
  /* (L) progress */
  srv_state_t state;
  bool cancelled;             /* the client went away */
  size_t prefilled;           /* prompt tokens evaluated */
  int generated;              /* completion tokens */
  int32_t last_token;
  tsr_seq_t *seq;
  tsr_sampler_t *sampler;
  const char *finish;         /* "stop" | "length" once done */
  char *error;                /* a failure's message once done */
  int error_status;           /* its HTTP status */
  /* (L) text produced and not yet sent (stream) or all of it (whole) */
  cli_text_t text;
  size_t *marks;              /* text.len after the echo and each token */
  int n_marks, cap_marks;
  int marks_sent;             /* marks already turned into events */
  size_t sent;                /* bytes of `text` already in events */
  char *out;                  /* (stream) event bytes not yet given to MHD */
  size_t out_len, out_off;
  bool stream_done;           /* (stream) [DONE] is in `out` */
  /* (L) HTTP side */
  struct MHD_Connection *conn;
  bool suspended;             /* the connection waits for news */
} srv_req_t;

#define SRV_STATUS_SLOTS 10
#define SRV_HIST_BUCKETS 14
typedef struct srv_hist {
  uint64_t counts[SRV_HIST_BUCKETS + 1]; /* last: +Inf */
  double sum;
  uint64_t n;
} srv_hist_t;

typedef struct srv_metrics {
  /* per tenant, per HTTP status (200 400 401 404 405 413 429 499 500 503) */
  uint64_t (*requests)[SRV_STATUS_SLOTS];
  uint64_t *prompt_tokens, *generated_tokens;
  srv_hist_t ttft[SRV_CLASSES], itl[SRV_CLASSES];
  uint64_t steps, batch_rows_total;
  int last_batch_rows;
  uint64_t scale_up, scale_down;
  double *dev_busy_s;   /* per context entry: wall time of evaluations using it */
  /* per context entry, all engines: launches, fallbacks, retries, cycles
   * (copied by the scheduler after each step) */
  uint64_t (*dev)[4];
  /* forward passes: their wall time; of it, the ops run on the host; and the
   * devices' work projected on their boards (every engine together) */
  double eval_s, host_op_s, board_s;
  double t_start;
} srv_metrics_t;

typedef struct srv_options {
  const char *host;
  int port;
  int parallel;         /* sequences running at once (all models) */
  int prefill_chunk;    /* prompt tokens per sequence per step */
  int step_tokens;      /* rows per step (decodes + prefill chunks) */
  double aging_ms;      /* one priority level gained per aging_ms waiting */
  size_t max_body;      /* bytes of a request body */
  int max_connections;
  /* the pool */
  int pool_min;         /* devices of the pool kept on */
  double pool_high, pool_low; /* load thresholds */
  double pool_window_s; /* load above/below for this long before acting */
  int pool_seqs;        /* sequences one pool device is counted for */
  const char *metrics_key; /* key for all of /metrics (admin); NULL = none */
} srv_options_t;

struct srv {
  srv_options_t opt;
  tsr_context_t *ctx;
  srv_model_t *models;
  int n_models;
  srv_tenant_t *tenants;
  int n_tenants;
  bool open_mode;       /* no tenants file: one tenant, no keys */
  char *admin_key;      /* from the tenants file or --metrics-key */
  /* devices: context entries; fixed ones are always offered to engines,
   * pool ones when active */
  int n_entries;
  const char **entry_names; /* the context's specs */
  uint64_t cpu_mask;    /* entries that are the host */
  uint64_t fixed_mask;  /* non-cpu entries outside the pool */
  uint64_t pool_mask;   /* every pool entry */
  pthread_mutex_t lock;
  pthread_cond_t wake;  /* (L) new work or shutdown */
  /* (L) */
  srv_req_t **waiting;
  int n_waiting, cap_waiting;
  srv_req_t **running;
  int n_running, cap_running;
  uint64_t next_id;
  uint64_t pool_active; /* pool entries on now */
  uint64_t lost_mask;   /* entries some engine gave up after failures */
  double load;          /* last computed pool load */
  double above_since, below_since, last_scale_t;
  bool stopping;        /* no new requests; drain, then the scheduler exits */
  srv_metrics_t m;
  pthread_t sched_thread;
  struct MHD_Daemon *daemon;
  int live_conns;       /* (L) requests still tied to a connection */
};

/* tenants.c */
bool srv_tenants_load(srv_t *s, const char *path);   /* false: message printed */
/* The same from text; `name` labels the messages. On failure nothing is
 * left allocated (s->tenants NULL, s->admin_key freed). */
bool srv_tenants_parse(srv_t *s, const char *text, size_t len, const char *name);
void srv_tenants_open_mode(srv_t *s);
srv_tenant_t *srv_tenant_by_key(srv_t *s, const char *key); /* NULL if none */
/* Whether `given` is the key `known` (NULLs never match), in a time that
 * does not depend on where they differ. */
bool srv_key_equal(const char *known, const char *given);
/* (L) Admits `cost` tokens for `t` or returns false with the seconds until
 * the quota allows it in *retry_after (and *reason set). */
bool srv_quota_take(srv_t *s, srv_tenant_t *t, int64_t cost, int *retry_after,
                    const char **reason);
void srv_quota_release(srv_t *s, srv_tenant_t *t, int64_t unused_tokens);
void srv_tenants_free(srv_t *s);

/* sched.c */
bool srv_sched_start(srv_t *s);
void srv_sched_stop(srv_t *s); /* after draining */
/* (L) queues `r` (takes a reference) and wakes the scheduler */
void srv_sched_submit(srv_t *s, srv_req_t *r);
double srv_now(void);

/* requests (request.c) */
typedef struct srv_error {
  int status;          /* HTTP status */
  char param[64];      /* the field at fault, "" for none */
  const char *code;    /* OpenAI-style code (static), or NULL */
  char message[1024];
} srv_error_t;
/* Parses and checks a completion body for `tenant` into a new request
 * (one reference, not queued), or fills *err. Touches no shared state. */
bool srv_completion_parse(srv_t *s, srv_tenant_t *tenant, const char *body, size_t len,
                          srv_req_t **out, srv_error_t *err);
/* (L) appends text for the client and marks the end of a token (or of the
 * echoed prompt); false when out of memory */
bool srv_req_append(srv_req_t *r, const char *p, size_t n);
void srv_req_unref(srv_t *s, srv_req_t *r); /* (L) for a request others may hold */
/* http.c: (L) the scheduler has news for r's client (text, done): resume it */
void srv_req_notify(srv_t *s, srv_req_t *r);
bool srv_http_start(srv_t *s);
void srv_http_stop(srv_t *s);

/* metrics.c */
void srv_metrics_init(srv_t *s);
void srv_metrics_free(srv_t *s);
void srv_hist_add(srv_hist_t *h, const double *bounds, double v);
extern const double srv_ttft_bounds[SRV_HIST_BUCKETS];
extern const double srv_itl_bounds[SRV_HIST_BUCKETS];
/* (L) counts a finished request of tenant t with HTTP status `status` */
void srv_metrics_request(srv_t *s, const srv_tenant_t *t, int status);
/* (L) the Prometheus text; only tenant `only`'s series when non-NULL.
 * malloc'd. */
char *srv_metrics_render(srv_t *s, const srv_tenant_t *only, size_t *len);

#endif
