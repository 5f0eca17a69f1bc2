/*
 * bench_peer.c - another engine measured by `tessera bench --peer` on the
 * same files (see bench_cli.h). Known peers: llama.cpp's llama-bench.
 *
 * llama-bench -o json prints an array of test records; each has n_prompt
 * and n_gen (a prompt-processing test has n_gen 0, a generation test
 * n_prompt 0), model_filename, and avg_ts / stddev_ts (tokens/s over its
 * repetitions). Its output is checked, not trusted: a record missing, for
 * another file, or with a rate that is not a positive number is an error
 * naming what is wrong.
 */
#include "bench_cli.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A run of llama-bench loads the model and warms up before timing; a
 * large model at fp32 on two cores takes a minute or two. */
#define PEER_TIMEOUT_S 600.0

bool cli_peer_parse(const char *spec, cli_peer_t *out) {
  memset(out, 0, sizeof *out);
  const char *eq = strchr(spec, '=');
  if (!eq || eq == spec) {
    fprintf(stderr, "tessera bench: --peer: '%s' is not NAME=PATH (e.g. "
                    "llama-bench=/opt/llama.cpp/llama-bench; known names: llama-bench)\n", spec);
    return false;
  }
  const size_t len = (size_t)(eq - spec);
  if (len != strlen("llama-bench") || strncmp(spec, "llama-bench", len)) {
    fprintf(stderr, "tessera bench: --peer: unknown peer '%.*s' in '%s' (known: llama-bench)\n",
            (int)len, spec, spec);
    return false;
  }
  if (!eq[1]) {
    fprintf(stderr, "tessera bench: --peer: '%s' has no path after '=' (the llama-bench "
                    "program to run)\n", spec);
    return false;
  }
  snprintf(out->name, sizeof out->name, "%.*s", (int)len, spec);
  out->path = eq + 1;
  return true;
}

/* The avg_ts of the record with these sizes; false with the reason. */
static bool find_rate(json_t *root, const char *model, int n_prompt, int n_gen, double *out,
                      char *why, size_t cap) {
  const char *what = n_gen ? "tg" : "pp";
  const int size = n_gen ? n_gen : n_prompt;
  size_t i;
  json_t *rec;
  json_array_foreach(root, i, rec) {
    if (!json_is_object(rec)) {
      snprintf(why, cap, "its JSON record %zu is not an object", i);
      return false;
    }
    json_t *np = json_object_get(rec, "n_prompt"), *ng = json_object_get(rec, "n_gen");
    if (!json_is_integer(np) || !json_is_integer(ng)) {
      snprintf(why, cap, "its JSON record %zu has no integer n_prompt and n_gen", i);
      return false;
    }
    if (json_integer_value(np) != n_prompt || json_integer_value(ng) != n_gen) continue;
    json_t *file = json_object_get(rec, "model_filename");
    if (json_is_string(file) && strcmp(json_string_value(file), model)) {
      snprintf(why, cap, "its JSON record %zu (%s%d) is for '%.200s', not this file", i, what,
               size, json_string_value(file));
      return false;
    }
    json_t *ts = json_object_get(rec, "avg_ts");
    const double v = json_is_number(ts) ? json_number_value(ts) : NAN;
    if (!isfinite(v) || v <= 0) {
      snprintf(why, cap, "its JSON record %zu (%s%d) has no positive avg_ts", i, what, size);
      return false;
    }
    *out = v;
    return true;
  }
  snprintf(why, cap, "its JSON has no record with n_prompt=%d and n_gen=%d (%s%d)",
           n_gen ? 0 : n_prompt, n_gen, what, size);
  return false;
}

/* The reason quotes the peer's output (jansson's error text, a file name
 * from its JSON): printable ASCII only, for terminals and tables. */
static void printable(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) *s = '?';
}

bool cli_peer_parse_llama_bench(const char *json, size_t len, const char *model, int n_prompt,
                                int n_gen, double *pp_tps, double *tg_tps, char *why,
                                size_t cap) {
  if (cap) why[0] = '\0';
  json_error_t err;
  json_t *root = json_loadb(json, len, 0, &err);
  if (!root) {
    snprintf(why, cap, "its output is not JSON (line %d, column %d: %s)", err.line, err.column,
             err.text);
    printable(why);
    return false;
  }
  bool ok = json_is_array(root);
  if (!ok) snprintf(why, cap, "its JSON output is not an array of test records");
  if (ok) ok = find_rate(root, model, n_prompt, 0, pp_tps, why, cap);
  if (ok) ok = find_rate(root, model, 0, n_gen, tg_tps, why, cap);
  json_decref(root);
  if (!ok) printable(why);
  return ok;
}

bool cli_peer_llama_bench(const cli_peer_t *peer, const char *model, int n_prompt, int n_gen,
                          int threads, double *pp_tps, double *tg_tps, char *why, size_t cap) {
  *pp_tps = *tg_tps = 0;
  char p[16], g[16], t[16];
  snprintf(p, sizeof p, "%d", n_prompt);
  snprintf(g, sizeof g, "%d", n_gen);
  snprintf(t, sizeof t, "%d", threads);
  char *argv[] = {(char *)peer->path, "-m", (char *)model, "-p", p, "-n", g, "-t", t,
                  "-r", "1", "-o", "json", NULL};
  cli_child_t c;
  if (!cli_child_run(argv, NULL, false, true, PEER_TIMEOUT_S, &c, why, cap)) return false;
  bool ok = !cli_child_failed(&c, why, cap);
  if (ok && c.out_len == 0) {
    snprintf(why, cap, "it printed nothing on stdout%s%s", c.err_tail[0] ? ": " : "",
             c.err_tail);
    ok = false;
  }
  if (ok) ok = cli_peer_parse_llama_bench(c.out, c.out_len, model, n_prompt, n_gen, pp_tps,
                                          tg_tps, why, cap);
  cli_child_free(&c);
  return ok;
}
