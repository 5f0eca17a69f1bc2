/*
 * cmd_loadgen.c - `tessera loadgen`: drive a completions server with
 * closed-loop concurrent clients, check and time every answer.
 *
 * Every client lives on one libcurl multi handle in one thread and sends its
 * next request when its previous one has finished. An answer is validated (the
 * completion object, or a strictly parsed event stream), timed (time to first
 * text, gaps between stream chunks, latency) and, with --check-run, compared
 * byte for byte with what `tessera run` prints for the same prompt and length
 * at temperature 0. The reference runs are spawned without a shell and read
 * through pipes polled with the same multi handle, so they never stall the
 * clients; a /metrics sampler rides the same handle too. Results go to stdout
 * per tenant class, optionally as JSON.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cli.h"

extern char **environ;

#define LG_CMD "loadgen"
#define LG_MAX_BODY (64u << 20)     /* bytes kept of one answer */
#define LG_MAX_ERRORS_SHOWN 20      /* per-request error lines on stderr */
#define LG_MAX_RETRY_PAUSE_S 5.0    /* cap on the pause after a 429 */
#define LG_TRANSPORT_PAUSE_S 0.1    /* pause after a connection-level error */
#define LG_SAMPLER_TIMEOUT_MS 5000

/* ---- growable buffers ---------------------------------------------------- */

typedef struct {
  char *p; /* always NUL-terminated once anything was added */
  size_t n, cap;
} lg_buf_t;

typedef struct {
  double *v; /* seconds */
  size_t n, cap;
} lg_vec_t;

static void lg_oom(void) {
  fprintf(stderr, "tessera " LG_CMD ": out of memory\n");
  exit(1);
}

static void *lg_alloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p) lg_oom();
  return p;
}

static char *lg_strdup(const char *s) {
  char *d = strdup(s);
  if (!d) lg_oom();
  return d;
}

static void buf_add(lg_buf_t *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) lg_oom();
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void buf_clear(lg_buf_t *b) {
  b->n = 0;
  if (b->p) b->p[0] = '\0';
}

static void vec_add(lg_vec_t *v, double x) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 64;
    double *p = realloc(v->v, cap * sizeof *p);
    if (!p) lg_oom();
    v->v = p;
    v->cap = cap;
  }
  v->v[v->n++] = x;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of v (sorted in place); NAN when empty. */
static double vec_pct(lg_vec_t *v, double p) {
  if (!v->n) return NAN;
  qsort(v->v, v->n, sizeof *v->v, cmp_double);
  size_t rank = (size_t)ceil(p / 100.0 * (double)v->n);
  return v->v[rank ? rank - 1 : 0];
}

/* Splits s on sep into n fresh strings (empty items kept). */
static char **lg_split(const char *s, char sep, size_t *n) {
  size_t count = 1;
  for (const char *q = s; *q; q++) count += *q == sep;
  char **out = lg_alloc(count * sizeof *out);
  for (size_t i = 0; i < count; i++) {
    const char *e = strchr(s, sep);
    size_t len = e ? (size_t)(e - s) : strlen(s);
    out[i] = lg_alloc(len + 1);
    memcpy(out[i], s, len);
    s += len + (e != NULL);
  }
  *n = count;
  return out;
}

static void lg_split_free(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* ---- options ------------------------------------------------------------- */

typedef struct {
  char *key; /* bearer key */
  char *cls; /* tenant class, the unit of the report */
  int64_t weight;
  size_t cls_idx;
} lg_tenant_t;

typedef struct {
  int64_t clients;
  double seconds;
} lg_phase_t;

typedef struct {
  const char *url, *model, *check_args, *json_path, *timeline_path, *metrics_key;
  int64_t clients, requests, timeline_ms, timeout_ms, priority;
  bool clients_set, requests_set, priority_set, no429;
  double duration, stream_frac, temperature, top_p;
  uint64_t seed;
  lg_tenant_t *tenants;
  size_t n_tenants;
  const char **prompts;
  size_t n_prompts;
  int64_t *max_tokens;
  size_t n_max;
  lg_phase_t *phases;
  size_t n_phases;
  double phases_s; /* sum of the phases */
} lg_opts_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera loadgen --url URL --model NAME [options]\n"
          "\n"
          "  --url URL              server base, e.g. http://127.0.0.1:8080\n"
          "  --model NAME           model name sent in every request\n"
          "  --clients N            concurrent closed-loop clients (default 4)\n"
          "  --requests R           requests in all (default 4 per client)\n"
          "  --duration S           send requests for S seconds instead\n"
          "  --steps-phase LIST     CLIENTS:SECONDS,... active clients over time\n"
          "                         (e.g. 1:2,16:6,1:6); the run lasts their sum\n"
          "  --tenant KEY:CLASS[:WEIGHT]  bearer key and report class, repeatable;\n"
          "                         clients get tenants by weighted round robin\n"
          "  --prompt TEXT          repeatable; each client cycles through them\n"
          "                         (default \"Once upon a time\")\n"
          "  --max-tokens LIST      e.g. 16,32,64, cycled over requests (default 32)\n"
          "  --stream-fraction F    share of requests that stream, 0..1 (default 0.5;\n"
          "                         request i streams if floor((i+1)F) > floor(iF))\n"
          "  --temperature T        default 0\n"
          "  --top-p P              default 1\n"
          "  --seed S               request i sends seed S+i (default 1)\n"
          "  --priority N           sent as \"priority\" when given\n"
          "  --check-run \"ARGS\"     compare each answer with `tessera run ARGS --temp 0\n"
          "                         -n STEPS -p PROMPT` (temperature 0 only)\n"
          "  --json FILE            write the results as JSON\n"
          "  --timeline FILE.csv    sample /metrics into a CSV\n"
          "  --timeline-ms MS       sampling period (default 100)\n"
          "  --metrics-key KEY      bearer key for /metrics\n"
          "  --timeout-ms MS        per request (default 120000)\n"
          "  --no-429               count 429 answers as failures\n"
          "  -h, --help             this text\n"
          "\n"
          "Every request has \"echo\": true. TTFT is the time to the first stream text\n"
          "past the echoed prompt (the latency of a plain request); ITL the gaps\n"
          "between stream chunks. A 429 is recorded, not retried; that client waits Retry-After seconds (at\n"
          "most 5) before its next request. Exit 0 when no request failed and no\n"
          "answer differed, 1 otherwise, 2 on a bad option.\n");
}

static bool lg_parse_tenant(const char *v, lg_tenant_t *t) {
  size_t n;
  char **f = lg_split(v, ':', &n);
  bool ok = n >= 2 && n <= 3 && f[0][0] && f[1][0];
  if (!ok) {
    fprintf(stderr, "tessera " LG_CMD ": --tenant: '%s' is not KEY:CLASS[:WEIGHT]\n", v);
  } else {
    t->weight = 1;
    if (n == 3) ok = cli_parse_i64(LG_CMD, "--tenant WEIGHT", f[2], 1, 1000, &t->weight);
    t->key = lg_strdup(f[0]);
    t->cls = lg_strdup(f[1]);
  }
  lg_split_free(f, n);
  return ok;
}

static bool lg_parse_max_tokens(const char *v, lg_opts_t *o) {
  size_t n;
  char **f = lg_split(v, ',', &n);
  free(o->max_tokens);
  o->max_tokens = lg_alloc(n * sizeof *o->max_tokens);
  o->n_max = n;
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++)
    ok = cli_parse_i64(LG_CMD, "--max-tokens", f[i], 1, 1 << 20, &o->max_tokens[i]);
  lg_split_free(f, n);
  return ok;
}

