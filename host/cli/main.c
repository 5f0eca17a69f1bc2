/* main.c - `tessera`: dispatches to the subcommands (see cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"run", tsr_cmd_run, "generate text from a prompt"},
    {"plan", tsr_cmd_plan, "show how a model is split between the CPU and devices"},
    {"info", tsr_cmd_info, "print a model's configuration and tensor table"},
    {"gen-model", tsr_cmd_gen_model, "write a llama GGUF with random weights"},
    {"prune", tsr_cmd_prune, "write a GGUF with the weights pruned by magnitude"},
    {"bench", tsr_cmd_bench, "CPU kernel and model benchmarks"},
    {"gemm", tsr_cmd_gemm, "run one int8 matmul on a device and print its checksum"},
    {"attn", tsr_cmd_attn, "run int8 block-sparse attention on a device, print its checksum"},
    {"devices", tsr_cmd_devices, "list device backends and their availability"},
    {"xclbin", tsr_cmd_xclbin, "write the kernel xclbin or describe/validate one"},
    {"serve", tsr_cmd_serve, "serve models over HTTP (OpenAI-compatible, multi-tenant)"},
    {"loadgen", tsr_cmd_loadgen, "drive a server with concurrent clients, check and time them"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: tessera COMMAND [options]   (tessera COMMAND --help)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("tessera %d.%d.%d\n", TSR_VERSION_MAJOR, TSR_VERSION_MINOR, TSR_VERSION_PATCH);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "tessera: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
