/* cmd_gen_model.c - placeholder until the subcommand lands. */
#include <stdio.h>

#include "cli.h"

int tsr_cmd_gen_model(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "tessera %s: not built yet\n", argv[0]);
  return 1;
}