static bool lg_parse_phases(const char *v, lg_opts_t *o) {
  size_t n;
  char **f = lg_split(v, ',', &n);
  free(o->phases);
  o->phases = lg_alloc(n * sizeof *o->phases);
  o->n_phases = n;
  o->phases_s = 0;
  bool ok = true;
  for (size_t i = 0; ok && i < n; i++) {
    size_t m;
    char **cs = lg_split(f[i], ':', &m);
    if (m != 2) {
      fprintf(stderr, "tessera " LG_CMD ": --steps-phase: '%s' is not CLIENTS:SECONDS\n",
              f[i]);
      ok = false;
    } else {
      ok = cli_parse_i64(LG_CMD, "--steps-phase CLIENTS", cs[0], 0, 4096,
                         &o->phases[i].clients) &&
           cli_parse_f64(LG_CMD, "--steps-phase SECONDS", cs[1], 0.001, 1e6,
                         &o->phases[i].seconds);
      o->phases_s += ok ? o->phases[i].seconds : 0;
    }
    lg_split_free(cs, m);
  }
  lg_split_free(f, n);
  return ok;
}

static void lg_opts_free(lg_opts_t *o) {
  for (size_t i = 0; i < o->n_tenants; i++) {
    free(o->tenants[i].key);
    free(o->tenants[i].cls);
  }
  free(o->tenants);
  free(o->prompts);
  free(o->max_tokens);
  free(o->phases);
}

/* Returns 0 to run, 2 on a bad option, -1 after --help. */
static int lg_parse(int argc, char **argv, lg_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->clients = 4;
  o->timeline_ms = 100;
  o->timeout_ms = 120000;
  o->stream_frac = 0.5;
  o->top_p = 1.0;
  o->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
#define VALUE() \
  if (!(v = cli_value(LG_CMD, argc, argv, &i))) return 2
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return -1;
    } else if (!strcmp(a, "--url")) {
      VALUE();
      o->url = v;
    } else if (!strcmp(a, "--model")) {
      VALUE();
      o->model = v;
    } else if (!strcmp(a, "--clients")) {
      VALUE();
      if (!cli_parse_i64(LG_CMD, a, v, 1, 4096, &o->clients)) return 2;
      o->clients_set = true;
    } else if (!strcmp(a, "--requests")) {
      VALUE();
      if (!cli_parse_i64(LG_CMD, a, v, 1, INT32_MAX, &o->requests)) return 2;
      o->requests_set = true;
    } else if (!strcmp(a, "--duration")) {
      VALUE();
      if (!cli_parse_f64(LG_CMD, a, v, 0.001, 1e6, &o->duration)) return 2;
    } else if (!strcmp(a, "--steps-phase")) {
      VALUE();
      if (!lg_parse_phases(v, o)) return 2;
    } else if (!strcmp(a, "--tenant")) {
      VALUE();
      lg_tenant_t *t = realloc(o->tenants, (o->n_tenants + 1) * sizeof *t);
      if (!t) lg_oom();
      o->tenants = t;
      memset(&t[o->n_tenants], 0, sizeof *t);
      if (!lg_parse_tenant(v, &t[o->n_tenants++])) return 2;
    } else if (!strcmp(a, "--prompt")) {
      VALUE();
      const char **p = realloc(o->prompts, (o->n_prompts + 1) * sizeof *p);
      if (!p) lg_oom();
      o->prompts = p;
      p[o->n_prompts++] = v;
    } else if (!strcmp(a, "--max-tokens")) {
      VALUE();
      if (!lg_parse_max_tokens(v, o)) return 2;
    } else if (!strcmp(a, "--stream-fraction")) {
      VALUE();
      if (!cli_parse_f64(LG_CMD, a, v, 0.0, 1.0, &o->stream_frac)) return 2;
    } else if (!strcmp(a, "--temperature") || !strcmp(a, "--temp")) {
      VALUE();
      if (!cli_parse_f64(LG_CMD, a, v, 0.0, 100.0, &o->temperature)) return 2;
    } else if (!strcmp(a, "--top-p")) {
      VALUE();
      if (!cli_parse_f64(LG_CMD, a, v, 0.0, 1.0, &o->top_p)) return 2;
    } else if (!strcmp(a, "--seed")) {
      VALUE();
      if (!cli_parse_u64(LG_CMD, a, v, &o->seed)) return 2;
      if (o->seed > (uint64_t)INT64_MAX / 2) {
        fprintf(stderr, "tessera " LG_CMD ": --seed: %s is above %" PRId64 "\n", v,
                INT64_MAX / 2);
        return 2;
      }
    } else if (!strcmp(a, "--priority")) {
      VALUE();
      if (!cli_parse_i64(LG_CMD, a, v, INT32_MIN, INT32_MAX, &o->priority)) return 2;
      o->priority_set = true;
    } else if (!strcmp(a, "--check-run")) {
      VALUE();
      o->check_args = v;
    } else if (!strcmp(a, "--json")) {
      VALUE();
      o->json_path = v;
    } else if (!strcmp(a, "--timeline")) {
      VALUE();
      o->timeline_path = v;
    } else if (!strcmp(a, "--timeline-ms")) {
      VALUE();
      if (!cli_parse_i64(LG_CMD, a, v, 1, 3600000, &o->timeline_ms)) return 2;
    } else if (!strcmp(a, "--metrics-key")) {
      VALUE();
      o->metrics_key = v;
    } else if (!strcmp(a, "--timeout-ms")) {
      VALUE();
      if (!cli_parse_i64(LG_CMD, a, v, 1, 86400000, &o->timeout_ms)) return 2;
    } else if (!strcmp(a, "--no-429")) {
      o->no429 = true;
    } else {
      fprintf(stderr, "tessera " LG_CMD ": unknown option '%s' (see --help)\n", a);
      return 2;
    }
#undef VALUE
  }
  const char *bad = NULL;
  if (!o->url) bad = "--url URL is required";
  else if (strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))
    bad = "--url: not an http:// or https:// URL";
  else if (!o->model) bad = "--model NAME is required";
  else if (o->duration > 0 && o->requests_set) bad = "--requests and --duration exclude each other";
  else if (o->n_phases && o->duration > 0) bad = "--steps-phase and --duration exclude each other";
  else if (o->n_phases && o->clients_set) bad = "--steps-phase sets the clients; drop --clients";
  else if (o->check_args && o->temperature != 0)
    bad = "--check-run needs --temperature 0 (the reference is greedy)";
  if (bad) {
    fprintf(stderr, "tessera " LG_CMD ": %s (see --help)\n", bad);
    return 2;
  }
  if (o->n_phases) {
    o->clients = 0;
    for (size_t i = 0; i < o->n_phases; i++)
      if (o->phases[i].clients > o->clients) o->clients = o->phases[i].clients;
    if (!o->clients) {
      fprintf(stderr, "tessera " LG_CMD ": --steps-phase: every phase has 0 clients\n");
      return 2;
    }
  }
  if (!o->requests_set && o->duration <= 0 && !o->n_phases) {
    o->requests = 4 * o->clients;
    o->requests_set = true;
  }
  if (!o->n_prompts) {
    o->prompts = lg_alloc(sizeof *o->prompts);
    o->prompts[o->n_prompts++] = "Once upon a time";
  }
  if (!o->n_max) {
    o->max_tokens = lg_alloc(sizeof *o->max_tokens);
    o->max_tokens[o->n_max++] = 32;
  }
  return 0;
}

/* ---- the event-stream parser --------------------------------------------- */

typedef struct {
  lg_buf_t line, data, text; /* partial line, event data, text so far */
  bool has_data, finished, done;
  int64_t chunks, text_chunks, usage_prompt, usage_completion; /* usage: -1 unknown */
  size_t echo_left; /* bytes of echoed prompt still expected before the tokens */
  double t_first, t_last;
  lg_vec_t itl;
  char *error; /* first violation; the stream is abandoned */
} lg_sse_t;

static void sse_reset(lg_sse_t *s) {
  buf_clear(&s->line);
  buf_clear(&s->data);
  buf_clear(&s->text);
  s->has_data = s->finished = s->done = false;
  s->chunks = s->text_chunks = 0;
  s->usage_prompt = s->usage_completion = -1;
  s->t_first = s->t_last = 0;
  s->itl.n = 0;
  free(s->error);
  s->error = NULL;
}

