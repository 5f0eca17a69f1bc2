/* status.c - the one status type: code + heap-allocated message. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tsr_status_s {
  tsr_status_code_t code;
  char *message;
};

/* Returned when even the status cannot be allocated; never freed. */
static struct tsr_status_s oom_status = {
    TSR_STATUS_RESOURCE_EXHAUSTED, "out of memory while reporting an error"};

static char *vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return NULL;
  char *buf = malloc((size_t)n + 1);
  if (buf) vsnprintf(buf, (size_t)n + 1, fmt, ap);
  return buf;
}

tsr_status_t tsr_make_status(tsr_status_code_t code, const char *fmt, ...) {
  struct tsr_status_s *s = malloc(sizeof(*s));
  if (!s) return &oom_status;
  va_list ap;
  va_start(ap, fmt);
  s->message = vformat(fmt, ap);
  va_end(ap);
  if (!s->message) {
    free(s);
    return &oom_status;
  }
  s->code = code == TSR_STATUS_OK ? TSR_STATUS_INTERNAL : code;
  return s;
}

tsr_status_t tsr_status_annotate(tsr_status_t s, const char *fmt, ...) {
  if (s == TSR_OK || s == &oom_status) return s;
  va_list ap;
  va_start(ap, fmt);
  char *prefix = vformat(fmt, ap);
  va_end(ap);
  if (!prefix) return s;
  if (prefix[0] == '\0') {
    free(prefix);
    return s;
  }
  size_t a = strlen(prefix), b = strlen(s->message);
  char *msg = malloc(a + 2 + b + 1);
  if (msg) {
    memcpy(msg, prefix, a);
    memcpy(msg + a, ": ", 2);
    memcpy(msg + a + 2, s->message, b + 1);
    free(s->message);
    s->message = msg;
  }
  free(prefix);
  return s;
}

tsr_status_t tsr_status_join(tsr_status_t first, tsr_status_t second) {
  if (first != TSR_OK) {
    tsr_status_free(second);
    return first;
  }
  return second;
}

tsr_status_code_t tsr_status_code(const struct tsr_status_s *s) {
  return s ? s->code : TSR_STATUS_OK;
}

const char *tsr_status_message(const struct tsr_status_s *s) {
  return s ? s->message : "OK";
}

const char *tsr_status_code_name(tsr_status_code_t code) {
  switch (code) {
    case TSR_STATUS_OK: return "OK";
    case TSR_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case TSR_STATUS_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case TSR_STATUS_FORMAT: return "FORMAT";
    case TSR_STATUS_NOT_FOUND: return "NOT_FOUND";
    case TSR_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case TSR_STATUS_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case TSR_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case TSR_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case TSR_STATUS_IO: return "IO";
    case TSR_STATUS_DEVICE: return "DEVICE";
    case TSR_STATUS_INTERNAL: return "INTERNAL";
  }
  return "UNKNOWN";
}

void tsr_status_free(tsr_status_t s) {
  if (!s || s == &oom_status) return;
  free(s->message);
  free(s);
}
