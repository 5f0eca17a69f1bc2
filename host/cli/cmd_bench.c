/*
 * cmd_bench.c - `tessera bench`: CPU kernel and model benchmarks.
 *
 * Kernels: memory read bandwidth, int8 and fp32 arithmetic peaks, OpenBLAS
 * sgemm, and the int8 GEMV/GEMM kernels with their ratio to the limit that
 * bounds them (host/src/bench.c). Models: prefill and decode tokens/s in
 * fp32 and int8 on generated models of several sizes (written once into
 * BUILD/bench/). Every figure is the median of --reps runs. Per model also:
 * load time per precision, `tessera run` as a child process (wall time and
 * peak RSS, bench_proc.c), decode at several context depths, and with
 * --peer llama-bench's figures on the same files, alternated with tessera's
 * repetitions (bench_peer.c); --plot writes the charts (bench_plot.c).
 * --batch runs a sweep instead: aggregate int8 decode throughput of B
 * sequences evaluated together on one engine, on the CPU and projected onto
 * the offload device.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "host/src/bench.h"
#include "cli.h"
#include "host/src/model_file.h"
#include "bench_cli.h"

/* The depth sweep: decode tokens/s of DEPTH_STEPS steps starting at each
 * position. */
#define DEPTH_MAX 8
#define DEPTH_STEPS 16
/* Whole-process runs and loads per precision (median), at most. */
#define PROC_MAX_RUNS 3
#define LOAD_MAX_RUNS 3
/* A tessera run child that takes longer than this is killed. */
#define PROC_TIMEOUT_S 900.0
/* The CPU batch sweep --plot adds to the model table. */
#define PLOT_N_BATCHES 5
static const int32_t plot_batches[PLOT_N_BATCHES] = {1, 2, 4, 8, 16};

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera bench [options]\n"
          "\n"
          "  --models LIST    generated model presets to run, comma-separated\n"
          "                   (default stories15M,stories110M; 'none' skips models)\n"
          "  --kernels        kernel measurements only (no models)\n"
          "  --no-kernels     model measurements only\n"
          "  --reps N         repetitions per figure, the median is reported (default 5)\n"
          "  --prompt N       prefill length in tokens (default 128)\n"
          "  --decode N       decode steps (default 64)\n"
          "  --dir DIR        where generated models are kept (default build/bench)\n"
          "  --offload-device SPEC  also project the int8 offload path onto this device\n"
          "                   (default fmodel: the kernel's cycle model, 16x16 at 300 MHz\n"
          "                   behind PCIe; sim for RTL cycles, slower; none to skip)\n"
          "  --boards LIST    the crossover per board profile instead (names or all; also\n"
          "                   --offload-device SPEC with board=): see bench --boards --help\n"
          "  -t, --threads N  threads (default: all)\n"
          "  --batch LIST     batched decode instead: for each size B (comma-separated,\n"
          "                   1..1024), B sequences on one int8 engine, each prefilled once\n"
          "                   with its own --prompt tokens (default 8), then decode steps of\n"
          "                   one token per sequence: aggregate tokens/s on the CPU, and\n"
          "                   projected on --offload-device with every matmul there; and\n"
          "                   the batch size where the device overtakes the CPU. Models\n"
          "                   default to stories110M,large; --decode N steps per repetition\n"
          "                   at batch 1, N/B at batch B, at least 4 (default 24)\n"
          "  --auto           with --batch: also the partitioner's own choice (auto policy;\n"
          "                   one more engine per model)\n"
          "  --mpi            under mpirun: the model across the ranks (int8), measured\n"
          "                   here and projected onto --network; --batch sizes (default\n"
          "                   1,8), --prompt tokens per sequence (default 64), --decode\n"
          "                   steps (default 16), --reps (default 3); models default to\n"
          "                   stories110M,large. With --mpi-split rows|layers,\n"
          "                   --mpi-timeout MS and --device (one list per rank, ';')\n"
          "  --network G,US   the network of the projection: G Gbit/s, US microseconds\n"
          "                   per message (default 25,10: 25 GbE)\n"
          "  --peer llama-bench=PATH  also run llama.cpp's llama-bench on the same\n"
          "                   generated files (-p PROMPT -n DECODE -t THREADS -r 1 -o json),\n"
          "                   one run after each tessera repetition: the f32 file against\n"
          "                   fp32, a q8_0 file of the model against int8 on that file;\n"
          "                   prints its figures and tessera/peer ratios. A peer that fails\n"
          "                   is named with the reason and the table goes on without it\n"
          "  --depths LIST    decode at depth: positions where %d timed greedy decode\n"
          "                   steps start, comma-separated (default 0,256,512,896 where\n"
          "                   the context holds them, else 0 and 1/4, 1/2, 7/8 of it);\n"
          "                   'none' skips the sweep\n"
          "  --half           also fp16 on each model's F16 file and bf16 on its BF16 file\n"
          "                   (generated beside the f32 one), against the peer's runs on them\n"
          "  --no-process     no whole-process runs (`tessera run` as a child process:\n"
          "                   its wall time and peak RSS; load times are always measured)\n"
          "  --plot DIR       PNG charts (gnuplot) in DIR, each with its data (.dat) and\n"
          "                   script (.gp): models.png (tokens/s vs parameters), depth.png,\n"
          "                   batch.png (adds a CPU batch sweep B=1..16 to the table),\n"
          "                   roofline.png (the kernels against the limits measured here);\n"
          "                   with --batch: batch.png of that sweep\n"
          "  --json           print JSON instead of a table\n"
          "  -h, --help       this text\n",
          DEPTH_STEPS);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Parameters of the model in millions (embedding and classifier counted
 * once when shared). */
static double params_millions(const tsr_model_config_t *c) {
  const double hd = c->hidden_dim, d = c->dim, kv = (double)c->n_kv_heads * c->head_dim;
  const double e = c->n_experts ? c->n_experts : 1; /* experts, and their router */
  return (c->n_layers * (d * d * 2 + 2 * d * kv + 3 * d * hd * e + (c->n_experts ? d * e : 0)) +
          (c->shared_classifier ? 1 : 2) * (double)c->vocab_size * d) / 1e6;
}

/* The generated model of `preset` with weights of `type` (seed 1), written
 * on first use. */
static tsr_status_t bench_model_file(const char *dir, const char *preset, tsr_dtype_t type,
                                     bool quiet, char *path, size_t cap) {
  tsr_gen_params_t p;
  TSR_RETURN_IF(tsr_gen_preset(preset, &p));
  snprintf(path, cap, "%s/%s-%s-seed1.gguf", dir, preset,
           type == TSR_DTYPE_Q8_0   ? "q8_0"
           : type == TSR_DTYPE_F16  ? "f16"
           : type == TSR_DTYPE_BF16 ? "bf16"
                                    : "f32");
  struct stat st;
  if (stat(path, &st) == 0) return TSR_OK;
  p.seed = 1;
  p.type = type;
  if (!quiet) fprintf(stderr, "tessera bench: generating %s\n", path);
  return tsr_gen_model_write(path, &p);
}

tsr_status_t cli_bench_model_path(const char *dir, const char *preset, bool quiet,
                                     char *path, size_t cap) {
  return bench_model_file(dir, preset, TSR_DTYPE_F32, quiet, path, cap);
}

/* The device memory the offload engines need for the model's int8
 * weights, with room for staging; fmodel's default (256 MiB) holds
 * stories110M but not `large`. */
static uint64_t offload_mem_bytes(const tsr_model_config_t *c) {
  const double d = c->dim, hd = c->hidden_dim, kv = (double)c->n_kv_heads * c->head_dim;
  const double q = (double)c->n_heads * c->head_dim;
  const double e = c->n_experts ? c->n_experts : 1;
  const double w =
      c->n_layers * (d * q * 2 + 2 * d * kv + 3 * d * hd * e + (c->n_experts ? d * e : 0)) +
      (double)c->vocab_size * d;
  uint64_t bytes = (uint64_t)(w * 1.125) + (128ull << 20);
  bytes = (bytes + (64ull << 20) - 1) & ~((64ull << 20) - 1);
  return bytes > (256ull << 20) ? bytes : 256ull << 20;
}

/* `spec` with room for the model's weights in device memory (fmodel and
 * sim, unless the spec sets mem=), so that --offload all does put every
 * matmul on the device. Only a single-entry spec is changed. */
static void offload_spec(const char *spec, const tsr_model_config_t *c, char *out, size_t cap) {
  const char *colon = strchr(spec, ':');
  const size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
  const bool sized = (name_len == 6 && !strncmp(spec, "fmodel", 6)) ||
                     (name_len == 3 && !strncmp(spec, "sim", 3));
  const bool single = colon || !strchr(spec, ',');
  size_t len = (size_t)snprintf(out, cap, "%s", spec);
  if (single && sized && !strstr(spec, "mem=") && len < cap)
    snprintf(out + len, cap - len, "%cmem=%" PRIu64 "M", colon ? ',' : ':',
             offload_mem_bytes(c) >> 20);
}


/* The peer's figures on one file. */
typedef struct {
  bool ok;
  int reps;
  double pp_tps, tg_tps; /* medians */
  char err[640];         /* why it failed */
} peer_result_t;