static void sse_free(lg_sse_t *s) {
  free(s->line.p);
  free(s->data.p);
  free(s->text.p);
  free(s->itl.v);
  free(s->error);
}

__attribute__((format(printf, 2, 3))) static void sse_fail(lg_sse_t *s, const char *fmt, ...) {
  if (s->error) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  s->error = lg_strdup(msg);
}

/* choices[0].text and finish_reason of a completion object or chunk; NULL or
 * a description of what is wrong. *fr is NULL for a JSON null. */
static const char *lg_choice(json_t *j, const char **text, size_t *len, const char **fr) {
  if (!json_is_object(j)) return "not a JSON object";
  json_t *ch = json_object_get(j, "choices");
  if (!json_is_array(ch) || !json_array_size(ch)) return "\"choices\" is not a non-empty array";
  json_t *c0 = json_array_get(ch, 0);
  json_t *t = json_object_get(c0, "text");
  if (!json_is_string(t)) return "choices[0].text is not a string";
  json_t *f = json_object_get(c0, "finish_reason");
  if (!f) return "choices[0].finish_reason is missing";
  if (json_is_null(f)) {
    *fr = NULL;
  } else if (json_is_string(f) && (!strcmp(json_string_value(f), "stop") ||
                                   !strcmp(json_string_value(f), "length"))) {
    *fr = json_string_value(f);
  } else {
    return "choices[0].finish_reason is not null, \"stop\" or \"length\"";
  }
  *text = json_string_value(t);
  *len = json_string_length(t);
  return NULL;
}

/* usage.prompt_tokens and completion_tokens; false if malformed. */
static bool lg_usage(json_t *u, int64_t *prompt, int64_t *completion) {
  json_t *p = json_object_get(u, "prompt_tokens"), *c = json_object_get(u, "completion_tokens");
  if (!json_is_integer(p) || !json_is_integer(c) || json_integer_value(p) < 0 ||
      json_integer_value(c) < 0)
    return false;
  *prompt = json_integer_value(p);
  *completion = json_integer_value(c);
  return true;
}

static void sse_event(lg_sse_t *s, double now) {
  const char *d = s->data.p ? s->data.p : "";
  if (s->done) return sse_fail(s, "data after [DONE]");
  if (!strcmp(d, "[DONE]")) {
    if (!s->finished) return sse_fail(s, "[DONE] before a chunk with a finish_reason");
    s->done = true;
    return;
  }
  if (s->finished) return sse_fail(s, "chunk after the chunk with the finish_reason");
  json_error_t je;
  json_t *j = json_loadb(d, s->data.n, 0, &je);
  if (!j) return sse_fail(s, "chunk %" PRId64 " is not JSON: %s", s->chunks, je.text);
  const char *text = NULL, *fr = NULL;
  size_t len = 0;
  json_t *err = json_object_get(json_object_get(j, "error"), "message");
  const char *why = lg_choice(j, &text, &len, &fr);
  if (json_is_string(err)) {
    sse_fail(s, "error event: %s", json_string_value(err));
    why = NULL;
  }
  json_t *u = json_object_get(j, "usage");
  if (!why && u && !json_is_null(u) && !lg_usage(u, &s->usage_prompt, &s->usage_completion))
    why = "\"usage\" lacks non-negative prompt_tokens and completion_tokens";
  if (why) {
    sse_fail(s, "chunk %" PRId64 ": %s", s->chunks, why);
  } else if (!s->error) {
    if (s->chunks) vec_add(&s->itl, now - s->t_last);
    s->t_last = now;
    s->chunks++;
    /* the echoed prompt comes first; only text past it is tokens */
    size_t echo = len < s->echo_left ? len : s->echo_left;
    s->echo_left -= echo;
    if (len > echo) {
      if (!s->text_chunks) s->t_first = now;
      s->text_chunks++;
    }
    buf_add(&s->text, text, len);
    s->finished = fr != NULL;
  }
  json_decref(j);
}

static void sse_line(lg_sse_t *s, double now) {
  const char *l = s->line.p ? s->line.p : "";
  size_t n = s->line.n;
  if (!n) { /* a blank line ends the event */
    if (s->has_data) sse_event(s, now);
    buf_clear(&s->data);
    s->has_data = false;
  } else if (l[0] == ':') {
    /* a comment (keep-alive) */
  } else if (n >= 5 && !memcmp(l, "data:", 5)) {
    size_t skip = n > 5 && l[5] == ' ' ? 6 : 5;
    if (s->has_data) buf_add(&s->data, "\n", 1);
    buf_add(&s->data, l + skip, n - skip);
    s->has_data = true;
  } else {
    sse_fail(s, "line '%.40s' is not a data field", l);
  }
}

/* Feeds received bytes; false once the stream broke the contract. */
static bool sse_feed(lg_sse_t *s, const char *p, size_t n, double now) {
  while (n && !s->error) {
    const char *nl = memchr(p, '\n', n);
    size_t len = nl ? (size_t)(nl - p) : n;
    if (s->line.n + len > LG_MAX_BODY) {
      sse_fail(s, "a line longer than %u bytes", LG_MAX_BODY);
      break;
    }
    buf_add(&s->line, p, len);
    p += len;
    n -= len;
    if (!nl) break;
    p++;
    n--;
    sse_line(s, now);
    buf_clear(&s->line);
  }
  return !s->error;
}

/* After the transfer: what is left unfinished, if anything. */
static void sse_end(lg_sse_t *s) {
  if (s->line.n) sse_fail(s, "stream ended inside a line");
  else if (s->has_data) sse_fail(s, "stream ended inside an event (no blank line)");
  else if (!s->done) sse_fail(s, "stream ended without data: [DONE]");
}

/* ---- the run's state ----------------------------------------------------- */

typedef struct {
  const char *name;
  int64_t requests, ok, n429, errors, mismatches, tokens, checked;
  lg_vec_t ttft, itl, lat; /* seconds */
} lg_class_t;

typedef struct {
  int64_t req_no;
  size_t cls;
  char *text;
  size_t len;
} lg_pending_t;

typedef enum {
  LG_CHECK_WAIT,    /* no prompt_tokens known yet */
  LG_CHECK_RUNNING, /* `tessera run` spawned */
  LG_CHECK_READY,
  LG_CHECK_FAILED,
} lg_check_state_t;

/* The reference text of one (prompt, max_tokens). */
typedef struct {
  size_t prompt;
  int64_t max_tokens;
  lg_check_state_t state;
  char *expected;
  size_t expected_len;
  pid_t pid;
  int fd[2]; /* its stdout, stderr; -1 closed */
  lg_buf_t out[2];
  lg_pending_t *pending; /* answers waiting for the reference */
  size_t n_pending;
} lg_check_t;

struct lg_run;

typedef struct {
  struct lg_run *run;
  size_t idx, tenant, nth;
  CURL *easy;
  struct curl_slist *hdrs;
  bool busy;
  double resume_at; /* run-relative time before which it sends nothing */
  /* the request in flight */
  int64_t req_no, max_tokens;
  size_t prompt;
  bool stream, mode_known, sse_mode, too_big;
  char *body;
  double t0;
  lg_buf_t raw; /* the body of a non-stream or refused answer */
  lg_sse_t sse;
  char errbuf[CURL_ERROR_SIZE];
} lg_client_t;

enum { LG_M_LOAD, LG_M_DEVICES, LG_M_QUEUE, LG_M_RUNNING, LG_M_UP, LG_M_DOWN, LG_M_COUNT };

typedef struct {
  CURL *easy;
  struct curl_slist *hdrs;
  FILE *csv;
  bool busy;
  double next, t_req;
  int64_t clients_at_req, failures, rows;
  lg_buf_t body;
  char errbuf[CURL_ERROR_SIZE];
} lg_sampler_t;

