/*
 * tenants.c - the tenants file, API keys and quotas.
 *
 * The file is JSON (host/serve/README.md documents it):
 *   {"admin_key": "KEY",                       optional: all of /metrics
 *    "tenants": [{"name": "acme", "key": "KEY", "class": "premium",
 *                 "priority": 0, "max_concurrent": 8,
 *                 "tokens_per_minute": 60000, "max_tokens": 256}, ...]}
 * name, key and class are required; the rest default to 0 (= no limit, and
 * priority 0). Unknown fields, wrong types, out-of-range values and
 * duplicate names or keys are errors naming the tenant and the field.
 *
 * Quotas: `max_concurrent` requests queued or running at once, and a token
 * bucket of `tokens_per_minute` (refilled continuously at a sixtieth of it
 * per second) charged prompt + max_tokens at admission, the unused part
 * given back when the request ends.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

const char *srv_class_name(srv_class_t c) {
  switch (c) {
    case SRV_PREMIUM: return "premium";
    case SRV_STANDARD: return "standard";
    case SRV_BATCH: return "batch";
    default: return "unknown";
  }
}

static bool parse_class(const char *s, srv_class_t *out) {
  for (int c = 0; c < SRV_CLASSES; c++)
    if (!strcmp(s, srv_class_name((srv_class_t)c))) {
      *out = (srv_class_t)c;
      return true;
    }
  return false;
}

#define TERR(...)                                 \
  do {                                            \
    fprintf(stderr, "tessera serve: %s: ", path); \
    fprintf(stderr, __VA_ARGS__);                 \
    fputc('\n', stderr);                          \
    goto fail;                                    \
  } while (0)

/* An integer field in [lo, hi], or `def` when absent. */
static bool int_field(json_t *o, const char *field, int64_t lo, int64_t hi, int64_t def,
                      int64_t *out) {
  json_t *v = json_object_get(o, field);
  if (!v) {
    *out = def;
    return true;
  }
  if (!json_is_integer(v)) return false;
  int64_t x = json_integer_value(v);
  if (x < lo || x > hi) return false;
  *out = x;
  return true;
}

bool srv_tenants_load(srv_t *s, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "tessera serve: %s: cannot open: %s\n", path, strerror(errno));
    return false;
  }
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  for (size_t n = 1; text && n > 0;) {
    if (len == cap) {
      char *t = cap < (64u << 20) ? realloc(text, cap * 2) : NULL;
      if (!t) {
        free(text);
        text = NULL;
        break;
      }
      text = t;
      cap *= 2;
    }
    n = fread(text + len, 1, cap - len, f);
    len += n;
  }
  bool io_error = ferror(f);
  fclose(f);
  if (!text || io_error) {
    fprintf(stderr, "tessera serve: %s: cannot read it (at most 64 MiB)\n", path);
    free(text);
    return false;
  }
  bool ok = srv_tenants_parse(s, text, len, path);
  free(text);
  return ok;
}

bool srv_tenants_parse(srv_t *s, const char *text, size_t len, const char *path) {
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    fprintf(stderr, "tessera serve: %s: line %d column %d: %s\n", path, jerr.line, jerr.column,
            jerr.text);
    return false;
  }
  const char *key;
  json_t *v;
  if (!json_is_object(root)) TERR("the top level must be an object");
  json_object_foreach(root, key, v) {
    if (strcmp(key, "tenants") && strcmp(key, "admin_key"))
      TERR("unknown field '%s' (tenants, admin_key)", key);
  }
  json_t *admin = json_object_get(root, "admin_key");
  if (admin) {
    if (!json_is_string(admin) || !json_string_length(admin))
      TERR("admin_key: must be a non-empty string");
    s->admin_key = strdup(json_string_value(admin));
  }
  json_t *arr = json_object_get(root, "tenants");
  if (!json_is_array(arr) || json_array_size(arr) == 0)
    TERR("tenants: must be a non-empty array");
  if (json_array_size(arr) > 64) TERR("tenants: at most 64 tenants (%zu given)", json_array_size(arr));
  s->n_tenants = (int)json_array_size(arr);
  s->tenants = calloc((size_t)s->n_tenants, sizeof(srv_tenant_t));
  if (!s->tenants) TERR("out of memory");
  for (int i = 0; i < s->n_tenants; i++) {
    json_t *o = json_array_get(arr, (size_t)i);
    srv_tenant_t *t = &s->tenants[i];
    t->index = i;
    if (!json_is_object(o)) TERR("tenants[%d]: must be an object", i);
    static const char *const known[] = {"name", "key", "class", "priority", "max_concurrent",
                                        "tokens_per_minute", "max_tokens"};
    json_object_foreach(o, key, v) {
      bool ok = false;
      for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) ok |= !strcmp(key, known[k]);
      if (!ok)
        TERR("tenants[%d]: unknown field '%s' (name, key, class, priority, max_concurrent, "
             "tokens_per_minute, max_tokens)",
             i, key);
    }
    json_t *name = json_object_get(o, "name"), *k = json_object_get(o, "key"),
           *cls = json_object_get(o, "class");
    if (!json_is_string(name) || !json_string_length(name))
      TERR("tenants[%d].name: required, a non-empty string", i);
    if (!json_is_string(k) || json_string_length(k) < 8)
      TERR("tenants[%d].key: required, a string of at least 8 characters", i);
    if (!json_is_string(cls) || !parse_class(json_string_value(cls), &t->cls))
      TERR("tenants[%d].class: required, one of premium, standard, batch", i);
    t->name = strdup(json_string_value(name));
    t->key = strdup(json_string_value(k));
    if (!t->name || !t->key) TERR("out of memory");
    for (const char *p = t->name; *p; p++)
      if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '_' || *p == '-' || *p == '.'))
        TERR("tenants[%d].name: '%s': only letters, digits, '_', '-' and '.'", i, t->name);
    int64_t x;
    if (!int_field(o, "priority", -1000, 1000, 0, &x))
      TERR("tenants[%d].priority: an integer in [-1000, 1000]", i);
    t->priority = (int)x;
    if (!int_field(o, "max_concurrent", 0, 100000, 0, &x))
      TERR("tenants[%d].max_concurrent: an integer in [0, 100000] (0 = no limit)", i);
    t->max_concurrent = (int)x;
    if (!int_field(o, "tokens_per_minute", 0, INT64_C(1) << 40, 0, &x))
      TERR("tenants[%d].tokens_per_minute: an integer >= 0 (0 = no limit)", i);
    t->tokens_per_minute = x;
    if (!int_field(o, "max_tokens", 0, 1 << 24, 0, &x))
      TERR("tenants[%d].max_tokens: an integer >= 0 (0 = the context)", i);
    t->max_tokens = (int)x;
    t->bucket = (double)t->tokens_per_minute;
    t->bucket_t = srv_now();
    for (int j = 0; j < i; j++) {
      if (!strcmp(s->tenants[j].name, t->name)) TERR("tenants[%d].name: '%s' repeats tenants[%d]", i, t->name, j);
      if (!strcmp(s->tenants[j].key, t->key)) TERR("tenants[%d].key: the key of tenants[%d] again", i, j);
    }
    if (s->admin_key && !strcmp(s->admin_key, t->key))
      TERR("tenants[%d].key: equals admin_key", i);
  }
  json_decref(root);
  return true;
