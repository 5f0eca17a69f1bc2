/*
 * cmd_bench_offload.c - `tessera bench --boards LIST|all` (or --offload-device
 * SPEC with board=): the crossover of the offload, per board profile.
 *
 * For every board (driver/boards, opened as fmodel:board=NAME so explicit
 * options apply), every model and batch size: CPU tokens/s measured here
 * next to the board's projected tokens/s, decode and prefill, and the
 * speedup; a PNG chart per board (gnuplot) with --plot DIR.
 *
 * What is measured and what is modeled:
 *   - the CPU profile (host/src/project.h): int8 weight bytes/s of a GEMV
 *     (1 x 14336 x 4096, 58 MB of weights) and int8 MACs/s of a GEMM
 *     (512 x 4096 x 4096), measured here (median of --reps), or given with
 *     --cpu-profile GBPS,GMACS;
 *   - the CPU path of the generated models (stories15M, stories110M,
 *     large): int8 decode of B sequences (B up to --measure-max) and int8
 *     prefill of one sequence, wall time here
 *     (median of --reps); the host's light ops of a pass (everything but
 *     the matmuls: the engine's light-op time) as measured in those runs;
 *   - the 7B shape (dim 4096, 32 layers, hidden 11008, 32 heads, vocab
 *     32000) has no file: its CPU figure is projected from the CPU profile,
 *     its light ops scaled from `large`'s by layers and dim;
 *   - the board: every matmul group through tsr_proj_model (project.c):
 *     the kernel's cycle model on the shapes alone (K in pieces where the
 *     executor cuts it), launch latency and two copies per launch (the
 *     ring stays resident), or on a board with doorbell_us a doorbell and
 *     three copies (queue mode), each at the host memory latency where the
 *     board has host memory access; placed where it pays by the rule of
 *     the `auto` policy (plan.c), launches queued ahead (ap_ctrl_chain) so
 *     a launch's latency overlaps the light ops before it (a doorbell
 *     follows them). No tile runs.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "bench_cli.h"
#include "cli.h"
#include "driver/board.h"
#include "driver/hal.h"
#include "driver/kernel_model.h"
#include "host/src/bench.h"
#include "host/src/model_file.h"
#include "host/src/project.h"

#define OB_MAX_MODELS 8
#define OB_MAX_BATCH 8
#define OB_MAX_DEVS 8

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera bench --boards LIST|all [options]\n"
          "       tessera bench --offload-device SPEC [options]   (SPEC with board=)\n"
          "\n"
          "The crossover of the offload: for each board profile (driver/boards, opened as\n"
          "fmodel:board=NAME), model and batch size, CPU tokens/s measured here next to the\n"
          "board's projected tokens/s (the kernel's cycle model on the shapes, launches and\n"
          "copies, every matmul group placed where it pays as the auto policy places it).\n"
          "\n"
          "  --boards LIST     board names, comma-separated, or all\n"
          "  --offload-device SPEC  one device spec instead (e.g. fmodel:board=u280,rows=64)\n"
          "  --models LIST     stories15M, stories110M, large, 7B (default: all four;\n"
          "                    7B is a shape only: its CPU figure is projected)\n"
          "  --batch LIST      batch sizes, comma-separated (default 1,8,32,128)\n"
          "  --prompt N        prefill tokens per sequence (default 128)\n"
          "  --decode N        decode steps per repetition at batch 1 (default 16; N/B at\n"
          "                    batch B, at least 4)\n"
          "  --measure-max B   measure CPU decode up to this batch size (prefill at batch\n"
          "                    1), project the rest from the CPU profile (default 32)\n"
          "  --reps N          repetitions, the median is reported (default 3)\n"
          "  --cpu-profile G,M fixed CPU profile: G GB/s of int8 GEMV weights, M GMAC/s of\n"
          "                    int8 GEMM (default: measured here)\n"
          "  --no-measure      no model runs: every CPU figure from the CPU profile, no\n"
          "                    light ops (deterministic with --cpu-profile)\n"
          "  --dir DIR         generated models (default build/bench)\n"
          "  --plot DIR        a PNG per board (speedup vs model size and batch) with its\n"
          "                    data and gnuplot script\n"
          "  -t, --threads N   threads (default: all)\n"
          "  -h, --help        this text\n");
}

typedef struct ob_model {
  char name[32];
  tsr_proj_shape_t shape;
  double params_m;
  bool has_file;
  /* measured here (0: not measured) */
  double pre_tps[OB_MAX_BATCH];   /* prefill of B sequences of n_prompt tokens */
  double dec_tps[OB_MAX_BATCH];   /* decode of B sequences, tokens/s          */
  bool pre_measured[OB_MAX_BATCH], dec_measured[OB_MAX_BATCH];
  /* the host's light ops of one pass (the engine's light-op time, all but
   * the matmuls), where known: measured, or scaled from `large` (7B) */
  double pre_light_s[OB_MAX_BATCH], dec_light_s[OB_MAX_BATCH];
  bool pre_light_known[OB_MAX_BATCH], dec_light_known[OB_MAX_BATCH];
} ob_model_t;