typedef struct lg_run {
  const lg_opts_t *o;
  char exe[PATH_MAX];
  char **run_args; /* --check-run split on spaces */
  size_t n_run_args;
  char *completions_url, *metrics_url;
  CURLM *multi;
  lg_class_t *classes;
  size_t n_classes;
  lg_client_t *clients;
  size_t n_clients;
  lg_check_t *checks; /* n_prompts * n_max; NULL without --check-run */
  size_t n_checks;
  lg_sampler_t sampler;
  double t_start, t_end; /* absolute; t_end: the last answer */
  int64_t issued, in_flight, errors_shown, check_failures, unchecked;
} lg_run_t;

/* Clients allowed to send at run-relative time t. */
static int64_t lg_active(const lg_run_t *r, double t) {
  const lg_opts_t *o = r->o;
  if (o->n_phases) {
    double end = 0;
    for (size_t i = 0; i < o->n_phases; i++) {
      end += o->phases[i].seconds;
      if (t < end) return o->phases[i].clients;
    }
    return 0;
  }
  if (o->duration > 0) return t < o->duration ? o->clients : 0;
  return o->clients;
}

/* Whether any request may still be started (now or later). */
static bool lg_more(const lg_run_t *r, double t) {
  const lg_opts_t *o = r->o;
  if (o->requests_set && r->issued >= o->requests) return false;
  if (o->n_phases) return t < o->phases_s;
  if (o->duration > 0) return t < o->duration;
  return true;
}

/* ---- reporting a failed request ------------------------------------------ */

__attribute__((format(printf, 3, 4))) static void lg_error(lg_run_t *r, lg_client_t *c,
                                                           const char *fmt, ...) {
  lg_class_t *k = &r->classes[r->o->tenants ? r->o->tenants[c->tenant].cls_idx : 0];
  k->errors++;
  if (r->errors_shown++ >= LG_MAX_ERRORS_SHOWN) {
    if (r->errors_shown == LG_MAX_ERRORS_SHOWN + 1)
      fprintf(stderr, "loadgen: further request errors are counted, not shown\n");
    return;
  }
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "loadgen: request %" PRId64 " (class %s, client %zu, %s): %s\n", c->req_no,
          k->name, c->idx, c->stream ? "stream" : "plain", msg);
}

