/*
 * request.c - completion requests: the body parsed and checked into a
 * request, its text and its references.
 *
 * srv_completion_parse validates every field of a POST /v1/completions body
 * (types, ranges, the model, the prompt's length against the context, the
 * tenant's largest max_tokens and tokens_per_minute) and builds the request
 * (prompt tokens, sampler, echoed prompt); it touches nothing shared, so
 * it is also the entry point of the body's fuzz target. Quotas that depend on
 * the moment (concurrency, the token bucket) are the HTTP side's.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cli/cli.h"
#include "serve.h"

static bool fail(srv_error_t *err, int status, const char *param, const char *code,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static bool fail(srv_error_t *err, int status, const char *param, const char *code,
                 const char *fmt, ...) {
  err->status = status;
  snprintf(err->param, sizeof err->param, "%s", param ? param : "");
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return false;
}

void srv_req_unref(srv_t *s, srv_req_t *r) {
  (void)s;
  if (--r->refs > 0) return;
  tsr_sampler_destroy(r->sampler);
  free(r->prompt);
  cli_text_free(&r->text);
  free(r->marks);
  free(r->out);
  free(r->error);
  free(r);
}

bool srv_req_append(srv_req_t *r, const char *p, size_t n) {
  if (r->n_marks == r->cap_marks) {
    int cap = r->cap_marks ? r->cap_marks * 2 : 64;
    size_t *q = realloc(r->marks, sizeof(size_t) * (size_t)cap);
    if (!q) return false;
    r->marks = q;
    r->cap_marks = cap;
  }
  if (!cli_text_append(&r->text, p, n)) return false;
  r->marks[r->n_marks++] = r->text.len;
  return true;
}

/* OpenAI fields accepted with their neutral value only. */
static const char *const neutral_fields[] = {"frequency_penalty", "presence_penalty", "logprobs",
                                             "best_of", "n", "suffix", "stop", "user",
                                             "logit_bias", "stream_options"};