typedef struct {
  char preset[32];
  char path[1024];
  double params_m;
  tsr_model_config_t cfg;
  int32_t n_prompt, n_decode; /* as run: clipped to the model's context */
  char off_spec[128]; /* the offload device as opened (offload_spec) */
  double prefill_tps[2], decode_tps[2]; /* [fp32, int8] */
  double off_prefill_tps, off_decode_tps; /* int8, offloaded, projected */
  /* tsr_model_load + tsr_session_create of the precision (the weights
   * prepared for it), warm page cache, median of load_runs */
  double load_ms[2];
  int load_runs;
  /* `tessera run` as a child process: wall time (median of proc_runs) and
   * peak RSS (the largest of the runs); proc_err says why a run failed */
  int32_t proc_steps;
  int proc_runs;
  double proc_wall_s[2];
  long proc_rss_kib[2];
  char proc_err[2][320];
  /* decode at depth */
  int n_depths, depths_skipped;
  int32_t depths[DEPTH_MAX];
  double depth_tps[2][DEPTH_MAX];
  /* the peer on the same files, alternated with tessera's repetitions:
   * [0] the f32 file against fp32, [1] the q8_0 file against int8 */
  bool peer_ran;
  peer_result_t peer[2];
  char q8_path[1024];
  double q8_prefill_tps, q8_decode_tps; /* tessera int8 on the q8_0 file */
  double q8_load_ms;
  /* --half: fp16 on the model's F16 file, bf16 on its BF16 file ([0], [1]),
   * with the peer on the same files */
  bool half_ran;
  char half_path[2][1024];
  double half_prefill_tps[2], half_decode_tps[2], half_load_ms[2];
  peer_result_t half_peer[2];
  /* CPU int8 batch sweep (with --plot) */
  int n_batches, batch_reps;
  int32_t batches[PLOT_N_BATCHES];
  double batch_cpu_tps[PLOT_N_BATCHES];
} model_result_t;

/* How bench_model runs each model. */
typedef struct {
  int reps;
  int32_t n_prompt, n_decode;
  bool depths_off;
  int n_depths; /* 0: the default depths (depth_list) */
  const int32_t *depths;
  const cli_peer_t *peer; /* NULL: none */
  int threads;            /* resolved (> 0): the peer's -t */
} model_bench_t;

/* The int8 offload path on `device`: every matmul on the device (--offload
 * all), one prefill and n_decode greedy steps. The figures are projections:
 * host time of the ops that stay on the host (measured) plus the devices'
 * board time (cycles at their clock, launches, copies over the link); the
 * device's own cycle counts are deterministic, so one run suffices. */
static tsr_status_t bench_offload(const char *device, int n_threads, const char *path,
                                  int n_prompt, int n_decode, model_result_t *r) {
  tsr_context_options_t co;
  tsr_context_options_init(&co);
  co.n_threads = n_threads;
  co.devices = device;
  co.offload = TSR_OFFLOAD_ALL;
  co.fallback = false; /* a projection from a device that fell back means nothing */
  tsr_context_t *ctx = NULL;
  tsr_model_t *m = NULL;
  tsr_session_t *sess = NULL;
  tsr_status_t s = tsr_context_create(&co, &ctx);
  if (!s) s = tsr_model_load(ctx, path, NULL, &m);
  tsr_model_config_t c;
  if (!s) {
    tsr_model_config(m, &c);
    if (n_prompt + n_decode > c.seq_len) {
      n_prompt = c.seq_len / 2;
      n_decode = c.seq_len - n_prompt;
    }
    tsr_session_options_t so;
    tsr_session_options_init(&so);
    so.precision = TSR_PRECISION_INT8;
    s = tsr_session_create(m, &so, &sess);
  }
  int32_t *toks = s ? NULL : malloc(sizeof(int32_t) * (size_t)n_prompt);
  if (!s && !toks) {
    tsr_session_destroy(sess);
    tsr_model_destroy(m);
    tsr_context_destroy(ctx);
    fprintf(stderr, "tessera bench: out of memory\n");
    return NULL;
  }
  tsr_session_stats_t s0, s1, s2;
  const float *logits = NULL;
  if (!s) {
    for (int i = 0; i < n_prompt; i++) toks[i] = (int32_t)((i * 7919 + 1) % c.vocab_size);
    tsr_session_get_stats(sess, &s0);
    s = tsr_session_eval(sess, toks, (size_t)n_prompt, &logits);
  }
  if (!s) tsr_session_get_stats(sess, &s1);
  for (int i = 0; i < n_decode && !s; i++) {
    int32_t best = 0;
    for (int32_t v = 1; v < c.vocab_size; v++)
      if (logits[v] > logits[best]) best = v;
    s = tsr_session_eval(sess, &best, 1, &logits);
  }
  if (!s) {
    tsr_session_get_stats(sess, &s2);
    double pre = (s1.cpu_s - s0.cpu_s) + (s1.board_projected_s - s0.board_projected_s);
    double dec = (s2.cpu_s - s1.cpu_s) + (s2.board_projected_s - s1.board_projected_s);
    r->off_prefill_tps = pre > 0 ? n_prompt / pre : 0;
    r->off_decode_tps = dec > 0 ? n_decode / dec : 0;
  }
  free(toks);
  tsr_session_destroy(sess);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  return s;
}

/* The depths of the sweep for a context of seq_len positions: the
 * requested ones that leave room for DEPTH_STEPS steps (the others counted
 * in *skipped), or by default 0, 256, 512 and 896 where they fit, and for a
 * context too short for three of them 0, 1/4, 1/2 and 7/8 of it. */
static int depth_list(const model_bench_t *o, int32_t seq_len, int32_t *out, int *skipped) {
  static const int32_t def[] = {0, 256, 512, 896};
  const int32_t *req = o->n_depths ? o->depths : def;
  const int n_req = o->n_depths ? o->n_depths : 4;
  int n = 0;
  *skipped = 0;
  if (seq_len < DEPTH_STEPS) {
    *skipped = n_req;
    return 0;
  }
  for (int i = 0; i < n_req; i++) {
    if (req[i] + DEPTH_STEPS <= seq_len && n < DEPTH_MAX) out[n++] = req[i];
    else ++*skipped;
  }
  if (!o->n_depths && n < 3) {
    const int32_t last = seq_len - DEPTH_STEPS;
    const int32_t f[] = {0, seq_len / 4, seq_len / 2, seq_len * 7 / 8 < last ? seq_len * 7 / 8 : last};
    n = 0;
    *skipped = 0;
    for (int i = 0; i < 4; i++)
      if (f[i] >= 0 && (!n || f[i] > out[n - 1])) out[n++] = f[i];
  }
  return n;
}

/* Prompt tokens of the benchmarks: a fixed sequence over the vocabulary. */
static void bench_tokens(int32_t *toks, int32_t n, int32_t vocab) {
  for (int32_t i = 0; i < n; i++) toks[i] = (int32_t)((i * 7919 + 1) % vocab);
}

/* Decode tokens/s at each depth of r: per repetition, the session is
 * prefilled (untimed) up to each depth in turn and DEPTH_STEPS greedy
 * decode steps from there are timed; median of reps per depth. */
static tsr_status_t depth_sweep(tsr_session_t *sess, model_result_t *r, int prec, int reps,
                                int32_t *toks, double *t) {
  const int32_t vocab = r->cfg.vocab_size;
  tsr_status_t s = TSR_OK;
  for (int rep = 0; rep < reps && !s; rep++) {
    tsr_session_reset(sess);
    int32_t pos = 0, tok = 1;
    const float *logits = NULL;
    for (int d = 0; d < r->n_depths && !s; d++) {
      const int32_t depth = r->depths[d];
      if (depth < pos) {
        tsr_session_reset(sess);
        pos = 0, tok = 1;
      }
      if (depth > pos) {
        s = tsr_session_eval(sess, toks + pos, (size_t)(depth - pos), &logits);
        if (s) break;
        tok = cli_argmax(logits, vocab);
        pos = depth;
      }
      const double t0 = cli_now_s();
      for (int i = 0; i < DEPTH_STEPS && !s; i++) {
        s = tsr_session_eval(sess, &tok, 1, &logits);
        if (!s) tok = cli_argmax(logits, vocab);
      }
      t[d * reps + rep] = DEPTH_STEPS / (cli_now_s() - t0);
      pos += DEPTH_STEPS;
    }
  }
  for (int d = 0; d < r->n_depths && !s; d++)
    r->depth_tps[prec][d] = cli_median(t + d * reps, reps);
  return s;
}

/* One peer run on `path` after tessera's repetition `rep`; a failure is
 * kept in *pr (later repetitions are not tried) and named on stderr. */
static void peer_rep(const model_bench_t *o, const char *path, int32_t n_prompt,
                     int32_t n_decode, int rep, double *pp, double *tg, peer_result_t *pr) {
  if (pr->err[0]) return;
  char why[512];
  if (cli_peer_llama_bench(o->peer, path, n_prompt, n_decode, o->threads, &pp[rep], &tg[rep],
                           why, sizeof why)) {
    pr->reps++;
    return;
  }
  snprintf(pr->err, sizeof pr->err, "%s", why);
  fprintf(stderr, "tessera bench: peer %s '%s' on '%s' (repetition %d): %s; the table goes "
                  "on without its figures for this file\n",
          o->peer->name, o->peer->path, path, rep + 1, why);
}

static void peer_done(peer_result_t *pr, int reps, double *pp, double *tg) {
  if (pr->err[0] || pr->reps != reps) return;
  pr->ok = true;
  pr->pp_tps = cli_median(pp, reps);
  pr->tg_tps = cli_median(tg, reps);
}

/* Loads `path` and creates a session `runs` times (1..LOAD_MAX_RUNS),
 * timing each; *load_ms = the median; the last model and session are kept
 * in *m and *sess (NULL on an error). */
static tsr_status_t timed_loads(tsr_context_t *ctx, const char *path,
                                const tsr_session_options_t *so, int runs, double *load_ms,
                                tsr_model_t **m, tsr_session_t **sess) {
  double lt[LOAD_MAX_RUNS];
  tsr_status_t s = TSR_OK;
  *m = NULL, *sess = NULL;
  for (int l = 0; l < runs && !s; l++) {
    const double t0 = cli_now_s();
    s = tsr_model_load(ctx, path, NULL, m);
    if (!s) s = tsr_session_create(*m, so, sess);
    lt[l] = (cli_now_s() - t0) * 1e3;
    if (l + 1 < runs || s) {
      tsr_session_destroy(*sess);
      tsr_model_destroy(*m);
      *sess = NULL, *m = NULL;
    }
  }
  if (!s) *load_ms = cli_median(lt, runs);
  return s;
}

/* tessera at `prec` on another file of the model (`path`: its q8_0, F16
 * or BF16 weights), load timed, then `reps` repetitions, each followed by
 * the peer's run on that file when there is a peer. */
