/* trace.c - Chrome trace writer (see trace.h). */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

#define TSR_TRACE_MAX_TRACKS 64

struct tsr_trace {
  FILE *f;
  pthread_mutex_t lock;
  struct timespec t0;
  int n_tracks;
  int open_events[TSR_TRACE_MAX_TRACKS]; /* begun, not yet ended, per track */
  int n_written;
};

static void write_sep(tsr_trace_t *t) { fputs(t->n_written++ ? ",\n" : "\n", t->f); }

/* Writes `s` as a JSON string body (quotes and control bytes escaped). */
static void write_json_str(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
}

tsr_status_t tsr_trace_open(const char *path, tsr_trace_t **out) {
  *out = NULL;
  tsr_trace_t *t = calloc(1, sizeof(*t));
  if (!t) return TSR_ERR(RESOURCE_EXHAUSTED, "trace");
  t->f = fopen(path, "w");
  if (!t->f) {
    int e = errno;
    free(t);
    return TSR_ERR(IO, "trace file '%s': %s", path, strerror(e));
  }
  pthread_mutex_init(&t->lock, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t->t0);
  fputs("[", t->f);
  write_sep(t);
  fputs("{\"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"name\": \"process_name\", "
        "\"args\": {\"name\": \"tessera\"}}", t->f);
  *out = t;
  return TSR_OK;
}

double tsr_trace_now_us(const tsr_trace_t *t) {
  if (!t) return 0;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t->t0.tv_sec) * 1e6 + (double)(now.tv_nsec - t->t0.tv_nsec) / 1e3;
}

int tsr_trace_track(tsr_trace_t *t, const char *name) {
  if (!t) return 0;
  pthread_mutex_lock(&t->lock);
  int id = t->n_tracks < TSR_TRACE_MAX_TRACKS - 1 ? ++t->n_tracks : t->n_tracks;
  write_sep(t);
  fprintf(t->f, "{\"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"name\": \"thread_name\", "
                "\"args\": {\"name\": \"", id);
  write_json_str(t->f, name);
  fputs("\"}}", t->f);
  write_sep(t);
  fprintf(t->f, "{\"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"name\": \"thread_sort_index\", "
                "\"args\": {\"sort_index\": %d}}", id, id);
  pthread_mutex_unlock(&t->lock);
  return id;
}

void tsr_trace_begin(tsr_trace_t *t, int track, const char *name, const char *cat, double ts) {
  if (!t || track < 0 || track >= TSR_TRACE_MAX_TRACKS) return;
  if (ts < 0) ts = tsr_trace_now_us(t);
  pthread_mutex_lock(&t->lock);
  write_sep(t);
  fprintf(t->f, "{\"ph\": \"B\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"cat\": \"", track, ts);
  write_json_str(t->f, cat);
  fputs("\", \"name\": \"", t->f);
  write_json_str(t->f, name);
  fputs("\"}", t->f);
  t->open_events[track]++;
  pthread_mutex_unlock(&t->lock);
}

void tsr_trace_end(tsr_trace_t *t, int track, const char *args_json, double ts) {
  if (!t || track < 0 || track >= TSR_TRACE_MAX_TRACKS) return;
  if (ts < 0) ts = tsr_trace_now_us(t);
  pthread_mutex_lock(&t->lock);
  if (t->open_events[track] > 0) {
    write_sep(t);
    fprintf(t->f, "{\"ph\": \"E\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f", track, ts);
    if (args_json) fprintf(t->f, ", \"args\": {%s}", args_json);
    fputs("}", t->f);
    t->open_events[track]--;
  }
  pthread_mutex_unlock(&t->lock);
}

void tsr_trace_complete(tsr_trace_t *t, int track, const char *name, const char *cat,
                        double ts, double dur, const char *args_json) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  write_sep(t);
  fprintf(t->f, "{\"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"cat\": \"",
          track, ts, dur < 0 ? 0 : dur);
  write_json_str(t->f, cat);
  fputs("\", \"name\": \"", t->f);
  write_json_str(t->f, name);
  fputs("\"", t->f);
  if (args_json) fprintf(t->f, ", \"args\": {%s}", args_json);
  fputs("}", t->f);
  pthread_mutex_unlock(&t->lock);
}

void tsr_trace_close(tsr_trace_t *t) {
  if (!t) return;
  double now = tsr_trace_now_us(t);
  for (int i = 0; i < TSR_TRACE_MAX_TRACKS; i++)
    while (t->open_events[i] > 0) tsr_trace_end(t, i, NULL, now);
  fputs("\n]\n", t->f);
  fclose(t->f);
  pthread_mutex_destroy(&t->lock);
  free(t);
}
