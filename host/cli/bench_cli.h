/*
 * bench_cli.h - the parts of `tessera bench` outside its measurement loops:
 * child processes (the peer, whole-process runs of `tessera run`), the
 * peer's output, and the charts. Internal to the CLI.
 */
#ifndef TSR_BENCH_CLI_H
#define TSR_BENCH_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- child processes (bench_proc.c) ---- */

typedef struct cli_child {
  bool started;         /* the program was executed                        */
  bool timed_out;       /* killed after the timeout                        */
  int exit_code;        /* when it exited (term_signal == 0)               */
  int term_signal;      /* the signal that ended it, 0 if it exited        */
  double wall_s;        /* from fork to its end                            */
  long max_rss_kib;     /* peak resident set (wait4's ru_maxrss)           */
  char *out;            /* its stdout when captured (NUL-terminated)       */
  size_t out_len;
  char err_tail[240];   /* last non-empty line of its stderr, printable    */
} cli_child_t;

/* Runs argv (NULL-terminated; argv[0] the program: a path, or looked up in
 * PATH when `search_path`) in directory `cwd` (NULL: this one), stdin from
 * /dev/null, stdout captured into c->out when `capture_out` (else
 * discarded), stderr's last line kept. Kills it after timeout_s. Returns
 * false with a reason in `why` when it could not be run at all (not found,
 * not executable, ...); otherwise true and the outcome in *c, even if it
 * failed (see cli_child_failed). */
bool cli_child_run(char *const argv[], const char *cwd, bool search_path, bool capture_out,
                   double timeout_s, cli_child_t *c, char *why, size_t cap);
/* false if the child exited with 0; else true with what happened in `why`
 * ("exited with status 3: <last stderr line>", "died on signal 4 (SIGILL,
 * Illegal instruction)", "did not finish within 300 s"). */
bool cli_child_failed(const cli_child_t *c, char *why, size_t cap);
void cli_child_free(cli_child_t *c);

/* Prints s as a JSON string (quoted, escaped; bytes outside printable
 * ASCII as \u00XX). */
void cli_json_string(FILE *f, const char *s);

/* ---- peers (bench_peer.c) ---- */

typedef struct cli_peer {
  char name[16];    /* "llama-bench"                                       */
  const char *path; /* borrowed from argv                                  */
} cli_peer_t;

/* Parses --peer NAME=PATH; on a malformed value prints a message naming
 * it and returns false. */
bool cli_peer_parse(const char *spec, cli_peer_t *out);

/* One run of llama-bench on `model`: -m model -p n_prompt -n n_gen -t
 * threads -r 1 -o json, its JSON checked (an array with the pp and tg
 * records of this file and these sizes, finite positive avg_ts). Returns
 * false with the reason in `why`. */
bool cli_peer_llama_bench(const cli_peer_t *peer, const char *model, int n_prompt, int n_gen,
                          int threads, double *pp_tps, double *tg_tps, char *why, size_t cap);
/* The same checks on output already read (for the run above, and tests). */
bool cli_peer_parse_llama_bench(const char *json, size_t len, const char *model, int n_prompt,
                                int n_gen, double *pp_tps, double *tg_tps, char *why,
                                size_t cap);

/* ---- charts (bench_plot.c) ---- */

/* Creates `dir` (and its parents) if needed and checks a file can be
 * written there and that gnuplot can be run; prints the reason and returns
 * false otherwise. */
bool cli_plot_prepare(const char *dir);
/* The head of a gnuplot script NAME.gp writing NAME.png: terminal, output,
 * title over a smaller caption, grid, key below. */
void cli_plot_script_head(FILE *f, const char *name, const char *title, const char *caption);

/* What the charts of one model show; arrays borrowed, counts 0 for none. */
typedef struct cli_plot_model {
  const char *preset;
  double params_m;
  double prefill_tps[2], decode_tps[2]; /* [fp32, int8]; 0 = not measured  */
  double peer_prefill_tps, peer_decode_tps; /* 0 = no peer figure          */
  int n_depths;
  const int32_t *depths;
  const double *depth_tps[2];           /* [fp32, int8] per depth; 0 = none */
  int n_batches;
  const int32_t *batches;
  const double *batch_cpu_tps;          /* measured                        */
  const double *batch_all_tps, *batch_auto_tps; /* projected; NULL = none  */
} cli_plot_model_t;

/* Each writes NAME.dat, NAME.gp and, through gnuplot, NAME.png in `dir`
 * (models, depth, batch, roofline); `caption` goes under the title (threads,
 * ISA, repetitions). Print the reason and return false on error. */
bool cli_plot_models(const char *dir, const cli_plot_model_t *m, int n, const char *peer_label,
                     const char *caption);
bool cli_plot_depths(const char *dir, const cli_plot_model_t *m, int n, const char *caption);
bool cli_plot_batches(const char *dir, const cli_plot_model_t *m, int n, const char *device,
                      const char *caption);
struct tsr_bench_kernel_results;
bool cli_plot_roofline(const char *dir, const struct tsr_bench_kernel_results *kr,
                       const char *caption);

#endif
