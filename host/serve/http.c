/*
 * http.c - the HTTP side: libmicrohttpd's polling thread.
 *
 * Endpoints (host/serve/README.md):
 *   POST /v1/completions   OpenAI-compatible; whole JSON, or Server-Sent
 *                          Events with "stream": true
 *   GET  /v1/models        the models served
 *   GET  /health           200 while serving, 503 while draining
 *   GET  /metrics          Prometheus text; the admin key sees everything, a
 *                          tenant's key only that tenant's series
 * With a tenants file every /v1 request needs `Authorization: Bearer KEY`.
 *
 * A completion is validated here (every field, the prompt's length against
 * the context, the tenant's quotas), then queued for the scheduler. A whole
 * answer waits as a suspended connection until the scheduler ends the
 * request; a stream's content reader turns each new token into an event
 * and suspends itself when it has nothing to send. Text is sent as the
 * tokenizer's bytes, except that JSON carries only UTF-8: an incomplete
 * sequence waits for the next token, a byte that cannot be UTF-8 becomes
 * U+FFFD.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../cli/cli.h"
#include "serve.h"

/* Per connection: the body as it arrives, then the request it became. */
typedef struct conn_ctx {
  char *body;
  size_t len, cap;
  bool too_large;
  srv_req_t *req;  /* a queued completion (one reference) */
  srv_tenant_t *tenant;
  int status;      /* the HTTP status answered, for the metrics */
} conn_ctx_t;

/* ---- requests ---- */

void srv_req_notify(srv_t *s, srv_req_t *r) {
  (void)s;
  if (!r->stream && r->state != SRV_DONE) return;
  if (r->conn && r->suspended) {
    r->suspended = false;
    MHD_resume_connection(r->conn);
  }
}

/* ---- UTF-8 ---- */

/* Length of the UTF-8 sequence starting at p[0..n) if it is complete and
 * valid, 0 if it is invalid, -1 if it is a valid start cut short by n. */
static int utf8_seq(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  int len;
  uint32_t min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) len = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) len = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, min = 0x10000;
  else return 0;
  uint32_t cp = c & (0x3f >> (len - 1));
  for (int i = 1; i < len; i++) {
    if ((size_t)i >= n) return -1;
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

/* A JSON string of p[0..n) as UTF-8; *used receives the bytes consumed (an
 * incomplete sequence at the end is left unless `final`). */
static json_t *json_text(const char *p, size_t n, bool final, size_t *used) {
  char *o = malloc(n * 3 + 1);
  if (!o) return NULL;
  size_t i = 0, k = 0;
  while (i < n) {
    int l = utf8_seq((const unsigned char *)p + i, n - i);
    if (l < 0 && !final) break;
    if (l <= 0) { /* U+FFFD */
      o[k++] = (char)0xef, o[k++] = (char)0xbf, o[k++] = (char)0xbd;
      i++;
      continue;
    }
    memcpy(o + k, p + i, (size_t)l);
    k += (size_t)l;
    i += (size_t)l;
  }
  if (used) *used = i;
  json_t *j = json_stringn(o, k);
  free(o);
  return j;
}

/* ---- answers ---- */

static enum MHD_Result send_text(struct MHD_Connection *c, int status, char *text, size_t len,
                                 const char *type, int retry_after) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (retry_after > 0) {
    char v[32];
    snprintf(v, sizeof v, "%d", retry_after);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
  }
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(resp, "Allow", "GET, POST");
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn_ctx_t *cc, int status,
                                 json_t *j, int retry_after) {
  char *text = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (!text) return MHD_NO;
  size_t len = strlen(text);
  /* a newline ends the body, as curl users expect */
  char *t2 = realloc(text, len + 2);
  if (!t2) {
    free(text);
    return MHD_NO;
  }
  t2[len++] = '\n';
  t2[len] = '\0';
  if (cc) cc->status = status;
  return send_text(c, status, t2, len, "application/json", retry_after);
}

static const char *error_type(int status) {
  switch (status) {
    case 400: case 404: case 405: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 503: return "unavailable_error";
    default: return "server_error";
  }
}

static json_t *error_json(int status, const char *param, const char *code, const char *msg) {
  return json_pack("{s:{s:s,s:s,s:s?,s:s?}}", "error", "message", msg, "type",
                   error_type(status), "param", param, "code", code);
}