typedef struct ob_opts {
  char boards[256];
  const char *device;
  const char *models, *dir, *plot;
  int32_t batches[OB_MAX_BATCH];
  int n_batches;
  int32_t n_prompt, n_decode, measure_max;
  int reps, threads;
  bool measure, profile_given;
  tsr_cpu_profile_t cpu;
} ob_opts_t;

static double params_of(const tsr_proj_shape_t *s) {
  const double d = s->dim, hd = s->hidden, kv = (double)s->kv_heads * (s->dim / s->heads);
  return (s->layers * (2 * d * d + 2 * d * kv + 3 * d * hd) + 2.0 * s->vocab * d) / 1e6;
}

static tsr_status_t model_shape(const char *name, ob_model_t *m) {
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s", name);
  if (!strcmp(name, "7B")) {
    m->shape = (tsr_proj_shape_t){NULL, 4096, 11008, 32, 32, 32, 32000};
  } else {
    tsr_gen_params_t p;
    TSR_RETURN_IF(tsr_gen_preset(name, &p));
    if (!strcmp(name, "stories260K"))
      return TSR_ERR(INVALID_ARGUMENT, "--models: stories260K is too small to compare "
                     "(stories15M, stories110M, large, 7B)");
    m->shape = (tsr_proj_shape_t){NULL, p.dim, p.hidden_dim, p.n_layers, p.n_heads,
                                  p.n_kv_heads, p.vocab_size};
    m->has_file = true;
  }
  m->shape.name = m->name;
  m->params_m = params_of(&m->shape);
  return TSR_OK;
}

/* Host seconds of the matmuls of one pass of `rows` rows under the profile. */
static double matmul_s(const tsr_cpu_profile_t *p, const tsr_proj_shape_t *s, int32_t rows) {
  const int32_t hd = s->dim / s->heads, q = s->heads * hd, kv = s->kv_heads * hd;
  double t = tsr_proj_cpu_matmul_s(p, rows, q, s->dim) +
             2 * tsr_proj_cpu_matmul_s(p, rows, kv, s->dim) +
             tsr_proj_cpu_matmul_s(p, rows, s->dim, q) +
             2 * tsr_proj_cpu_matmul_s(p, rows, s->hidden, s->dim) +
             tsr_proj_cpu_matmul_s(p, rows, s->dim, s->hidden);
  return t * s->layers + tsr_proj_cpu_matmul_s(p, rows, s->vocab, s->dim);
}

static tsr_status_t measure_profile(const ob_opts_t *o, tsr_cpu_profile_t *out) {
  tsr_threadpool_t *pool = NULL;
  TSR_RETURN_IF(tsr_threadpool_create(o->threads, &pool));
  const tsr_isa_t isa = tsr_isa_detect();
  double gemv = 0, gemm = 0;
  tsr_status_t s = tsr_bench_qgemm(pool, isa, (tsr_bench_shape_t){1, 14336, 4096}, o->reps * 2 + 1,
                                   &gemv);
  if (!s)
    s = tsr_bench_qgemm(pool, isa, (tsr_bench_shape_t){512, 4096, 4096}, o->reps, &gemm);
  tsr_threadpool_destroy(pool);
  if (s) return s;
  out->weight_bytes_per_s = 14336.0 * 4096.0 / gemv;
  out->int8_macs_per_s = 512.0 * 4096.0 * 4096.0 / gemm;
  return TSR_OK;
}

/* Measures the CPU int8 path of model m: decode of B sequences for every
 * batch size up to measure_max, prefill of B sequences likewise. */
