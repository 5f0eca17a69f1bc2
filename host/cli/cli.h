/*
 * cli.h - the `tessera` command-line tool: one function per subcommand.
 *
 * Each tsr_cmd_* gets argv with argv[0] = the subcommand name, prints its
 * own --help, and returns the process exit code (0 ok, 1 failure, 2 usage).
 */
#ifndef TSR_CLI_H
#define TSR_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

int tsr_cmd_run(int argc, char **argv);       /* cmd_run.c       */
int tsr_cmd_info(int argc, char **argv);      /* cmd_info.c      */
int tsr_cmd_gen_model(int argc, char **argv); /* cmd_gen_model.c */
int tsr_cmd_prune(int argc, char **argv);     /* cmd_prune.c */
int tsr_cmd_bench(int argc, char **argv);     /* cmd_bench.c     */
int tsr_cmd_gemm(int argc, char **argv);      /* cmd_gemm.c      */
int tsr_cmd_devices(int argc, char **argv);   /* cmd_devices.c   */
int tsr_cmd_plan(int argc, char **argv);      /* cmd_plan.c      */
int tsr_cmd_xclbin(int argc, char **argv);    /* cmd_xclbin.c    */
int tsr_cmd_attn(int argc, char **argv);      /* cmd_attn.c      */
int tsr_cmd_serve(int argc, char **argv);     /* host/serve      */
int tsr_cmd_loadgen(int argc, char **argv);   /* cmd_loadgen.c   */

/* Option helpers: print "tessera CMD: FLAG: ..." to stderr and return false
 * on a malformed or out-of-range value. */
bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo,
                   int64_t hi, int64_t *out);
bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
bool cli_parse_f64(const char *cmd, const char *flag, const char *s, double lo,
                   double hi, double *out);
/* Returns the value of a flag that takes one (argv[*i + 1]) and advances *i;
 * NULL (with a message) if it is missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
/* The device and partitioning options shared by run, plan and attn:
 * --device, --split, --offload, --place, --no-fallback, --retries, --device-timeout,
 * --trace, --quiet. Returns 1 if argv[*i] was one of them (consuming its
 * value), 0 if not, -1 on a bad value (message printed). */
int cli_device_option(const char *cmd, int argc, char **argv, int *i,
                      tsr_context_options_t *opts);
#define CLI_DEVICE_HELP                                                                   \
  "      --device LIST      where layers run, split in order: cpu (default), sim,\n"     \
  "                         fmodel, opencl, xrt, usb, with options (sim:latency=80);\n" \
  "                         e.g. sim, sim,sim, sim,cpu\n"                                \
  "      --split S          how several entries share the work: layers (default: each\n" \
  "                         a range of layers) | rows (each a share of every batch)\n"  \
  "      --offload P        auto (cost model, default) | all | none\n"                   \
  "      --place OP=WHERE   override placement: OP attn_q..output, attn, ffn, all,\n"    \
  "                         experts, expertN, expertA-B; WHERE cpu, a device name\n"    \
  "                         (sim0) or devN (comma-separated, or --place repeated)\n"   \
  "      --no-fallback      a device failure is an error instead of a CPU fallback\n"    \
  "      --retries N        retries of a failed device command (default 1)\n"           \
  "      --device-timeout MS  watchdog per device command (default 10000)\n"            \
  "      --quiet            no warnings on stderr\n"                                    \
  "      --mpi              under mpirun: layers split across the ranks (a pipeline);\n" \
  "                         --device takes one list per rank: 'fmodel;sim'\n"          \
  "      --mpi-split S      layers (pipeline, default) | rows (sequences per rank)\n"    \
  "      --mpi-timeout MS   longest wait for another rank (default 60000)\n"

/* The session options shared by run and plan: --precision (fp32 | int8 | fp16 | bf16),
 * --attn (a pattern, tsr_attn_pattern_parse) and --kv (f32 | f16 | q8). Returns like
 * cli_device_option. */
int cli_session_option(const char *cmd, int argc, char **argv, int *i,
                       tsr_session_options_t *opts);