static enum MHD_Result send_error(struct MHD_Connection *c, conn_ctx_t *cc, int status,
                                  const char *param, const char *code, int retry_after,
                                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static enum MHD_Result send_error(struct MHD_Connection *c, conn_ctx_t *cc, int status,
                                  const char *param, const char *code, int retry_after,
                                  const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *j = error_json(status, param, code, msg);
  if (!j) return MHD_NO;
  return send_json(c, cc, status, j, retry_after);
}

/* ---- authentication ---- */

static const char *bearer(struct MHD_Connection *c) {
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncasecmp(h, "Bearer ", 7)) return NULL;
  h += 7;
  while (*h == ' ') h++;
  return *h ? h : NULL;
}

/* ---- completions ---- */

static int64_t now_unix(void) { return (int64_t)time(NULL); }

/* The completion object of r with choices[0].text = `text` (stolen); a
 * stream's token events (final false) have finish_reason null and no
 * usage. */
static json_t *completion_json(const srv_req_t *r, json_t *text, bool final) {
  char id[48];
  snprintf(id, sizeof id, "cmpl-%" PRIu64, r->id);
  if (!final)
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:n}]}", "id", id, "object",
                     "text_completion", "created", (json_int_t)now_unix(), "model",
                     r->model->name, "choices", "index", 0, "text", text, "logprobs",
                     "finish_reason");
  return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:s}],s:{s:i,s:i,s:i}}", "id", id,
                   "object", "text_completion", "created", (json_int_t)now_unix(), "model",
                   r->model->name, "choices", "index", 0, "text", text, "logprobs",
                   "finish_reason", r->finish ? r->finish : "stop", "usage", "prompt_tokens",
                   (int)r->n_prompt, "completion_tokens", r->generated, "total_tokens",
                   (int)r->n_prompt + r->generated);
}

/* (L) Appends "data: JSON\n\n" (ev consumed; NULL appends nothing) to the
 * stream's pending bytes; false when out of memory. */
static bool put_event(srv_req_t *r, json_t *ev) {
  char *d = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
  json_decref(ev);
  if (!d) return false;
  size_t dl = strlen(d);
  char *o = realloc(r->out, r->out_len + dl + 9); /* "data: " "\n\n" NUL */
  if (o) {
    r->out = o;
    r->out_len += (size_t)sprintf(r->out + r->out_len, "data: %s\n\n", d);
  }
  free(d);
  return o != NULL;
}

/* The stream's reader: events for the tokens so far, then [DONE]. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  srv_req_t *r = cls;
  srv_t *s = r->srv;
  pthread_mutex_lock(&s->lock);
  if (r->out_off == r->out_len) {
    r->out_off = r->out_len = 0;
    /* render what is new */
    while (r->marks_sent < r->n_marks) {
      size_t end = r->marks[r->marks_sent];
      bool last_text = r->state == SRV_DONE && r->marks_sent == r->n_marks - 1;
      size_t used = 0;
      json_t *txt = json_text(r->text.p + r->sent, end - r->sent, last_text, &used);
      r->marks_sent++;
      r->sent += used;
      if (!txt || !put_event(r, completion_json(r, txt, false))) break;
    }
    if (r->state == SRV_DONE && r->marks_sent == r->n_marks && !r->stream_done) {
      json_t *ev;
      if (r->error) {
        ev = error_json(r->error_status ? r->error_status : 500, NULL, NULL, r->error);
      } else {
        size_t used = 0;
        json_t *rest = json_text(r->text.p + r->sent, r->text.len - r->sent, true, &used);
        r->sent += used;
        ev = completion_json(r, rest, true);
      }
      put_event(r, ev);
      char *o = realloc(r->out, r->out_len + 16);
      if (o) {
        r->out = o;
        r->out_len += (size_t)sprintf(r->out + r->out_len, "data: [DONE]\n\n");
      }
      r->stream_done = true;
    }
  }
  ssize_t n;
  if (r->out_off < r->out_len) {
    size_t k = r->out_len - r->out_off;
    if (k > max) k = max;
    memcpy(buf, r->out + r->out_off, k);
    r->out_off += k;
    n = (ssize_t)k;
  } else if (r->stream_done) {
    n = MHD_CONTENT_READER_END_OF_STREAM;
  } else {
    /* nothing yet: wait for the scheduler's news */
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    n = 0;
  }
  pthread_mutex_unlock(&s->lock);
  return n;
}

static void stream_free(void *cls) {
  srv_req_t *r = cls;
  srv_t *s = r->srv;
  pthread_mutex_lock(&s->lock);
  srv_req_unref(s, r);
  pthread_mutex_unlock(&s->lock);
}

