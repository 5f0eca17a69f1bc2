/* recover.c - the failure policy of device work (see recover.h). */
#include "recover.h"

void tsr_recover_note(const tsr_context_t *ctx, const char *name, tsr_recover_state_t *st,
                      const tsr_status_t s) {
  if (tsr_status_code(s) != TSR_STATUS_UNAVAILABLE || !st->usable) return;
  st->usable = false;
  st->gone = true;
  tsr_ctx_warn(ctx, "%s is gone (%s); its work runs on the CPU from now on", name,
               tsr_status_message(s));
}

tsr_status_t tsr_recover(const tsr_context_t *ctx, tsr_hal_device_t *h, const char *name,
                         tsr_recover_state_t *st, tsr_status_t first,
                         const tsr_recover_ops_t *ops, const char *what, bool *fall_back,
                         uint32_t *retried) {
  const tsr_context_options_t *o = &ctx->opts;
  tsr_status_t err = first;
  *fall_back = false;
  tsr_recover_note(ctx, name, st, err);
  for (int attempt = 0; st->usable && attempt <= o->retries; attempt++) {
    tsr_status_free(h->vt->reset(h));
    st->resets++;
    if (ops->after_reset) ops->after_reset(ops->arg);
    if (attempt == o->retries) break;
    st->retries++;
    if (retried) (*retried)++;
    tsr_ctx_warn(ctx, "%s: %s; reset, retry %d of %d", name, tsr_status_message(err),
                 attempt + 1, o->retries);
    tsr_status_t s = ops->retry(ops->arg);
    if (!s) {
      tsr_status_free(err);
      tsr_recover_ok(st);
      return TSR_OK;
    }
    tsr_status_free(err);
    err = s;
    tsr_recover_note(ctx, name, st, err);
  }
  if (!o->fallback) return tsr_status_annotate(err, "%s failed (fallback is off)", name);
  st->fallbacks++;
  if (++st->consecutive_failures >= TSR_RECOVER_MAX_FAILURES && st->usable) {
    st->usable = false;
    tsr_ctx_warn(ctx, "%s failed %d times in a row; its work runs on the CPU from now on", name,
                 TSR_RECOVER_MAX_FAILURES);
  }
  tsr_ctx_warn(ctx, "%s: %s; %s fall back to the CPU", name, tsr_status_message(err), what);
  tsr_status_free(err);
  *fall_back = true;
  return TSR_OK;
}