#define CLI_ATTN_HELP                                                                      \
  "      --attn P           attention: ref (fp32, default) or int8 block-sparse:\n"         \
  "                         dense | window:W[,sinks:S] | strided:S[,local:L] | topk:K,\n" \
  "                         sizes in blocks, optional ,block:B (keys per block, 16)\n"    \
  "      --kv T             the ref attention's KV cache: f32 (default) | f16 (half the\n" \
  "                         memory and bytes per token; keys and values rounded) | q8\n" \
  "                         (int8, a scale per position and head: a quarter)\n"

/* Whether a token's piece is part of the text: not empty and not a lone
 * unprintable byte (as llama2.c prints). `tessera run` and the server's
 * completions show the same text through it. */
bool cli_piece_shown(const char *piece);

/* Growing text, always NUL-terminated once something was appended (p is
 * NULL before). */
typedef struct cli_text {
  char *p;
  size_t len, cap;
} cli_text_t;
/* Appends n bytes of s; false when out of memory (the text unchanged). */
bool cli_text_append(cli_text_t *t, const char *s, size_t n);
void cli_text_free(cli_text_t *t);

/* Monotonic wall clock in seconds. */
double cli_now_s(void);
/* splitmix64: the random data of gemm and attn (as in the gemm CLI
 * contract). */
uint64_t cli_splitmix64(uint64_t *s);
/* FNV-1a 64 over the little-endian bytes of n int32 values, continuing
 * from h (CLI_FNV1A_BASIS to start): the checksums gemm and attn print. */
#define CLI_FNV1A_BASIS 0xcbf29ce484222325ull
uint64_t cli_fnv1a_i32(uint64_t h, const int32_t *c, size_t n);

/* Shared by the benchmarks (cmd_bench.c, cmd_bench_mpi.c). */
double cli_median(double *v, int n); /* sorts v */
int32_t cli_argmax(const float *v, int32_t n);
/* The generated model of `preset` in `dir` (f32, seed 1), written on first
 * use into `path`. */
tsr_status_t cli_bench_model_path(const char *dir, const char *preset, bool quiet, char *path,
                                  size_t cap);
/* Prefills each of the n sequences with its own n_prompt tokens, all in
 * one batch on `eng`, and leaves each one's greedy next token in toks[i]. */
tsr_status_t cli_bench_prefill(tsr_engine_t *eng, tsr_seq_t **seqs, int32_t n, tsr_batch_t *b,
                               int32_t n_prompt, int32_t vocab, int32_t *toks);
/* `steps` decode steps of the first B sequences: each step one batch of
 * one token per sequence (toks[i], replaced by its greedy successor);
 * *out_s the wall time of the steps. */
tsr_status_t cli_bench_decode(tsr_engine_t *eng, tsr_seq_t **seqs, int32_t B, tsr_batch_t *b,
                              int32_t steps, int32_t vocab, int32_t *toks, double *out_s);
/* `tessera bench --mpi` (cmd_bench_mpi.c): under mpirun, tokens/s of the
 * model across the ranks of `copts` measured here, and projected onto a
 * network of `gbit` Gbit/s and `lat_us` per message. Returns the exit code. */
typedef struct cli_bench_mpi {
  const tsr_context_options_t *copts;
  const char *models, *dir;
  const int32_t *batches;
  int n_batches, reps;
  int32_t n_prompt, n_decode;
  double gbit, lat_us;
  bool json;
} cli_bench_mpi_t;
int cli_bench_mpi(const cli_bench_mpi_t *o);
/* `tessera bench --boards LIST|all` (or --offload-device SPEC with board=):
 * the crossover per board profile (cmd_bench_offload.c), which parses the
 * whole command line itself. Returns the exit code. */
bool cli_bench_offload_wanted(int argc, char **argv);
int cli_bench_offload(int argc, char **argv);

/* Prints "tessera CMD: <status message>" and frees the status; returns 1. */
int cli_fail(const char *cmd, tsr_status_t s);

#endif
