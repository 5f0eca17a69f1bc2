/*
 * cmd_serve.c - `tessera serve`: options, start-up and shutdown.
 *
 * Start-up loads every model once, creates one engine per (model, tenant)
 * with its own device windows (TSR_WINDOW_AUTO: the kernel refuses any
 * descriptor of one tenant that points into another's memory), starts the
 * scheduler and the HTTP daemon, then waits for SIGINT or SIGTERM: new
 * completions get 503, the queued and running ones finish, their answers
 * go out, and the process exits 0.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "serve.h"

#define MAX_MODELS 16

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera serve -m [NAME=]MODEL[,TOKENIZER] [-m ...] [options]\n"
          "\n"
          "OpenAI-compatible completions over HTTP for several tenants and models:\n"
          "POST /v1/completions, GET /v1/models, GET /health, GET /metrics.\n"
          "\n"
          "  -m, --model SPEC       a model to serve: NAME=FILE[,TOKENIZER] (NAME defaults\n"
          "                         to the file's name without extension); repeatable\n"
          "      --host ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
          "      --port P           TCP port (default 8080; 0 = any free port)\n"
          "      --port-file FILE   write the port listened on to FILE once ready\n"
          "      --tenants FILE     tenants, keys, classes and quotas (JSON; see\n"
          "                         host/serve/README.md); without it: open mode\n"
          "      --metrics-key KEY  key for all of /metrics (or admin_key in the file)\n"
          "      --pool LIST        accelerators added and released with the load: device\n"
          "                         specs, each with an optional :N for N of them\n"
          "                         (sim:4, fmodel:2, sim:2,fmodel:latency=40)\n"
          "      --pool-min N       pool devices always active (default 1)\n"
          "      --pool-high X      add a device when the load stays above X (0.8)\n"
          "      --pool-low X       release one when it stays below X (0.3)\n"
          "      --pool-window S    for that many seconds; also the cooldown (2)\n"
          "      --pool-seqs K      sequences one pool device counts for (4)\n"
          "      --parallel N       sequences running at once, all models (16)\n"
          "      --prefill-chunk N  prompt tokens per sequence per step (32)\n"
          "      --step-tokens N    rows per step: decodes + prompt chunks (256)\n"
          "      --aging-ms MS      a waiting request gains one priority level per MS (2000)\n"
          "      --max-seq N        context per sequence (default: the model's)\n"
          "      --max-body BYTES   largest request body (default 1048576)\n"
          "      --max-connections N  (default 256)\n"
          "      --precision P      int8 (default: bit-exact on every device) | fp32 | fp16 | bf16\n"
          CLI_ATTN_HELP
          "  -t, --threads N        CPU threads (default: all)\n"
          "%s"
          "                         (serve: fixed devices every engine may use; --offload\n"
          "                         defaults to all; several entries share rows; with --mpi\n"
          "                         rank 0 serves HTTP and the other ranks work behind it)\n"
          "  -h, --help             this text\n",
          CLI_DEVICE_HELP);
}

/* Whether a piece of a device list continues the previous entry's options
 * ("bw=32" in "sim:latency=80,bw=32"): its text before any ':' holds '='
 * (a device name never does). */
static bool continues(const char *p, size_t n) {
  for (size_t i = 0; i < n && p[i] != ':'; i++)
    if (p[i] == '=') return true;
  return false;
}

/* Expands a --pool list: device entries as --device takes them, each
 * optionally followed by ":N" for N copies (sim:3, fmodel:latency=40:2,
 * sim:2,fmodel); *entries receives the count. NULL with a message when
 * malformed; malloc'd. */