static tsr_status_t measure_model(const ob_opts_t *o, ob_model_t *m) {
  char path[1024];
  TSR_RETURN_IF(cli_bench_model_path(o->dir, m->name, false, path, sizeof path));
  int32_t max_b = 1, positions = o->n_prompt + 8;
  int32_t steps[OB_MAX_BATCH];
  for (int i = 0; i < o->n_batches; i++) {
    const int32_t B = o->batches[i];
    steps[i] = o->n_decode / B > 4 ? o->n_decode / B : 4;
    if (B > o->measure_max) continue;
    if (B > max_b) max_b = B;
    positions += o->reps * steps[i];
  }
  tsr_context_options_t co;
  tsr_context_options_init(&co);
  co.n_threads = o->threads;
  tsr_context_t *ctx = NULL;
  tsr_model_t *mod = NULL;
  tsr_engine_t *eng = NULL;
  tsr_batch_t *b = NULL;
  const int32_t n_seqs = max_b;
  tsr_seq_t **seqs = calloc((size_t)n_seqs, sizeof *seqs);
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_seqs);
  double *t = malloc(sizeof(double) * (size_t)o->reps);
  tsr_status_t s = seqs && toks && t ? TSR_OK : TSR_ERR(RESOURCE_EXHAUSTED, "offload bench");
  if (!s) s = tsr_context_create(&co, &ctx);
  if (!s) s = tsr_model_load(ctx, path, NULL, &mod);
  tsr_model_config_t c;
  memset(&c, 0, sizeof c);
  if (!s) {
    tsr_model_config(mod, &c);
    if (positions > c.seq_len)
      s = TSR_ERR(OUT_OF_RANGE, "%s: %d prompt tokens and the decode steps take %d positions, "
                  "more than the context of %d (fewer --prompt, --decode or --reps)", path,
                  o->n_prompt, positions, c.seq_len);
  }
  if (!s) {
    tsr_session_options_t so;
    tsr_session_options_init(&so);
    so.precision = TSR_PRECISION_INT8;
    so.max_seq = positions;
    so.max_batch_rows = max_b > o->n_prompt ? max_b : o->n_prompt;
    s = tsr_engine_create(mod, &so, &eng);
  }
  for (int32_t i = 0; i < n_seqs && !s; i++) s = tsr_seq_create(eng, &seqs[i]);
  if (!s) s = tsr_batch_create(0, &b);
  /* prefill: one sequence of n_prompt tokens from position 0 (larger
   * batches only add rows to a GEMM-bound pass: projected) */
  for (int i = 0; i < o->n_batches && !s; i++) {
    const int32_t B = o->batches[i];
    if (B > 1) continue;
    tsr_session_stats_t st0, st1;
    tsr_engine_get_stats(eng, &st0);
    for (int rep = 0; rep < o->reps && !s; rep++) {
      for (int32_t q = 0; q < B; q++) tsr_seq_reset(seqs[q]);
      const double t0 = tsr_now_s();
      s = cli_bench_prefill(eng, seqs, B, b, o->n_prompt, c.vocab_size, toks);
      t[rep] = tsr_now_s() - t0;
    }
    if (s) break;
    tsr_engine_get_stats(eng, &st1);
    const double pass = cli_median(t, o->reps);
    m->pre_tps[i] = (double)B * o->n_prompt / pass;
    m->pre_light_s[i] = (st1.light_s - st0.light_s) / o->reps;
    m->pre_measured[i] = m->pre_light_known[i] = true;
  }
  /* decode: the last prefill left max_b sequences at n_prompt, with their
   * next tokens (a larger B than prefilled is not measured) */
  if (!s) {
    for (int32_t q = 0; q < n_seqs; q++) tsr_seq_reset(seqs[q]);
    s = cli_bench_prefill(eng, seqs, n_seqs, b, 8, c.vocab_size, toks);
  }
  for (int i = 0; i < o->n_batches && !s; i++) {
    const int32_t B = o->batches[i];
    if (B > o->measure_max) continue;
    tsr_session_stats_t st0, st1;
    tsr_engine_get_stats(eng, &st0);
    for (int rep = 0; rep < o->reps && !s; rep++)
      s = cli_bench_decode(eng, seqs, B, b, steps[i], c.vocab_size, toks, &t[rep]);
    if (s) break;
    tsr_engine_get_stats(eng, &st1);
    const double total = cli_median(t, o->reps), pass = total / steps[i];
    m->dec_tps[i] = (double)B / pass;
    m->dec_light_s[i] = (st1.light_s - st0.light_s) / ((double)o->reps * steps[i]);
    m->dec_measured[i] = m->dec_light_known[i] = true;
  }
  tsr_batch_destroy(b);
  for (int32_t i = 0; seqs && i < n_seqs; i++) tsr_seq_destroy(seqs[i]);
  tsr_engine_destroy(eng);
  tsr_model_destroy(mod);
  tsr_context_destroy(ctx);
  free(seqs);
  free(toks);
  free(t);
  return s;
}