/* The whole answer of a finished request. */
static enum MHD_Result answer(srv_t *s, struct MHD_Connection *c, conn_ctx_t *cc) {
  srv_req_t *r = cc->req;
  pthread_mutex_lock(&s->lock);
  json_t *j;
  int status = 200;
  if (r->error) {
    status = r->error_status ? r->error_status : 500;
    j = error_json(status, NULL, NULL, r->error);
  } else {
    j = completion_json(r, json_text(r->text.p ? r->text.p : "", r->text.len, true, NULL), true);
  }
  pthread_mutex_unlock(&s->lock);
  if (!j) return MHD_NO;
  return send_json(c, cc, status, j, 0);
}

static enum MHD_Result completions(srv_t *s, struct MHD_Connection *c, conn_ctx_t *cc,
                                   srv_tenant_t *tenant) {
  enum MHD_Result ret;
  srv_error_t err;
  srv_req_t *r = NULL;
  if (!srv_completion_parse(s, tenant, cc->body, cc->len, &r, &err))
    return send_error(c, cc, err.status, err.param[0] ? err.param : NULL, err.code, 0, "%s",
                      err.message);
  bool stream = r->stream;

  pthread_mutex_lock(&s->lock);
  if (s->stopping) {
    pthread_mutex_unlock(&s->lock);
    ret = send_error(c, cc, 503, NULL, "shutting_down", 5, "the server is shutting down");
    goto out;
  }
  int retry = 0;
  const char *why = NULL;
  if (!srv_quota_take(s, tenant, r->charged, &retry, &why)) {
    pthread_mutex_unlock(&s->lock);
    if (!strcmp(why, "max_concurrent"))
      ret = send_error(c, cc, 429, NULL, "rate_limit_exceeded", retry,
                       "tenant '%s': %d requests already queued or running (max_concurrent)",
                       tenant->name, tenant->max_concurrent);
    else
      ret = send_error(c, cc, 429, NULL, "rate_limit_exceeded", retry,
                       "tenant '%s': %" PRId64 " tokens needed, over tokens_per_minute %" PRId64
                       "; retry in %d s",
                       tenant->name, r->charged, tenant->tokens_per_minute, retry);
    goto out;
  }
  r->conn = c;
  s->live_conns++;
  srv_sched_submit(s, r);
  cc->req = r;
  r = NULL;
  if (!stream) {
    cc->req->suspended = true;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&s->lock);
    ret = MHD_YES;
    goto out;
  }
  cc->req->refs++; /* the reader's */
  pthread_mutex_unlock(&s->lock);
  struct MHD_Response *resp =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, cc->req, stream_free);
  if (!resp) {
    stream_free(cc->req);
    ret = MHD_NO;
    goto out;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  cc->status = 200;
  ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
out:
  if (r) {
    pthread_mutex_lock(&s->lock);
    srv_req_unref(s, r);
    pthread_mutex_unlock(&s->lock);
  }
  return ret;
}

