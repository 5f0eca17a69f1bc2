/*
 * cmd_run.c - `tessera run`: generate text from a prompt.
 *
 * Output follows llama2.c's `run`: the prompt (as its tokens decode), then
 * the continuation, then a newline, on stdout; a one-line summary on stderr.
 * -n counts positions including BOS and the prompt tokens. Several -p run
 * as one batch of sequences on an engine (their prefills in one pass, then
 * one decode step of every live sequence per pass); each sequence's text is
 * printed when all are done, in the order of the prompts, exactly as a run
 * of that prompt alone prints it (int8: bit-identical logits; fp32: the
 * BLAS may round a batch of rows differently, see tessera.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera run -m MODEL [-z TOKENIZER] [-p PROMPT] [-n STEPS] [options]\n"
          "\n"
          "  -m, --model FILE       GGUF (llama) or llama2.c .bin checkpoint\n"
          "  -z, --tokenizer FILE   llama2.c tokenizer (.bin); GGUF files carry their own\n"
          "  -p, --prompt TEXT      prompt (default: empty); repeated: one sequence each,\n"
          "                         evaluated together as a batch (sequence i samples\n"
          "                         with seed S + i)\n"
          "  -n, --steps N          positions to run, prompt included (default 256;\n"
          "                         0 or more than the context = the model's context)\n"
          "      --temp T           temperature, 0 = greedy (default 1.0)\n"
          "      --topp P           nucleus sampling threshold in [0,1] (default 0.9)\n"
          "      --seed S           RNG seed (default: from the clock; printed)\n"
          "      --precision P      fp32 | int8 (W8A8 dynamic quantization) | fp16 | bf16\n"
          "                         (half weights, fp32 sums; CPU only) (default fp32)\n"
          CLI_ATTN_HELP
          "  -t, --threads N        CPU threads (default: all)\n"
          "%s"
          "      --stats            print per-op placement, bytes, cycles and times (stderr)\n"
          "      --trace FILE       write a Chrome trace (JSON, for Perfetto)\n"
          "  -h, --help             this text\n",
          CLI_DEVICE_HELP);
}

static void print_piece(const char *piece) {
  if (cli_piece_shown(piece)) fputs(piece, stdout);
}

#define MAX_PROMPTS 1024

/* One sequence of a batch run: its tokens so far and its text. */
typedef struct {
  tsr_seq_t *seq;
  tsr_sampler_t *sampler;
  int32_t *tokens;
  size_t n_prompt;
  cli_text_t text;
  int32_t token;
  int64_t pos;
  bool done;
} run_seq_t;

static bool text_append(run_seq_t *q, const char *piece) {
  return !cli_piece_shown(piece) || cli_text_append(&q->text, piece, strlen(piece));
}

/* Several prompts: one engine, one sequence per prompt, every live sequence
 * in each pass. Returns the exit code. */
