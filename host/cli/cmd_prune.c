/* cmd_prune.c - `tessera prune`: a GGUF file with its layer weights pruned
 * by magnitude (host/src/prune.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "host/src/prune.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera prune -m IN.gguf -o OUT.gguf --pattern 2:4|block:RxC [--density D]\n"
          "\n"
          "Writes IN with every layer matrix (attention, FFN, experts) pruned by\n"
          "magnitude; the embedding, classifier, norms and router are kept whole. The\n"
          "output is a standard GGUF (pruned weights are zeros in the file's type)\n"
          "with tessera.prune.pattern and tessera.prune.density in its metadata.\n"
          "\n"
          "  --pattern 2:4        of each 4 consecutive weights of a row, keep the 2\n"
          "                       largest\n"
          "  --pattern block:RxC  tiles of R rows x C columns, keep the fraction D of\n"
          "                       them with the largest L1 norm, per matrix\n"
          "  --density D          fraction kept, in (0, 1] (default 0.5; 2:4 is 0.5)\n"
          "  -h, --help           this text\n");
}

int tsr_cmd_prune(int argc, char **argv) {
  const char *cmd = argv[0], *in = NULL, *out = NULL, *pattern = NULL;
  double density = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
      if (!(in = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (!(out = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--pattern")) {
      if (!(pattern = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--density")) {
      if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_f64(cmd, a, v, 1e-9, 1, &density))
        return 2;
    } else {
      fprintf(stderr, "tessera %s: unknown option '%s'\n", cmd, a);
      usage(stderr);
      return 2;
    }
  }
  if (!in || !out || !pattern) {
    fprintf(stderr, "tessera %s: %s is required\n", cmd,
            !in ? "-m IN.gguf" : !out ? "-o OUT.gguf" : "--pattern");
    usage(stderr);
    return 2;
  }
  tsr_prune_pattern_t p;
  tsr_status_t s = tsr_prune_pattern_parse(pattern, density, &p);
  if (s) {
    cli_fail(cmd, s);
    return 2;
  }
  tsr_prune_report_t rep;
  s = tsr_prune_file(in, out, &p, &rep);
  if (s) {
    cli_fail(cmd, s);
    return 1;
  }
  char pat[32];
  tsr_prune_pattern_format(&p, pat, sizeof pat);
  printf("wrote %s: %s, %d matrices, %" PRIu64 " of %" PRIu64 " weights kept (%.4f)\n", out, pat,
         rep.matrices, rep.kept, rep.weights,
         rep.weights ? (double)rep.kept / (double)rep.weights : 0.0);
  return 0;
}