/* ---- routing ---- */

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls) {
  (void)version;
  srv_t *s = cls;
  conn_ctx_t *cc = *con_cls;
  if (!cc) {
    cc = calloc(1, sizeof *cc);
    if (!cc) return MHD_NO;
    *con_cls = cc;
    return MHD_YES;
  }
  if (*upload_size) {
    if (!cc->too_large) {
      if (cc->len + *upload_size > s->opt.max_body) {
        cc->too_large = true;
      } else {
        if (cc->len + *upload_size + 1 > cc->cap) {
          size_t cap = (cc->len + *upload_size + 1) * 2;
          char *b = realloc(cc->body, cap);
          if (!b) return MHD_NO;
          cc->body = b;
          cc->cap = cap;
        }
        memcpy(cc->body + cc->len, upload, *upload_size);
        cc->len += *upload_size;
      }
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (cc->req) return answer(s, c, cc); /* resumed: the request is done */

  bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
  const char *key = bearer(c);
  if (!strcmp(url, "/health")) {
    if (!get) return send_error(c, cc, 405, NULL, NULL, 0, "/health: use GET");
    pthread_mutex_lock(&s->lock);
    bool stopping = s->stopping;
    int running = s->n_running, waiting = s->n_waiting;
    pthread_mutex_unlock(&s->lock);
    json_t *j = json_pack("{s:s,s:i,s:i,s:i}", "status", stopping ? "shutting down" : "ok",
                          "models", s->n_models, "running", running, "waiting", waiting);
    return send_json(c, cc, stopping ? 503 : 200, j, 0);
  }
  if (!strcmp(url, "/metrics")) {
    if (!get) return send_error(c, cc, 405, NULL, NULL, 0, "/metrics: use GET");
    const srv_tenant_t *only = NULL;
    if (!srv_key_equal(s->admin_key, key)) {
      if (s->open_mode) {
        if (s->admin_key)
          return send_error(c, cc, 401, NULL, "invalid_api_key", 0,
                            "/metrics needs the admin key (Authorization: Bearer KEY)");
      } else {
        only = srv_tenant_by_key(s, key);
        if (!only)
          return send_error(c, cc, 401, NULL, "invalid_api_key", 0,
                            "/metrics needs a tenant's or the admin key (Authorization: Bearer KEY)");
      }
    }
    pthread_mutex_lock(&s->lock);
    size_t len = 0;
    char *text = srv_metrics_render(s, only, &len);
    pthread_mutex_unlock(&s->lock);
    if (!text) return send_error(c, cc, 500, NULL, NULL, 0, "out of memory for the metrics");
    cc->status = 200;
    return send_text(c, 200, text, len, "text/plain; version=0.0.4; charset=utf-8", 0);
  }
  bool v1 = !strncmp(url, "/v1/", 4);
  if (!v1) return send_error(c, cc, 404, NULL, "not_found", 0, "no endpoint %s %s", method, url);
  srv_tenant_t *tenant = srv_tenant_by_key(s, key);
  if (!tenant)
    return send_error(c, cc, 401, NULL, "invalid_api_key", 0,
                      key ? "the API key is not known" : "an API key is required (Authorization: Bearer KEY)");
  cc->tenant = tenant;
  if (!strcmp(url, "/v1/models")) {
    if (!get) return send_error(c, cc, 405, NULL, NULL, 0, "/v1/models: use GET");
    json_t *data = json_array();
    for (int i = 0; i < s->n_models; i++)
      json_array_append_new(data, json_pack("{s:s,s:s,s:s,s:i,s:i}", "id", s->models[i].name,
                                            "object", "model", "owned_by", "tessera",
                                            "context_length", s->models[i].cfg.seq_len,
                                            "vocab_size", s->models[i].cfg.vocab_size));
    return send_json(c, cc, 200, json_pack("{s:s,s:o}", "object", "list", "data", data), 0);
  }
  if (!strcmp(url, "/v1/completions")) {
    if (!post) return send_error(c, cc, 405, NULL, NULL, 0, "/v1/completions: use POST");
    if (cc->too_large)
      return send_error(c, cc, 413, NULL, "body_too_large", 0,
                        "the body exceeds %zu bytes (--max-body)", s->opt.max_body);
    return completions(s, c, cc, tenant);
  }
  return send_error(c, cc, 404, NULL, "not_found", 0, "no endpoint %s %s", method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)c;
  srv_t *s = cls;
  conn_ctx_t *cc = *con_cls;
  if (!cc) return;
  pthread_mutex_lock(&s->lock);
  if (cc->tenant && cc->status) {
    int status = cc->status;
    if (cc->req && (cc->req->state != SRV_DONE || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK))
      status = 499;
    else if (cc->req && cc->req->error)
      status = cc->req->error_status ? cc->req->error_status : 500;
    srv_metrics_request(s, cc->tenant, status);
  }
  if (cc->req) {
    srv_req_t *r = cc->req;
    if (r->state != SRV_DONE) r->cancelled = true;
    r->conn = NULL;
    r->suspended = false;
    s->live_conns--;
    pthread_cond_signal(&s->wake);
    srv_req_unref(s, r);
  }
  pthread_mutex_unlock(&s->lock);
  free(cc->body);
  free(cc);
  *con_cls = NULL;
}

bool srv_http_start(srv_t *s) {
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)s->opt.port);
  if (inet_pton(AF_INET, s->opt.host, &addr.sin_addr) != 1) {
    fprintf(stderr, "tessera serve: --host: '%s' is not an IPv4 address\n", s->opt.host);
    return false;
  }
  s->daemon = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
          MHD_USE_ERROR_LOG,
      (uint16_t)s->opt.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, &addr,
      MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)s->opt.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
      MHD_OPTION_END);
  if (!s->daemon) {
    fprintf(stderr, "tessera serve: cannot listen on %s:%d (in use, or not permitted)\n",
            s->opt.host, s->opt.port);
    return false;
  }
  if (s->opt.port == 0) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (di) s->opt.port = di->port;
  }
  return true;
}

void srv_http_stop(srv_t *s) {
  if (!s->daemon) return;
  /* let the last answers go out, then close */
  for (int i = 0; i < 100; i++) {
    pthread_mutex_lock(&s->lock);
    int live = s->live_conns;
    pthread_mutex_unlock(&s->lock);
    if (!live) break;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&s->lock);
  /* MHD must not stop with suspended connections */
  for (int i = 0; i < s->n_running; i++) srv_req_notify(s, s->running[i]);
  pthread_mutex_unlock(&s->lock);
  MHD_stop_daemon(s->daemon);
  s->daemon = NULL;
}
