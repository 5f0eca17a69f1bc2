/* fuzz_completion.c - the body of POST /v1/completions
 * (srv_completion_parse) against a generated model, for an open-mode
 * tenant and for one with a max_tokens limit (the first byte of the input
 * picks). A body that parses gives a request whose prompt starts with BOS,
 * fits the context and holds only vocabulary ids; one that does not gives
 * an HTTP error status and a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/util.h"
#include "host/serve/serve.h"

static srv_t srv;
static srv_model_t model;
static srv_tenant_t limited;

static void setup(void) {
  model.model = fz_tiny_model("fuzz_completion", 32);
  tsr_model_config(model.model, &model.cfg);
  model.name = "tiny";
  srv.ctx = fz_context();
  srv.models = &model;
  srv.n_models = 1;
  pthread_mutex_init(&srv.lock, NULL);
  srv_tenants_open_mode(&srv);
  limited = srv.tenants[0];
  limited.max_tokens = 4;
  limited.tokens_per_minute = 100;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!srv.tenants) setup();
  if (size < 1) return 0;
  srv_tenant_t *t = data[0] & 1 ? &limited : &srv.tenants[0];
  srv_req_t *r = NULL;
  srv_error_t err;
  if (!srv_completion_parse(&srv, t, (const char *)data + 1, size - 1, &r, &err)) {
    if (r || err.status < 400 || err.status > 599 || !err.message[0]) {
      fprintf(stderr, "fuzz_completion: refused with status %d, message '%s'\n", err.status,
              err.message);
      abort();
    }
    return 0;
  }
  if (!r || r->n_prompt < 1 || (int64_t)r->n_prompt > model.cfg.seq_len ||
      r->prompt[0] != tsr_model_bos(model.model) || r->max_tokens < 1 || !r->sampler) {
    fprintf(stderr, "fuzz_completion: a request that cannot run was accepted\n");
    abort();
  }
  if (t->max_tokens > 0 && r->max_tokens > t->max_tokens) abort();
  for (size_t i = 0; i < r->n_prompt; i++)
    if (r->prompt[i] < 0 || r->prompt[i] >= model.cfg.vocab_size) abort();
  if (r->n_marks > 0 && (!r->text.p || r->marks[r->n_marks - 1] != r->text.len)) abort();
  srv_req_unref(&srv, r);
  return 0;
}