static tsr_status_t bench_typed(tsr_context_t *ctx, const model_bench_t *o,
                                const model_result_t *r, const char *path,
                                tsr_precision_t prec, double *prefill_tps, double *decode_tps,
                                double *load_ms, peer_result_t *peer) {
  const int reps = o->reps;
  const int32_t n_prompt = r->n_prompt, n_decode = r->n_decode, vocab = r->cfg.vocab_size;
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_prompt);
  double *pre = malloc(sizeof(double) * (size_t)reps), *dec = malloc(sizeof(double) * (size_t)reps);
  double *ppp = malloc(sizeof(double) * (size_t)reps), *ptg = malloc(sizeof(double) * (size_t)reps);
  tsr_status_t s = toks && pre && dec && ppp && ptg
                       ? TSR_OK
                       : TSR_ERR(RESOURCE_EXHAUSTED, "%s: benchmark buffers", path);
  tsr_model_t *m = NULL;
  tsr_session_t *sess = NULL;
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = prec;
  if (!s) s = timed_loads(ctx, path, &so, r->load_runs, load_ms, &m, &sess);
  if (!s) bench_tokens(toks, n_prompt, vocab);
  for (int rep = 0; rep < reps && !s; rep++) {
    tsr_session_reset(sess);
    const float *logits = NULL;
    const double t0 = cli_now_s();
    s = tsr_session_eval(sess, toks, (size_t)n_prompt, &logits);
    const double t1 = cli_now_s();
    for (int i = 0; i < n_decode && !s; i++) {
      int32_t best = cli_argmax(logits, vocab);
      s = tsr_session_eval(sess, &best, 1, &logits);
    }
    pre[rep] = n_prompt / (t1 - t0);
    dec[rep] = n_decode / (cli_now_s() - t1);
    if (!s && o->peer) peer_rep(o, path, n_prompt, n_decode, rep, ppp, ptg, peer);
  }
  if (!s) {
    *prefill_tps = cli_median(pre, reps);
    *decode_tps = cli_median(dec, reps);
    if (o->peer) peer_done(peer, reps, ppp, ptg);
  }
  tsr_session_destroy(sess);
  tsr_model_destroy(m);
  free(toks), free(pre), free(dec), free(ppp), free(ptg);
  return s;
}

/* With a peer: tessera int8 on the model's q8_0 file (the format the peer
 * runs as int8). */
static tsr_status_t bench_q8(tsr_context_t *ctx, const model_bench_t *o, model_result_t *r) {
  return bench_typed(ctx, o, r, r->q8_path, TSR_PRECISION_INT8, &r->q8_prefill_tps,
                     &r->q8_decode_tps, &r->q8_load_ms, &r->peer[1]);
}

/* --half: fp16 on the model's F16 file and bf16 on its BF16 file. */
static tsr_status_t bench_half(tsr_context_t *ctx, const char *dir, bool quiet,
                               const model_bench_t *o, model_result_t *r) {
  const tsr_dtype_t types[2] = {TSR_DTYPE_F16, TSR_DTYPE_BF16};
  const tsr_precision_t precs[2] = {TSR_PRECISION_FP16, TSR_PRECISION_BF16};
  r->half_ran = true;
  for (int h = 0; h < 2; h++) {
    TSR_RETURN_IF(bench_model_file(dir, r->preset, types[h], quiet, r->half_path[h],
                                   sizeof r->half_path[h]));
    if (!quiet)
      fprintf(stderr, "tessera bench: %s, %s\n", r->preset, tsr_precision_name(precs[h]));
    TSR_RETURN_IF(bench_typed(ctx, o, r, r->half_path[h], precs[h], &r->half_prefill_tps[h],
                              &r->half_decode_tps[h], &r->half_load_ms[h], &r->half_peer[h]));
  }
  return TSR_OK;
}

/* Per precision: the model loaded and its session created (timed, a few
 * times), then `reps` repetitions of a prefill of `n_prompt` tokens and
 * `n_decode` greedy steps (medians), with the peer's run on the same file
 * after each fp32 repetition; then the depth sweep. */
static tsr_status_t bench_model(tsr_context_t *ctx, const char *path, const model_bench_t *o,
                                model_result_t *r) {
  const int reps = o->reps;
  int32_t n_prompt = o->n_prompt, n_decode = o->n_decode;
  tsr_model_t *m = NULL;
  tsr_status_t s = tsr_model_load(ctx, path, NULL, &m);
  if (s) return s;
  tsr_model_config_t c;
  tsr_model_config(m, &c);
  tsr_model_destroy(m);
  m = NULL;
  if (n_prompt + n_decode > c.seq_len) {
    n_prompt = c.seq_len / 2;
    n_decode = c.seq_len - n_prompt;
  }
  r->params_m = params_millions(&c);
  r->cfg = c;
  r->n_prompt = n_prompt;
  r->n_decode = n_decode;
  snprintf(r->path, sizeof r->path, "%s", path);
  if (!o->depths_off) r->n_depths = depth_list(o, c.seq_len, r->depths, &r->depths_skipped);
  r->load_runs = reps < LOAD_MAX_RUNS ? reps : LOAD_MAX_RUNS;
  r->peer_ran = o->peer != NULL;
  int32_t n_toks = n_prompt;
  if (r->n_depths && r->depths[r->n_depths - 1] > n_toks) n_toks = r->depths[r->n_depths - 1];
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n_toks > 0 ? n_toks : 1));
  double *pre = malloc(sizeof(double) * (size_t)reps), *dec = malloc(sizeof(double) * (size_t)reps);
  double *ppp = malloc(sizeof(double) * (size_t)reps), *ptg = malloc(sizeof(double) * (size_t)reps);
  double *dt = malloc(sizeof(double) * (size_t)reps * DEPTH_MAX);
  if (!toks || !pre || !dec || !ppp || !ptg || !dt) {
    free(toks), free(pre), free(dec), free(ppp), free(ptg), free(dt);
    return TSR_ERR(RESOURCE_EXHAUSTED, "%s: benchmark buffers", path);
  }
  bench_tokens(toks, n_toks, c.vocab_size);
  for (int prec = 0; prec < 2 && !s; prec++) {
    tsr_session_options_t so;
    tsr_session_options_init(&so);
    so.precision = prec ? TSR_PRECISION_INT8 : TSR_PRECISION_FP32;
    tsr_session_t *sess = NULL;
    s = timed_loads(ctx, path, &so, r->load_runs, &r->load_ms[prec], &m, &sess);
    for (int rep = 0; rep < reps && !s; rep++) {
      tsr_session_reset(sess);
      const float *logits = NULL;
      double t0 = cli_now_s();
      s = tsr_session_eval(sess, toks, (size_t)n_prompt, &logits);
      double t1 = cli_now_s();
      for (int i = 0; i < n_decode && !s; i++) {
        int32_t best = cli_argmax(logits, c.vocab_size);
        s = tsr_session_eval(sess, &best, 1, &logits);
      }
      double t2 = cli_now_s();
      pre[rep] = n_prompt / (t1 - t0);
      dec[rep] = n_decode / (t2 - t1);
      /* the peer's repetition right after tessera's, on the same file */
      if (!s && prec == 0 && o->peer)
        peer_rep(o, path, n_prompt, n_decode, rep, ppp, ptg, &r->peer[0]);
    }
    if (!s) {
      r->prefill_tps[prec] = cli_median(pre, reps);
      r->decode_tps[prec] = cli_median(dec, reps);
    }
    if (!s && r->n_depths) s = depth_sweep(sess, r, prec, reps, toks, dt);
    tsr_session_destroy(sess);
    tsr_model_destroy(m);
    m = NULL;
  }
  if (!s && r->peer_ran) peer_done(&r->peer[0], reps, ppp, ptg);
  free(toks), free(pre), free(dec), free(ppp), free(ptg), free(dt);
  return s;
}

/* `tessera run` on the model's file as a child process, per precision:
 * wall time (median) and peak RSS (the largest) of up to PROC_MAX_RUNS
 * runs of proc_steps positions. A run that fails is stated, not fatal. */
static void bench_process(model_result_t *r, int threads, int reps) {
  r->proc_runs = reps < PROC_MAX_RUNS ? reps : PROC_MAX_RUNS;
  r->proc_steps = r->n_prompt + r->n_decode;
  if (r->proc_steps > r->cfg.seq_len) r->proc_steps = r->cfg.seq_len;
  char steps[16], thr[16];
  snprintf(steps, sizeof steps, "%d", r->proc_steps);
  snprintf(thr, sizeof thr, "%d", threads);
  for (int prec = 0; prec < 2; prec++) {
    char *argv[] = {"/proc/self/exe", "run", "-m", r->path, "-p", "Once upon a time", "-n",
                    steps, "--temp", "0", "--precision", prec ? "int8" : "fp32", "-t", thr,
                    "--quiet", NULL};
    double wall[PROC_MAX_RUNS];
    int ok = 0;
    for (int run = 0; run < r->proc_runs; run++) {
      cli_child_t ch;
      char why[300];
      if (!cli_child_run(argv, NULL, false, false, PROC_TIMEOUT_S, &ch, why, sizeof why) ||
          cli_child_failed(&ch, why, sizeof why)) {
        snprintf(r->proc_err[prec], sizeof r->proc_err[prec], "tessera run: %s", why);
        fprintf(stderr, "tessera bench: whole-process run of %s (%s): tessera run %s\n",
                r->preset, prec ? "int8" : "fp32", why);
        break;
      }
      wall[ok++] = ch.wall_s;
      if (ch.max_rss_kib > r->proc_rss_kib[prec]) r->proc_rss_kib[prec] = ch.max_rss_kib;
    }
    if (ok == r->proc_runs) r->proc_wall_s[prec] = cli_median(wall, ok);
    else r->proc_rss_kib[prec] = 0;
  }
}

/* ---- batched decode: many sequences on one engine ---- */

