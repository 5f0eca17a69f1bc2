/*
 * cmd_bench_mpi.c - `tessera bench --mpi`: the model across MPI ranks,
 * measured here and projected onto a network.
 *
 * Under mpirun every rank runs `tessera bench --mpi ...`; rank 0 runs the
 * benchmark and the others serve it (tsr_context_serve_ranks). For each
 * model and batch size B: B sequences prefilled with --prompt tokens each
 * (one evaluation), then --decode steps of one token per sequence, int8.
 * Measured: wall tokens/s, and from every rank's counters around each phase
 * (tsr_context_rank_stats) its compute time, its wait and the bytes it
 * sent. Projected: the same compute per rank, with each message costing
 * `lat_us + bytes / bandwidth` on the stated network instead of what the
 * loopback cost here:
 *   pipeline (layers)  per evaluation of M micro-batches through R ranks,
 *                      c_r compute of rank r and t_h transfer of hop h per
 *                      micro-batch (R hops, the last back to rank 0):
 *                      sum(c_r) + sum(t_h) + (M - 1) * max(max c_r, max t_h)
 *                      (the sends are non-blocking: a rank computes the
 *                      next micro-batch while the previous one travels);
 *   rows               rank 0 computes its share while rank k receives
 *                      its tokens, computes and returns logits:
 *                      max(c_0, max_k(c_k + 2 lat + bytes_k / bandwidth)).
 * The ranks of one job here share this machine's cores, so ranks computing
 * at once slow each other: in a pipeline the compute of each rank comes
 * from a run of the same phase with one micro-batch in flight (mpi_depth
 * 1: the ranks take turns), the bytes and micro-batches from the measured
 * run; in the rows split the ranks do compute at once, and their measured
 * compute (slowed by each other here) is taken as it is.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "cli.h"

#define MAX_RANKS 64
#define HDR_BYTES 32 /* the header of every message */

typedef struct {
  char preset[32];
  int32_t batch;
  const char *phase; /* "prefill" | "decode" */
  double measured_tps;
  double wait_frac;     /* rank 0's wait / wall */
  double act_per_token; /* bytes of activations (all hops) per token */
  double msgs_per_eval;
  double compute_ms[MAX_RANKS]; /* per evaluation */
  double network_ms;            /* per evaluation, projected */
  double projected_tps;
} mpi_row_t;

static void stats_diff(const tsr_rank_stats_t *a, const tsr_rank_stats_t *b, int n,
                       tsr_rank_stats_t *out) {
  for (int r = 0; r < n; r++) {
    out[r] = b[r];
    out[r].msgs_sent = b[r].msgs_sent - a[r].msgs_sent;
    out[r].msgs_recv = b[r].msgs_recv - a[r].msgs_recv;
    out[r].bytes_sent = b[r].bytes_sent - a[r].bytes_sent;
    out[r].bytes_recv = b[r].bytes_recv - a[r].bytes_recv;
    out[r].act_bytes_sent = b[r].act_bytes_sent - a[r].act_bytes_sent;
    out[r].passes = b[r].passes - a[r].passes;
    out[r].busy_s = b[r].busy_s - a[r].busy_s;
    out[r].wait_s = b[r].wait_s - a[r].wait_s;
  }
}

/* The projection of one phase of `evals` evaluations (see the header):
 * `d` the ranks' counters of the measured run, `cal` those of the same
 * phase run one micro-batch at a time (pipeline; NULL: take d's compute). */
