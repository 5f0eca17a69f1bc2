/* cmd_gen_model.c - `tessera gen-model`: writes a llama GGUF with
 * deterministic random weights (see gen_model.c for presets and the weight
 * recipe). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "host/src/model_file.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera gen-model -o FILE.gguf --preset NAME [--type f32|f16|bf16|q8_0]\n"
          "                         [--seed S] [--dim N] [--hidden N] [--layers N]\n"
          "                         [--heads N] [--kv-heads N] [--vocab N] [--seq N]\n"
          "                         [--experts N --experts-used K]\n"
          "\n"
          "Writes a standard llama GGUF v3 with a SentencePiece-style vocabulary and\n"
          "deterministic random weights. Explicit sizes override the preset's.\n"
          "\n"
          "presets (dim, hidden, layers, heads, kv-heads, vocab, seq):\n"
          "  stories260K    64   172   5   8   4    512   512\n"
          "  stories15M    288   768   6   6   6  32000   256\n"
          "  stories110M   768  2048  12  12  12  32000  1024\n"
          "  large        2048  5632   8  32   4  32000  2048  (~0.42B parameters)\n"
          "  moe260K       64    96   3   8   4    512   512  4 experts, 2 per token\n"
          "  moe15M       288   768   6   6   6  32000   256  8 experts, 2 per token\n"
          "\n"
          "  --experts N         Mixture-of-Experts FFN of N experts of --hidden each\n"
          "                      (Mixtral's tensors; 0 = dense); --experts-used K per token\n"
          "\n"
          "  -o, --output FILE   where to write (required)\n"
          "  --preset NAME       base shape (required)\n"
          "  --type T            2-D weights as f32 (default), f16, bf16 or q8_0\n"
          "  --seed S            weight seed (default 42)\n"
          "  -h, --help          this text\n");
}

int tsr_cmd_gen_model(int argc, char **argv) {
  const char *cmd = argv[0], *out = NULL, *preset = NULL, *type = NULL;
  /* Overrides, -1 = keep the preset's value. */
  int64_t dims[9] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
  static const char *const dim_flags[9] = {"--dim",   "--hidden",  "--layers",
                                           "--heads", "--kv-heads", "--vocab",
                                           "--seq",   "--experts", "--experts-used"};
  uint64_t seed = 0;
  bool have_seed = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (!(out = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--preset")) {
      if (!(preset = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--type")) {
      if (!(type = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--seed")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_u64(cmd, a, v, &seed)) return 2;
      have_seed = true;
    } else {
      int k = 0;
      while (k < 9 && strcmp(a, dim_flags[k])) k++;
      if (k == 9) {
        fprintf(stderr, "tessera %s: unknown option '%s'\n", cmd, a);
        usage(stderr);
        return 2;
      }
      if (!(v = cli_value(cmd, argc, argv, &i)) ||
          !cli_parse_i64(cmd, a, v, k == 7 ? 0 : 1, 1 << 20, &dims[k]))
        return 2;
    }
  }
  if (!out || !preset) {
    fprintf(stderr, "tessera %s: %s is required\n", cmd, !out ? "-o FILE" : "--preset NAME");
    usage(stderr);
    return 2;
  }
  tsr_gen_params_t p;
  tsr_status_t s = tsr_gen_preset(preset, &p);
  if (s) {
    cli_fail(cmd, s);
    return 2;
  }
  if (type) {
    if (!strcmp(type, "f32"))
      p.type = TSR_DTYPE_F32;
    else if (!strcmp(type, "f16"))
      p.type = TSR_DTYPE_F16;
    else if (!strcmp(type, "bf16"))
      p.type = TSR_DTYPE_BF16;
    else if (!strcmp(type, "q8_0"))
      p.type = TSR_DTYPE_Q8_0;
    else {
      fprintf(stderr, "tessera %s: --type: '%s' is not f32, f16, bf16 or q8_0\n", cmd, type);
      return 2;
    }
  }
  if (have_seed) p.seed = seed;
  int32_t *fields[9] = {&p.dim,        &p.hidden_dim, &p.n_layers,  &p.n_heads,
                        &p.n_kv_heads, &p.vocab_size, &p.seq_len,   &p.n_experts,
                        &p.n_experts_used};
  if (dims[7] > 1 && dims[8] < 0 && !p.n_experts_used) dims[8] = 2; /* top-2 by default */
  for (int k = 0; k < 9; k++)
    if (dims[k] >= 0) *fields[k] = (int32_t)dims[k];

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  s = tsr_gen_model_write(out, &p);
  if (s) {
    /* Inconsistent sizes are a usage error, not a failure of the run. */
    tsr_status_code_t code = tsr_status_code(s);
    int rc = cli_fail(cmd, s);
    return code == TSR_STATUS_OUT_OF_RANGE || code == TSR_STATUS_FORMAT ||
                   code == TSR_STATUS_INVALID_ARGUMENT
               ? 2
               : rc;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  printf("wrote %s: preset %s, dim %d, hidden %d, layers %d, heads %d/%d, vocab %d, seq %d, "
         "type %s, seed %" PRIu64 " (%.2f s)\n",
         out, p.preset, p.dim, p.hidden_dim, p.n_layers, p.n_heads, p.n_kv_heads,
         p.vocab_size, p.seq_len, tsr_dtype_name(p.type), p.seed, secs);
  return 0;
}
