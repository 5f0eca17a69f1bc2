/* context.c - the context: thread pool, int8 kernel choice, device list. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

void tsr_context_options_init(tsr_context_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->n_threads = 0;
  o->devices = NULL;
  o->fallback = true;
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
  tsr_context_t *ctx = calloc(1, sizeof(*ctx));
  if (!ctx) return TSR_ERR(RESOURCE_EXHAUSTED, "context");
  ctx->n_threads = opts->n_threads;
  if (ctx->n_threads == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    ctx->n_threads = n > 0 ? (int)n : 1;
  }
  ctx->fallback = opts->fallback;
  ctx->devices = strdup(opts->devices ? opts->devices : "cpu");
  tsr_status_t s = ctx->devices ? TSR_OK : TSR_ERR(RESOURCE_EXHAUSTED, "context: devices");
  if (!s) s = tsr_threadpool_create(ctx->n_threads, &ctx->pool);
  if (s) {
    tsr_context_destroy(ctx);
    return tsr_status_annotate(s, "context");
  }
  ctx->isa = tsr_isa_detect();
  /* OpenBLAS runs the fp32 matmuls with as many threads as we were given. */
  openblas_set_num_threads(ctx->n_threads);
  *out = ctx;
  return TSR_OK;
}

void tsr_context_destroy(tsr_context_t *ctx) {
  if (!ctx) return;
  tsr_threadpool_destroy(ctx->pool);
  free(ctx->devices);
  free(ctx);
}