#define BATCH_MAX_SIZES 16
#define BATCH_MAX 1024
#define BATCH_PROMPT 8    /* prompt tokens per sequence */
#define BATCH_DECODE 24   /* decode steps per repetition at batch 1 */
#define BATCH_MIN_STEPS 4 /* and at least this many at any batch size */

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Sorts out[0..n) ascending and keeps each value once; returns the count. */
static int sort_unique_i32(int32_t *out, int n) {
  qsort(out, (size_t)n, sizeof *out, cmp_i32);
  int u = 0;
  for (int i = 0; i < n; i++)
    if (!u || out[i] != out[u - 1]) out[u++] = out[i];
  return u;
}

/* Parses --batch: comma-separated sizes in [1, BATCH_MAX], at most
 * BATCH_MAX_SIZES of them, into ascending order without repeats. Prints a
 * message naming the entry on error. */
static bool parse_batch_list(const char *s, int32_t *out, int *n_out) {
  int n = 0;
  const char *p = s;
  for (int entry = 1;; entry++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char piece[32];
    if (len == 0) {
      fprintf(stderr, "tessera bench: --batch: entry %d of '%s' is empty\n", entry, s);
      return false;
    }
    snprintf(piece, sizeof piece, "%.*s", (int)(len < sizeof piece - 1 ? len : sizeof piece - 1),
             p);
    char *e = NULL;
    errno = 0;
    long long v = strtoll(piece, &e, 10);
    const bool huge = errno == ERANGE && e != piece && *e == '\0';
    if (!huge && (len >= sizeof piece || errno || e == piece || *e != '\0')) {
      fprintf(stderr, "tessera bench: --batch: entry %d '%.*s' is not a number (batch sizes "
                      "are integers in [1, %d])\n", entry, (int)len, p, BATCH_MAX);
      return false;
    }
    if (huge || v < 1 || v > BATCH_MAX) {
      fprintf(stderr, "tessera bench: --batch: entry %d '%s' is outside [1, %d]\n", entry,
              piece, BATCH_MAX);
      return false;
    }
    if (n == BATCH_MAX_SIZES) {
      fprintf(stderr, "tessera bench: --batch: more than %d batch sizes\n", BATCH_MAX_SIZES);
      return false;
    }
    out[n++] = (int32_t)v;
    if (!end) break;
    p = end + 1;
  }
  /* ascending, each size once: the table reads as a sweep */
  *n_out = sort_unique_i32(out, n);
  return true;
}

/* One batch size of one model. */
typedef struct {
  int32_t batch, steps;
  double cpu_tps;                  /* aggregate, measured: median of reps  */
  double all_tps, auto_tps;        /* projected onto the offload device     */
  /* per decode step: host ops, board time, and of the board time the
   * device cycles at its clock */
  double all_host_s, all_board_s, all_cycles_s;
  double auto_host_s, auto_board_s, auto_cycles_s;
  double all_launches, auto_launches; /* device launches per decode step   */
} batch_row_t;

typedef struct {
  char preset[32];
  tsr_model_config_t cfg;
  char device[128];    /* the offload device spec used (offload_spec) */
  int n_rows;
  batch_row_t rows[BATCH_MAX_SIZES];
} batch_result_t;

/* How one engine of the sweep runs. */
typedef enum { RUN_CPU = 0, RUN_ALL = 1, RUN_AUTO = 2 } batch_run_t;

/* The decode steps of one repetition at batch size B: `decode` at batch 1,
 * decode / B beyond (a step's work grows with B once the weights are
 * amortized), at least `min_steps`. */
static int32_t batch_steps(int32_t decode, int32_t B, int32_t min_steps) {
  int32_t s = (decode + B / 2) / B;
  return s < min_steps ? min_steps : s;
}

int32_t cli_argmax(const float *v, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

tsr_status_t cli_bench_prefill(tsr_engine_t *eng, tsr_seq_t **seqs, int32_t n,
                                  tsr_batch_t *b, int32_t n_prompt, int32_t vocab,
                                  int32_t *toks) {
  int32_t *pr = malloc(sizeof(int32_t) * (size_t)n_prompt);
  if (!pr) return TSR_ERR(RESOURCE_EXHAUSTED, "prompt of %d tokens", n_prompt);
  tsr_status_t s = TSR_OK;
  tsr_batch_clear(b);
  for (int32_t i = 0; i < n && !s; i++) {
    for (int32_t j = 0; j < n_prompt; j++)
      pr[j] = (int32_t)(((int64_t)j * 7919 + 1 + (int64_t)i * 104729) % vocab);
    s = tsr_batch_add(b, seqs[i], pr, (size_t)n_prompt, true, NULL);
  }
  free(pr);
  if (!s) s = tsr_engine_eval(eng, b);
  for (int32_t i = 0; i < n && !s; i++) toks[i] = cli_argmax(tsr_batch_logits(b, (size_t)i), vocab);
  return s;
}

tsr_status_t cli_bench_decode(tsr_engine_t *eng, tsr_seq_t **seqs, int32_t B, tsr_batch_t *b,
                              int32_t steps, int32_t vocab, int32_t *toks, double *out_s) {
  tsr_status_t s = TSR_OK;
  double t0 = cli_now_s();
  for (int32_t step = 0; step < steps && !s; step++) {
    tsr_batch_clear(b);
    for (int32_t i = 0; i < B && !s; i++) s = tsr_batch_add(b, seqs[i], &toks[i], 1, true, NULL);
    if (!s) s = tsr_engine_eval(eng, b);
    for (int32_t i = 0; i < B && !s; i++)
      toks[i] = cli_argmax(tsr_batch_logits(b, (size_t)i), vocab);
  }
  *out_s = cli_now_s() - t0;
  return s;
}

/* Runs every batch size of `r` on one engine of model `path`: on the CPU
 * (kind RUN_CPU, `reps` repetitions, median), or on `device` with every
 * matmul there (RUN_ALL) or the partitioner's choice (RUN_AUTO), projected:
 * B x steps / (host ops measured + the board's time), one repetition since
 * the device's cycles are deterministic. The sequences are prefilled once;
 * batch size B decodes the first B of them onward from where they are, and
 * the repetitions are consecutive runs of steps. */
static tsr_status_t batch_engine(batch_run_t kind, const char *device, int n_threads,
                                 const char *path, int reps, int32_t n_prompt, int32_t n_decode,
                                 int32_t min_steps, batch_result_t *r) {
  tsr_context_options_t co;
  tsr_context_options_init(&co);
  co.n_threads = n_threads;
  if (kind != RUN_CPU) {
    co.devices = device;
    co.offload = kind == RUN_ALL ? TSR_OFFLOAD_ALL : TSR_OFFLOAD_AUTO;
    co.fallback = false; /* a projection from a device that fell back means nothing */
    reps = 1;
  }
  int32_t max_b = 1, positions = n_prompt;
  for (int i = 0; i < r->n_rows; i++) {
    r->rows[i].steps = batch_steps(n_decode, r->rows[i].batch, min_steps);
    if (r->rows[i].batch > max_b) max_b = r->rows[i].batch;
    positions += reps * r->rows[i].steps;
  }
  tsr_context_t *ctx = NULL;
  tsr_model_t *m = NULL;
  tsr_engine_t *eng = NULL;
  tsr_batch_t *b = NULL;
  tsr_seq_t **seqs = calloc((size_t)max_b, sizeof *seqs);
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)max_b);
  double *t = malloc(sizeof(double) * (size_t)reps);
  tsr_status_t s = seqs && toks && t ? TSR_OK : TSR_ERR(RESOURCE_EXHAUSTED, "batch bench");
  if (!s) s = tsr_context_create(&co, &ctx);
  if (!s) s = tsr_model_load(ctx, path, NULL, &m);
  tsr_model_config_t c;
  memset(&c, 0, sizeof c);
  if (!s) {
    tsr_model_config(m, &c);
    r->cfg = c;
    if (positions > c.seq_len)
      s = TSR_ERR(OUT_OF_RANGE, "%s: prompt and decode steps take %d positions, more than the "
                                "context of %d (fewer --decode or --reps)", path, positions,
                  c.seq_len);
  }
  if (!s) {
    tsr_session_options_t so;
    tsr_session_options_init(&so);
    so.precision = TSR_PRECISION_INT8;
    so.max_seq = positions;
    /* plans for every size up to the largest batch: a decode step is one pass */
    so.max_batch_rows = max_b;
    s = tsr_engine_create(m, &so, &eng);
  }
  for (int32_t i = 0; i < max_b && !s; i++) s = tsr_seq_create(eng, &seqs[i]);
  if (!s) s = tsr_batch_create(0, &b);
  if (!s) s = cli_bench_prefill(eng, seqs, max_b, b, n_prompt, c.vocab_size, toks);
  for (int i = 0; i < r->n_rows && !s; i++) {
    batch_row_t *row = &r->rows[i];
    const int32_t B = row->batch, steps = row->steps;
    tsr_session_stats_t st0, st1;
    for (int rep = 0; rep < reps && !s; rep++) {
      tsr_engine_get_stats(eng, &st0);
      s = cli_bench_decode(eng, seqs, B, b, steps, c.vocab_size, toks, &t[rep]);
      tsr_engine_get_stats(eng, &st1);
      t[rep] = (double)B * steps / t[rep];
    }
    if (s) break;
    if (kind == RUN_CPU) {
      row->cpu_tps = cli_median(t, reps);
      continue;
    }
    const double host = st1.cpu_s - st0.cpu_s;
    const double board = st1.board_projected_s - st0.board_projected_s;
    const double tps = host + board > 0 ? (double)B * steps / (host + board) : 0;
    const double launches = (double)(st1.device_calls - st0.device_calls) / steps;
    const double cycles = (st1.device_projected_s - st0.device_projected_s) / steps;
    if (kind == RUN_ALL) {
      row->all_tps = tps;
      row->all_host_s = host / steps;
      row->all_board_s = board / steps;
      row->all_cycles_s = cycles;
      row->all_launches = launches;
    } else {
      row->auto_tps = tps;
      row->auto_host_s = host / steps;
      row->auto_board_s = board / steps;
      row->auto_cycles_s = cycles;
      row->auto_launches = launches;
    }
  }
  tsr_batch_destroy(b);
  for (int32_t i = 0; seqs && i < max_b; i++) tsr_seq_destroy(seqs[i]);
  tsr_engine_destroy(eng);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  free(seqs);
  free(toks);
  free(t);
  return s;
}