/* The light ops of a pass of B sequences: as known at this batch size, or
 * else scaled in proportion from the largest batch size below it where
 * they are known (norms, RoPE, attention and SwiGLU are per row or per
 * sequence); 0 when nothing is known (--no-measure). */
static double light_of(const ob_opts_t *o, const ob_model_t *m, bool prefill, int i) {
  const bool *known = prefill ? m->pre_light_known : m->dec_light_known;
  const double *light = prefill ? m->pre_light_s : m->dec_light_s;
  if (known[i]) return light[i];
  int best = -1;
  for (int j = 0; j < o->n_batches; j++)
    if (known[j] && o->batches[j] <= o->batches[i] &&
        (best < 0 || o->batches[j] > o->batches[best]))
      best = j;
  return best < 0 ? 0 : light[best] * o->batches[i] / o->batches[best];
}

typedef struct ob_dev {
  char spec[320];
  char label[64];
  tsr_hal_caps_t caps;
  tsr_km_timing_t timing;
} ob_dev_t;

static tsr_status_t open_dev(const char *spec, ob_dev_t *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->spec, sizeof d->spec, "%s", spec);
  tsr_hal_device_t *h = NULL;
  TSR_RETURN_IF_ERROR(tsr_hal_open(spec, &h), "--offload-device '%s'", spec);
  h->vt->query_caps(h, &d->caps);
  tsr_hal_close(h);
  if (!(d->caps.ops & (1u << TSR_OP_GEMM_I8_I32)) || (d->caps.flags & TSR_HAL_CAP_NO_COMPUTE))
    return TSR_ERR(INVALID_ARGUMENT, "--offload-device '%s': %s runs no int8 GEMM", spec,
                   d->caps.name);
  /* the timing exactly as the engine derives it (exec.c), so that the plan
   * and this projection see the same device */
  tsr_km_timing_init(&d->timing);
  d->timing.rows = d->caps.array_rows;
  d->timing.cols = d->caps.array_cols;
  d->timing.mem_bytes_per_cycle = d->caps.mem_bytes_per_cycle;
  d->timing.clock_hz = d->caps.clock_hz;
  if (d->caps.mem_ports) d->timing.ports = d->caps.mem_ports;
  if (d->caps.mem_latency) d->timing.mem_latency = d->caps.mem_latency;
  snprintf(d->label, sizeof d->label, "%s", d->caps.board[0] ? d->caps.board : spec);
  return TSR_OK;
}

static void placement(const tsr_proj_result_t *r, char *buf, size_t cap) {
  static const char *names[4] = {"qkv", "o", "gate_up", "down"};
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < 4; i++)
    if (r->on[i]) len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? "," : "", names[i]);
  if (r->classifier_on) len += (size_t)snprintf(buf + len, cap - len, "%sclassifier", len ? "," : "");
  if (!len) snprintf(buf, cap, "none");
}

typedef struct ob_row {
  double cpu_meas, cpu_model, board, serial, all, speedup, all_speedup;
} ob_row_t;

/* How much slower this model's matmuls ran here than the CPU profile says
 * (its matrices are smaller than the profile's 14336 x 4096): measured pass
 * less light ops over the profile's matmul time, at batch i or the largest
 * measured batch below it; 1 where nothing was measured (the 7B shape, whose
 * matrices are the profile's size). */