static int run_batch(tsr_model_t *model, const tsr_session_options_t *sopts,
                     const char *const *prompts, int n, int64_t steps, double temp, double topp,
                     uint64_t seed, bool stats) {
  const char *cmd = "run";
  tsr_model_config_t cfg;
  tsr_model_config(model, &cfg);
  if (steps == 0 || steps > cfg.seq_len) steps = cfg.seq_len;
  tsr_engine_t *en = NULL;
  tsr_batch_t *b = NULL;
  run_seq_t *q = calloc((size_t)n, sizeof *q);
  size_t *idx = calloc((size_t)n, sizeof *idx);
  int rc = 1;
  if (!q || !idx) {
    fprintf(stderr, "tessera run: out of memory for %d sequences\n", n);
    goto done;
  }
  tsr_status_t s = tsr_engine_create(model, sopts, &en);
  if (!s) s = tsr_batch_create((size_t)n, &b);
  size_t total_prompt = 0;
  for (int i = 0; i < n && !s; i++) {
    size_t cap = strlen(prompts[i]) + 3;
    if (!(q[i].tokens = malloc(sizeof(int32_t) * cap))) {
      fprintf(stderr, "tessera run: out of memory for %zu prompt tokens\n", cap);
      goto done;
    }
    s = tsr_model_tokenize(model, prompts[i], true, false, q[i].tokens, cap, &q[i].n_prompt);
    if (!s) s = tsr_seq_create(en, &q[i].seq);
    if (!s)
      s = tsr_sampler_create(cfg.vocab_size, (float)temp, (float)topp, seed + (uint64_t)i,
                             &q[i].sampler);
    if (s) break;
    if ((int64_t)q[i].n_prompt > steps) q[i].n_prompt = (size_t)steps;
    for (size_t k = 1; k < q[i].n_prompt; k++)
      if (!text_append(&q[i], tsr_model_token_piece(model, q[i].tokens[k - 1], q[i].tokens[k]))) {
        fprintf(stderr, "tessera run: out of memory for the text of prompt %d\n", i + 1);
        goto done;
      }
    q[i].token = q[i].tokens[q[i].n_prompt - 1];
    q[i].pos = (int64_t)q[i].n_prompt - 1;
    total_prompt += q[i].n_prompt;
    s = tsr_batch_add(b, q[i].seq, q[i].tokens, q[i].n_prompt, true, &idx[i]);
  }
  if (s) {
    rc = cli_fail(cmd, s);
    goto done;
  }
  float *scratch = malloc(sizeof(float) * (size_t)cfg.vocab_size);
  if (!scratch) {
    fprintf(stderr, "tessera run: out of memory for %d logits\n", cfg.vocab_size);
    goto done;
  }
  double t0 = cli_now_s(), t_first = 0;
  int64_t generated = 0, passes = 0;
  for (;;) {
    s = tsr_engine_eval(en, b);
    if (s) break;
    if (!passes++) t_first = cli_now_s();
    /* sample every sequence of the pass, then form the next one */
    int live = 0;
    for (int i = 0; i < n; i++) {
      if (q[i].done) continue;
      memcpy(scratch, tsr_batch_logits(b, idx[i]), sizeof(float) * (size_t)cfg.vocab_size);
      int32_t next = tsr_sampler_sample(q[i].sampler, scratch);
      q[i].pos++;
      if (next == tsr_model_bos(model)) { /* BOS ends a sequence */
        q[i].done = true;
        continue;
      }
      if (!text_append(&q[i], tsr_model_token_piece(model, q[i].token, next))) {
        fprintf(stderr, "tessera run: out of memory for the text of prompt %d\n", i + 1);
        free(scratch);
        goto done;
      }
      q[i].token = next;
      generated++;
      if (q[i].pos >= steps) q[i].done = true;
      else live++;
    }
    tsr_batch_clear(b);
    if (!live) break;
    for (int i = 0; i < n && !s; i++)
      if (!q[i].done) s = tsr_batch_add(b, q[i].seq, &q[i].token, 1, true, &idx[i]);
    if (s) break;
  }
  free(scratch);
  if (s) {
    rc = cli_fail(cmd, s);
    goto done;
  }
  double t1 = cli_now_s();
  for (int i = 0; i < n; i++) printf("%s\n", q[i].text.p ? q[i].text.p : "");
  double prefill_s = t_first - t0, decode_s = t1 - t_first;
  fprintf(stderr,
          "tessera run: %d sequences: %zu prompt tokens in %.3f s (%.1f tok/s), %" PRId64
          " generated in %.3f s (%.1f tok/s), %" PRId64 " passes, %s, seed %" PRIu64 "\n",
          n, total_prompt, prefill_s, prefill_s > 0 ? (double)total_prompt / prefill_s : 0.0,
          generated, decode_s, decode_s > 0 ? (double)generated / decode_s : 0.0, passes,
          tsr_precision_name(sopts->precision), seed);
  if (stats) tsr_engine_print_stats(en, stderr);
  rc = 0;
done:
  if (q)
    for (int i = 0; i < n; i++) {
      tsr_seq_destroy(q[i].seq);
      tsr_sampler_destroy(q[i].sampler);
      free(q[i].tokens);
      cli_text_free(&q[i].text);
    }
  free(q);
  free(idx);
  tsr_batch_destroy(b);
  tsr_engine_destroy(en);
  return rc;
}

int tsr_cmd_run(int argc, char **argv) {
  const char *cmd = "run";
  const char *model_path = NULL, *tok_path = NULL, *prompt = "";
  const char *prompts[MAX_PROMPTS];
  int n_prompts = 0;
  bool stats = false;
  int64_t steps = 256, threads = 0;
  double temp = 1.0, topp = 0.9;
  uint64_t seed = 0;
  tsr_context_options_t copts;
  tsr_context_options_init(&copts);
  tsr_session_options_t sopts;
  tsr_session_options_init(&sopts);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int used = cli_device_option(cmd, argc, argv, &i, &copts);
    if (!used) used = cli_session_option(cmd, argc, argv, &i, &sopts);
    if (used < 0) return 2;
    if (used) continue;
#define VALUE() \
  if (!(v = cli_value(cmd, argc, argv, &i))) return 2
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
      VALUE();
      model_path = v;
    } else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) {
      VALUE();
      tok_path = v;
    } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
      VALUE();
      if (n_prompts == MAX_PROMPTS) {
        fprintf(stderr, "tessera run: -p: at most %d prompts\n", MAX_PROMPTS);
        return 2;
      }
      prompt = prompts[n_prompts++] = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--steps")) {
      VALUE();
      if (!cli_parse_i64(cmd, a, v, 0, INT32_MAX, &steps)) return 2;
    } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
      VALUE();
      if (!cli_parse_f64(cmd, a, v, 0.0, 1e6, &temp)) return 2;
    } else if (!strcmp(a, "--topp") || !strcmp(a, "--top-p")) {
      VALUE();
      if (!cli_parse_f64(cmd, a, v, 0.0, 1.0, &topp)) return 2;
    } else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
      VALUE();
      if (!cli_parse_u64(cmd, a, v, &seed)) return 2;
    } else if (!strcmp(a, "--stats")) {
      stats = true;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
      VALUE();
      if (!cli_parse_i64(cmd, a, v, 0, 1024, &threads)) return 2;
    } else {
      fprintf(stderr, "tessera run: unknown option '%s' (see --help)\n", a);
      return 2;
    }
