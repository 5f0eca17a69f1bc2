/*
 * cmd_bench.c - `tessera bench`: CPU kernel and model benchmarks.
 *
 * Kernels: memory read bandwidth, int8 and fp32 arithmetic peaks, OpenBLAS
 * sgemm, and the int8 GEMV/GEMM kernels with their ratio to the limit that
 * bounds them (host/src/bench.c). Models: prefill and decode tokens/s in
 * fp32 and int8 on generated models of several sizes (written once into
 * BUILD/bench/). Every figure is the median of --reps runs.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "host/src/bench.h"
#include "cli.h"
#include "host/src/model_file.h"

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
          "  -t, --threads N  threads (default: all)\n"
          "  --json           print JSON instead of a table\n"
          "  -h, --help       this text\n");
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
  char preset[32];
  double params_m;
  double prefill_tps[2], decode_tps[2]; /* [fp32, int8] */
  double off_prefill_tps, off_decode_tps; /* int8, offloaded, projected */
} model_result_t;

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

/* Prefill `n_prompt` tokens, then decode `n_decode` greedy steps; medians. */
static tsr_status_t bench_model(tsr_context_t *ctx, const char *path, int reps, int n_prompt,
                                int n_decode, model_result_t *r) {
  tsr_model_t *m = NULL;
  tsr_status_t s = tsr_model_load(ctx, path, NULL, &m);
  if (s) return s;
  tsr_model_config_t c;
  tsr_model_config(m, &c);
  if (n_prompt + n_decode > c.seq_len) {
    n_prompt = c.seq_len / 2;
    n_decode = c.seq_len - n_prompt;
  }
  double hd = c.hidden_dim, d = c.dim, kv = (double)c.n_kv_heads * c.head_dim;
  r->params_m =
      (c.n_layers * (d * d * 2 + 2 * d * kv + 3 * d * hd) + (c.shared_classifier ? 1 : 2) * c.vocab_size * d) / 1e6;
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_prompt);
  double *pre = malloc(sizeof(double) * (size_t)reps), *dec = malloc(sizeof(double) * (size_t)reps);
  if (!toks || !pre || !dec) {
    free(toks); free(pre); free(dec);
    tsr_model_destroy(m);
    fprintf(stderr, "tessera bench: out of memory\n");
    return NULL;
  }
  for (int i = 0; i < n_prompt; i++) toks[i] = (int32_t)((i * 7919 + 1) % c.vocab_size);
  for (int prec = 0; prec < 2 && !s; prec++) {
    tsr_session_options_t o;
    tsr_session_options_init(&o);
    o.precision = prec ? TSR_PRECISION_INT8 : TSR_PRECISION_FP32;
    tsr_session_t *sess = NULL;
    s = tsr_session_create(m, &o, &sess);
    for (int rep = 0; rep < reps && !s; rep++) {
      tsr_session_reset(sess);
      const float *logits = NULL;
      double t0 = cli_now_s();
      s = tsr_session_eval(sess, toks, (size_t)n_prompt, &logits);
      double t1 = cli_now_s();
      for (int i = 0; i < n_decode && !s; i++) {
        int32_t best = 0;
        for (int32_t v = 1; v < c.vocab_size; v++)
          if (logits[v] > logits[best]) best = v;
        s = tsr_session_eval(sess, &best, 1, &logits);
      }
      double t2 = cli_now_s();
      pre[rep] = n_prompt / (t1 - t0);
      dec[rep] = n_decode / (t2 - t1);
    }
    if (!s) {
      r->prefill_tps[prec] = median(pre, reps);
      r->decode_tps[prec] = median(dec, reps);
    }
    tsr_session_destroy(sess);
  }
  free(toks); free(pre); free(dec);
  tsr_model_destroy(m);
  return s;
}