/* Appends s[from, from+n) to out, escaped onto one line. */
static void lg_escape(lg_buf_t *out, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char b = (unsigned char)s[i];
    char tmp[8];
    if (b == '\n') buf_add(out, "\\n", 2);
    else if (b == '\\') buf_add(out, "\\\\", 2);
    else if (b < 0x20 || b == 0x7f) buf_add(out, tmp, (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", b));
    else buf_add(out, (const char *)&s[i], 1);
  }
}

/* Around byte `at` of s: ...[at-24, at+40)... */
static void lg_excerpt(lg_buf_t *out, const char *s, size_t n, size_t at) {
  size_t from = at > 24 ? at - 24 : 0, to = at + 40 < n ? at + 40 : n;
  buf_clear(out);
  buf_add(out, "\"", 1);
  if (from) buf_add(out, "...", 3);
  lg_escape(out, s + from, to > from ? to - from : 0);
  if (to < n) buf_add(out, "...", 3);
  buf_add(out, "\"", 1);
}

/* ---- --check-run: the reference text --------------------------------------- */

static void lg_compare(lg_run_t *r, const lg_check_t *ck, int64_t req_no, size_t cls,
                       const char *t, size_t n) {
  const char *e = ck->expected;
  size_t en = ck->expected_len, i = 0;
  while (i < n && i < en && t[i] == e[i]) i++;
  if (i == n && i == en) {
    r->classes[cls].checked++;
    return;
  }
  r->classes[cls].mismatches++;
  lg_buf_t a = {0}, b = {0};
  lg_excerpt(&a, t, n, i);
  lg_excerpt(&b, e, en, i);
  fprintf(stderr,
          "loadgen: mismatch: request %" PRId64 " (class %s, prompt %zu, max_tokens %" PRId64
          "): first difference at byte %zu (server %zu bytes, run %zu bytes)\n"
          "  server: %s\n  run:    %s\n",
          req_no, r->classes[cls].name, ck->prompt, ck->max_tokens, i, n, en, a.p, b.p);
  free(a.p);
  free(b.p);
}

static void lg_check_fail(lg_run_t *r, lg_check_t *ck, const char *why) {
  fprintf(stderr, "loadgen: --check-run for prompt %zu, max_tokens %" PRId64 " failed: %s\n",
          ck->prompt, ck->max_tokens, why);
  ck->state = LG_CHECK_FAILED;
  r->check_failures++;
}

/* Spawns `EXE run ARGS --temp 0 -n STEPS -p PROMPT`, stdout and stderr piped. */
static void lg_check_spawn(lg_run_t *r, lg_check_t *ck, int64_t prompt_tokens) {
  char steps[32], why[PATH_MAX + 128];
  snprintf(steps, sizeof steps, "%" PRId64, prompt_tokens + ck->max_tokens - 1);
  size_t na = 0;
  char **argv = lg_alloc((r->n_run_args + 9) * sizeof *argv);
  argv[na++] = r->exe;
  argv[na++] = "run";
  for (size_t i = 0; i < r->n_run_args; i++) argv[na++] = r->run_args[i];
  argv[na++] = "--temp";
  argv[na++] = "0";
  argv[na++] = "-n";
  argv[na++] = steps;
  argv[na++] = "-p";
  argv[na++] = (char *)r->o->prompts[ck->prompt];
  argv[na] = NULL;

  int p_out[2] = {-1, -1}, p_err[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int e = 0;
  if (pipe2(p_out, O_CLOEXEC) || pipe2(p_err, O_CLOEXEC)) e = errno;
  if (!e) e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!e) e = posix_spawn_file_actions_adddup2(&fa, p_out[1], 1);
  if (!e) e = posix_spawn_file_actions_adddup2(&fa, p_err[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  /* the clients' sockets stay out of the child */
  if (!e) e = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
  if (!e) e = posix_spawn(&ck->pid, r->exe, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  free(argv);
  for (int k = 0; k < 2; k++) {
    int *p = k ? p_err : p_out;
    if (p[1] >= 0) close(p[1]);
    ck->fd[k] = p[0];
    if (p[0] >= 0) fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  }
  if (e) {
    for (int k = 0; k < 2; k++)
      if (ck->fd[k] >= 0) close(ck->fd[k]);
    ck->fd[0] = ck->fd[1] = -1;
    snprintf(why, sizeof why, "cannot start %s: %s", r->exe, strerror(e));
    lg_check_fail(r, ck, why);
    return;
  }
  ck->state = LG_CHECK_RUNNING;
}

/* The reference ended: keep its text and check the answers that waited. */
static void lg_check_done(lg_run_t *r, lg_check_t *ck, int status) {
  lg_buf_t *out = &ck->out[0], *err = &ck->out[1];
  char why[512];
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const char *msg = err->p ? err->p : "";
    size_t n = err->n;
    while (n && msg[n - 1] == '\n') n--;
    const char *last = n ? memrchr(msg, '\n', n) : NULL;
    last = last ? last + 1 : msg;
    if (WIFEXITED(status))
      snprintf(why, sizeof why, "run exited with status %d: %.*s", WEXITSTATUS(status),
               (int)(msg + n - last), last);
    else
      snprintf(why, sizeof why, "run killed by signal %d", WTERMSIG(status));
    lg_check_fail(r, ck, why);
  } else if (!out->n || out->p[out->n - 1] != '\n') {
    lg_check_fail(r, ck, "run's output does not end with a newline");
  } else {
    ck->state = LG_CHECK_READY;
    ck->expected = out->p;
    ck->expected_len = out->n - 1;
    out->p = NULL;
    out->n = out->cap = 0;
  }
  for (size_t i = 0; i < ck->n_pending; i++) {
    lg_pending_t *p = &ck->pending[i];
    if (ck->state == LG_CHECK_READY) lg_compare(r, ck, p->req_no, p->cls, p->text, p->len);
    else r->unchecked++;
    free(p->text);
  }
  free(ck->pending);
  ck->pending = NULL;
  ck->n_pending = 0;
}

/* Reads what the running references wrote; reaps the finished ones. */
static void lg_check_pump(lg_run_t *r) {
  for (size_t i = 0; i < r->n_checks; i++) {
    lg_check_t *ck = &r->checks[i];
    if (ck->state != LG_CHECK_RUNNING) continue;
    for (int k = 0; k < 2; k++) {
      char chunk[4096];
      while (ck->fd[k] >= 0) {
        ssize_t n = read(ck->fd[k], chunk, sizeof chunk);
        if (n > 0) {
          buf_add(&ck->out[k], chunk, (size_t)n);
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          break;
        } else {
          close(ck->fd[k]);
          ck->fd[k] = -1;
        }
      }
    }
    if (ck->fd[0] < 0 && ck->fd[1] < 0) {
      int status = 0;
      while (waitpid(ck->pid, &status, 0) < 0 && errno == EINTR) {
      }
      lg_check_done(r, ck, status);
    }
  }
}

/* A valid answer's text: compare it, or keep it until the reference exists. */
static void lg_check_answer(lg_run_t *r, const lg_client_t *c, size_t cls, const char *text,
                            size_t len, int64_t prompt_tokens) {
  if (!r->checks) return;
  const lg_opts_t *o = r->o;
  size_t mi = 0; /* first list entry with this value: one reference per value */
  while (o->max_tokens[mi] != c->max_tokens) mi++;
  lg_check_t *ck = &r->checks[c->prompt * o->n_max + mi];
  if (ck->state == LG_CHECK_READY) return lg_compare(r, ck, c->req_no, cls, text, len);
  if (ck->state == LG_CHECK_FAILED) {
    r->unchecked++;
    return;
  }
  lg_pending_t *p = realloc(ck->pending, (ck->n_pending + 1) * sizeof *p);
  if (!p) lg_oom();
  ck->pending = p;
  p += ck->n_pending++;
  p->req_no = c->req_no;
  p->cls = cls;
  p->len = len;
  p->text = lg_alloc(len + 1);
  memcpy(p->text, text, len);
  if (ck->state == LG_CHECK_WAIT && prompt_tokens >= 0) lg_check_spawn(r, ck, prompt_tokens);
}

/* ---- /metrics sampling --------------------------------------------------- */

/* One sample line `name{labels} value [timestamp]`: its name, its direction
 * label (empty if none) and value; false if malformed. */
static bool lg_prom_line(const char *l, char *name, size_t nname, char *dir, size_t ndir,
                         double *value) {
  size_t k = 0;
  dir[0] = '\0';
  if (!(*l == '_' || *l == ':' || (*l >= 'a' && *l <= 'z') || (*l >= 'A' && *l <= 'Z')))
    return false;
  while (*l == '_' || *l == ':' || (*l >= 'a' && *l <= 'z') || (*l >= 'A' && *l <= 'Z') ||
         (*l >= '0' && *l <= '9')) {
    if (k + 1 < nname) name[k++] = *l;
    l++;
  }
  name[k] = '\0';
  if (*l == '{') {
    l++;
    for (;;) {
      while (*l == ' ') l++;
      if (*l == '}') break;
      const char *ln = l;
      while (*l == '_' || (*l >= 'a' && *l <= 'z') || (*l >= 'A' && *l <= 'Z') ||
             (*l >= '0' && *l <= '9'))
        l++;
      size_t lnlen = (size_t)(l - ln);
      while (*l == ' ') l++;
      if (!lnlen || *l++ != '=') return false;
      while (*l == ' ') l++;
      if (*l++ != '"') return false;
      bool is_dir = lnlen == 9 && !memcmp(ln, "direction", 9);
      size_t dk = 0;
      while (*l && *l != '"') {
        char ch = *l++;
        if (ch == '\\') {
          if (!*l) return false;
          ch = *l == 'n' ? '\n' : *l;
          l++;
        }
        if (is_dir && dk + 1 < ndir) dir[dk++] = ch;
      }
      if (*l++ != '"') return false;
      if (is_dir) dir[dk] = '\0';
      while (*l == ' ') l++;
      if (*l == ',') l++;
      else if (*l != '}') return false;
    }
    l++;
  }
  if (*l != ' ' && *l != '\t') return false;
  while (*l == ' ' || *l == '\t') l++;
  char *end = NULL;
  *value = strtod(l, &end);
  return end != l && (*end == '\0' || *end == ' ' || *end == '\t');
}

/* The timeline's figures from an exposition: the pool load is the largest
 * over the label sets, the others are sums. */
static void lg_prom_parse(char *text, double v[LG_M_COUNT], bool seen[LG_M_COUNT],
                          int64_t *bad) {
  static const char *const gauges[] = {"tessera_pool_load", "tessera_pool_devices",
                                       "tessera_queue_depth", "tessera_running_sequences"};
  for (char *l = text, *next; l && *l; l = next) {
    next = strchr(l, '\n');
    if (next) *next++ = '\0';
    size_t n = strlen(l);
    if (n && l[n - 1] == '\r') l[--n] = '\0';
    while (*l == ' ' || *l == '\t') l++;
    if (!*l || *l == '#') continue;
    char name[128], dir[16];
    double x;
    if (!lg_prom_line(l, name, sizeof name, dir, sizeof dir, &x)) {
      (*bad)++;
      continue;
    }
    int m = -1;
    for (int g = 0; g < 4; g++)
      if (!strcmp(name, gauges[g])) m = g;
    if (!strcmp(name, "tessera_scaling_events_total"))
      m = !strcmp(dir, "up") ? LG_M_UP : !strcmp(dir, "down") ? LG_M_DOWN : -1;
    if (m < 0) continue;
    if (!seen[m]) v[m] = x;
    else if (m == LG_M_LOAD) v[m] = fmax(v[m], x);
    else v[m] += x;
    seen[m] = true;
  }
}

static size_t lg_on_metrics(char *p, size_t sz, size_t nm, void *ud) {
  lg_buf_t *b = ud;
  if (b->n + sz * nm > LG_MAX_BODY) return 0;
  buf_add(b, p, sz * nm);
  return sz * nm;
}

static void lg_sampler_tick(lg_run_t *r, double t) {
  lg_sampler_t *s = &r->sampler;
  if (!s->csv || s->busy || t < s->next) return;
  double period = (double)r->o->timeline_ms / 1000.0;
  while (s->next <= t) s->next += period;
  s->t_req = t;
  s->clients_at_req = lg_active(r, t);
  buf_clear(&s->body);
  s->errbuf[0] = '\0';
  if (curl_multi_add_handle(r->multi, s->easy) == CURLM_OK) s->busy = true;
}

static void lg_sampler_done(lg_run_t *r, CURLcode res) {
  lg_sampler_t *s = &r->sampler;
  curl_multi_remove_handle(r->multi, s->easy);
  s->busy = false;
  long status = 0;
  curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
  double v[LG_M_COUNT] = {0};
  bool seen[LG_M_COUNT] = {false};
  int64_t bad = 0;
  if (res == CURLE_OK && status == 200 && s->body.p) {
    lg_prom_parse(s->body.p, v, seen, &bad);
    if (bad && !s->failures++)
      fprintf(stderr, "loadgen: /metrics: %" PRId64 " malformed sample lines skipped\n", bad);
  } else if (!s->failures++) {
    fprintf(stderr, "loadgen: /metrics: %s (timeline rows left empty)\n",
            res != CURLE_OK ? (s->errbuf[0] ? s->errbuf : curl_easy_strerror(res))
                            : status == 401 ? "HTTP 401 (see --metrics-key)" : "HTTP error");
  }
  fprintf(s->csv, "%.3f,%" PRId64, s->t_req, s->clients_at_req);
  for (int m = 0; m < LG_M_COUNT; m++) {
    if (seen[m]) fprintf(s->csv, ",%.10g", v[m]);
    else fputc(',', s->csv);
  }
  fputc('\n', s->csv);
  s->rows++;
}

/* ---- clients ------------------------------------------------------------- */

static size_t lg_on_body(char *p, size_t sz, size_t nm, void *ud) {
  lg_client_t *c = ud;
  size_t n = sz * nm;
  if (!c->mode_known) {
    long status = 0;
    char *ct = NULL;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c->easy, CURLINFO_CONTENT_TYPE, &ct);
    c->sse_mode = c->stream && status == 200 && ct && !strncmp(ct, "text/event-stream", 17);
    c->mode_known = true;
  }
  if (c->sse_mode) return sse_feed(&c->sse, p, n, cli_now_s()) ? n : 0;
  if (c->raw.n + n > LG_MAX_BODY) {
    c->too_big = true;
    return 0;
  }
  buf_add(&c->raw, p, n);
  return n;
}

static bool lg_client_init(lg_run_t *r, lg_client_t *c, size_t idx, size_t tenant) {
  c->run = r;
  c->idx = idx;
  c->tenant = tenant;
  c->sse.usage_prompt = c->sse.usage_completion = -1;
  if (!(c->easy = curl_easy_init())) return false;
  c->hdrs = curl_slist_append(c->hdrs, "Content-Type: application/json");
  c->hdrs = curl_slist_append(c->hdrs, "Expect:");
  if (r->o->tenants) {
    lg_buf_t h = {0};
    buf_add(&h, "Authorization: Bearer ", 22);
    buf_add(&h, r->o->tenants[tenant].key, strlen(r->o->tenants[tenant].key));
    c->hdrs = curl_slist_append(c->hdrs, h.p);
    free(h.p);
  }
  CURL *e = c->easy;
  curl_easy_setopt(e, CURLOPT_URL, r->completions_url);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->hdrs);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, lg_on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)r->o->timeout_ms);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PRIVATE, c);
  return c->hdrs != NULL;
}