static char *expand_pool(const char *list, int *entries) {
  size_t cap = strlen(list) * 2 + 16, len = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  out[0] = '\0';
  int total = 0;
  for (const char *p = list;;) {
    /* one entry: a piece, then the pieces that continue its options */
    const char *q = p;
    for (;;) {
      const char *c = strchr(q, ',');
      if (!c || !continues(c + 1, strcspn(c + 1, ","))) {
        q = c ? c : q + strlen(q);
        break;
      }
      q = c + 1;
    }
    size_t n = (size_t)(q - p), base = n;
    const char *colon = NULL;
    for (const char *r = p; r < p + n; r++)
      if (*r == ':') colon = r;
    long copies = 1;
    if (colon && colon + 1 < p + n &&
        strspn(colon + 1, "0123456789") == (size_t)(p + n - colon - 1)) {
      copies = strtol(colon + 1, NULL, 10);
      base = (size_t)(colon - p);
    }
    if (base == 0 || continues(p, n) || copies < 1 || copies > 63 ||
        (total += (int)copies) > 63) {
      fprintf(stderr, "tessera serve: --pool: '%.*s': a device spec with an optional :N, "
                      "1 <= N, at most 63 devices in all\n", (int)n, p);
      free(out);
      return NULL;
    }
    for (long k = 0; k < copies; k++) {
      size_t need = len + base + 2;
      if (need > cap) {
        cap = need * 2;
        char *o = realloc(out, cap);
        if (!o) {
          free(out);
          return NULL;
        }
        out = o;
      }
      if (len) out[len++] = ',';
      memcpy(out + len, p, base);
      len += base;
      out[len] = '\0';
    }
    if (!*q) break;
    p = q + 1;
  }
  *entries = total;
  return out;
}

/* The context's entries: their specs (borrowed from the context), which are
 * the host, which fixed and which the pool's (the first n_fixed entries are
 * the --device ones). */
static bool context_entries(srv_t *s, int n_fixed) {
  s->n_entries = tsr_context_device_count(s->ctx);
  s->entry_names = calloc((size_t)s->n_entries, sizeof(const char *));
  if (!s->entry_names) return false;
  for (int e = 0; e < s->n_entries; e++) {
    const char *spec = tsr_context_device_spec(s->ctx, e);
    s->entry_names[e] = spec;
    if (e >= 64) continue; /* refused by the caller */
    if (!strcmp(spec, "cpu")) { /* the host; the context takes no options for it */
      s->cpu_mask |= 1ull << e;
    } else {
      if (e >= n_fixed) s->pool_mask |= 1ull << e;
      else s->fixed_mask |= 1ull << e;
    }
  }
  return true;
}

int tsr_cmd_serve(int argc, char **argv) {
  const char *cmd = "serve";
  const char *model_specs[MAX_MODELS];
  int n_specs = 0;
  const char *tenants_path = NULL, *pool_arg = NULL, *port_file = NULL, *metrics_key = NULL;
  int64_t threads = 0, port = 8080, max_seq = 0, pool_min = 1, pool_seqs = 4, parallel = 16,
          prefill_chunk = 32, step_tokens = 256, max_conn = 256, max_body = 1 << 20;
  double pool_high = 0.8, pool_low = 0.3, pool_window = 2, aging_ms = 2000;
  const char *host = "127.0.0.1";
  tsr_context_options_t copts;
  tsr_context_options_init(&copts);
  copts.offload = TSR_OFFLOAD_ALL;
  tsr_session_options_t sopts;
  tsr_session_options_init(&sopts);
  sopts.precision = TSR_PRECISION_INT8;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int used = cli_device_option(cmd, argc, argv, &i, &copts);
    if (!used) used = cli_session_option(cmd, argc, argv, &i, &sopts);
    if (used < 0) return 2;
    if (used) continue;
#define VALUE() \
  if (!(v = cli_value(cmd, argc, argv, &i))) return 2
#define INT(var, lo, hi) \
  VALUE();               \
  if (!cli_parse_i64(cmd, a, v, lo, hi, &var)) return 2
#define F64(var, lo, hi) \
  VALUE();               \
  if (!cli_parse_f64(cmd, a, v, lo, hi, &var)) return 2
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
      VALUE();
      if (n_specs == MAX_MODELS) {
        fprintf(stderr, "tessera serve: -m: at most %d models\n", MAX_MODELS);
        return 2;
      }
      model_specs[n_specs++] = v;
    } else if (!strcmp(a, "--host")) {
      VALUE();
      host = v;
    } else if (!strcmp(a, "--port")) {
      INT(port, 0, 65535);
    } else if (!strcmp(a, "--port-file")) {
      VALUE();
      port_file = v;
    } else if (!strcmp(a, "--tenants")) {
      VALUE();
      tenants_path = v;
    } else if (!strcmp(a, "--metrics-key")) {
      VALUE();
      if (strlen(v) < 8) {
        fprintf(stderr, "tessera serve: --metrics-key: at least 8 characters\n");
        return 2;
      }
      metrics_key = v;
    } else if (!strcmp(a, "--pool")) {
      VALUE();
      if (!*v) {
        fprintf(stderr, "tessera serve: --pool: an empty list\n");
        return 2;
      }
      pool_arg = v;
    } else if (!strcmp(a, "--pool-min")) {
      INT(pool_min, 0, 63);
    } else if (!strcmp(a, "--pool-seqs")) {
      INT(pool_seqs, 1, 4096);
    } else if (!strcmp(a, "--pool-high")) {
      F64(pool_high, 0, 1e6);
    } else if (!strcmp(a, "--pool-low")) {
      F64(pool_low, 0, 1e6);
    } else if (!strcmp(a, "--pool-window")) {
      F64(pool_window, 0, 3600);
    } else if (!strcmp(a, "--parallel")) {
      INT(parallel, 1, 4096);
    } else if (!strcmp(a, "--prefill-chunk")) {
      INT(prefill_chunk, 1, 4096);
    } else if (!strcmp(a, "--step-tokens")) {
      INT(step_tokens, 1, 4096);
    } else if (!strcmp(a, "--aging-ms")) {
      F64(aging_ms, 0, 1e9);
    } else if (!strcmp(a, "--max-seq")) {
      INT(max_seq, 0, 1 << 20);
    } else if (!strcmp(a, "--max-body")) {
      INT(max_body, 256, INT64_C(1) << 30);
    } else if (!strcmp(a, "--max-connections")) {
      INT(max_conn, 1, 65536);
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
      INT(threads, 0, 1024);
    } else {
      fprintf(stderr, "tessera serve: unknown option '%s' (see --help)\n", a);
      return 2;
    }