static double calibration(const ob_opts_t *o, const ob_model_t *m, bool prefill, int i) {
  const bool *meas = prefill ? m->pre_measured : m->dec_measured;
  int j = meas[i] ? i : -1;
  if (j < 0)
    for (int q = 0; q < o->n_batches; q++)
      if (meas[q] && o->batches[q] <= o->batches[i] && (j < 0 || o->batches[q] > o->batches[j]))
        j = q;
  if (j < 0) return 1;
  const int32_t rows = prefill ? o->batches[j] * o->n_prompt : o->batches[j];
  const double pass = rows / (prefill ? m->pre_tps[j] : m->dec_tps[j]);
  const double light = prefill ? m->pre_light_s[j] : m->dec_light_s[j];
  const double k = (pass - light) / matmul_s(&o->cpu, &m->shape, rows);
  return isfinite(k) && k > 0.05 ? k : 1;
}

static void project_row(const ob_opts_t *o, const ob_dev_t *d, const ob_model_t *m, bool prefill,
                        int i, ob_row_t *row, tsr_proj_result_t *r) {
  const int32_t B = o->batches[i];
  const int32_t rows = prefill ? B * o->n_prompt : B;
  const double tokens = rows;
  const double light = light_of(o, m, prefill, i);
  /* the host side at the rate this model's matmuls ran here */
  const double k = calibration(o, m, prefill, i);
  const tsr_cpu_profile_t eff = {o->cpu.weight_bytes_per_s / k, o->cpu.int8_macs_per_s / k};
  tsr_proj_model(&m->shape, &d->caps, &d->timing, &eff, rows, light, r);
  row->cpu_model = tokens / (matmul_s(&o->cpu, &m->shape, rows) + light);
  row->board = tokens / r->board_s;
  row->serial = tokens / r->serial_s;
  row->all = tokens / r->all_s;
  const bool meas = prefill ? m->pre_measured[i] : m->dec_measured[i];
  row->cpu_meas = meas ? (prefill ? m->pre_tps[i] : m->dec_tps[i]) : 0;
  /* over the host side of the same projection: the measured rate where
   * measured (calibrated), the profile's elsewhere */
  row->speedup = r->cpu_s / r->board_s;
  row->all_speedup = r->cpu_s / r->all_s;
}

static bool write_plot(const ob_opts_t *o, const ob_dev_t *d, const ob_model_t *ms, int n) {
  char name[96], path[4200];
  snprintf(name, sizeof name, "crossover-%s", d->label);
  for (char *p = name; *p; p++)
    if (*p == '/' || *p == ':' || *p == ',' || *p == '=') *p = '_';
  snprintf(path, sizeof path, "%s/%s.dat", o->plot, name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "tessera bench: --plot: cannot write '%s'\n", path);
    return false;
  }
  fprintf(f, "# model params_millions then speedup with every matmul group on the board (board "
             "/ CPU tokens/s) for decode at");
  for (int i = 0; i < o->n_batches; i++) fprintf(f, " B=%d", o->batches[i]);
  fprintf(f, ", then prefill at the same B\n");
  for (int k = 0; k < n; k++) {
    fprintf(f, "%s %.3f", ms[k].name, ms[k].params_m);
    for (int pf = 0; pf < 2; pf++)
      for (int i = 0; i < o->n_batches; i++) {
        ob_row_t row;
        tsr_proj_result_t r;
        project_row(o, d, &ms[k], pf == 1, i, &row, &r);
        fprintf(f, " %.4g", row.all_speedup);
      }
    fprintf(f, "\n");
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/%s.gp", o->plot, name);
  f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "tessera bench: --plot: cannot write '%s'\n", path);
    return false;
  }
  char title[128], caption[256];
  snprintf(title, sizeof title,
           "offload on %s, every matmul on the board: projected board / CPU tokens/s", d->label);
  snprintf(caption, sizeof caption,
           "%ux%u MACs at %.0f MHz, %u x %.1f GB/s, %s %.0f us, %.0f us per copy%s; CPU %s; "
           "below 1 the board loses and auto keeps the CPU",
           d->caps.array_rows, d->caps.array_cols, d->caps.clock_hz / 1e6,
           d->caps.mem_ports ? d->caps.mem_ports : 1,
           d->caps.mem_bytes_per_cycle * d->caps.clock_hz / 1e9,
           (d->caps.flags & TSR_HAL_CAP_QUEUE) ? "doorbell" : "launch",
           tsr_hal_ring_latency_s(&d->caps) * 1e6, tsr_hal_copy_latency_s(&d->caps) * 1e6,
           (d->caps.flags & TSR_HAL_CAP_HOST_MEM) ? " (host memory)" : "",
           o->measure ? "measured here (7B projected)" : "from the CPU profile");
  cli_plot_script_head(f, name, title, caption);
  fprintf(f, "set logscale x\nset logscale y\n"
             "set xlabel \"model parameters (millions, log scale)\"\n"
             "set ylabel \"speedup (log scale; 1 = break-even)\"\n"
             "plot 1 with lines lc rgb \"black\" dt 2 title \"break-even\"");
  for (int pf = 0; pf < 2; pf++)
    for (int i = 0; i < o->n_batches; i++)
      fprintf(f, ", \\\n  \"%s.dat\" using 2:%d with linespoints lw 2 pt %d dt %d title "
                 "\"%s B=%d\"",
              name, 3 + pf * o->n_batches + i, 5 + i, pf ? 3 : 1, pf ? "prefill" : "decode",
              o->batches[i]);
  fprintf(f, "\n");
  fclose(f);
  char script[128];
  snprintf(script, sizeof script, "%s.gp", name);
  char *argv[] = {"gnuplot", script, NULL};
  cli_child_t c;
  char why[512];
  if (!cli_child_run(argv, o->plot, true, false, 60.0, &c, why, sizeof why) ||
      cli_child_failed(&c, why, sizeof why)) {
    fprintf(stderr, "tessera bench: --plot: gnuplot %s/%s: %s\n", o->plot, script, why);
    cli_child_free(&c);
    return false;
  }
  cli_child_free(&c);
  printf("chart: %s/%s.png (data %s.dat, script %s.gp)\n", o->plot, name, name, name);
  return true;
}