/* Whether an accepted-but-unsupported field has its neutral value. */
static bool neutral(const char *k, json_t *v) {
  if (json_is_null(v)) return true;
  if (!strcmp(k, "user")) return json_is_string(v);
  if (!strcmp(k, "frequency_penalty") || !strcmp(k, "presence_penalty"))
    return json_is_number(v) && json_number_value(v) == 0;
  if (!strcmp(k, "best_of") || !strcmp(k, "n"))
    return json_is_integer(v) && json_integer_value(v) == 1;
  if (!strcmp(k, "stop") || !strcmp(k, "logit_bias"))
    return (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
  if (!strcmp(k, "stream_options")) return json_is_object(v);
  if (!strcmp(k, "logprobs")) return json_is_false(v) || (json_is_integer(v) && !json_integer_value(v));
  return false;
}

bool srv_completion_parse(srv_t *s, srv_tenant_t *tenant, const char *text, size_t len,
                          srv_req_t **out, srv_error_t *err) {
  *out = NULL;
  memset(err, 0, sizeof *err);
  json_error_t jerr;
  json_t *body = json_loadb(text ? text : "", text ? len : 0, JSON_REJECT_DUPLICATES, &jerr);
  if (!body)
    return fail(err, 400, NULL, "invalid_json", "the body is not JSON: %s (line %d, column %d)",
                jerr.text, jerr.line, jerr.column);
  bool ok_ = false;
#define BAD(param, ...)                                  \
  do {                                                   \
    fail(err, 400, param, "invalid_value", __VA_ARGS__); \
    goto out;                                            \
  } while (0)
  srv_req_t *r = NULL;
  if (!json_is_object(body)) BAD(NULL, "the body must be a JSON object");
  const char *k;
  json_t *v;
  static const char *const known[] = {"model", "prompt", "max_tokens", "temperature", "top_p",
                                      "seed", "stream", "echo", "priority"};
  json_object_foreach(body, k, v) {
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= !strcmp(k, known[i]);
    if (ok) continue;
    bool acc = false;
    for (size_t i = 0; i < sizeof neutral_fields / sizeof neutral_fields[0]; i++)
      acc |= !strcmp(k, neutral_fields[i]);
    if (!acc) BAD(k, "unknown field '%s'", k);
    if (!neutral(k, v)) BAD(k, "'%s' is not supported (only its default value is accepted)", k);
  }
  /* model */
  srv_model_t *m = NULL;
  v = json_object_get(body, "model");
  if (v && !json_is_null(v)) {
    if (!json_is_string(v)) BAD("model", "model: must be a string");
    for (int i = 0; i < s->n_models; i++)
      if (!strcmp(s->models[i].name, json_string_value(v))) m = &s->models[i];
    if (!m) {
      fail(err, 404, "model", "model_not_found",
           "model '%s' is not served here (GET /v1/models lists them)", json_string_value(v));
      goto out;
    }
  } else if (s->n_models == 1) {
    m = &s->models[0];
  } else {
    BAD("model", "model: required when several models are served");
  }
  /* prompt: a string, or an array of one string */
  v = json_object_get(body, "prompt");
  const char *prompt = "";
  if (json_is_array(v) && json_array_size(v) == 1) v = json_array_get(v, 0);
  if (v && !json_is_null(v)) {
    if (!json_is_string(v)) BAD("prompt", "prompt: must be a string (or an array of one string)");
    prompt = json_string_value(v);
    if (strlen(prompt) != json_string_length(v)) BAD("prompt", "prompt: contains a NUL character");
  }
  int64_t max_tokens = 16;
  v = json_object_get(body, "max_tokens");
  if (v && !json_is_null(v)) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 24))
      BAD("max_tokens", "max_tokens: an integer >= 1");
    max_tokens = json_integer_value(v);
  }
  double temperature = 1.0, top_p = 1.0;
  v = json_object_get(body, "temperature");
  if (v && !json_is_null(v)) {
    if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 100)
      BAD("temperature", "temperature: a number in [0, 100]");
    temperature = json_number_value(v);
  }
  v = json_object_get(body, "top_p");
  if (v && !json_is_null(v)) {
    if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1)
      BAD("top_p", "top_p: a number in (0, 1]");
    top_p = json_number_value(v);
  }
  uint64_t seed = 0;
  bool have_seed = false;
  v = json_object_get(body, "seed");
  if (v && !json_is_null(v)) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) BAD("seed", "seed: an integer >= 0");
    seed = (uint64_t)json_integer_value(v);
    have_seed = true;
  }
  bool stream = false, echo = false;
  v = json_object_get(body, "stream");
  if (v && !json_is_null(v)) {
    if (!json_is_boolean(v)) BAD("stream", "stream: must be true or false");
    stream = json_is_true(v);
  }
  v = json_object_get(body, "echo");
  if (v && !json_is_null(v)) {
    if (!json_is_boolean(v)) BAD("echo", "echo: must be true or false");
    echo = json_is_true(v);
  }
  int64_t priority = 0;
  v = json_object_get(body, "priority");
  if (v && !json_is_null(v)) {
    if (!json_is_integer(v) || json_integer_value(v) < -1000 || json_integer_value(v) > 1000)
      BAD("priority", "priority: an integer in [-1000, 1000] (lower runs first)");
    priority = json_integer_value(v);
  }
  if (tenant->max_tokens > 0 && max_tokens > tenant->max_tokens)
    BAD("max_tokens", "max_tokens: %" PRId64 " exceeds the tenant's maximum of %d", max_tokens,
        tenant->max_tokens);

  r = calloc(1, sizeof *r);
  if (!r) {
    fail(err, 500, NULL, NULL, "out of memory");
    goto out;
  }
  r->srv = s;
  r->refs = 1;
  r->tenant = tenant;
  r->model = m;
  r->engine = tenant->index;
  size_t cap = strlen(prompt) + 3;
  r->prompt = malloc(sizeof(int32_t) * cap);
  if (!r->prompt) {
    fail(err, 500, NULL, NULL, "out of memory for the prompt's tokens");
    goto out;
  }
  tsr_status_t st = tsr_model_tokenize(m->model, prompt, true, false, r->prompt, cap, &r->n_prompt);
  if (st) {
    fail(err, 400, "prompt", "invalid_value", "prompt: %s", tsr_status_message(st));
    tsr_status_free(st);
    goto out;
  }
  int32_t ctx_len = m->cfg.seq_len;
  if ((int64_t)r->n_prompt > ctx_len)
    BAD("prompt", "prompt: %zu tokens (BOS included) do not fit the context of model '%s' (%d)",
        r->n_prompt, m->name, ctx_len);
  /* as `tessera run -n` capped at the context: the last token sampled is at
   * position seq_len */
  int64_t room = (int64_t)ctx_len - (int64_t)r->n_prompt + 1;
  r->max_tokens = (int)(max_tokens < room ? max_tokens : room);
  r->temperature = (float)temperature;
  r->top_p = (float)top_p;
  r->priority = (int)priority;
  r->stream = stream;
  r->echo = echo;
  r->last_token = r->prompt[r->n_prompt - 1];
  r->t_arrival = srv_now();
  if (!have_seed) seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)r;
  r->seed = seed;
  st = tsr_sampler_create(m->cfg.vocab_size, r->temperature, r->top_p, seed, &r->sampler);
  if (st) {
    fail(err, 400, NULL, "invalid_value", "%s", tsr_status_message(st));
    tsr_status_free(st);
    goto out;
  }
  if (echo) {
    bool ok = true;
    for (size_t i = 1; i < r->n_prompt && ok; i++) {
      const char *p = tsr_model_token_piece(m->model, r->prompt[i - 1], r->prompt[i]);
      if (cli_piece_shown(p)) ok = srv_req_append(r, p, strlen(p));
    }
    if (ok && r->text.len) {
      /* one mark for the whole prompt */
      r->n_marks = 1;
      r->marks[0] = r->text.len;
    } else {
      r->n_marks = 0;
    }
    if (!ok) {
      fail(err, 500, NULL, NULL, "out of memory for the echoed prompt");
      goto out;
    }
  }
  r->charged = (int64_t)r->n_prompt + r->max_tokens;
  if (tenant->tokens_per_minute > 0 && r->charged > tenant->tokens_per_minute)
    BAD("max_tokens",
        "prompt (%zu tokens) + max_tokens (%d) exceed the tenant's tokens_per_minute (%" PRId64 ")",
        r->n_prompt, r->max_tokens, tenant->tokens_per_minute);
  *out = r;
  r = NULL;
  ok_ = true;
out:
  if (r) srv_req_unref(s, r);
  json_decref(body);
  return ok_;
#undef BAD
}
