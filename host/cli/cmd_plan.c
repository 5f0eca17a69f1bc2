/*
 * cmd_plan.c - `tessera plan`: how a model's graph is split between the
 * host and the devices, why, and the projected time split.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera plan -m MODEL [-z TOKENIZER] [--device LIST] [options]\n"
          "\n"
          "Prints every matmul of the decode (1 row) and prefill graphs with the device it\n"
          "goes to and the cause, then the projected per-evaluation time of host matmuls,\n"
          "transfers and device work (host times are measured here; device times come\n"
          "from the kernel's cycle model at the device's stated clock).\n"
          "\n"
          "  -m, --model FILE       GGUF or llama2.c checkpoint\n"
          "  -z, --tokenizer FILE   llama2.c tokenizer (llama2.c checkpoints)\n"
          "      --precision P      int8 (default) | fp32 | fp16 | bf16 (the last three: CPU)\n"
          CLI_ATTN_HELP
          "      --graph            also print the whole graph, light ops included\n"
          "  -t, --threads N        CPU threads (default: all)\n"
          "%s"
          "  -h, --help             this text\n",
          CLI_DEVICE_HELP);
}

int tsr_cmd_plan(int argc, char **argv) {
  const char *cmd = "plan";
  const char *model_path = NULL, *tok_path = NULL;
  bool graph = false;
  int64_t threads = 0;
  tsr_context_options_t copts;
  tsr_context_options_init(&copts);
  tsr_session_options_t sopts;
  tsr_session_options_init(&sopts);
  sopts.precision = TSR_PRECISION_INT8;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int used = cli_device_option(cmd, argc, argv, &i, &copts);
    if (!used) used = cli_session_option(cmd, argc, argv, &i, &sopts);
    if (used < 0) return 2;
    if (used) continue;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      model_path = v;
    } else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) {
      if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
      tok_path = v;
    } else if (!strcmp(a, "--graph")) {
      graph = true;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_i64(cmd, a, v, 0, 1024, &threads))
        return 2;
    } else {
      fprintf(stderr, "tessera plan: unknown option '%s' (see --help)\n", a);
      return 2;
    }
  }
  if (!model_path) {
    fprintf(stderr, "tessera plan: -m MODEL is required (see --help)\n");
    return 2;
  }
  copts.n_threads = (int)threads;
  tsr_context_t *ctx = NULL;
  tsr_model_t *model = NULL;
  tsr_session_t *sess = NULL;
  tsr_status_t s = tsr_context_create(&copts, &ctx);
  if (!s) s = tsr_model_load(ctx, model_path, tok_path, &model);
  if (!s) s = tsr_session_create(model, &sopts, &sess);
  int rc = 0;
  if (s) {
    rc = cli_fail(cmd, s);
  } else {
    tsr_model_config_t c;
    tsr_model_config(model, &c);
    printf("model %s: dim %d, hidden %d, %d layers, %d/%d heads, vocab %d\n", model_path, c.dim,
           c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size);
    tsr_session_print_plan(sess, stdout);
    if (graph) tsr_session_print_graph(sess, stdout);
  }
  tsr_session_destroy(sess);
  tsr_model_destroy(model);
  tsr_context_destroy(ctx);
  return rc;
}