#undef VALUE
#undef INT
#undef F64
  }
  if (!n_specs) {
    fprintf(stderr, "tessera serve: -m MODEL is required (see --help)\n");
    return 2;
  }
  if (pool_low >= pool_high) {
    fprintf(stderr, "tessera serve: --pool-low %g must be below --pool-high %g\n", pool_low,
            pool_high);
    return 2;
  }
  if (parallel > step_tokens) {
    fprintf(stderr,
            "tessera serve: --parallel %" PRId64 " exceeds --step-tokens %" PRId64
            " (every running sequence decodes in every step)\n",
            parallel, step_tokens);
    return 2;
  }

  char *pool = NULL;
  int pool_entries = 0;
  if (pool_arg && !(pool = expand_pool(pool_arg, &pool_entries))) return 2;
  srv_t *s = calloc(1, sizeof *s);
  if (!s) {
    free(pool);
    return 1;
  }
  int rc = 1;
  char *devices = NULL;
  srv_options_t *o = &s->opt;
  o->host = host;
  o->port = (int)port;
  o->parallel = (int)parallel;
  o->prefill_chunk = (int)prefill_chunk;
  o->step_tokens = (int)step_tokens;
  o->aging_ms = aging_ms;
  o->max_body = (size_t)max_body;
  o->max_connections = (int)max_conn;
  o->pool_min = (int)pool_min;
  o->pool_high = pool_high;
  o->pool_low = pool_low;
  o->pool_window_s = pool_window;
  o->pool_seqs = (int)pool_seqs;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->wake, NULL);

  /* tenants */
  if (tenants_path) {
    if (!srv_tenants_load(s, tenants_path)) goto done;
  } else {
    srv_tenants_open_mode(s);
  }
  if (metrics_key) {
    free(s->admin_key);
    s->admin_key = strdup(metrics_key);
  }

  /* devices: the fixed list, then the pool */
  const char *fixed = copts.devices;
  bool fixed_given = fixed && *fixed && strcmp(fixed, "cpu") != 0;
  size_t dl = (fixed ? strlen(fixed) : 0) + (pool ? strlen(pool) : 0) + 8;
  devices = malloc(dl);
  if (!devices) goto done;
  if (pool && fixed_given) snprintf(devices, dl, "%s,%s", fixed, pool);
  else if (pool) snprintf(devices, dl, "%s", pool);
  else snprintf(devices, dl, "%s", fixed && *fixed ? fixed : "cpu");
  copts.devices = devices;
  copts.split = TSR_SPLIT_ROWS; /* every entry takes a share of each batch */
  copts.n_threads = (int)threads;
  if (copts.mpi && pool) {
    fprintf(stderr, "tessera serve: --pool: not with --mpi (each rank's devices are its "
                    "--device list)\n");
    rc = 2;
    goto done;
  }
  tsr_status_t st = tsr_context_create(&copts, &s->ctx);
  if (st) {
    rc = cli_fail(cmd, st);
    goto done;
  }
  if (tsr_context_rank(s->ctx) > 0) {
    /* another rank of an MPI job: a worker behind rank 0's HTTP front end.
     * A SIGINT or SIGTERM sent to the job reaches every rank: this one
     * ignores it, rank 0 drains its requests (which need this rank) and
     * then ends the job. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    st = tsr_context_serve_ranks(s->ctx);
    rc = st ? cli_fail(cmd, st) : 0;
    goto done;
  }
  if (!context_entries(s, tsr_context_device_count(s->ctx) - pool_entries)) goto done;
  if (s->n_entries > 64) {
    fprintf(stderr, "tessera serve: at most 64 device entries (%d given)\n", s->n_entries);
    goto done;
  }
  int pool_n = __builtin_popcountll(s->pool_mask);
  if (pool && pool_n != pool_entries) {
    fprintf(stderr, "tessera serve: --pool: '%s' names a cpu entry (the pool is of accelerators)\n",
            pool_arg);
    goto done;
  }
  if (pool_min > pool_n && pool) {
    fprintf(stderr, "tessera serve: --pool-min %" PRId64 " exceeds the pool's %d devices\n",
            pool_min, pool_n);
    goto done;
  }
  for (int e = 0, on = 0; e < s->n_entries && on < pool_min; e++)
    if (s->pool_mask >> e & 1) {
      s->pool_active |= 1ull << e;
      on++;
    }

  /* models and their engines */
  s->models = calloc((size_t)n_specs, sizeof(srv_model_t));
  if (!s->models) goto done;
  sopts.max_batch_rows = (int32_t)step_tokens;
  sopts.max_seq = (int32_t)max_seq;
  if (s->fixed_mask | s->pool_mask) sopts.device_window_bytes = TSR_WINDOW_AUTO;
  sopts.device_mask = ~s->pool_mask | s->pool_active;
  for (int i = 0; i < n_specs; i++) {
    srv_model_t *m = &s->models[i];
    s->n_models = i + 1;
    const char *spec = model_specs[i], *eq = strchr(spec, '=');
    const char *file = eq ? eq + 1 : spec;
    const char *comma = strchr(file, ',');
    m->path = comma ? strndup(file, (size_t)(comma - file)) : strdup(file);
    m->tokenizer = comma ? strdup(comma + 1) : NULL;
    if (eq) {
      m->name = strndup(spec, (size_t)(eq - spec));
    } else {
      const char *b = strrchr(m->path, '/');
      b = b ? b + 1 : m->path;
      const char *dot = strrchr(b, '.');
      m->name = dot && dot != b ? strndup(b, (size_t)(dot - b)) : strdup(b);
    }
    if (!m->path || !m->name || (comma && !m->tokenizer)) goto done;
    if (!*m->name || !*m->path) {
      fprintf(stderr, "tessera serve: -m '%s': an empty name or file\n", spec);
      goto done;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp(s->models[j].name, m->name)) {
        fprintf(stderr, "tessera serve: -m: the name '%s' is given twice\n", m->name);
        goto done;
      }
    st = tsr_model_load(s->ctx, m->path, m->tokenizer, &m->model);
    if (st) {
      fprintf(stderr, "tessera serve: model '%s': ", m->name);
      rc = cli_fail(cmd, st);
      goto done;
    }
    tsr_model_config(m->model, &m->cfg);
    if (max_seq > 0 && max_seq < m->cfg.seq_len) m->cfg.seq_len = (int32_t)max_seq;
    size_t nt = (size_t)s->n_tenants;
    m->engines = calloc(nt, sizeof(tsr_engine_t *));
    m->engine_mask = calloc(nt, sizeof(uint64_t));
    m->batches = calloc(nt, sizeof(tsr_batch_t *));
    m->free_seqs = calloc(nt, sizeof(tsr_seq_t **));
    m->n_free_seqs = calloc(nt, sizeof(int));
    if (!m->engines || !m->engine_mask || !m->batches || !m->free_seqs || !m->n_free_seqs)
      goto done;
    for (int t = 0; t < s->n_tenants; t++) {
      st = tsr_engine_create(m->model, &sopts, &m->engines[t]);
      if (!st) st = tsr_batch_create(0, &m->batches[t]);
      if (st) {
        fprintf(stderr, "tessera serve: model '%s', tenant '%s': ", m->name, s->tenants[t].name);
        rc = cli_fail(cmd, st);
        goto done;
      }
      m->engine_mask[t] = tsr_engine_devices(m->engines[t]);
      m->free_seqs[t] = calloc((size_t)parallel, sizeof(tsr_seq_t *));
      if (!m->free_seqs[t]) goto done;
    }
  }
  srv_metrics_init(s);
  for (int i = 0; i < s->n_models; i++)
    fprintf(stderr, "tessera serve: model '%s' (%s): %d layers, dim %d, vocab %d, context %d\n",
            s->models[i].name, s->models[i].path, s->models[i].cfg.n_layers,
            s->models[i].cfg.dim, s->models[i].cfg.vocab_size, s->models[i].cfg.seq_len);
  fprintf(stderr, "tessera serve: devices %s (fixed %d, pool %d of which %d active), %s\n",
          devices, __builtin_popcountll(s->fixed_mask), pool_n,
          __builtin_popcountll(s->pool_active),
          tsr_precision_name(sopts.precision));
  if (s->open_mode)
    fprintf(stderr, "tessera serve: no --tenants file: open mode, one tenant 'default' "
                    "(standard class), no API keys asked\n");
  else
    fprintf(stderr, "tessera serve: %d tenants from %s\n", s->n_tenants, tenants_path);

  /* signals go to the main thread alone */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (!srv_sched_start(s)) {
    fprintf(stderr, "tessera serve: cannot start the scheduler thread\n");
    goto done;
  }
  if (!srv_http_start(s)) {
    srv_sched_stop(s);
    goto done;
  }
  fprintf(stderr, "tessera serve: listening on http://%s:%d\n", host, s->opt.port);
  if (port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", s->opt.port) < 0 || fclose(f) != 0 || rename(tmp, port_file)) {
      fprintf(stderr, "tessera serve: --port-file %s: cannot write it\n", port_file);
    }
  }

  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "tessera serve: %s: finishing the requests in flight\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  pthread_mutex_lock(&s->lock);
  s->stopping = true;
  pthread_mutex_unlock(&s->lock);
  srv_sched_stop(s);
  srv_http_stop(s);
  uint64_t total = 0;
  for (int t = 0; t < s->n_tenants; t++)
    for (int k = 0; k < SRV_STATUS_SLOTS; k++) total += s->m.requests[t][k];
  fprintf(stderr, "tessera serve: stopped after %" PRIu64 " requests, %" PRIu64 " steps\n", total,
          s->m.steps);
  rc = 0;
done:
  for (int i = 0; i < s->n_models; i++) {
    srv_model_t *m = &s->models[i];
    for (int t = 0; m->engines && t < s->n_tenants; t++) {
      for (int q = 0; m->free_seqs && m->free_seqs[t] && q < m->n_free_seqs[t]; q++)
        tsr_seq_destroy(m->free_seqs[t][q]);
      if (m->free_seqs) free(m->free_seqs[t]);
      if (m->batches) tsr_batch_destroy(m->batches[t]);
      tsr_engine_destroy(m->engines[t]);
    }
    free(m->engines);
    free(m->engine_mask);
    free(m->batches);
    free(m->free_seqs);
    free(m->n_free_seqs);
    tsr_model_destroy(m->model);
    free(m->name);
    free(m->path);
    free(m->tokenizer);
  }
  free(s->models);
  tsr_context_destroy(s->ctx);
  if (s->m.requests) srv_metrics_free(s);
  free(s->entry_names);
  free(s->waiting);
  free(s->running);
  free(s->admin_key);
  srv_tenants_free(s);
  pthread_cond_destroy(&s->wake);
  pthread_mutex_destroy(&s->lock);
  free(devices);
  free(pool);
  free(s);
  return rc;
}