/* The first batch size from which the projected device throughput stays
 * above the CPU's (index into r->rows), or -1. */
static int batch_overtake(const batch_result_t *r, bool auto_policy) {
  int at = -1;
  for (int i = r->n_rows - 1; i >= 0; i--) {
    const batch_row_t *w = &r->rows[i];
    if ((auto_policy ? w->auto_tps : w->all_tps) <= w->cpu_tps) break;
    at = i;
  }
  return at;
}

static void batch_print_json(const batch_result_t *res, int n_res, int reps, int32_t n_prompt,
                             bool offload, bool with_auto) {
  printf("{\n  \"reps\": %d,\n  \"batched_decode\": {\n    \"precision\": \"int8\", "
         "\"prompt_tokens\": %d,\n    \"cpu\": \"aggregate tokens/s of B sequences on one "
         "engine, B x steps / wall time of the decode steps, median of reps\",\n"
         "    \"projected\": \"B x steps / (host ops measured + board time: device cycles at "
         "its clock, launch latency, copies over its link, host work around the launches), "
         "decode steps only\",\n    \"models\": [",
         reps, n_prompt);
  for (int m = 0; m < n_res; m++) {
    const batch_result_t *r = &res[m];
    printf("%s\n      {\"preset\": \"%s\", \"params_millions\": %.1f", m ? "," : "", r->preset,
           params_millions(&r->cfg));
    if (offload) printf(", \"offload_device\": \"%s\"", r->device);
    printf(", \"batches\": [");
    for (int i = 0; i < r->n_rows; i++) {
      const batch_row_t *w = &r->rows[i];
      printf("%s\n        {\"batch\": %d, \"decode_steps\": %d, \"cpu_tok_s\": %.2f, "
             "\"cpu_vs_smallest_batch\": %.3f",
             i ? "," : "", w->batch, w->steps, w->cpu_tps,
             r->rows[0].cpu_tps > 0 ? w->cpu_tps / r->rows[0].cpu_tps : 0.0);
      if (offload)
        printf(", \"offload_all\": {\"tok_s\": %.2f, \"host_ms_per_step\": %.3f, "
               "\"board_ms_per_step\": %.3f, \"cycles_ms_per_step\": %.3f, "
               "\"launches_per_step\": %.1f}",
               w->all_tps, w->all_host_s * 1e3, w->all_board_s * 1e3, w->all_cycles_s * 1e3,
               w->all_launches);
      if (offload && with_auto)
        printf(", \"offload_auto\": {\"tok_s\": %.2f, \"host_ms_per_step\": %.3f, "
               "\"board_ms_per_step\": %.3f, \"cycles_ms_per_step\": %.3f, "
               "\"launches_per_step\": %.1f}",
               w->auto_tps, w->auto_host_s * 1e3, w->auto_board_s * 1e3,
               w->auto_cycles_s * 1e3, w->auto_launches);
      printf("}");
    }
    printf("\n      ]");
    for (int pol = 0; offload && pol < (with_auto ? 2 : 1); pol++) {
      const int at = batch_overtake(r, pol == 1);
      printf(", \"device_%s_ahead_from_batch\": ", pol ? "auto" : "all");
      if (at >= 0) printf("%d", r->rows[at].batch);
      else printf("null");
    }
    printf("}");
  }
  printf("%s]\n  }\n}\n", n_res ? "\n    " : "");
}

/* "<host> + <board> (<cycles>)" milliseconds per step. */
static const char *ms_split(char *buf, size_t cap, double host_s, double board_s,
                            double cycles_s) {
  snprintf(buf, cap, "%.1f + %.1f (%.1f)", host_s * 1e3, board_s * 1e3, cycles_s * 1e3);
  return buf;
}

static void batch_print_table(const batch_result_t *res, int n_res, int reps, int32_t n_prompt,
                              const char *off_dev, bool offload, bool with_auto) {
  printf("batched decode, int8: B sequences on one engine, each prefilled with %d tokens, then\n"
         "decode steps of one token per sequence (one forward pass of B rows per step).\n"
         "CPU t/s: B x steps / wall time of the steps, median of %d.\n", n_prompt, reps);
  if (offload)
    printf("%s t/s, projected with every matmul on the device (all)%s:\n"
           "B x steps / (host ops measured here + board time: device cycles at its clock,\n"
           "launch latency, copies over its link, host work around the launches), decode\n"
           "steps only; ms/step = host + board (of which device cycles); launches = device\n"
           "launches per step\n",
           off_dev, with_auto ? " and with the partitioner's choice (auto)" : "");
  char b1[48], b2[48];
  for (int m = 0; m < n_res; m++) {
    const batch_result_t *r = &res[m];
    printf("\n%s (%.1fM params)%s%s\n", r->preset, params_millions(&r->cfg),
           offload ? ", device " : "", offload ? r->device : "");
    char first[16];
    snprintf(first, sizeof first, "vs B=%d", r->rows[0].batch);
    printf("%6s %6s %11s %7s", "batch", "steps", "CPU t/s", first);
    if (offload) printf("  %9s %24s %8s %7s", "all t/s", "ms/step", "launches", "vs CPU");
    if (offload && with_auto) printf("  %9s %24s %8s", "auto t/s", "ms/step", "launches");
    printf("\n");
    for (int i = 0; i < r->n_rows; i++) {
      const batch_row_t *w = &r->rows[i];
      printf("%6d %6d %11.1f %6.2fx", w->batch, w->steps, w->cpu_tps,
             r->rows[0].cpu_tps > 0 ? w->cpu_tps / r->rows[0].cpu_tps : 0.0);
      if (offload)
        printf("  %9.1f %24s %8.0f %6.2fx", w->all_tps,
               ms_split(b1, sizeof b1, w->all_host_s, w->all_board_s, w->all_cycles_s),
               w->all_launches, w->cpu_tps > 0 ? w->all_tps / w->cpu_tps : 0.0);
      if (offload && with_auto)
        printf("  %9.1f %24s %8.0f", w->auto_tps,
               ms_split(b2, sizeof b2, w->auto_host_s, w->auto_board_s, w->auto_cycles_s),
               w->auto_launches);
      printf("\n");
    }
    for (int pol = 0; offload && pol < (with_auto ? 2 : 1); pol++) {
      const int at = batch_overtake(r, pol == 1);
      const char *what = pol ? "auto policy" : "all matmuls";
      if (at < 0)
        printf("%s: the device (%s) does not overtake the CPU: none up to %d\n", r->preset,
               what, r->rows[r->n_rows - 1].batch);
      else if (at == 0)
        printf("%s: the device (%s) is ahead of the CPU from batch %d on\n", r->preset, what,
               r->rows[0].batch);
      else
        printf("%s: the device (%s) overtakes the CPU at batch %d\n", r->preset, what,
               r->rows[at].batch);
    }
  }
}

/* `tessera bench --batch`: the sweep over `batches` for every model of
 * `models`. */
static int bench_batch(const int32_t *batches, int n_batches, const char *models,
                       const char *dir, const char *off_dev, bool with_auto, int threads,
                       int reps, int32_t n_prompt, int32_t n_decode, bool json,
                       const char *plot_dir) {
  const char *cmd = "bench";
  const bool offload = strcmp(off_dev, "none") != 0;
  batch_result_t res[8];
  int n_res = 0;
  tsr_status_t s = TSR_OK;
  char *list = strdup(models);
  if (!list) return cli_fail(cmd, TSR_ERR(RESOURCE_EXHAUSTED, "models"));
  mkdir("build", 0755);
  mkdir(dir, 0755);
  for (char *tok = strtok(list, ","); tok && !s; tok = strtok(NULL, ",")) {
    if (n_res == 8) {
      s = TSR_ERR(OUT_OF_RANGE, "--models: at most 8 models");
      break;
    }
    char path[1024];
    s = cli_bench_model_path(dir, tok, json, path, sizeof path);
    if (s) break;
    batch_result_t *r = &res[n_res];
    memset(r, 0, sizeof *r);
    snprintf(r->preset, sizeof r->preset, "%s", tok);
    r->n_rows = n_batches;
    for (int i = 0; i < n_batches; i++) r->rows[i].batch = batches[i];
    if (!json) fprintf(stderr, "tessera bench: %s, batches on the CPU\n", tok);
    s = batch_engine(RUN_CPU, NULL, threads, path, reps, n_prompt, n_decode,
                     BATCH_MIN_STEPS, r);
    if (!s && offload) {
      offload_spec(off_dev, &r->cfg, r->device, sizeof r->device);
      if (!json)
        fprintf(stderr, "tessera bench: %s, batches on %s (%s)\n", tok, r->device,
                with_auto ? "offload all, then auto" : "offload all");
      s = batch_engine(RUN_ALL, r->device, threads, path, reps, n_prompt, n_decode,
                       BATCH_MIN_STEPS, r);
      if (!s && with_auto)
        s = batch_engine(RUN_AUTO, r->device, threads, path, reps, n_prompt, n_decode,
                         BATCH_MIN_STEPS, r);
    }
    if (!s) n_res++;
  }
  free(list);
  if (s) return cli_fail(cmd, s);
  if (json) batch_print_json(res, n_res, reps, n_prompt, offload, with_auto);
  else batch_print_table(res, n_res, reps, n_prompt, off_dev, offload, with_auto);
  if (plot_dir) {
    cli_plot_model_t pm[8];
    int32_t bs[8][BATCH_MAX_SIZES];
    double cpu[8][BATCH_MAX_SIZES], all[8][BATCH_MAX_SIZES], aut[8][BATCH_MAX_SIZES];
    memset(pm, 0, sizeof pm);
    for (int m = 0; m < n_res; m++) {
      for (int i = 0; i < res[m].n_rows; i++) {
        bs[m][i] = res[m].rows[i].batch;
        cpu[m][i] = res[m].rows[i].cpu_tps;
        all[m][i] = res[m].rows[i].all_tps;
        aut[m][i] = res[m].rows[i].auto_tps;
      }
      pm[m].preset = res[m].preset;
      pm[m].params_m = params_millions(&res[m].cfg);
      pm[m].n_batches = res[m].n_rows;
      pm[m].batches = bs[m];
      pm[m].batch_cpu_tps = cpu[m];
      pm[m].batch_all_tps = offload ? all[m] : NULL;
      pm[m].batch_auto_tps = offload && with_auto ? aut[m] : NULL;
    }
    char caption[160];
    snprintf(caption, sizeof caption, "CPU measured (median of %d), device projected; "
             "prompt %d tokens per sequence", reps, n_prompt);
    if (!cli_plot_batches(plot_dir, pm, n_res, offload ? off_dev : NULL, caption)) return 1;
    if (!json) printf("\nchart: %s/batch.png (data batch.dat, script batch.gp)\n", plot_dir);
  }
  return 0;
}

