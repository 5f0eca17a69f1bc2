/* cli_util.c - option parsing and small helpers shared by the subcommands. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/splitmix.h"
#include "cli.h"

bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo,
                   int64_t hi, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno || end == s || *end != '\0') {
    fprintf(stderr, "tessera %s: %s: '%s' is not an integer\n", cmd, flag, s);
    return false;
  }
  if (v < lo || v > hi) {
    fprintf(stderr, "tessera %s: %s: %lld is outside [%" PRId64 ", %" PRId64 "]\n", cmd,
            flag, v, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

bool cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (s[0] == '-') {
    fprintf(stderr, "tessera %s: %s: '%s' must not be negative\n", cmd, flag, s);
    return false;
  }
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end != '\0') {
    fprintf(stderr, "tessera %s: %s: '%s' is not an unsigned integer\n", cmd, flag, s);
    return false;
  }
  *out = v;
  return true;
}

bool cli_parse_f64(const char *cmd, const char *flag, const char *s, double lo,
                   double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !isfinite(v)) {
    fprintf(stderr, "tessera %s: %s: '%s' is not a number\n", cmd, flag, s);
    return false;
  }
  if (v < lo || v > hi) {
    fprintf(stderr, "tessera %s: %s: %g is outside [%g, %g]\n", cmd, flag, v, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "tessera %s: %s needs a value\n", cmd, argv[*i]);
    return NULL;
  }
  *i += 1;
  return argv[*i];
}

int cli_fail(const char *cmd, tsr_status_t s) {
  fprintf(stderr, "tessera %s: %s: %s\n", cmd, tsr_status_code_name(tsr_status_code(s)),
          tsr_status_message(s));
  tsr_status_free(s);
  return 1;
}

int cli_device_option(const char *cmd, int argc, char **argv, int *i,
                      tsr_context_options_t *opts) {
  const char *a = argv[*i], *v;
  int64_t n;
  if (!strcmp(a, "--device") || !strcmp(a, "--devices")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    opts->devices = v;
  } else if (!strcmp(a, "--offload")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(v, "auto")) opts->offload = TSR_OFFLOAD_AUTO;
    else if (!strcmp(v, "all")) opts->offload = TSR_OFFLOAD_ALL;
    else if (!strcmp(v, "none")) opts->offload = TSR_OFFLOAD_NONE;
    else {
      fprintf(stderr, "tessera %s: --offload: '%s' is not auto, all or none\n", cmd, v);
      return -1;
    }
  } else if (!strcmp(a, "--place")) {
    /* repeated: the overrides of every --place, in order */
    static char joined[4096];
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (opts->placement) {
      char tmp[sizeof joined];
      int len = snprintf(tmp, sizeof tmp, "%s,%s", opts->placement, v);
      if (len < 0 || (size_t)len >= sizeof tmp) {
        fprintf(stderr, "tessera %s: --place: the overrides together exceed %zu bytes\n", cmd,
                sizeof joined - 1);
        return -1;
      }
      memcpy(joined, tmp, (size_t)len + 1);
      v = joined;
    }
    opts->placement = v;
  } else if (!strcmp(a, "--split")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(v, "layers")) opts->split = TSR_SPLIT_LAYERS;
    else if (!strcmp(v, "rows")) opts->split = TSR_SPLIT_ROWS;
    else {
      fprintf(stderr, "tessera %s: --split: '%s' is not layers or rows\n", cmd, v);
      return -1;
    }
  } else if (!strcmp(a, "--no-fallback")) {
    opts->fallback = false;
  } else if (!strcmp(a, "--retries")) {
    if (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_i64(cmd, a, v, 0, 100, &n)) return -1;
    opts->retries = (int)n;
  } else if (!strcmp(a, "--device-timeout")) {
    if (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_i64(cmd, a, v, 1, 3600000, &n))
      return -1;
    opts->device_timeout_ms = (uint32_t)n;
  } else if (!strcmp(a, "--trace")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    opts->trace_path = v;
  } else if (!strcmp(a, "--quiet")) {
    opts->quiet = true;
  } else if (!strcmp(a, "--mpi")) {
    opts->mpi = true;
  } else if (!strcmp(a, "--mpi-split")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    opts->mpi = true;
    if (!strcmp(v, "layers")) opts->mpi_split = TSR_SPLIT_LAYERS;
    else if (!strcmp(v, "rows")) opts->mpi_split = TSR_SPLIT_ROWS;
    else {
      fprintf(stderr, "tessera %s: --mpi-split: '%s' is not layers or rows\n", cmd, v);
      return -1;
    }
  } else if (!strcmp(a, "--mpi-timeout")) {
    if (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_i64(cmd, a, v, 1, 3600000, &n))
      return -1;
    opts->mpi_timeout_ms = (uint32_t)n;
  } else {
    return 0;
  }
  return 1;
}

int cli_session_option(const char *cmd, int argc, char **argv, int *i,
                       tsr_session_options_t *opts) {
  const char *a = argv[*i], *v;
  if (!strcmp(a, "--precision")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(v, "fp32")) opts->precision = TSR_PRECISION_FP32;
    else if (!strcmp(v, "int8")) opts->precision = TSR_PRECISION_INT8;
    else if (!strcmp(v, "fp16")) opts->precision = TSR_PRECISION_FP16;
    else if (!strcmp(v, "bf16")) opts->precision = TSR_PRECISION_BF16;
    else {
      fprintf(stderr, "tessera %s: --precision: '%s' is not fp32, int8, fp16 or bf16\n", cmd,
              v);
      return -1;
    }
  } else if (!strcmp(a, "--kv")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(v, "f32")) opts->kv_type = TSR_KV_F32;
    else if (!strcmp(v, "f16")) opts->kv_type = TSR_KV_F16;
    else if (!strcmp(v, "q8")) opts->kv_type = TSR_KV_Q8;
    else {
      fprintf(stderr, "tessera %s: --kv: '%s' is not f32, f16 or q8\n", cmd, v);
      return -1;
    }
  } else if (!strcmp(a, "--attn")) {
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    tsr_status_t s = tsr_attn_pattern_parse(v, &opts->attn);
    if (s) {
      fprintf(stderr, "tessera %s: --attn: %s\n", cmd, tsr_status_message(s));
      tsr_status_free(s);
      return -1;
    }
  } else {
    return 0;
  }
  return 1;
}

bool cli_text_append(cli_text_t *t, const char *s, size_t n) {
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    while (cap < t->len + n + 1) cap *= 2;
    char *q = realloc(t->p, cap);
    if (!q) return false;
    t->p = q;
    t->cap = cap;
  }
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = '\0';
  return true;
}

void cli_text_free(cli_text_t *t) {
  free(t->p);
  memset(t, 0, sizeof *t);
}

double cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t cli_splitmix64(uint64_t *s) { return tsr_splitmix64(s); }

uint64_t cli_fnv1a_i32(uint64_t h, const int32_t *c, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t v = (uint32_t)c[i];
    for (int b = 0; b < 4; b++) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

bool cli_piece_shown(const char *piece) {
  if (!piece || !piece[0]) return false;
  if (piece[1] == '\0') {
    unsigned char b = (unsigned char)piece[0];
    if (!(isprint(b) || isspace(b))) return false;
  }
  return true;
}