static void lg_client_start(lg_run_t *r, lg_client_t *c) {
  const lg_opts_t *o = r->o;
  int64_t i = r->issued++;
  c->req_no = i;
  c->prompt = (c->idx + c->nth++) % o->n_prompts;
  c->max_tokens = o->max_tokens[(size_t)i % o->n_max];
  c->stream = floor((double)(i + 1) * o->stream_frac) > floor((double)i * o->stream_frac);

  json_t *j = json_object();
  json_object_set_new(j, "model", json_string(o->model));
  json_object_set_new(j, "prompt", json_string(o->prompts[c->prompt]));
  json_object_set_new(j, "max_tokens", json_integer(c->max_tokens));
  json_object_set_new(j, "temperature", json_real(o->temperature));
  json_object_set_new(j, "top_p", json_real(o->top_p));
  json_object_set_new(j, "seed", json_integer((json_int_t)o->seed + i));
  json_object_set_new(j, "stream", json_boolean(c->stream));
  json_object_set_new(j, "echo", json_true());
  if (o->priority_set) json_object_set_new(j, "priority", json_integer(o->priority));
  free(c->body);
  c->body = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (!c->body) lg_oom();

  buf_clear(&c->raw);
  sse_reset(&c->sse);
  c->sse.echo_left = strlen(o->prompts[c->prompt]);
  c->mode_known = c->sse_mode = c->too_big = false;
  c->errbuf[0] = '\0';
  curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body);
  curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(c->body));
  r->classes[o->tenants ? o->tenants[c->tenant].cls_idx : 0].requests++;
  c->t0 = cli_now_s();
  CURLMcode mc = curl_multi_add_handle(r->multi, c->easy);
  if (mc != CURLM_OK) {
    lg_error(r, c, "cannot start the transfer: %s", curl_multi_strerror(mc));
    c->resume_at = c->t0 - r->t_start + LG_TRANSPORT_PAUSE_S;
    return;
  }
  c->busy = true;
  r->in_flight++;
}

/* The message of an error answer, or what is wrong with its shape. */
static void lg_error_answer(lg_run_t *r, lg_client_t *c, long status) {
  json_t *j = c->raw.p ? json_loadb(c->raw.p, c->raw.n, 0, NULL) : NULL;
  json_t *err = json_object_get(j, "error");
  json_t *msg = json_object_get(err, "message");
  if (json_is_string(msg)) {
    lg_error(r, c, "HTTP %ld: %s", status, json_string_value(msg));
  } else {
    lg_buf_t b = {0};
    lg_escape(&b, c->raw.p ? c->raw.p : "", c->raw.n < 120 ? c->raw.n : 120);
    lg_error(r, c, "HTTP %ld without an {\"error\":{\"message\"}} body: \"%s\"", status,
             b.p ? b.p : "");
    free(b.p);
  }
  json_decref(j);
}

/* A finished transfer: validate, time, count and check it. */
static void lg_client_done(lg_run_t *r, lg_client_t *c, CURLcode res) {
  const lg_opts_t *o = r->o;
  double now = cli_now_s();
  curl_multi_remove_handle(r->multi, c->easy);
  c->busy = false;
  r->in_flight--;
  r->t_end = now;
  size_t cls = o->tenants ? o->tenants[c->tenant].cls_idx : 0;
  lg_class_t *k = &r->classes[cls];
  long status = 0;
  curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);

  if (res != CURLE_OK) {
    if (c->sse.error) {
      lg_error(r, c, "malformed event stream: %s", c->sse.error);
    } else if (c->too_big) {
      lg_error(r, c, "answer larger than %u bytes", LG_MAX_BODY);
    } else {
      lg_error(r, c, "%s", c->errbuf[0] ? c->errbuf : curl_easy_strerror(res));
      c->resume_at = now - r->t_start + LG_TRANSPORT_PAUSE_S;
    }
    return;
  }
  if (status == 429) {
    struct curl_header *h = NULL;
    char *end = NULL;
    double secs = -1;
    if (curl_easy_header(c->easy, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK) {
      secs = strtod(h->value, &end);
      if (end == h->value || *end || secs < 0) secs = -1;
    }
    if (secs < 0) return lg_error(r, c, "HTTP 429 without a Retry-After: SECONDS header");
    k->n429++;
    c->resume_at = now - r->t_start + fmin(secs, LG_MAX_RETRY_PAUSE_S);
    return;
  }
  if (status != 200) return lg_error_answer(r, c, status);

  const char *text = NULL;
  size_t len = 0;
  int64_t tokens = 0, prompt_tokens = -1;
  double ttft = -1;
  json_t *j = NULL;
  if (c->stream) {
    lg_sse_t *s = &c->sse;
    if (!c->sse_mode) {
      char *ct = NULL;
      curl_easy_getinfo(c->easy, CURLINFO_CONTENT_TYPE, &ct);
      return lg_error(r, c, "stream answer with Content-Type '%s', not text/event-stream",
                      ct ? ct : "(none)");
    }
    sse_end(s);
    if (s->error) return lg_error(r, c, "malformed event stream: %s", s->error);
    text = s->text.p ? s->text.p : "";
    len = s->text.n;
    tokens = s->usage_completion >= 0 ? s->usage_completion : s->text_chunks;
    prompt_tokens = s->usage_prompt;
    if (s->text_chunks) ttft = s->t_first - c->t0;
    for (size_t i = 0; i < s->itl.n; i++) vec_add(&k->itl, s->itl.v[i]);
  } else {
    json_error_t je;
    const char *fr = NULL, *why = NULL;
    j = c->raw.p ? json_loadb(c->raw.p, c->raw.n, 0, &je) : NULL;
    json_t *obj = json_object_get(j, "object"), *model = json_object_get(j, "model");
    if (!j) why = "the body is not JSON";
    else if (!json_is_string(obj) || strcmp(json_string_value(obj), "text_completion"))
      why = "\"object\" is not \"text_completion\"";
    else if (!json_is_string(model) || strcmp(json_string_value(model), o->model))
      why = "\"model\" is not the model asked for";
    else if ((why = lg_choice(j, &text, &len, &fr))) {
    } else if (!fr) why = "choices[0].finish_reason is null";
    else if (!lg_usage(json_object_get(j, "usage"), &prompt_tokens, &tokens))
      why = "\"usage\" lacks non-negative prompt_tokens and completion_tokens";
    if (why) {
      lg_error(r, c, "malformed completion: %s", why);
      json_decref(j);
      return;
    }
    ttft = now - c->t0;
  }
  k->ok++;
  k->tokens += tokens;
  vec_add(&k->lat, now - c->t0);
  if (ttft >= 0) vec_add(&k->ttft, ttft);
  lg_check_answer(r, c, cls, text, len, prompt_tokens);
  json_decref(j);
}

