/*
 * trace.h - Chrome trace (JSON array format) for Perfetto / chrome://tracing.
 *
 * Internal header. Each track is a "thread" of one process; events are
 * begin/end pairs ("B"/"E") with microsecond timestamps since the trace was
 * opened. Thread-safe. The file is a valid JSON array once closed.
 */
#ifndef TSR_TRACE_H
#define TSR_TRACE_H

#include "tessera.h"

typedef struct tsr_trace tsr_trace_t;

tsr_status_t tsr_trace_open(const char *path, tsr_trace_t **out);
/* Ends every open event, closes the array and the file. NULL is accepted. */
void tsr_trace_close(tsr_trace_t *t);
/* A new track named `name`; returns its id (names are shown by viewers). */
int tsr_trace_track(tsr_trace_t *t, const char *name);
/* Microseconds since the trace was opened. */
double tsr_trace_now_us(const tsr_trace_t *t);
/* Begin / end of an event on a track; `args_json` (may be NULL) is an object
 * body such as "\"bytes\": 12" attached to the end event. `ts_us` < 0 means
 * now. All calls on a NULL trace do nothing. */
void tsr_trace_begin(tsr_trace_t *t, int track, const char *name, const char *cat, double ts_us);
void tsr_trace_end(tsr_trace_t *t, int track, const char *args_json, double ts_us);

/* A complete event ("X") that began at ts_us and lasted dur_us: used for
 * device runs, which overlap when two are in flight. */
void tsr_trace_complete(tsr_trace_t *t, int track, const char *name, const char *cat,
                        double ts_us, double dur_us, const char *args_json);

#endif