/* The CPU int8 batch sweep of a model for the batch chart: B sequences on
 * one engine (batch_engine), sizes plot_batches, as many repetitions (up to
 * reps) as the context holds. */
static tsr_status_t plot_batch_sweep(model_result_t *m, int threads, int reps) {
  batch_result_t br;
  memset(&br, 0, sizeof br);
  memcpy(br.preset, m->preset, sizeof br.preset);
  br.n_rows = PLOT_N_BATCHES;
  int32_t per_rep = 0;
  for (int i = 0; i < PLOT_N_BATCHES; i++) {
    br.rows[i].batch = plot_batches[i];
    per_rep += batch_steps(BATCH_DECODE, plot_batches[i], BATCH_MIN_STEPS);
  }
  int fit = (m->cfg.seq_len - BATCH_PROMPT) / per_rep;
  if (fit < 1)
    return TSR_ERR(OUT_OF_RANGE, "%s: a context of %d positions is too short for the batch "
                   "sweep (%d positions)", m->preset, m->cfg.seq_len, BATCH_PROMPT + per_rep);
  m->batch_reps = reps < fit ? reps : fit;
  TSR_RETURN_IF(batch_engine(RUN_CPU, NULL, threads, m->path, m->batch_reps, BATCH_PROMPT,
                             BATCH_DECODE, BATCH_MIN_STEPS, &br));
  m->n_batches = PLOT_N_BATCHES;
  for (int i = 0; i < PLOT_N_BATCHES; i++) {
    m->batches[i] = plot_batches[i];
    m->batch_cpu_tps[i] = br.rows[i].cpu_tps;
  }
  return TSR_OK;
}

/* Parses --depths: "none", or comma-separated positions in [0, 65536],
 * at most DEPTH_MAX, into ascending order without repeats. */
static bool parse_depths(const char *s, int32_t *out, int *n_out, bool *off) {
  *n_out = 0;
  *off = !strcmp(s, "none");
  if (*off) return true;
  int n = 0;
  const char *p = s;
  for (int entry = 1;; entry++) {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    char piece[16];
    char *e = NULL;
    long v = -1;
    if (len > 0 && len < sizeof piece) {
      memcpy(piece, p, len);
      piece[len] = '\0';
      errno = 0;
      v = strtol(piece, &e, 10);
      if (errno || e == piece || *e) v = -1;
    }
    if (v < 0 || v > 65536) {
      fprintf(stderr, "tessera bench: --depths: entry %d '%.*s' of '%s' is not a position in "
                      "[0, 65536] (or the whole value 'none')\n", entry, (int)len, p, s);
      return false;
    }
    if (n == DEPTH_MAX) {
      fprintf(stderr, "tessera bench: --depths: more than %d depths in '%s'\n", DEPTH_MAX, s);
      return false;
    }
    out[n++] = (int32_t)v;
    if (!end) break;
    p = end + 1;
  }
  *n_out = sort_unique_i32(out, n);
  return true;
}

static double mib(long kib) { return kib / 1024.0; }

static void models_print_json(const model_result_t *res, int n_res, bool offload,
                              const cli_peer_t *peer) {
  printf("  \"models\": [");
  for (int i = 0; i < n_res; i++) {
    const model_result_t *r = &res[i];
    printf("%s\n    {\"preset\": \"%s\", \"params_millions\": %.1f, "
           "\"prompt_tokens\": %d, \"decode_steps\": %d, "
           "\"fp32\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}, "
           "\"int8\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}",
           i ? "," : "", r->preset, r->params_m, r->n_prompt, r->n_decode, r->prefill_tps[0],
           r->decode_tps[0], r->prefill_tps[1], r->decode_tps[1]);
    if (offload)
      printf(", \"int8_offload_projected\": {\"device\": \"%s\", \"prefill_tok_s\": %.2f, "
             "\"decode_tok_s\": %.2f}", r->off_spec, r->off_prefill_tps, r->off_decode_tps);
    printf(",\n     \"load_ms\": {\"runs\": %d, \"fp32\": %.2f, \"int8\": %.2f}",
           r->load_runs, r->load_ms[0], r->load_ms[1]);
    if (r->proc_runs) {
      printf(",\n     \"process\": {\"command\": \"tessera run -n %d\", \"runs\": %d",
             r->proc_steps, r->proc_runs);
      for (int p = 0; p < 2; p++) {
        printf(", \"%s\": ", p ? "int8" : "fp32");
        if (r->proc_err[p][0]) {
          printf("{\"error\": ");
          cli_json_string(stdout, r->proc_err[p]);
          printf("}");
        } else
          printf("{\"wall_s\": %.3f, \"peak_rss_mib\": %.1f}", r->proc_wall_s[p],
                 mib(r->proc_rss_kib[p]));
      }
      printf("}");
    }
    if (r->n_depths || r->depths_skipped) {
      printf(",\n     \"depth_decode\": {\"steps\": %d, \"skipped_depths\": %d, "
             "\"depths\": [", DEPTH_STEPS, r->depths_skipped);
      for (int d = 0; d < r->n_depths; d++) printf("%s%d", d ? ", " : "", r->depths[d]);
      for (int p = 0; p < 2; p++) {
        printf("], \"%s_tok_s\": [", p ? "int8" : "fp32");
        for (int d = 0; d < r->n_depths; d++) printf("%s%.2f", d ? ", " : "", r->depth_tps[p][d]);
      }
      printf("]}");
    }
    if (r->peer_ran) {
      printf(",\n     \"peer\": {\"name\": \"%s\", \"path\": ", peer->name);
      cli_json_string(stdout, peer->path);
      for (int f = 0; f < 2; f++) {
        const peer_result_t *pr = &r->peer[f];
        const double ours_pp = f ? r->q8_prefill_tps : r->prefill_tps[0];
        const double ours_tg = f ? r->q8_decode_tps : r->decode_tps[0];
        printf(",\n       \"%s\": {\"file\": ", f ? "q8_0" : "f32");
        cli_json_string(stdout, f ? r->q8_path : r->path);
        printf(", \"compared_with\": \"%s\"", f ? "int8" : "fp32");
        if (f)
          printf(", \"tessera\": {\"load_ms\": %.2f, \"prefill_tok_s\": %.2f, "
                 "\"decode_tok_s\": %.2f}", r->q8_load_ms, ours_pp, ours_tg);
        if (pr->ok)
          printf(", \"ok\": true, \"reps\": %d, \"prefill_tok_s\": %.2f, "
                 "\"decode_tok_s\": %.2f, \"prefill_ratio\": %.4f, \"decode_ratio\": %.4f}",
                 pr->reps, pr->pp_tps, pr->tg_tps, ours_pp / pr->pp_tps, ours_tg / pr->tg_tps);
        else {
          printf(", \"ok\": false, \"error\": ");
          cli_json_string(stdout, pr->err[0] ? pr->err : "not run");
          printf("}");
        }
      }
      printf("}");
    }
    if (r->half_ran) {
      printf(",\n     \"half\": {");
      for (int h = 0; h < 2; h++) {
        printf("%s\"%s\": {\"file\": ", h ? ", " : "", h ? "bf16" : "fp16");
        cli_json_string(stdout, r->half_path[h]);
        printf(", \"load_ms\": %.2f, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f",
               r->half_load_ms[h], r->half_prefill_tps[h], r->half_decode_tps[h]);
        const peer_result_t *pr = &r->half_peer[h];
        if (r->peer_ran && pr->ok)
          printf(", \"peer\": {\"ok\": true, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, "
                 "\"prefill_ratio\": %.4f, \"decode_ratio\": %.4f}",
                 pr->pp_tps, pr->tg_tps, r->half_prefill_tps[h] / pr->pp_tps,
                 r->half_decode_tps[h] / pr->tg_tps);
        else if (r->peer_ran) {
          printf(", \"peer\": {\"ok\": false, \"error\": ");
          cli_json_string(stdout, pr->err[0] ? pr->err : "not run");
          printf("}");
        }
        printf("}");
      }
      printf("}");
    }
    if (r->n_batches) {
      printf(",\n     \"batched_cpu_int8\": {\"reps\": %d, \"batches\": [", r->batch_reps);
      for (int b = 0; b < r->n_batches; b++) printf("%s%d", b ? ", " : "", r->batches[b]);
      printf("], \"tok_s\": [");
      for (int b = 0; b < r->n_batches; b++) printf("%s%.2f", b ? ", " : "", r->batch_cpu_tps[b]);
      printf("]}");
    }
    printf("}");
  }
  printf("%s]", n_res ? "\n  " : "");
}

/* n_prompt, n_decode: the sizes asked for; a model whose context is
 * shorter ran half its context each and is marked. */