/* ---- the loop ------------------------------------------------------------ */

static void lg_reap(lg_run_t *r) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(r->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL *e = m->easy_handle;
    CURLcode res = m->data.result;
    if (e == r->sampler.easy) {
      lg_sampler_done(r, res);
    } else {
      lg_client_t *c = NULL;
      curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&c);
      lg_client_done(r, c, res);
    }
  }
}

/* Milliseconds to wait: until the next thing that is due, at most 100. */
static int lg_wait_ms(const lg_run_t *r, double t) {
  double next = t + 0.1;
  const lg_opts_t *o = r->o;
  if (r->sampler.csv && !r->sampler.busy) next = fmin(next, r->sampler.next);
  if (o->duration > 0 && t < o->duration) next = fmin(next, o->duration);
  double end = 0;
  for (size_t i = 0; i < o->n_phases; i++) {
    end += o->phases[i].seconds;
    if (end > t) next = fmin(next, end);
  }
  int64_t active = lg_active(r, t);
  for (size_t i = 0; i < r->n_clients; i++) {
    if (r->clients[i].busy) continue;
    /* an idle client that may send now: no waiting */
    if ((int64_t)i < active && r->clients[i].resume_at <= t && lg_more(r, t)) return 0;
    if (r->clients[i].resume_at > t) next = fmin(next, r->clients[i].resume_at);
  }
  double ms = ceil((next - t) * 1000.0);
  return ms < 0 ? 0 : (int)ms;
}

static void lg_loop(lg_run_t *r) {
  struct curl_waitfd *wfds = lg_alloc((2 * r->n_checks + 1) * sizeof *wfds);
  for (;;) {
    double t = cli_now_s() - r->t_start;
    int64_t active = lg_active(r, t);
    for (size_t i = 0; i < r->n_clients && (int64_t)i < active; i++) {
      lg_client_t *c = &r->clients[i];
      if (!c->busy && t >= c->resume_at && lg_more(r, t)) lg_client_start(r, c);
    }
    bool traffic = r->in_flight > 0 || lg_more(r, t);
    if (traffic) lg_sampler_tick(r, t);
    int running = 0;
    curl_multi_perform(r->multi, &running);
    lg_reap(r);
    lg_check_pump(r);

    traffic = r->in_flight > 0 || lg_more(r, t);
    unsigned nw = 0;
    for (size_t i = 0; i < r->n_checks; i++)
      for (int k = 0; k < 2; k++)
        if (r->checks[i].state == LG_CHECK_RUNNING && r->checks[i].fd[k] >= 0)
          wfds[nw++] = (struct curl_waitfd){.fd = r->checks[i].fd[k], .events = CURL_WAIT_POLLIN};
    if (!traffic) {
      if (r->sampler.busy) {
        curl_multi_remove_handle(r->multi, r->sampler.easy);
        r->sampler.busy = false;
      }
      bool checking = false;
      for (size_t i = 0; i < r->n_checks; i++) checking |= r->checks[i].state == LG_CHECK_RUNNING;
      if (!checking) break;
    }
    curl_multi_poll(r->multi, wfds, nw, lg_wait_ms(r, t), NULL);
  }
  free(wfds);
}

/* ---- the report ---------------------------------------------------------- */

static void lg_print_row(const char *what, lg_vec_t *v) {
  if (!v->n) {
    printf("  %-8s %10s %10s\n", what, "-", "-");
    return;
  }
  printf("  %-8s %10.2f %10.2f\n", what, 1e3 * vec_pct(v, 50), 1e3 * vec_pct(v, 99));
}

static json_t *lg_pct_json(lg_vec_t *v) {
  json_t *o = json_object();
  json_object_set_new(o, "p50", v->n ? json_real(1e3 * vec_pct(v, 50)) : json_null());
  json_object_set_new(o, "p99", v->n ? json_real(1e3 * vec_pct(v, 99)) : json_null());
  json_object_set_new(o, "samples", json_integer((json_int_t)v->n));
  return o;
}

static json_t *lg_counts_json(json_t *o, int64_t req, int64_t ok, int64_t n429, int64_t errors,
                              int64_t mismatches, int64_t tokens, double secs) {
  json_object_set_new(o, "requests", json_integer(req));
  json_object_set_new(o, "ok", json_integer(ok));
  json_object_set_new(o, "rate_limited_429", json_integer(n429));
  json_object_set_new(o, "errors", json_integer(errors));
  json_object_set_new(o, "mismatches", json_integer(mismatches));
  json_object_set_new(o, "tokens", json_integer(tokens));
  json_object_set_new(o, "tok_s", json_real(secs > 0 ? (double)tokens / secs : 0.0));
  return o;
}

/* Prints the tables and the total line; writes --json. Returns the exit code. */
static int lg_report(lg_run_t *r) {
  const lg_opts_t *o = r->o;
  double secs = r->t_end > r->t_start ? r->t_end - r->t_start : 0;
  int64_t req = 0, ok = 0, n429 = 0, errors = r->check_failures, mism = 0, tokens = 0,
          checked = 0;
  json_t *root = json_object(), *classes = json_array();
  for (size_t i = 0; i < r->n_classes; i++) {
    lg_class_t *k = &r->classes[i];
    printf("class %s\n", k->name);
    printf("  requests %" PRId64 ", ok %" PRId64 ", 429 %" PRId64 ", errors %" PRId64
           ", mismatches %" PRId64 "\n",
           k->requests, k->ok, k->n429, k->errors, k->mismatches);
    printf("  tokens %" PRId64 ", %.1f tok/s aggregate\n", k->tokens,
           secs > 0 ? (double)k->tokens / secs : 0.0);
    printf("  %-8s %10s %10s\n", "ms", "p50", "p99");
    lg_print_row("TTFT", &k->ttft);
    lg_print_row("ITL", &k->itl);
    lg_print_row("latency", &k->lat);
    json_t *cj = lg_counts_json(json_object(), k->requests, k->ok, k->n429, k->errors,
                                k->mismatches, k->tokens, secs);
    json_object_set_new(cj, "class", json_string(k->name));
    json_object_set_new(cj, "checked", json_integer(k->checked));
    json_object_set_new(cj, "ttft_ms", lg_pct_json(&k->ttft));
    json_object_set_new(cj, "itl_ms", lg_pct_json(&k->itl));
    json_object_set_new(cj, "latency_ms", lg_pct_json(&k->lat));
    json_array_append_new(classes, cj);
    req += k->requests;
    ok += k->ok;
    n429 += k->n429;
    errors += k->errors;
    mism += k->mismatches;
    tokens += k->tokens;
    checked += k->checked;
  }
  if (r->checks)
    printf("loadgen: check-run: %" PRId64 " answers equal to `tessera run`, %" PRId64
           " unchecked, %" PRId64 " reference runs failed\n",
           checked, r->unchecked, r->check_failures);
  if (r->sampler.csv)
    printf("loadgen: timeline: %" PRId64 " samples, %" PRId64 " failed\n", r->sampler.rows,
           r->sampler.failures);
  printf("loadgen: %" PRId64 " requests, ok %" PRId64 ", 429 %" PRId64 ", errors %" PRId64
         ", mismatches %" PRId64 ", %" PRId64 " tokens in %.2f s = %.1f tok/s aggregate\n",
         req, ok, n429, errors, mism, tokens, secs, secs > 0 ? (double)tokens / secs : 0.0);
  int rc = errors || mism || (o->no429 && n429) ? 1 : 0;

  lg_counts_json(root, req, ok, n429, errors, mism, tokens, secs);
  json_object_set_new(root, "url", json_string(o->url));
  json_object_set_new(root, "model", json_string(o->model));
  json_object_set_new(root, "clients", json_integer(o->clients));
  json_object_set_new(root, "seconds", json_real(secs));
  if (r->checks) {
    json_object_set_new(root, "checked", json_integer(checked));
    json_object_set_new(root, "unchecked", json_integer(r->unchecked));
    json_object_set_new(root, "check_failures", json_integer(r->check_failures));
  }
  json_object_set_new(root, "classes", classes);
  json_object_set_new(root, "exit", json_integer(rc));
  if (o->json_path && json_dump_file(root, o->json_path, JSON_INDENT(2) | JSON_SORT_KEYS)) {
    fprintf(stderr, "tessera " LG_CMD ": --json: cannot write %s: %s\n", o->json_path,
            strerror(errno));
    rc = 1;
  }
  json_decref(root);
  return rc;
}

