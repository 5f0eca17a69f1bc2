/* cmd_info.c - `tessera info`: a model file's configuration, tensor table
 * and vocabulary summary, straight from the loader (no weights converted). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "host/src/model_file.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera info -m MODEL [-z TOKENIZER]\n"
          "\n"
          "Prints the configuration, the tensor table (name, type, shape, file offset,\n"
          "bytes) and the vocabulary of a GGUF (llama) or llama2.c checkpoint.\n"
          "\n"
          "  -m, --model FILE       model file (.gguf or llama2.c .bin)\n"
          "  -z, --tokenizer FILE   llama2.c tokenizer (required for .bin; replaces the\n"
          "                         GGUF's embedded vocabulary if given)\n"
          "  -h, --help             this text\n");
}

static const char *format_name(tsr_model_format_t f) {
  return f == TSR_MODEL_FORMAT_GGUF ? "GGUF" : f == TSR_MODEL_FORMAT_LLAMA2C ? "llama2.c" : "?";
}

static void print_model(const char *path, const tsr_model_file_t *mf) {
  const tsr_model_config_t *c = &mf->config;
  printf("file:         %s (%zu bytes)\n", path, mf->file.size);
  if (c->format == TSR_MODEL_FORMAT_GGUF)
    printf("format:       GGUF v%u, alignment %" PRIu64 "\n", mf->gguf_version,
           mf->gguf_alignment);
  else
    printf("format:       %s\n", format_name(c->format));
  printf("dim:          %d\n", c->dim);
  printf("hidden_dim:   %d\n", c->hidden_dim);
  printf("n_layers:     %d\n", c->n_layers);
  printf("n_heads:      %d\n", c->n_heads);
  printf("n_kv_heads:   %d\n", c->n_kv_heads);
  printf("head_dim:     %d\n", c->head_dim);
  printf("vocab_size:   %d\n", c->vocab_size);
  printf("seq_len:      %d\n", c->seq_len);
  printf("rms_eps:      %g\n", (double)c->rms_eps);
  printf("rope_theta:   %g\n", (double)c->rope_theta);
  if (c->n_experts)
    printf("experts:      %d per layer, %d per token (FFN of hidden_dim each)\n", c->n_experts,
           c->n_experts_used);
  if (mf->prune_pattern[0])
    printf("pruned:       %s, density %g (tessera prune)\n", mf->prune_pattern,
           (double)mf->prune_density);
  printf("classifier:   %s\n", c->shared_classifier ? "shared with token embedding"
                                                    : "separate");
  printf("vocabulary:   %d tokens, bos %d, eos %d, unk %d, longest piece %d bytes\n",
         mf->vocab.n, mf->vocab.bos, mf->vocab.eos, mf->vocab.unk, mf->vocab.max_piece_len);

  uint64_t total_bytes = 0, total_params = 0;
  printf("\n%-4s %-32s %-5s %-22s %12s %12s\n", "#", "tensor", "type", "shape (ne)",
         "offset", "bytes");
  for (int32_t i = 0; i < mf->n_tensors; i++) {
    const tsr_tensor_info_t *t = &mf->tensors[i];
    char shape[64];
    int n = snprintf(shape, sizeof shape, "[");
    uint64_t elems = 1;
    for (int d = 0; d < t->n_dims; d++) {
      n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "",
                    t->ne[d]);
      elems *= (uint64_t)t->ne[d];
    }
    snprintf(shape + n, sizeof shape - (size_t)n, "]");
    printf("%-4d %-32s %-5s %-22s %#12" PRIx64 " %12" PRIu64 "\n", i, t->name,
           tsr_dtype_name(t->type), shape, t->offset, t->nbytes);
    total_bytes += t->nbytes;
    /* The llama2.c RoPE tables are not parameters. */
    if (strncmp(t->name, "freq_cis", 8) != 0) total_params += elems;
  }
  printf("\n%d tensors, %" PRIu64 " parameters, %" PRIu64 " bytes of weights\n",
         mf->n_tensors, total_params, total_bytes);
}

int tsr_cmd_info(int argc, char **argv) {
  const char *cmd = argv[0], *model = NULL, *tok = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
      if (!(model = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) {
      if (!(tok = cli_value(cmd, argc, argv, &i))) return 2;
    } else {
      fprintf(stderr, "tessera %s: unknown option '%s'\n", cmd, a);
      usage(stderr);
      return 2;
    }
  }
  if (!model) {
    fprintf(stderr, "tessera %s: -m MODEL is required\n", cmd);
    usage(stderr);
    return 2;
  }
  tsr_model_file_t *mf = NULL;
  tsr_status_t s = tsr_model_file_open(model, tok, &mf);
  if (s) return cli_fail(cmd, s);
  print_model(model, mf);
  tsr_model_file_close(mf);
  return 0;
}