static void project(const tsr_rank_stats_t *d, const tsr_rank_stats_t *cal, int n, bool pipe,
                    double evals, double wall, double tokens, double bw, double lat,
                    mpi_row_t *row) {
  row->measured_tps = wall > 0 ? tokens / wall : 0;
  row->wait_frac = wall > 0 ? d[0].wait_s / wall : 0;
  double act = 0, msgs = 0;
  for (int r = 0; r < n; r++) {
    act += (double)d[r].act_bytes_sent;
    msgs += (double)d[r].msgs_sent;
  }
  row->act_per_token = tokens > 0 ? act / tokens : 0;
  row->msgs_per_eval = msgs / evals;
  if (n == 1) { /* one rank: nothing travels */
    row->compute_ms[0] = wall / evals * 1e3;
    row->network_ms = 0;
    row->projected_tps = row->measured_tps;
    return;
  }
  if (!cal) cal = d;
  double t_eval;
  if (pipe) {
    /* every micro-batch passes every rank; rank 1 counts each once */
    const double micro = d[1].passes > 0 ? (double)d[1].passes : evals;
    const double micro_cal = cal[1].passes > 0 ? (double)cal[1].passes : micro;
    const double m_per_eval = micro / evals;
    double sum_c = 0, max_c = 0, sum_t = 0, max_t = 0;
    for (int r = 0; r < n; r++) {
      const double c = cal[r].busy_s / micro_cal;
      const double t = lat + ((double)d[r].act_bytes_sent / micro + HDR_BYTES) / bw;
      row->compute_ms[r] = c * m_per_eval * 1e3;
      sum_c += c;
      sum_t += t;
      if (c > max_c) max_c = c;
      if (t > max_t) max_t = t;
    }
    const double slowest = max_c > max_t ? max_c : max_t;
    t_eval = sum_c + sum_t + (m_per_eval - 1) * slowest;
    row->network_ms = sum_t * 1e3;
  } else {
    const double c0 = d[0].busy_s / evals;
    row->compute_ms[0] = c0 * 1e3;
    t_eval = c0;
    double net = 0;
    for (int k = 1; k < n; k++) {
      const double ck = d[k].busy_s / evals;
      const double tk = (d[k].passes ? 2 * lat : 0) +
                        ((double)d[k].bytes_recv + (double)d[k].act_bytes_sent) / evals / bw;
      row->compute_ms[k] = ck * 1e3;
      if (tk > net) net = tk;
      if (ck + tk > t_eval) t_eval = ck + tk;
    }
    row->network_ms = net * 1e3;
  }
  row->projected_tps = t_eval > 0 ? tokens / (evals * t_eval) : 0;
}

/* One engine's sequences, and the ranks' counters around its phases. */
typedef struct {
  tsr_engine_t *eng;
  tsr_seq_t **seqs;
  double wall[2];        /* prefill, decode */
  tsr_rank_stats_t *d[2]; /* counters of each phase, n each */
} phase_run_t;

/* Prefill then decode of B sequences on r->eng (reset first). */
static tsr_status_t run_phases(tsr_context_t *ctx, const cli_bench_mpi_t *o, int32_t B,
                               int32_t vocab, tsr_batch_t *b, int32_t *toks,
                               tsr_rank_stats_t *snap, phase_run_t *r) {
  const int n = tsr_context_ranks(ctx);
  tsr_status_t s = TSR_OK;
  for (int32_t i = 0; i < B && !s; i++) {
    if (r->seqs[i]) tsr_seq_reset(r->seqs[i]);
    else s = tsr_seq_create(r->eng, &r->seqs[i]);
  }
  if (!s) s = tsr_context_rank_stats(ctx, snap);
  double t0 = cli_now_s();
  if (!s) s = cli_bench_prefill(r->eng, r->seqs, B, b, o->n_prompt, vocab, toks);
  r->wall[0] = cli_now_s() - t0;
  if (!s) s = tsr_context_rank_stats(ctx, snap + n);
  if (!s) s = cli_bench_decode(r->eng, r->seqs, B, b, o->n_decode, vocab, toks, &r->wall[1]);
  if (!s) s = tsr_context_rank_stats(ctx, snap + 2 * n);
  if (s) return s;
  stats_diff(snap, snap + n, n, r->d[0]);
  stats_diff(snap + n, snap + 2 * n, n, r->d[1]);
  return TSR_OK;
}

/* One model, one batch size: `reps` repetitions, medians. In a pipeline of
 * several ranks each repetition first runs the phases one micro-batch at a
 * time (the compute of each rank alone, for the projection), then with
 * every rank busy (the measured rate). */