/* ---- setup and teardown -------------------------------------------------- */

static char *lg_join(const char *base, const char *path) {
  size_t n = strlen(base);
  while (n && base[n - 1] == '/') n--;
  lg_buf_t b = {0};
  buf_add(&b, base, n);
  buf_add(&b, path, strlen(path));
  return b.p;
}

/* Everything but the loop; returns 0, or the exit code of a failure. */
static int lg_setup(lg_run_t *r, const lg_opts_t *o) {
  r->o = o;
  r->completions_url = lg_join(o->url, "/v1/completions");
  r->metrics_url = lg_join(o->url, "/metrics");

  /* classes in order of first mention; tenants to clients by smooth weighted
   * round robin, so weights 3:1 give A A B A */
  r->classes = lg_alloc((o->n_tenants ? o->n_tenants : 1) * sizeof *r->classes);
  if (!o->n_tenants) r->classes[r->n_classes++].name = "default";
  for (size_t i = 0; i < o->n_tenants; i++) {
    size_t k = 0;
    while (k < r->n_classes && strcmp(r->classes[k].name, o->tenants[i].cls)) k++;
    if (k == r->n_classes) r->classes[r->n_classes++].name = o->tenants[i].cls;
    o->tenants[i].cls_idx = k;
  }
  r->n_clients = (size_t)o->clients;
  r->clients = lg_alloc(r->n_clients * sizeof *r->clients);
  int64_t *cur = lg_alloc((o->n_tenants ? o->n_tenants : 1) * sizeof *cur), total = 0;
  for (size_t t = 0; t < o->n_tenants; t++) total += o->tenants[t].weight;
  bool ok = true;
  for (size_t c = 0; c < r->n_clients; c++) {
    size_t best = 0;
    for (size_t t = 0; t < o->n_tenants; t++) {
      cur[t] += o->tenants[t].weight;
      if (cur[t] > cur[best]) best = t;
    }
    if (o->n_tenants) cur[best] -= total;
    ok = ok && lg_client_init(r, &r->clients[c], c, best);
  }
  free(cur);
  if (!ok || !(r->multi = curl_multi_init())) {
    fprintf(stderr, "tessera " LG_CMD ": cannot create the HTTP client handles\n");
    return 1;
  }

  if (o->check_args) {
    ssize_t n = readlink("/proc/self/exe", r->exe, sizeof r->exe - 1);
    if (n <= 0) {
      fprintf(stderr, "tessera " LG_CMD ": --check-run: cannot find this executable: %s\n",
              strerror(errno));
      return 1;
    }
    r->exe[n] = '\0';
    size_t nf;
    char **f = lg_split(o->check_args, ' ', &nf);
    r->run_args = lg_alloc(nf * sizeof *r->run_args);
    for (size_t i = 0; i < nf; i++) {
      if (f[i][0]) r->run_args[r->n_run_args++] = f[i];
      else free(f[i]);
    }
    free(f);
    r->n_checks = o->n_prompts * o->n_max;
    r->checks = lg_alloc(r->n_checks * sizeof *r->checks);
    for (size_t i = 0; i < r->n_checks; i++) {
      r->checks[i].prompt = i / o->n_max;
      r->checks[i].max_tokens = o->max_tokens[i % o->n_max];
      r->checks[i].fd[0] = r->checks[i].fd[1] = -1;
    }
  }

  if (o->timeline_path) {
    lg_sampler_t *s = &r->sampler;
    if (!(s->csv = fopen(o->timeline_path, "w"))) {
      fprintf(stderr, "tessera " LG_CMD ": --timeline: cannot write %s: %s\n",
              o->timeline_path, strerror(errno));
      return 2;
    }
    fprintf(s->csv, "t_s,clients,load,pool_devices,queue_depth,running,scale_up,scale_down\n");
    if (!(s->easy = curl_easy_init())) return 1;
    if (o->metrics_key) {
      lg_buf_t h = {0};
      buf_add(&h, "Authorization: Bearer ", 22);
      buf_add(&h, o->metrics_key, strlen(o->metrics_key));
      s->hdrs = curl_slist_append(NULL, h.p);
      free(h.p);
      curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->hdrs);
    }
    curl_easy_setopt(s->easy, CURLOPT_URL, r->metrics_url);
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, lg_on_metrics);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, &s->body);
    curl_easy_setopt(s->easy, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, (long)LG_SAMPLER_TIMEOUT_MS);
    curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
  }
  return 0;
}

static void lg_teardown(lg_run_t *r) {
  for (size_t i = 0; i < r->n_clients; i++) {
    lg_client_t *c = &r->clients[i];
    if (c->busy) curl_multi_remove_handle(r->multi, c->easy);
    curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->hdrs);
    free(c->body);
    free(c->raw.p);
    sse_free(&c->sse);
  }
  free(r->clients);
  lg_sampler_t *s = &r->sampler;
  if (s->easy) {
    if (s->busy) curl_multi_remove_handle(r->multi, s->easy);
    curl_easy_cleanup(s->easy);
  }
  curl_slist_free_all(s->hdrs);
  free(s->body.p);
  if (s->csv && fclose(s->csv))
    fprintf(stderr, "tessera " LG_CMD ": --timeline: write error: %s\n", strerror(errno));
  if (r->multi) curl_multi_cleanup(r->multi);
  for (size_t i = 0; i < r->n_checks; i++) {
    lg_check_t *ck = &r->checks[i];
    free(ck->expected);
    free(ck->out[0].p);
    free(ck->out[1].p);
    for (size_t p = 0; p < ck->n_pending; p++) free(ck->pending[p].text);
    free(ck->pending);
  }
  free(r->checks);
  for (size_t i = 0; i < r->n_run_args; i++) free(r->run_args[i]);
  free(r->run_args);
  for (size_t i = 0; i < r->n_classes; i++) {
    free(r->classes[i].ttft.v);
    free(r->classes[i].itl.v);
    free(r->classes[i].lat.v);
  }
  free(r->classes);
  free(r->completions_url);
  free(r->metrics_url);
}

int tsr_cmd_loadgen(int argc, char **argv) {
  lg_opts_t o;
  int rc = lg_parse(argc, argv, &o);
  if (rc) {
    lg_opts_free(&o);
    return rc < 0 ? 0 : rc;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
    fprintf(stderr, "tessera " LG_CMD ": libcurl initialization failed\n");
    lg_opts_free(&o);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  lg_run_t r;
  memset(&r, 0, sizeof r);
  rc = lg_setup(&r, &o);
  if (!rc) {
    r.t_start = r.t_end = cli_now_s();
    lg_loop(&r);
    rc = lg_report(&r);
  }
  lg_teardown(&r);
  curl_global_cleanup();
  lg_opts_free(&o);
  return rc;
}