static void print_board(const ob_opts_t *o, const ob_dev_t *d, const ob_model_t *ms, int n) {
  const tsr_hal_caps_t *c = &d->caps;
  const unsigned ports = c->mem_ports ? c->mem_ports : 1;
  printf("\nboard %s (%s): %ux%u MACs at %.0f MHz; %u read port%s x %.2f GB/s = %.1f GB/s; "
         "link %.2f GB/s, %.1f us per copy%s, %.1f us per %s\n",
         d->label, c->name, c->array_rows, c->array_cols, c->clock_hz / 1e6, ports,
         ports == 1 ? "" : "s", c->mem_bytes_per_cycle * c->clock_hz / 1e9,
         ports * c->mem_bytes_per_cycle * c->clock_hz / 1e9, c->link_bytes_per_s / 1e9,
         tsr_hal_copy_latency_s(c) * 1e6,
         (c->flags & TSR_HAL_CAP_HOST_MEM) ? " (host memory the kernel reaches)" : "",
         tsr_hal_ring_latency_s(c) * 1e6,
         (c->flags & TSR_HAL_CAP_QUEUE) ? "doorbell (queue mode)" : "launch");
  printf("  %-11s %8s %-7s %4s %11s %11s %11s %11s %8s %11s %8s %8s  %s\n", "model", "params",
         "phase", "B", "cpu meas", "cpu model", "board", "board serl", "speedup", "all on brd",
         "all", "rings", "groups on the board (auto)");
  for (int k = 0; k < n; k++)
    for (int pf = 0; pf < 2; pf++)
      for (int i = 0; i < o->n_batches; i++) {
        ob_row_t row;
        tsr_proj_result_t r;
        project_row(o, d, &ms[k], pf == 1, i, &row, &r);
        char meas[24], where[64];
        if (row.cpu_meas > 0) snprintf(meas, sizeof meas, "%.1f", row.cpu_meas);
        else snprintf(meas, sizeof meas, "-");
        placement(&r, where, sizeof where);
        printf("  %-11s %7.0fM %-7s %4d %11s %11.1f %11.1f %11.1f %7.2fx %11.1f %7.2fx %8d  %s\n",
               ms[k].name, ms[k].params_m, pf ? "prefill" : "decode", o->batches[i], meas,
               row.cpu_model, row.board, row.serial, row.speedup, row.all, row.all_speedup,
               r.launches, where);
      }
}

static bool parse_list_i32(const char *s, int32_t *out, int *n, int max, int32_t hi) {
  *n = 0;
  const char *p = s;
  while (*p) {
    char *e = NULL;
    long v = strtol(p, &e, 10);
    if (e == p || (*e && *e != ',') || v < 1 || v > hi || *n >= max) {
      fprintf(stderr, "tessera bench: --batch: entry %d of '%s' is not a size in [1, %d] (at "
                      "most %d sizes)\n", *n + 1, s, hi, max);
      return false;
    }
    out[(*n)++] = (int32_t)v;
    p = *e ? e + 1 : e;
  }
  return *n > 0;
}