fail:
  json_decref(root);
  srv_tenants_free(s);
  free(s->admin_key);
  s->admin_key = NULL;
  return false;
}

void srv_tenants_open_mode(srv_t *s) {
  s->open_mode = true;
  s->n_tenants = 1;
  s->tenants = calloc(1, sizeof(srv_tenant_t));
  if (!s->tenants) abort();
  s->tenants[0].name = strdup("default");
  s->tenants[0].cls = SRV_STANDARD;
  if (!s->tenants[0].name) abort();
}

bool srv_key_equal(const char *known, const char *given) {
  if (!known || !given) return false;
  /* every byte of the known key is compared whatever the first difference */
  size_t lk = strlen(known), lg = strlen(given);
  unsigned diff = (unsigned)(lk != lg);
  for (size_t i = 0; i < lk; i++)
    diff |= (unsigned char)known[i] ^ (unsigned char)(i < lg ? given[i] : 0);
  return !diff;
}

srv_tenant_t *srv_tenant_by_key(srv_t *s, const char *key) {
  if (s->open_mode) return &s->tenants[0];
  if (!key) return NULL;
  for (int i = 0; i < s->n_tenants; i++) {
    if (srv_key_equal(s->tenants[i].key, key)) return &s->tenants[i];
  }
  return NULL;
}

static void refill(srv_tenant_t *t, double now) {
  if (t->tokens_per_minute <= 0) return;
  double cap = (double)t->tokens_per_minute;
  t->bucket = fmin(cap, t->bucket + (now - t->bucket_t) * cap / 60.0);
  t->bucket_t = now;
}

bool srv_quota_take(srv_t *s, srv_tenant_t *t, int64_t cost, int *retry_after,
                    const char **reason) {
  (void)s;
  if (t->max_concurrent > 0 && t->active >= t->max_concurrent) {
    *retry_after = 1;
    *reason = "max_concurrent";
    return false;
  }
  if (t->tokens_per_minute > 0) {
    double now = srv_now();
    refill(t, now);
    if (t->bucket < (double)cost) {
      double need = (double)cost - t->bucket;
      *retry_after = (int)ceil(need * 60.0 / (double)t->tokens_per_minute);
      if (*retry_after < 1) *retry_after = 1;
      *reason = "tokens_per_minute";
      return false;
    }
    t->bucket -= (double)cost;
  }
  t->active++;
  return true;
}

void srv_quota_release(srv_t *s, srv_tenant_t *t, int64_t unused_tokens) {
  (void)s;
  t->active--;
  if (t->tokens_per_minute > 0 && unused_tokens > 0) {
    refill(t, srv_now());
    t->bucket = fmin((double)t->tokens_per_minute, t->bucket + (double)unused_tokens);
  }
}

void srv_tenants_free(srv_t *s) {
  for (int i = 0; i < s->n_tenants && s->tenants; i++) {
    free(s->tenants[i].name);
    free(s->tenants[i].key);
  }
  free(s->tenants);
  s->tenants = NULL;
  s->n_tenants = 0;
}
