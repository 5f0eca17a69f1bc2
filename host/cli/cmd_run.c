/*
 * cmd_run.c - `tessera run`: generate text from a prompt.
 *
 * Output follows llama2.c's `run`: the prompt (as its tokens decode), then
 * the continuation, then a newline, on stdout; a one-line summary on stderr.
 * -n counts positions including BOS and the prompt tokens.
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
          "  -p, --prompt TEXT      prompt (default: empty)\n"
          "  -n, --steps N          positions to run, prompt included (default 256;\n"
          "                         0 or more than the context = the model's context)\n"
          "      --temp T           temperature, 0 = greedy (default 1.0)\n"
          "      --topp P           nucleus sampling threshold in [0,1] (default 0.9)\n"
          "      --seed S           RNG seed (default: from the clock; printed)\n"
          "      --precision P      fp32 | int8 (W8A8 dynamic quantization) (default fp32)\n"
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

int tsr_cmd_run(int argc, char **argv) {
  const char *cmd = "run";
  const char *model_path = NULL, *tok_path = NULL, *prompt = "";
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
      prompt = v;
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
          sopts.precision == TSR_PRECISION_INT8 ? "int8" : "fp32", seed);
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