int tsr_cmd_bench(int argc, char **argv) {
  const char *cmd = "bench";
  const char *models = "stories15M,stories110M", *dir = "build/bench", *off_dev = "fmodel";
  bool json = false, kernels = true, run_models = true;
  int64_t reps = 5, n_prompt = 128, n_decode = 64, threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--kernels")) {
      run_models = false;
    } else if (!strcmp(a, "--no-kernels")) {
      kernels = false;
    } else if (!strcmp(a, "--models")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      models = v;
    } else if (!strcmp(a, "--offload-device")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      off_dev = v;
    } else if (!strcmp(a, "--dir")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      dir = v;
    } else if (!strcmp(a, "--reps")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 1, 1000, &reps))
        return 2;
    } else if (!strcmp(a, "--prompt")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 1, 1 << 16, &n_prompt))
        return 2;
    } else if (!strcmp(a, "--decode")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 1, 1 << 16, &n_decode))
        return 2;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 0, 1024, &threads))
        return 2;
    } else {
      fprintf(stderr, "tessera bench: unknown option '%s' (see --help)\n", a);
      return 2;
    }
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
  if (run_models) {
    char *list = strdup(models);
    mkdir("build", 0755);
    mkdir(dir, 0755);
    for (char *tok = strtok(list, ","); tok && n_res < 8 && !s; tok = strtok(NULL, ",")) {
      tsr_gen_params_t p;
      s = tsr_gen_preset(tok, &p);
      if (s) break;
      char path[1024];
      snprintf(path, sizeof path, "%s/%s-f32-seed1.gguf", dir, tok);
      struct stat st;
      if (stat(path, &st) != 0) {
        p.seed = 1;
        p.type = TSR_DTYPE_F32;
        if (!json) fprintf(stderr, "tessera bench: generating %s\n", path);
        s = tsr_gen_model_write(path, &p);
        if (s) break;
      }
      model_result_t *r = &res[n_res];
      memset(r, 0, sizeof *r);
      snprintf(r->preset, sizeof r->preset, "%s", tok);
      if (!json) fprintf(stderr, "tessera bench: running %s\n", tok);
      s = bench_model(ctx, path, (int)reps, (int)n_prompt, (int)n_decode, r);
      if (!s && strcmp(off_dev, "none") != 0)
        s = bench_offload(off_dev, (int)threads, path, (int)n_prompt, (int)n_decode, r);
      if (!s) n_res++;
    }
    free(list);
  }
  tsr_context_destroy(ctx);
  if (s) return cli_fail(cmd, s);

  if (json) {
    printf("{\n  \"reps\": %d,\n", (int)reps);
    if (kernels) {
      printf("  \"kernels\": ");
      tsr_bench_print_json(stdout, &kr);
      printf(",\n");
    }
    printf("  \"models\": [");
    for (int i = 0; i < n_res; i++)
      printf("%s\n    {\"preset\": \"%s\", \"params_millions\": %.1f, "
             "\"fp32\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}, "
             "\"int8\": {\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}, "
             "\"int8_offload_projected\": {\"device\": \"%s\", \"prefill_tok_s\": %.2f, "
             "\"decode_tok_s\": %.2f}}",
             i ? "," : "", res[i].preset, res[i].params_m, res[i].prefill_tps[0],
             res[i].decode_tps[0], res[i].prefill_tps[1], res[i].decode_tps[1], off_dev,
             res[i].off_prefill_tps, res[i].off_decode_tps);
    printf("%s]\n}\n", n_res ? "\n  " : "");
    return 0;
  }
  if (kernels) tsr_bench_print_table(stdout, &kr);
  if (n_res) {
    printf("\nmodels (generated weights; prefill %d tokens, decode %d steps; median of %d)\n",
           (int)n_prompt, (int)n_decode, (int)reps);
    printf("%-14s %8s  %14s %14s  %14s %14s  %7s\n", "model", "params", "fp32 prefill",
           "fp32 decode", "int8 prefill", "int8 decode", "int8/fp32 decode");
    for (int i = 0; i < n_res; i++)
      printf("%-14s %7.1fM  %10.1f t/s %10.1f t/s  %10.1f t/s %10.1f t/s  %6.2fx\n",
             res[i].preset, res[i].params_m, res[i].prefill_tps[0], res[i].decode_tps[0],
             res[i].prefill_tps[1], res[i].decode_tps[1],
             res[i].decode_tps[1] / res[i].decode_tps[0]);
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
  return 0;
}
