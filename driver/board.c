/* board.c - board profiles: the "key = value" parser and the lookup (board.h). */
#include "driver/board.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"

/* board_data.c */
const char *tsr_board_builtin_text(size_t i, size_t *len);

typedef enum { K_STR, K_U32, K_SIZE, K_F64 } key_type_t;

/* Every key a profile may hold: where it goes, its range, whether it is
 * required, and the factor that turns the file's unit into the field's. */
typedef struct key_spec {
  const char *name;
  key_type_t type;
  bool required;
  double lo, hi;  /* range in the file's unit                           */
  double scale;   /* field = value * scale (F64)                        */
  size_t offset;
  size_t size;    /* STR capacity                                       */
} key_spec_t;

#define KS(n, t, req, lo, hi, sc, field) \
  {n, t, req, lo, hi, sc, offsetof(tsr_board_t, field), sizeof(((tsr_board_t *)0)->field)}

static const key_spec_t keys[] = {
    KS("name", K_STR, true, 0, 0, 1, name),
    KS("title", K_STR, true, 0, 0, 1, title),
    KS("memory", K_STR, false, 0, 0, 1, memory),
    KS("mem_channels", K_U32, true, 1, 1024, 1, mem_channels),
    KS("channel_gbps", K_F64, true, 0.001, 10000, 1e9, channel_bytes_per_s),
    KS("mem_size", K_SIZE, true, 4096, 68719476736.0, 1, mem_size),
    KS("mem_latency_cycles", K_U32, false, 0, 100000, 1, mem_latency),
    KS("clock_mhz", K_F64, true, 1, 5000, 1e6, clock_hz),
    KS("dsp_slices", K_U32, false, 1, 10000000, 1, dsp_slices),
    KS("macs_per_dsp", K_U32, false, 1, 2, 1, macs_per_dsp),
    KS("array_rows", K_U32, true, 1, 255, 1, array_rows),
    KS("array_cols", K_U32, true, 1, 255, 1, array_cols),
    KS("ports", K_U32, false, 1, 1024, 1, ports),
    KS("link", K_STR, false, 0, 0, 1, link),
    KS("link_gbps", K_F64, true, 0.0001, 10000, 1e9, link_bytes_per_s),
    KS("link_latency_us", K_F64, true, 0, 1e6, 1e-6, link_latency_s),
    KS("launch_latency_us", K_F64, true, 0, 1e6, 1e-6, launch_latency_s),
    KS("doorbell_us", K_F64, false, 0.001, 1e6, 1e-6, doorbell_latency_s),
    KS("host_memory_latency_us", K_F64, false, 0.001, 1e6, 1e-6, host_mem_latency_s),
};
#define N_KEYS (sizeof keys / sizeof keys[0])

static size_t key_index(const char *name) {
  size_t k = 0;
  while (k < N_KEYS && strcmp(keys[k].name, name)) k++;
  return k;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = '\0';
  return s;
}

static void known_keys(char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < N_KEYS && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", keys[i].name);
}

static tsr_status_t set_value(const key_spec_t *ks, const char *origin, int line,
                              const char *val, tsr_board_t *out) {
  char *field = (char *)out + ks->offset;
  if (ks->type == K_STR) {
    if (!*val)
      return TSR_ERR(FORMAT, "%s:%d: key '%s': empty value", origin, line, ks->name);
    if (strlen(val) >= ks->size)
      return TSR_ERR(FORMAT, "%s:%d: key '%s': value longer than %zu characters", origin, line,
                     ks->name, ks->size - 1);
    memcpy(field, val, strlen(val) + 1);
    return TSR_OK;
  }
  if (ks->type == K_SIZE || ks->type == K_U32) {
    uint64_t v = 0;
    /* the shared option parser: K/M/G suffixes, 0x, ranges, negatives */
    tsr_status_t s = tsr_opt_u64("board", ks->name, val, (uint64_t)ks->lo, (uint64_t)ks->hi, &v);
    if (s) {
      tsr_status_t e = TSR_ERR(FORMAT, "%s:%d: key '%s': %s", origin, line, ks->name,
                               tsr_status_message(s));
      tsr_status_free(s);
      return e;
    }
    if (ks->type == K_SIZE) *(uint64_t *)(void *)field = v;
    else *(uint32_t *)(void *)field = (uint32_t)v;
    return TSR_OK;
  }
  char *end = NULL;
  errno = 0;
  double v = strtod(val, &end);
  if (!*val || *end || errno)
    return TSR_ERR(FORMAT, "%s:%d: key '%s': '%s' is not a number", origin, line, ks->name, val);
  if (!(v >= ks->lo && v <= ks->hi))
    return TSR_ERR(FORMAT, "%s:%d: key '%s': %s is outside [%g, %g]", origin, line, ks->name,
                   val, ks->lo, ks->hi);
  *(double *)(void *)field = v * ks->scale;
  return TSR_OK;
}

