/* cli_util.c - option parsing shared by the subcommands. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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