bool cli_bench_offload_wanted(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--boards")) return true;
    if (!strcmp(argv[i], "--offload-device") && i + 1 < argc && strstr(argv[i + 1], "board="))
      return true;
  }
  return false;
}

int cli_bench_offload(int argc, char **argv) {
  ob_opts_t o = {.models = "stories15M,stories110M,large,7B", .dir = "build/bench",
                 .batches = {1, 8, 32, 128}, .n_batches = 4, .n_prompt = 128,
                 .n_decode = 16, .measure_max = 32, .reps = 3, .measure = true};
  for (int i = 1; i < argc; i++) /* also `bench --boards --help` */
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const bool has = i + 1 < argc;
    if (!strcmp(a, "--no-measure")) {
      o.measure = false;
      continue;
    }
    if (!has) {
      fprintf(stderr, "tessera bench: option '%s' %s (see --help)\n", a,
              a[0] == '-' ? "needs a value or is unknown here" : "is not an option");
      return 2;
    }
    const char *v = argv[++i];
    char *e = NULL;
    if (!strcmp(a, "--boards")) {
      snprintf(o.boards, sizeof o.boards, "%s", v);
    } else if (!strcmp(a, "--offload-device")) {
      o.device = v;
    } else if (!strcmp(a, "--models")) {
      o.models = v;
    } else if (!strcmp(a, "--dir")) {
      o.dir = v;
    } else if (!strcmp(a, "--plot")) {
      o.plot = v;
    } else if (!strcmp(a, "--batch")) {
      if (!parse_list_i32(v, o.batches, &o.n_batches, OB_MAX_BATCH, 1024)) return 2;
    } else if (!strcmp(a, "--cpu-profile")) {
      double g = strtod(v, &e), mm = e && *e == ',' ? strtod(e + 1, &e) : 0;
      if (!e || *e || !(g > 0) || !(mm > 0) || !isfinite(g) || !isfinite(mm)) {
        fprintf(stderr, "tessera bench: --cpu-profile: '%s' is not GBPS,GMACS (two positive "
                        "numbers, e.g. 40,400)\n", v);
        return 2;
      }
      o.cpu.weight_bytes_per_s = g * 1e9;
      o.cpu.int8_macs_per_s = mm * 1e9;
      o.profile_given = true;
    } else if (!strcmp(a, "--prompt") || !strcmp(a, "--decode") || !strcmp(a, "--reps") ||
               !strcmp(a, "--measure-max") || !strcmp(a, "-t") || !strcmp(a, "--threads")) {
      long x = strtol(v, &e, 10);
      const long lo = !strcmp(a, "-t") || !strcmp(a, "--threads") ? 0 : 1;
      if (e == v || *e || x < lo || x > 4096) {
        fprintf(stderr, "tessera bench: %s: '%s' is not a number in [%ld, 4096]\n", a, v, lo);
        return 2;
      }
      if (!strcmp(a, "--prompt")) o.n_prompt = (int32_t)x;
      else if (!strcmp(a, "--decode")) o.n_decode = (int32_t)x;
      else if (!strcmp(a, "--reps")) o.reps = (int)x;
      else if (!strcmp(a, "--measure-max")) o.measure_max = (int32_t)x;
      else o.threads = (int)x;
    } else {
      fprintf(stderr, "tessera bench: unknown option '%s' with --boards (see bench --boards "
                      "--help)\n", a);
      return 2;
    }
  }
  if (o.boards[0] && o.device) {
    fprintf(stderr, "tessera bench: --boards and --offload-device exclude each other\n");
    return 2;
  }
  if (o.threads == 0) o.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (o.plot && !cli_plot_prepare(o.plot)) return 2;
  for (int i = 0; i < o.n_batches; i++)
    if ((int64_t)o.batches[i] * o.n_prompt > TSR_HW_MAX_DIM) {
      fprintf(stderr, "tessera bench: prefill of %d x %d tokens is more rows than a "
                      "descriptor takes (%d)\n", o.batches[i], o.n_prompt, TSR_HW_MAX_DIM);
      return 2;
    }

  /* the devices: one spec, or fmodel:board=NAME per board */
  ob_dev_t *devs = calloc(OB_MAX_DEVS, sizeof *devs);
  if (!devs) return cli_fail("bench", TSR_ERR(RESOURCE_EXHAUSTED, "devices"));
  int n_devs = 0;
  tsr_status_t s = TSR_OK;
  if (o.device) {
    s = open_dev(o.device, &devs[n_devs++]);
  } else {
    const bool all = !strcmp(o.boards, "all");
    char list[256];
    if (all) {
      size_t len = 0;
      list[0] = '\0';
      for (size_t b = 0; b < tsr_board_builtin_count(); b++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", b ? "," : "",
                                tsr_board_builtin_name(b));
    } else {
      snprintf(list, sizeof list, "%s", o.boards);
    }
    for (char *tok = strtok(list, ","); tok && !s; tok = strtok(NULL, ",")) {
      if (n_devs == OB_MAX_DEVS) {
        s = TSR_ERR(OUT_OF_RANGE, "--boards: at most %d boards", OB_MAX_DEVS);
        break;
      }
      char spec[300];
      snprintf(spec, sizeof spec, "fmodel:board=%s", tok);
      s = open_dev(spec, &devs[n_devs++]);
    }
  }
  ob_model_t ms[OB_MAX_MODELS];
  int n_models = 0;
  if (!s) {
    char list[256];
    snprintf(list, sizeof list, "%s", o.models);
    for (char *tok = strtok(list, ","); tok && !s; tok = strtok(NULL, ",")) {
      if (n_models == OB_MAX_MODELS) {
        s = TSR_ERR(OUT_OF_RANGE, "--models: at most %d models", OB_MAX_MODELS);
        break;
      }
      s = model_shape(tok, &ms[n_models++]);
    }
  }
  if (!s && !o.profile_given) s = measure_profile(&o, &o.cpu);
  if (s) {
    free(devs);
    return cli_fail("bench", s);
  }
  printf("CPU profile (%s): int8 GEMV %.1f GB/s of weights, int8 GEMM %.1f GMAC/s; %d threads\n",
         o.profile_given ? "given" : "measured here, median", o.cpu.weight_bytes_per_s / 1e9,
         o.cpu.int8_macs_per_s / 1e9, o.threads);
  /* measured CPU runs, then the 7B shape's light ops from large's */
  const ob_model_t *large = NULL;
  for (int k = 0; k < n_models && o.measure && !s; k++) {
    if (!ms[k].has_file) continue;
    fprintf(stderr, "tessera bench: measuring %s on the CPU\n", ms[k].name);
    s = measure_model(&o, &ms[k]);
    if (!strcmp(ms[k].name, "large")) large = &ms[k];
  }
  if (s) {
    free(devs);
    return cli_fail("bench", s);
  }
  for (int k = 0; k < n_models; k++) {
    if (ms[k].has_file || !large) continue;
    const double f = (double)ms[k].shape.dim / large->shape.dim * ms[k].shape.layers /
                     large->shape.layers;
    for (int i = 0; i < o.n_batches; i++) {
      ms[k].dec_light_s[i] = large->dec_light_s[i] * f;
      ms[k].dec_light_known[i] = large->dec_light_known[i];
      ms[k].pre_light_s[i] = large->pre_light_s[i] * f;
      ms[k].pre_light_known[i] = large->pre_light_known[i];
    }
  }
  printf("CPU: int8, measured here (wall time, median of %d; prefill of one %d-token prompt, "
         "decode up to B=%d)%s; above that and for shapes without a file, projected from the CPU "
         "profile%s\n",
         o.reps, o.n_prompt, o.measure_max, o.measure ? "" : " [not run: --no-measure]",
         large ? " (7B light ops scaled from large's)" : "");
  printf("board: projected (cycle model on the shapes, launches queued ahead; 'board serl' "
         "without the queue), each group where it pays (the auto policy); 'all on brd' every "
         "group on the board; speedups over cpu meas (cpu model where not measured); 'rings' "
         "per pass: launches, or doorbells on a board in queue mode\n");
  for (int d = 0; d < n_devs; d++) {
    print_board(&o, &devs[d], ms, n_models);
    if (o.plot && !write_plot(&o, &devs[d], ms, n_models)) {
      free(devs);
      return 1;
    }
  }
  free(devs);
  return 0;
}