#undef VALUE
  }
  if (!model_path) {
    fprintf(stderr, "tessera run: -m MODEL is required (see --help)\n");
    return 2;
  }
  if (seed == 0) seed = (uint64_t)time(NULL);

  copts.n_threads = (int)threads;
  tsr_context_t *ctx = NULL;
  tsr_model_t *model = NULL;
  tsr_session_t *sess = NULL;
  tsr_sampler_t *sampler = NULL;
  int32_t *tokens = NULL;
  int rc = 1;
  tsr_status_t s = tsr_context_create(&copts, &ctx);
  if (!s && tsr_context_rank(ctx) > 0) {
    /* another rank of an MPI job: serve rank 0 until it is done */
    s = tsr_context_serve_ranks(ctx);
    rc = s ? cli_fail(cmd, s) : 0;
    goto done;
  }
  if (!s) s = tsr_model_load(ctx, model_path, tok_path, &model);
  if (!s && n_prompts > 1) {
    rc = run_batch(model, &sopts, prompts, n_prompts, steps, temp, topp, seed, stats);
    goto done;
  }
  tsr_model_config_t cfg = {0};
  if (!s) {
    tsr_model_config(model, &cfg);
    s = tsr_session_create(model, &sopts, &sess);
  }
  if (!s) s = tsr_sampler_create(cfg.vocab_size, (float)temp, (float)topp, seed, &sampler);
  size_t n_prompt = 0;
  if (!s) {
    size_t cap = strlen(prompt) + 3;
    tokens = malloc(sizeof(int32_t) * cap);
    if (!tokens) {
      fprintf(stderr, "tessera run: out of memory for %zu prompt tokens\n", cap);
      goto done;
    }
    s = tsr_model_tokenize(model, prompt, true, false, tokens, cap, &n_prompt);
  }
  if (s) {
    rc = cli_fail(cmd, s);
    goto done;
  }
  if (steps == 0 || steps > cfg.seq_len) steps = cfg.seq_len;
  if ((int64_t)n_prompt > steps) n_prompt = (size_t)steps; /* prompt cut at the context */

  /* Prefill: all prompt tokens in one batch; print them as they decode. */
  const float *logits = NULL;
  double t0 = cli_now_s(), t_first = 0;
  s = tsr_session_eval(sess, tokens, n_prompt, &logits);
  if (s) {
    rc = cli_fail(cmd, s);
    goto done;
  }
  for (size_t i = 1; i < n_prompt; i++)
    print_piece(tsr_model_token_piece(model, tokens[i - 1], tokens[i]));
  fflush(stdout);
  t_first = cli_now_s();
  int32_t token = tokens[n_prompt - 1];
  int64_t pos = (int64_t)n_prompt - 1, generated = 0;
  float *scratch = malloc(sizeof(float) * (size_t)cfg.vocab_size);
  if (!scratch) {
    fprintf(stderr, "tessera run: out of memory for %d logits\n", cfg.vocab_size);
    goto done;
  }
  while (pos < steps) {
    memcpy(scratch, logits, sizeof(float) * (size_t)cfg.vocab_size);
    int32_t next = tsr_sampler_sample(sampler, scratch);
    pos++;
    if (next == tsr_model_bos(model)) break; /* BOS ends a sequence */
    print_piece(tsr_model_token_piece(model, token, next));
    fflush(stdout);
    token = next;
    generated++;
    if (pos >= steps) break;
    s = tsr_session_eval(sess, &token, 1, &logits);
    if (s) {
      free(scratch);
      printf("\n");
      rc = cli_fail(cmd, s);
      goto done;
    }
  }
  free(scratch);
  printf("\n");
  double t1 = cli_now_s();
  double prefill_s = t_first - t0, decode_s = t1 - t_first;
  fprintf(stderr,
          "tessera run: %zu prompt tokens in %.3f s (%.1f tok/s), %" PRId64
          " generated in %.3f s (%.1f tok/s), %s, seed %" PRIu64 "\n",
          n_prompt, prefill_s, prefill_s > 0 ? (double)n_prompt / prefill_s : 0.0, generated,
          decode_s, decode_s > 0 ? (double)generated / decode_s : 0.0,
          tsr_precision_name(sopts.precision), seed);
  if (copts.devices && strstr(copts.devices, "sim"))
    fprintf(stderr, "tessera run: these rates are host wall time and include the RTL "
                    "simulation; device time is in cycles (--stats)\n");
  if (stats) tsr_session_print_stats(sess, stderr);
  rc = 0;
done:
  free(tokens);
  tsr_sampler_destroy(sampler);
  tsr_session_destroy(sess);
  tsr_model_destroy(model);
  tsr_context_destroy(ctx);
  return rc;
}