static void models_print_table(const model_result_t *res, int n_res, int reps,
                               int32_t n_prompt, int32_t n_decode, const char *off_dev,
                               const cli_peer_t *peer) {
  const model_result_t *r0 = &res[0];
  printf("\nmodels (generated weights; prefill %d tokens, decode %d steps; median of %d)\n",
         n_prompt, n_decode, reps);
  printf("%-14s %8s  %14s %14s  %14s %14s  %7s\n", "model", "params", "fp32 prefill",
         "fp32 decode", "int8 prefill", "int8 decode", "int8/fp32 decode");
  for (int i = 0; i < n_res; i++) {
    const model_result_t *r = &res[i];
    printf("%-14s %7.1fM  %10.1f t/s %10.1f t/s  %10.1f t/s %10.1f t/s  %6.2fx%s\n", r->preset,
           r->params_m, r->prefill_tps[0], r->decode_tps[0], r->prefill_tps[1], r->decode_tps[1],
           r->decode_tps[1] / r->decode_tps[0],
           r->n_prompt != n_prompt || r->n_decode != n_decode ? "  (shorter: context)"
                                                                      : "");
  }
  if (peer) {
    printf("\npeer %s: %s\n"
           "on the same generated files: the f32 file against tessera fp32, the q8_0 file\n"
           "against tessera int8 on that file; one peer run (-r 1) after each tessera\n"
           "repetition, medians of %d; pp = prefill of the prompt, tg = the decode steps\n"
           "(llama-bench decodes from position 0, tessera after the prompt)\n",
           peer->name, peer->path, reps);
    printf("%-14s %-5s %12s %12s %8s  %12s %12s %8s\n", "model", "file", "tessera pp",
           "peer pp", "ratio", "tessera tg", "peer tg", "ratio");
    for (int i = 0; i < n_res; i++) {
      const model_result_t *r = &res[i];
      for (int f = 0; f < 2; f++) {
        const peer_result_t *pr = &r->peer[f];
        const double pp = f ? r->q8_prefill_tps : r->prefill_tps[0];
        const double tg = f ? r->q8_decode_tps : r->decode_tps[0];
        const char *file = f ? "q8_0" : "f32";
        if (pr->ok)
          printf("%-14s %-5s %8.1f t/s %8.1f t/s %7.2fx  %8.1f t/s %8.1f t/s %7.2fx\n",
                 r->preset, file, pp, pr->pp_tps, pp / pr->pp_tps, tg, pr->tg_tps,
                 tg / pr->tg_tps);
        else
          printf("%-14s %-5s peer failed: %s\n", r->preset, file,
                 pr->err[0] ? pr->err : "not run");
      }
    }
  }
  if (r0->half_ran) {
    printf("\nhalf precisions (--half): fp16 on each model's F16 file, bf16 on its BF16 file\n"
           "(weights from the mapping; fp32 sums), prefill %d tokens and %d decode steps,\n"
           "medians of %d; load = tsr_model_load + tsr_session_create%s\n",
           n_prompt, n_decode, reps, peer ? "; the peer on the same files" : "");
    printf("%-14s %-5s %10s %12s %12s", "model", "prec", "load", "prefill", "decode");
    if (peer) printf(" %12s %7s %12s %7s", "peer pp", "ratio", "peer tg", "ratio");
    printf("\n");
    for (int i = 0; i < n_res; i++) {
      const model_result_t *r = &res[i];
      for (int h = 0; h < 2; h++) {
        printf("%-14s %-5s %7.1f ms %8.1f t/s %8.1f t/s", r->preset, h ? "bf16" : "fp16",
               r->half_load_ms[h], r->half_prefill_tps[h], r->half_decode_tps[h]);
        const peer_result_t *pr = &r->half_peer[h];
        if (peer && pr->ok)
          printf(" %8.1f t/s %6.2fx %8.1f t/s %6.2fx", pr->pp_tps,
                 r->half_prefill_tps[h] / pr->pp_tps, pr->tg_tps,
                 r->half_decode_tps[h] / pr->tg_tps);
        else if (peer)
          printf("  peer failed: %s", pr->err[0] ? pr->err : "not run");
        printf("\n");
      }
    }
  }
  if (r0->proc_runs) {
    printf("\nload and whole process: load = open + map + weights prepared for the precision\n"
           "(tsr_model_load + tsr_session_create, warm page cache, median of %d); run = `tessera\n"
           "run -p \"Once upon a time\" -n N --temp 0` on the same file as a child process: wall\n"
           "time (median of %d) and peak RSS (wait4 ru_maxrss, largest of the runs)\n",
           r0->load_runs, r0->proc_runs);
    printf("%-14s %5s %11s %11s %10s %10s %10s %10s%s\n", "model", "N", "load fp32",
           "load int8", "run fp32", "RSS fp32", "run int8", "RSS int8",
           peer ? "  load int8 of q8_0" : "");
    for (int i = 0; i < n_res; i++) {
      const model_result_t *r = &res[i];
      printf("%-14s %5d %8.1f ms %8.1f ms", r->preset, r->proc_steps, r->load_ms[0],
             r->load_ms[1]);
      for (int p = 0; p < 2; p++) {
        if (r->proc_err[p][0]) printf(" %10s %10s", "failed", "-");
        else printf(" %8.2f s %6.1f MiB", r->proc_wall_s[p], mib(r->proc_rss_kib[p]));
      }
      if (peer) printf(" %15.1f ms", r->q8_load_ms);
      printf("\n");
      for (int p = 0; p < 2; p++)
        if (r->proc_err[p][0]) printf("  %s %s: %s\n", r->preset, p ? "int8" : "fp32",
                                      r->proc_err[p]);
    }
  }
  bool any_depth = false;
  for (int i = 0; i < n_res; i++) any_depth |= res[i].n_depths > 0 || res[i].depths_skipped > 0;
  if (any_depth) {
    printf("\ndecode at depth: tokens/s of %d greedy decode steps starting at position p (the\n"
           "positions before p prefilled, untimed); median of %d\n", DEPTH_STEPS, reps);
    for (int i = 0; i < n_res; i++) {
      const model_result_t *r = &res[i];
      if (!r->n_depths) {
        if (r->depths_skipped)
          printf("%-14s every depth of --depths is beyond the context of %d minus %d steps\n",
                 r->preset, r->cfg.seq_len, DEPTH_STEPS);
        continue;
      }
      printf("%-14s %8s", r->preset, "p");
      for (int d = 0; d < r->n_depths; d++) printf(" %9d", r->depths[d]);
      printf("  %10s\n", "last/first");
      for (int p = 0; p < 2; p++) {
        printf("%-14s %8s", "", p ? "int8 t/s" : "fp32 t/s");
        for (int d = 0; d < r->n_depths; d++) printf(" %9.1f", r->depth_tps[p][d]);
        printf("  %9.2fx\n", r->depth_tps[p][r->n_depths - 1] / r->depth_tps[p][0]);
      }
      if (r->depths_skipped)
        printf("%-14s (%d depth(s) of --depths beyond the context of %d minus %d steps: "
               "skipped)\n", "", r->depths_skipped, r->cfg.seq_len, DEPTH_STEPS);
    }
  }
  bool any_batch = false;
  for (int i = 0; i < n_res; i++) any_batch |= res[i].n_batches > 0;
  if (any_batch) {
    printf("\nbatched decode on the CPU, int8 (for the batch chart): aggregate tokens/s of B\n"
           "sequences on one engine, each prefilled with %d tokens (as --batch); median of the\n"
           "repetitions the context holds (column reps)\n", BATCH_PROMPT);
    printf("%-14s %5s", "model", "reps");
    for (int b = 0; b < PLOT_N_BATCHES; b++) printf("  B=%-7d", plot_batches[b]);
    printf("\n");
    for (int i = 0; i < n_res; i++) {
      const model_result_t *r = &res[i];
      if (!r->n_batches) continue;
      printf("%-14s %5d", r->preset, r->batch_reps);
      for (int b = 0; b < r->n_batches; b++) printf(" %9.1f", r->batch_cpu_tps[b]);
      printf("\n");
    }
  }
  if (strcmp(off_dev, "none") != 0) {
    printf("\nint8 offload path on %s, projected: host ops measured here + the board's\n"
           "time (device cycles at its clock, launch latency, copies over its link)\n",
           off_dev);
    printf("%-14s %16s %16s  %20s\n", "model", "offload prefill", "offload decode",
           "decode vs CPU int8");
    for (int i = 0; i < n_res; i++)
      printf("%-14s %12.1f t/s %12.1f t/s  %19.2fx\n", res[i].preset, res[i].off_prefill_tps,
             res[i].off_decode_tps, res[i].off_decode_tps / res[i].decode_tps[1]);
  }
}