static tsr_status_t run_one(tsr_context_t *ctx, tsr_model_t *model, const cli_bench_mpi_t *o,
                            int32_t B, double bw, double lat, mpi_row_t *pre, mpi_row_t *dec) {
  const int n = tsr_context_ranks(ctx);
  const bool pipe = o->copts->mpi_split == TSR_SPLIT_LAYERS;
  const bool calibrate = pipe && n > 1;
  tsr_model_config_t c;
  tsr_model_config(model, &c);
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = TSR_PRECISION_INT8;
  so.max_seq = o->n_prompt + o->n_decode + 1;
  phase_run_t run[2] = {0}; /* measured, one at a time */
  tsr_batch_t *b = NULL;
  int32_t *toks = calloc((size_t)B, sizeof *toks);
  tsr_rank_stats_t *st = calloc((size_t)n * 7, sizeof *st);
  mpi_row_t *rows = calloc((size_t)o->reps * 2, sizeof *rows);
  double *v = calloc((size_t)o->reps, sizeof *v);
  tsr_status_t s = TSR_OK;
  for (int k = 0; k < 2; k++) {
    run[k].seqs = calloc((size_t)B, sizeof *run[k].seqs);
    if (!run[k].seqs) s = TSR_ERR(RESOURCE_EXHAUSTED, "batch of %d", B);
    if (st) run[k].d[0] = st + 3 * n + 2 * k * n, run[k].d[1] = run[k].d[0] + n;
  }
  if (!toks || !st || !rows || !v) s = TSR_ERR(RESOURCE_EXHAUSTED, "batch of %d", B);
  if (!s) s = tsr_engine_create(model, &so, &run[0].eng);
  so.mpi_depth = 1;
  if (!s && calibrate) s = tsr_engine_create(model, &so, &run[1].eng);
  if (!s) s = tsr_batch_create((size_t)B, &b);
  for (int rep = 0; rep < o->reps && !s; rep++) {
    if (calibrate) s = run_phases(ctx, o, B, c.vocab_size, b, toks, st, &run[1]);
    if (!s) s = run_phases(ctx, o, B, c.vocab_size, b, toks, st, &run[0]);
    if (s) break;
    for (int ph = 0; ph < 2; ph++) {
      const double evals = ph ? o->n_decode : 1;
      const double tokens = (double)B * (ph ? o->n_decode : o->n_prompt);
      project(run[0].d[ph], calibrate ? run[1].d[ph] : NULL, n, pipe, evals, run[0].wall[ph],
              tokens, bw, lat, &rows[2 * rep + ph]);
    }
  }
  /* the repetition with the median measured rate stands for each phase */
  for (int ph = 0; ph < 2 && !s; ph++) {
    for (int rep = 0; rep < o->reps; rep++) v[rep] = rows[2 * rep + ph].measured_tps;
    const double med = cli_median(v, o->reps);
    int pick = 0;
    double best = 1e300;
    for (int rep = 0; rep < o->reps; rep++) {
      double dlt = rows[2 * rep + ph].measured_tps - med;
      if (dlt < 0) dlt = -dlt;
      if (dlt < best) best = dlt, pick = rep;
    }
    mpi_row_t *out = ph ? dec : pre;
    *out = rows[2 * pick + ph];
    out->batch = B;
    out->phase = ph ? "decode" : "prefill";
  }
  for (int k = 0; k < 2; k++) {
    for (int32_t i = 0; run[k].seqs && i < B; i++) tsr_seq_destroy(run[k].seqs[i]);
    free(run[k].seqs);
    tsr_engine_destroy(run[k].eng);
  }
  tsr_batch_destroy(b);
  free(toks);
  free(st);
  free(rows);
  free(v);
  return s;
}

static void print_table(const mpi_row_t *r, int n_rows, int n, const cli_bench_mpi_t *o,
                        bool pipe) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("tessera bench --mpi: %d rank%s, %s; int8; prefill %d tokens per sequence, decode %d "
         "steps; median of %d\n",
         n, n == 1 ? "" : "s", pipe ? "pipeline of layers" : "sequences split across ranks",
         o->n_prompt, o->n_decode, o->reps);
  printf("measured: every rank on this host, sharing its %ld cores, messages over loopback\n",
         cores);
  printf("projected: one host per rank, each rank's compute as measured here %s, each message "
         "%.0f us + bytes at %.1f Gbit/s\n",
         pipe ? "with one micro-batch in flight (the ranks taking turns)"
              : "(ranks computing at once on the shared cores)",
         o->lat_us, o->gbit);
  printf("%-12s %5s %-8s %12s %6s %10s %9s  %-24s %10s %13s\n", "model", "batch", "phase",
         "measured t/s", "wait", "act B/tok", "msgs/eval", "compute ms/eval per rank",
         "net ms/eval", "projected t/s");
  for (int i = 0; i < n_rows; i++) {
    char comp[160];
    size_t len = 0;
    comp[0] = 0;
    for (int k = 0; k < n && len < sizeof comp - 12; k++)
      len += (size_t)snprintf(comp + len, sizeof comp - len, "%s%.2f", k ? "/" : "",
                              r[i].compute_ms[k]);
    printf("%-12s %5d %-8s %12.1f %5.0f%% %10.0f %9.1f  %-24s %10.3f %13.1f\n", r[i].preset,
           r[i].batch, r[i].phase, r[i].measured_tps, 100 * r[i].wait_frac, r[i].act_per_token,
           r[i].msgs_per_eval, comp, r[i].network_ms, r[i].projected_tps);
  }
  printf("wait: rank 0's time blocked on another rank, share of the phase's wall time\n");
}