tsr_status_t tsr_board_parse(const char *text, size_t len, const char *origin,
                             tsr_board_t *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->origin, sizeof out->origin, "%s", origin);
  bool seen[N_KEYS] = {false};
  int seen_line[N_KEYS] = {0};
  size_t pos = 0;
  int line = 0;
  while (pos < len) {
    size_t e = pos;
    while (e < len && text[e] != '\n') e++;
    line++;
    char buf[512];
    if (e - pos >= sizeof buf)
      return TSR_ERR(FORMAT, "%s:%d: line longer than %zu characters", origin, line,
                     sizeof buf - 1);
    if (memchr(text + pos, '\0', e - pos))
      return TSR_ERR(FORMAT, "%s:%d: a NUL byte in the line", origin, line);
    memcpy(buf, text + pos, e - pos);
    buf[e - pos] = '\0';
    pos = e + 1;
    char *s = trim(buf);
    if (!*s || *s == '#') continue;
    char *eq = strchr(s, '=');
    if (!eq)
      return TSR_ERR(FORMAT, "%s:%d: expected 'key = value', got '%.60s'", origin, line, s);
    *eq = '\0';
    char *key = trim(s), *val = trim(eq + 1);
    const size_t k = key_index(key);
    if (k == N_KEYS) {
      char known[512];
      known_keys(known, sizeof known);
      return TSR_ERR(FORMAT, "%s:%d: unknown key '%.40s' (known: %s)", origin, line, key, known);
    }
    if (seen[k])
      return TSR_ERR(FORMAT, "%s:%d: key '%s' given twice (first on line %d)", origin, line,
                     key, seen_line[k]);
    seen[k] = true;
    seen_line[k] = line;
    TSR_RETURN_IF(set_value(&keys[k], origin, line, val, out));
  }
  for (size_t k = 0; k < N_KEYS; k++)
    if (keys[k].required && !seen[k])
      return TSR_ERR(FORMAT, "%s: required key '%s' missing", origin, keys[k].name);
  if (!out->ports) out->ports = 1;
  if (!seen[key_index("mem_latency_cycles")]) out->mem_latency = 40;
  if (out->ports > out->mem_channels)
    return TSR_ERR(FORMAT, "%s:%d: key 'ports': %u read ports need as many memory channels, "
                   "the board has %u", origin, seen_line[key_index("ports")], out->ports, out->mem_channels);
  if (out->dsp_slices) {
    const uint64_t macs = (uint64_t)out->array_rows * out->array_cols;
    const uint64_t cap = (uint64_t)out->dsp_slices * (out->macs_per_dsp ? out->macs_per_dsp : 1);
    if (macs > cap)
      return TSR_ERR(FORMAT, "%s:%d: key 'array_cols': a %ux%u array is %llu MACs, more than "
                     "%u DSP slices x %u MACs hold (%llu)", origin,
                     seen_line[key_index("array_cols")],
                     out->array_rows, out->array_cols, (unsigned long long)macs,
                     out->dsp_slices, out->macs_per_dsp ? out->macs_per_dsp : 1,
                     (unsigned long long)cap);
  }
  return TSR_OK;
}

tsr_status_t tsr_board_load(const char *name, tsr_board_t *out) {
  memset(out, 0, sizeof *out);
  if (!name || !*name) return TSR_ERR(INVALID_ARGUMENT, "board: empty name");
  const size_t nl = strlen(name);
  if (strchr(name, '/') || (nl > 6 && !strcmp(name + nl - 6, ".board"))) {
    FILE *f = fopen(name, "rb");
    if (!f) return TSR_ERR(NOT_FOUND, "board: cannot open '%s': %s", name, strerror(errno));
    char *buf = malloc(65536);
    size_t n = buf ? fread(buf, 1, 65536, f) : 0;
    int too_big = buf && n == 65536 && fgetc(f) != EOF;
    int err = ferror(f);
    fclose(f);
    tsr_status_t s;
    if (!buf) s = TSR_ERR(RESOURCE_EXHAUSTED, "board: reading '%s'", name);
    else if (err) s = TSR_ERR(IO, "board: reading '%s' failed", name);
    else if (too_big) s = TSR_ERR(FORMAT, "board: '%s' is larger than 64 KiB", name);
    else s = tsr_board_parse(buf, n, name, out);
    free(buf);
    return s;
  }
  for (size_t i = 0; i < tsr_board_builtin_count(); i++) {
    if (strcmp(tsr_board_builtin_name(i), name)) continue;
    size_t len = 0;
    const char *text = tsr_board_builtin_text(i, &len);
    char origin[64];
    snprintf(origin, sizeof origin, "driver/boards/%s.board", name);
    TSR_RETURN_IF(tsr_board_parse(text, len, origin, out));
    snprintf(out->origin, sizeof out->origin, "built-in %s", origin);
    return TSR_OK;
  }
  char known[256] = "";
  size_t l = 0;
  for (size_t i = 0; i < tsr_board_builtin_count() && l < sizeof known; i++)
    l += (size_t)snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "",
                          tsr_board_builtin_name(i));
  return TSR_ERR(NOT_FOUND, "board '%s' unknown (built-in: %s; or a path to a .board file)",
                 name, known);
}

void tsr_board_apply_caps(const tsr_board_t *b, tsr_hal_caps_t *caps) {
  snprintf(caps->board, sizeof caps->board, "%s", b->name);
  caps->array_rows = b->array_rows;
  caps->array_cols = b->array_cols;
  caps->clock_hz = b->clock_hz;
  caps->mem_ports = b->ports;
  caps->mem_latency = b->mem_latency;
  caps->mem_bytes_per_cycle = tsr_board_bytes_per_cycle(b);
  caps->link_bytes_per_s = b->link_bytes_per_s;
  caps->link_latency_s = b->link_latency_s;
  caps->launch_latency_s = b->launch_latency_s;
  caps->doorbell_latency_s = b->doorbell_latency_s;
  caps->host_mem_latency_s = b->host_mem_latency_s;
  if (b->host_mem_latency_s > 0) caps->flags |= TSR_HAL_CAP_HOST_MEM;
}