int tsr_cmd_bench(int argc, char **argv) {
  if (cli_bench_offload_wanted(argc, argv)) return cli_bench_offload(argc, argv);
  const char *cmd = "bench";
  const char *models = "stories15M,stories110M", *dir = "build/bench", *off_dev = "fmodel";
  bool json = false, kernels = true, run_models = true, only_kernels = false;
  bool models_set = false, prompt_set = false, decode_set = false, with_auto = false;
  int64_t reps = 5, n_prompt = 128, n_decode = 64, threads = 0;
  int32_t batches[BATCH_MAX_SIZES];
  int n_batches = 0;
  bool reps_set = false, device_set = false;
  double gbit = 25, lat_us = 10;
  const char *plot_dir = NULL;
  cli_peer_t peer;
  bool have_peer = false, depths_off = false, process = true, half = false;
  int32_t depths[DEPTH_MAX];
  int n_depths = 0;
  tsr_context_options_t mco;
  tsr_context_options_init(&mco);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strncmp(a, "--mpi", 5) || !strcmp(a, "--device")) {
      device_set |= !strcmp(a, "--device");
      if (cli_device_option(cmd, argc, argv, &i, &mco) != 1) {
        if (strcmp(a, "--mpi") && strcmp(a, "--mpi-split") && strcmp(a, "--mpi-timeout") &&
            strcmp(a, "--device"))
          fprintf(stderr, "tessera bench: unknown option '%s' (see --help)\n", a);
        return 2;
      }
    } else if (!strcmp(a, "--network")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      char extra;
      if (sscanf(v, "%lf,%lf%c", &gbit, &lat_us, &extra) != 2 || !(gbit > 0) || gbit > 1e5 ||
          !(lat_us >= 0) || lat_us > 1e7) {
        fprintf(stderr, "tessera bench: --network: '%s' is not GBIT,LATENCY_US (e.g. 25,10; "
                        "Gbit/s > 0, latency >= 0)\n", v);
        return 2;
      }
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--kernels")) {
      run_models = false;
      only_kernels = true;
    } else if (!strcmp(a, "--batch")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !parse_batch_list(v, batches, &n_batches))
        return 2;
    } else if (!strcmp(a, "--auto")) {
      with_auto = true;
    } else if (!strcmp(a, "--peer")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_peer_parse(v, &peer)) return 2;
      have_peer = true;
    } else if (!strcmp(a, "--plot")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      plot_dir = v;
    } else if (!strcmp(a, "--depths")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !parse_depths(v, depths, &n_depths, &depths_off))
        return 2;
    } else if (!strcmp(a, "--no-process")) {
      process = false;
    } else if (!strcmp(a, "--half")) {
      half = true;
    } else if (!strcmp(a, "--no-kernels")) {
      kernels = false;
    } else if (!strcmp(a, "--models")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      models = v;
      models_set = true;
    } else if (!strcmp(a, "--offload-device")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      off_dev = v;
    } else if (!strcmp(a, "--dir")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      dir = v;
    } else if (!strcmp(a, "--reps")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 1, 1000, &reps))
        return 2;
      reps_set = true;
    } else if (!strcmp(a, "--prompt")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 1, 1 << 16, &n_prompt))
        return 2;
      prompt_set = true;
    } else if (!strcmp(a, "--decode")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 1, 1 << 16, &n_decode))
        return 2;
      decode_set = true;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 0, 1024, &threads))
        return 2;
    } else {
      fprintf(stderr, "tessera bench: unknown option '%s' (see --help)\n", a);
      return 2;
    }
  }
  if (mco.mpi && (have_peer || plot_dir)) {
    fprintf(stderr, "tessera bench: --%s is not for --mpi\n", have_peer ? "peer" : "plot");
    return 2;
  }
  if (n_batches && have_peer) {
    fprintf(stderr, "tessera bench: --peer goes with the model table, not --batch\n");
    return 2;
  }
  if (only_kernels && have_peer) {
    fprintf(stderr, "tessera bench: --peer measures models: not with --kernels\n");
    return 2;
  }
  if (plot_dir && !cli_plot_prepare(plot_dir)) return 1;
  if (mco.mpi) {
    if (only_kernels || with_auto) {
      fprintf(stderr, "tessera bench: --mpi measures models: not with --%s\n",
              only_kernels ? "kernels" : "auto");
      return 2;
    }
    static const int32_t default_batches[] = {1, 8};
    cli_bench_mpi_t mo = {
        .copts = &mco,
        .models = models_set ? models : "stories110M,large",
        .dir = dir,
        .batches = n_batches ? batches : default_batches,
        .n_batches = n_batches ? n_batches : 2,
        .reps = reps_set ? (int)reps : 3,
        .n_prompt = prompt_set ? (int32_t)n_prompt : 64,
        .n_decode = decode_set ? (int32_t)n_decode : 16,
        .gbit = gbit,
        .lat_us = lat_us,
        .json = json,
    };
    mco.n_threads = (int)threads;
    return cli_bench_mpi(&mo);
  }
  if (device_set) {
    fprintf(stderr, "tessera bench: --device goes with --mpi (see --offload-device)\n");
    return 2;
  }
  if (n_batches) {
    if (only_kernels) {
      fprintf(stderr, "tessera bench: --batch and --kernels exclude each other\n");
      return 2;
    }
    return bench_batch(batches, n_batches, models_set ? models : "stories110M,large", dir,
                       off_dev, with_auto, (int)threads, (int)reps,
                       prompt_set ? (int32_t)n_prompt : BATCH_PROMPT,
                       decode_set ? (int32_t)n_decode : BATCH_DECODE, json, plot_dir);
  }
  if (with_auto) {
    fprintf(stderr, "tessera bench: --auto goes with --batch\n");
    return 2;
  }
  if (!strcmp(models, "none")) run_models = false;

  tsr_context_options_t co;
  tsr_context_options_init(&co);
  co.n_threads = (int)threads;
  tsr_context_t *ctx = NULL;
  tsr_status_t s = tsr_context_create(&co, &ctx);
  if (s) return cli_fail(cmd, s);

  tsr_bench_kernel_results_t kr;
  memset(&kr, 0, sizeof kr);
  if (kernels) {
    tsr_bench_opts_t bo;
    tsr_bench_opts_init(&bo);
    bo.reps = (int)reps;
    tsr_threadpool_t *pool = NULL;
    s = tsr_threadpool_create((int)threads, &pool);
    bo.pool = pool;
    if (!s) s = tsr_bench_kernels(&bo, &kr);
    tsr_threadpool_destroy(pool);
    if (s) {
      tsr_context_destroy(ctx);
      return cli_fail(cmd, s);
    }
  }

  model_result_t res[8];
  int n_res = 0;
  const int n_threads = threads > 0 ? (int)threads : tsr_cpu_count();
  const bool offload = strcmp(off_dev, "none") != 0;
  if (run_models) {
    char *list = strdup(models);
    if (!list) s = TSR_ERR(RESOURCE_EXHAUSTED, "models");
    mkdir("build", 0755);
    mkdir(dir, 0755);
    const model_bench_t mb = {
        .reps = (int)reps,
        .n_prompt = (int32_t)n_prompt,
        .n_decode = (int32_t)n_decode,
        .depths_off = depths_off,
        .n_depths = n_depths,
        .depths = depths,
        .peer = have_peer ? &peer : NULL,
        .threads = n_threads,
    };
    for (char *tok = list ? strtok(list, ",") : NULL; tok && !s; tok = strtok(NULL, ",")) {
      if (n_res == 8) {
        s = TSR_ERR(OUT_OF_RANGE, "--models: at most 8 models");
        break;
      }
      char path[1024];
      s = cli_bench_model_path(dir, tok, json, path, sizeof path);
      if (s) break;
      model_result_t *r = &res[n_res];
      memset(r, 0, sizeof *r);
      snprintf(r->preset, sizeof r->preset, "%s", tok);
      if (!json) fprintf(stderr, "tessera bench: running %s\n", tok);
      s = bench_model(ctx, path, &mb, r);
      if (!s && have_peer) {
        s = bench_model_file(dir, tok, TSR_DTYPE_Q8_0, json, r->q8_path, sizeof r->q8_path);
        if (!s) s = bench_q8(ctx, &mb, r);
      }
      if (!s && half) s = bench_half(ctx, dir, json, &mb, r);
      if (!s && offload) {
        offload_spec(off_dev, &r->cfg, r->off_spec, sizeof r->off_spec);
        s = bench_offload(r->off_spec, (int)threads, path, r->n_prompt, r->n_decode, r);
      }
      if (!s && process) {
        if (!json) fprintf(stderr, "tessera bench: %s, whole-process runs\n", tok);
        bench_process(r, n_threads, (int)reps);
      }
      if (!s && plot_dir) {
        if (!json) fprintf(stderr, "tessera bench: %s, CPU batch sweep for the chart\n", tok);
        s = plot_batch_sweep(r, (int)threads, (int)reps);
      }
      if (!s) n_res++;
    }
    free(list);
  }
  tsr_context_destroy(ctx);
  if (s) return cli_fail(cmd, s);

  if (json) {
    printf("{\n  \"reps\": %d,\n  \"threads\": %d,\n", (int)reps, n_threads);
    if (kernels) {
      printf("  \"kernels\": ");
      tsr_bench_print_json(stdout, &kr);
      printf(",\n");
    }
    models_print_json(res, n_res, offload, have_peer ? &peer : NULL);
    printf("\n}\n");
  } else {
    if (kernels) tsr_bench_print_table(stdout, &kr);
    if (n_res)
      models_print_table(res, n_res, (int)reps, (int32_t)n_prompt, (int32_t)n_decode, off_dev,
                         have_peer ? &peer : NULL);
  }
  if (plot_dir) {
    char caption[160];
    snprintf(caption, sizeof caption, "this machine, %d threads, %s; median of %d", n_threads,
             tsr_isa_name(kernels ? kr.isa : tsr_isa_detect()), (int)reps);
    cli_plot_model_t pm[8];
    memset(pm, 0, sizeof pm);
    for (int i = 0; i < n_res; i++) {
      const model_result_t *r = &res[i];
      pm[i] = (cli_plot_model_t){
          .preset = r->preset,
          .params_m = r->params_m,
          .prefill_tps = {r->prefill_tps[0], r->prefill_tps[1]},
          .decode_tps = {r->decode_tps[0], r->decode_tps[1]},
          .peer_prefill_tps = r->peer[0].ok ? r->peer[0].pp_tps : 0,
          .peer_decode_tps = r->peer[0].ok ? r->peer[0].tg_tps : 0,
          .n_depths = r->n_depths,
          .depths = r->depths,
          .depth_tps = {r->depth_tps[0], r->depth_tps[1]},
          .n_batches = r->n_batches,
          .batches = r->batches,
          .batch_cpu_tps = r->batch_cpu_tps,
      };
    }
    char peer_label[64];
    snprintf(peer_label, sizeof peer_label, "%s (f32 file)", have_peer ? peer.name : "");
    bool ok = true;
    const char *written[4];
    int n_written = 0;
    if (n_res) {
      ok = ok && cli_plot_models(plot_dir, pm, n_res, have_peer ? peer_label : NULL, caption);
      if (ok) written[n_written++] = "models";
      if (ok && !depths_off) {
        ok = cli_plot_depths(plot_dir, pm, n_res, caption);
        if (ok) written[n_written++] = "depth";
      }
      ok = ok && cli_plot_batches(plot_dir, pm, n_res, NULL, caption);
      if (ok) written[n_written++] = "batch";
    }
    if (ok && kernels) {
      ok = cli_plot_roofline(plot_dir, &kr, caption);
      if (ok) written[n_written++] = "roofline";
    }
    if (!ok) return 1;
    FILE *f = json ? stderr : stdout;
    fprintf(f, "\ncharts in %s:", plot_dir);
    for (int i = 0; i < n_written; i++) fprintf(f, " %s.png", written[i]);
    fprintf(f, " (data NAME.dat, gnuplot script NAME.gp)\n");
  }
  return 0;
}
