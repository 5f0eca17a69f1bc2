/* context.c - the context: thread pool, int8 kernel choice, the devices. */
#include <cblas.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/threadpool.h"
#include "dist.h"
#include "internal.h"
#include "trace.h"

void tsr_context_options_init(tsr_context_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->n_threads = 0;
  o->devices = NULL;
  o->fallback = true;
  o->retries = 1;
  o->device_timeout_ms = 10000;
  o->offload = TSR_OFFLOAD_AUTO;
  o->mpi_timeout_ms = 60000;
}

void tsr_ctx_warn(const tsr_context_t *ctx, const char *fmt, ...) {
  if (ctx && ctx->opts.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("tessera: warning: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* True if `tok` (up to `len` bytes) starts a new device entry: "cpu" (the
 * host) or a HAL backend name ("fmodel", "sim", ...), optionally followed
 * by ":options". */
static bool starts_entry(const char *tok, size_t len) {
  size_t n = 0;
  while (n < len && tok[n] != ':') n++;
  char name[32];
  if (n == 0 || n >= sizeof name) return false;
  memcpy(name, tok, n);
  name[n] = '\0';
  return !strcmp(name, "cpu") || tsr_hal_find(name) != NULL;
}

/* Splits the device list into entries. Commas separate entries and also the
 * options of one entry ("sim:latency=80,bw=32,sim"): a piece that does not
 * start with a device name continues the previous entry's options. */
static tsr_status_t split_devices(tsr_context_t *ctx) {
  const char *list = ctx->devices;
  int cap = 1;
  for (const char *p = list; *p; p++) cap += *p == ',';
  ctx->devs = calloc((size_t)cap, sizeof(tsr_ctx_device_t));
  if (!ctx->devs) return TSR_ERR(RESOURCE_EXHAUSTED, "devices: %d entries", cap);
  for (const char *p = list;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (starts_entry(p, len)) {
      /* The host has no options: "cpu:x" would become a device entry that
       * no backend opens, silently running on the host. */
      if (len > 3 && !strncmp(p, "cpu:", 4))
        return TSR_ERR(INVALID_ARGUMENT,
                       "devices: entry '%.*s' at offset %zu of '%s': cpu takes no options",
                       (int)len, p, (size_t)(p - list), list);
      tsr_ctx_device_t *d = &ctx->devs[ctx->n_devs++];
      pthread_mutex_init(&d->lock, NULL);
      if (len >= sizeof d->spec)
        return TSR_ERR(INVALID_ARGUMENT, "devices: entry at offset %zu of '%s' is too long",
                       (size_t)(p - list), list);
      memcpy(d->spec, p, len);
    } else if (ctx->n_devs > 0 && len > 0 && strchr(ctx->devs[ctx->n_devs - 1].spec, ':')) {
      tsr_ctx_device_t *d = &ctx->devs[ctx->n_devs - 1];
      size_t have = strlen(d->spec);
      if (have + 1 + len >= sizeof d->spec)
        return TSR_ERR(INVALID_ARGUMENT, "devices: options of '%s' are too long", d->spec);
      d->spec[have] = ',';
      memcpy(d->spec + have + 1, p, len);
    } else {
      return TSR_ERR(INVALID_ARGUMENT,
                     "devices: '%.*s' at offset %zu of '%s' is not a device (cpu, fmodel, or a "
                     "backend: see `tessera devices`)",
                     (int)len, p, (size_t)(p - list), list);
    }
    if (!end) break;
    p = end + 1;
  }
  return TSR_OK;
}

/* Opens every entry of the device list. An entry that cannot be opened
 * stays in the list without a device: with fallback on, its work runs on
 * the host (and the reason is reported); with fallback off, creating the
 * context fails. A malformed entry (an option out of range, an unknown
 * one) fails creating the context either way. */
static tsr_status_t open_devices(tsr_context_t *ctx) {
  TSR_RETURN_IF(split_devices(ctx));
  for (int i = 0; i < ctx->n_devs; i++) {
    tsr_ctx_device_t *d = &ctx->devs[i];
    if (!strcmp(d->spec, "cpu")) {
      d->host = true;
      snprintf(d->name, sizeof d->name, "cpu");
      continue;
    }
    /* Name: the backend and how many entries of that backend came before. */
    size_t name_len = strcspn(d->spec, ":");
    int index = 0;
    for (int j = 0; j < i; j++)
      index += !ctx->devs[j].host && strcspn(ctx->devs[j].spec, ":") == name_len &&
               !strncmp(ctx->devs[j].spec, d->spec, name_len);
    snprintf(d->name, sizeof d->name, "%.*s%d", (int)(name_len > 30 ? 30 : name_len), d->spec,
             index);
    tsr_status_t s = tsr_hal_open(d->spec, &d->hal);
    if (s) {
      snprintf(d->unavailable, sizeof d->unavailable, "%s", tsr_status_message(s));
      /* a malformed spec is the caller's error, not a device to fall back from */
      const tsr_status_code_t code = tsr_status_code(s);
      if (code == TSR_STATUS_INVALID_ARGUMENT || code == TSR_STATUS_OUT_OF_RANGE)
        return s;
      if (!ctx->opts.fallback)
        return tsr_status_annotate(s, "device '%s' (fallback is off)", d->spec);
      tsr_ctx_warn(ctx, "device '%s' unavailable, its work runs on the CPU: %s", d->spec,
                   tsr_status_message(s));
      tsr_status_free(s);
      continue;
    }
    d->hal->vt->query_caps(d->hal, &d->caps);
  }
  return TSR_OK;
}

tsr_status_t tsr_context_check_devices(const char *devices, int *out_count,
                                       int *out_backends) {
  *out_count = *out_backends = 0;
  tsr_context_t *tmp = calloc(1, sizeof *tmp);
  if (!tmp) return TSR_ERR(RESOURCE_EXHAUSTED, "devices: out of memory");
  tmp->devices = (char *)(devices && *devices ? devices : "cpu");
  tsr_status_t s = split_devices(tmp);
  for (int i = 0; !s && i < tmp->n_devs; i++) {
    if (!strcmp(tmp->devs[i].spec, "cpu")) continue;
    (*out_backends)++;
    s = tsr_hal_check_spec(tmp->devs[i].spec);
  }
  if (!s) *out_count = tmp->n_devs;
  for (int i = 0; i < tmp->n_devs; i++) pthread_mutex_destroy(&tmp->devs[i].lock);
  free(tmp->devs);
  free(tmp);
  return s;
}

/* The device list of MPI rank `rank`: entry `rank` of a ';'-separated
 * list (the last for the ranks beyond it); the list itself without MPI. */
static char *rank_devices(const char *list, int rank, bool mpi) {
  if (!mpi) return strdup(list);
  const char *p = list;
  for (int r = 0; r < rank; r++) {
    const char *semi = strchr(p, ';');
    if (!semi) break;
    p = semi + 1;
  }
  const size_t n = strcspn(p, ";");
  char *out = strndup(p, n);
  if (out && !*out) {
    free(out);
    out = strdup("cpu");
  }
  return out;
}

tsr_status_t tsr_context_create(const tsr_context_options_t *opts, tsr_context_t **out) {
  if (!out) return TSR_ERR(INVALID_ARGUMENT, "context: out_ctx is NULL");
  *out = NULL;
  tsr_context_options_t defaults;
  if (!opts) {
    tsr_context_options_init(&defaults);
    opts = &defaults;
  }
  if (opts->n_threads < 0 || opts->n_threads > 1024)
    return TSR_ERR(INVALID_ARGUMENT, "context: n_threads %d outside [0, 1024]",
                   opts->n_threads);
  if (opts->retries < 0 || opts->retries > 100)
    return TSR_ERR(INVALID_ARGUMENT, "context: retries %d outside [0, 100]", opts->retries);
  if ((unsigned)opts->offload > TSR_OFFLOAD_NONE)
    return TSR_ERR(INVALID_ARGUMENT, "context: unknown offload policy %d", (int)opts->offload);
  if ((unsigned)opts->split > TSR_SPLIT_ROWS)
    return TSR_ERR(INVALID_ARGUMENT, "context: unknown split %d (layers 0, rows 1)",
                   (int)opts->split);
  if (opts->split == TSR_SPLIT_ROWS && opts->placement && *opts->placement)
    return TSR_ERR(INVALID_ARGUMENT, "context: placement overrides name one device per op, "
                                     "which --split rows does not have");
  tsr_context_t *ctx = calloc(1, sizeof(*ctx));
  if (!ctx) return TSR_ERR(RESOURCE_EXHAUSTED, "context");
  ctx->opts = *opts;
  ctx->n_threads = opts->n_threads;
  if (ctx->n_threads == 0) ctx->n_threads = tsr_cpu_count();
  if (ctx->opts.device_timeout_ms == 0) ctx->opts.device_timeout_ms = 10000;
  tsr_status_t s = tsr_dist_create(opts, &ctx->dist);
  if (s) {
    free(ctx);
    return tsr_status_annotate(s, "context");
  }
  ctx->devices = rank_devices(opts->devices && *opts->devices ? opts->devices : "cpu",
                              tsr_dist_rank(ctx->dist), ctx->dist != NULL);
  ctx->placement = dup_or_null(opts->placement);
  ctx->trace_path = dup_or_null(opts->trace_path);
  ctx->opts.devices = ctx->devices;
  ctx->opts.placement = ctx->placement;
  ctx->opts.trace_path = ctx->trace_path;
  if (!ctx->devices || (opts->placement && !ctx->placement) ||
      (opts->trace_path && !ctx->trace_path))
    s = TSR_ERR(RESOURCE_EXHAUSTED, "context: option strings");
  if (!s) s = tsr_threadpool_create(ctx->n_threads, &ctx->pool);
  if (!s) s = open_devices(ctx);
  if (!s && ctx->trace_path) s = tsr_trace_open(ctx->trace_path, &ctx->trace);
  if (s) {
    tsr_context_destroy(ctx);
    return tsr_status_annotate(s, "context");
  }
  ctx->isa = tsr_isa_detect();
  /* The fp32 matmuls call OpenBLAS from the pool's tasks, one slice of the
   * weights each, OpenBLAS single-threaded (exec.c host_sgemm): one set of
   * threads for every op of a pass (stories15M fp32 prefill 1.6x faster
   * than with OpenBLAS's own threads beside the pool's, measured). */
  openblas_set_num_threads(1);
  *out = ctx;
  return TSR_OK;
}

int tsr_context_device_count(const tsr_context_t *ctx) { return ctx ? ctx->n_devs : 0; }

const char *tsr_context_device_spec(const tsr_context_t *ctx, int e) {
  if (!ctx || e < 0 || e >= ctx->n_devs) return NULL;
  return ctx->devs[e].spec;
}

void tsr_context_destroy(tsr_context_t *ctx) {
  if (!ctx) return;
  for (int i = 0; i < ctx->n_devs; i++) {
    tsr_hal_close(ctx->devs[i].hal);
    pthread_mutex_destroy(&ctx->devs[i].lock);
  }
  ctx->n_devs = 0;
  free(ctx->devs);
  tsr_trace_close(ctx->trace);
  tsr_threadpool_destroy(ctx->pool);
  free(ctx->devices);
  free(ctx->placement);
  free(ctx->trace_path);
  tsr_dist_destroy(ctx->dist);
  free(ctx);
}

int tsr_context_rank(const tsr_context_t *ctx) { return ctx ? tsr_dist_rank(ctx->dist) : 0; }
int tsr_context_ranks(const tsr_context_t *ctx) { return ctx ? tsr_dist_size(ctx->dist) : 1; }