static void print_json(const mpi_row_t *r, int n_rows, int n, const cli_bench_mpi_t *o,
                       bool pipe) {
  printf("{\n  \"ranks\": %d, \"split\": \"%s\", \"precision\": \"int8\", \"reps\": %d,\n"
         "  \"prompt\": %d, \"decode\": %d, \"network\": {\"gbit_s\": %.3f, \"latency_us\": "
         "%.3f},\n  \"rows\": [",
         n, pipe ? "layers" : "rows", o->reps, o->n_prompt, o->n_decode, o->gbit, o->lat_us);
  for (int i = 0; i < n_rows; i++) {
    printf("%s\n    {\"model\": \"%s\", \"batch\": %d, \"phase\": \"%s\", \"measured_tok_s\": "
           "%.3f, \"wait_fraction\": %.4f, \"act_bytes_per_token\": %.1f, \"msgs_per_eval\": "
           "%.2f, \"compute_ms_per_eval\": [",
           i ? "," : "", r[i].preset, r[i].batch, r[i].phase, r[i].measured_tps, r[i].wait_frac,
           r[i].act_per_token, r[i].msgs_per_eval);
    for (int k = 0; k < n; k++) printf("%s%.4f", k ? ", " : "", r[i].compute_ms[k]);
    printf("], \"network_ms_per_eval\": %.4f, \"projected_tok_s\": %.3f}", r[i].network_ms,
           r[i].projected_tps);
  }
  printf("%s]\n}\n", n_rows ? "\n  " : "");
}

int cli_bench_mpi(const cli_bench_mpi_t *o) {
  const char *cmd = "bench";
  tsr_context_t *ctx = NULL;
  tsr_status_t s = tsr_context_create(o->copts, &ctx);
  if (s) return cli_fail(cmd, s);
  if (tsr_context_rank(ctx) > 0) {
    s = tsr_context_serve_ranks(ctx);
    tsr_context_destroy(ctx);
    return s ? cli_fail(cmd, s) : 0;
  }
  const int n = tsr_context_ranks(ctx);
  if (n > MAX_RANKS) {
    tsr_context_destroy(ctx);
    fprintf(stderr, "tessera bench: --mpi: at most %d ranks (%d here)\n", MAX_RANKS, n);
    return 2;
  }
  const bool pipe = o->copts->mpi_split == TSR_SPLIT_LAYERS;
  const double bw = o->gbit * 1e9 / 8, lat = o->lat_us * 1e-6;
  mpi_row_t *rows = calloc(16 * (size_t)o->n_batches * 2, sizeof *rows);
  char *list = strdup(o->models);
  int n_rows = 0, n_models = 0;
  if (!rows || !list) s = TSR_ERR(RESOURCE_EXHAUSTED, "results");
  mkdir("build", 0755);
  mkdir(o->dir, 0755);
  for (char *tok = list ? strtok(list, ",") : NULL; tok && !s; tok = strtok(NULL, ",")) {
    if (n_models++ == 16) {
      s = TSR_ERR(OUT_OF_RANGE, "--models: at most 16 models");
      break;
    }
    char path[1024];
    s = cli_bench_model_path(o->dir, tok, o->json, path, sizeof path);
    tsr_model_t *model = NULL;
    if (!s) s = tsr_model_load(ctx, path, NULL, &model);
    for (int i = 0; i < o->n_batches && !s; i++) {
      if (!o->json)
        fprintf(stderr, "tessera bench: %s, batch %d, %d ranks\n", tok, o->batches[i], n);
      mpi_row_t *pre = &rows[n_rows], *dec = &rows[n_rows + 1];
      s = run_one(ctx, model, o, o->batches[i], bw, lat, pre, dec);
      if (!s) {
        snprintf(pre->preset, sizeof pre->preset, "%s", tok);
        snprintf(dec->preset, sizeof dec->preset, "%s", tok);
        n_rows += 2;
      }
    }
    tsr_model_destroy(model);
  }
  free(list);
  tsr_context_destroy(ctx);
  if (s) {
    free(rows);
    return cli_fail(cmd, s);
  }
  if (o->json) print_json(rows, n_rows, n, o, pipe);
  else print_table(rows, n_rows, n, o, pipe);
  free(rows);
  return 0;
}
