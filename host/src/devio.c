/* devio.c - HAL calls with accounting and tracing (see devio.h). */
#include "devio.h"

#include <inttypes.h>
#include <string.h>

#include "trace.h"

/* A buffer inside the engine's window is a range of the window's HAL
 * buffer: the copy goes to the window at the buffer's offset in it, after
 * the window allocator's range check. */
static tsr_status_t windowed(tsr_exec_dev_t *d, const tsr_hal_buffer_t **buf, uint64_t *off,
                             size_t n, const char *what) {
  if (!d->sub) return TSR_OK;
  TSR_RETURN_IF(tsr_devmem_check_copy(d->sub, d->cd->name, *buf, *off, n, what));
  *off += (*buf)->addr - d->window.addr;
  *buf = &d->window;
  return TSR_OK;
}

tsr_status_t tsr_dio_write(tsr_exec_t *o, tsr_exec_dev_t *d, const tsr_hal_buffer_t *buf,
                           uint64_t off, const void *src, size_t n, bool count) {
  tsr_hal_device_t *h = d->cd->hal;
  TSR_RETURN_IF(windowed(d, &buf, &off, n, "write"));
  tsr_trace_t *tr = o->ctx->trace;
  if (count) tsr_trace_begin(tr, o->track_copy, "write", "copy", -1);
  double t0 = tsr_now_s();
  tsr_status_t s = h->vt->write(h, buf, off, src, n);
  if (count) {
    d->hal_s += tsr_now_s() - t0;
    d->xfers++;
    d->xfer_bytes += n;
    char args[48];
    snprintf(args, sizeof args, "\"bytes\": %zu", n);
    tsr_trace_end(tr, o->track_copy, args, -1);
  }
  return s;
}

tsr_status_t tsr_dio_read(tsr_exec_t *o, tsr_exec_dev_t *d, const tsr_hal_buffer_t *buf,
                          uint64_t off, void *dst, size_t n) {
  tsr_hal_device_t *h = d->cd->hal;
  TSR_RETURN_IF(windowed(d, &buf, &off, n, "read"));
  tsr_trace_t *tr = o->ctx->trace;
  tsr_trace_begin(tr, o->track_copy, "read", "copy", -1);
  double t0 = tsr_now_s();
  tsr_status_t s = h->vt->read(h, buf, off, dst, n);
  d->hal_s += tsr_now_s() - t0;
  d->xfers++;
  d->xfer_bytes += n;
  char args[48];
  snprintf(args, sizeof args, "\"bytes\": %zu", n);
  tsr_trace_end(tr, o->track_copy, args, -1);
  return s;
}

tsr_status_t tsr_dio_submit(tsr_exec_t *o, tsr_exec_dev_t *d, const tsr_hal_command_t *cmd,
                            uint64_t *fence) {
  (void)o;
  tsr_hal_device_t *h = d->cd->hal;
  double t0 = tsr_now_s();
  if (d->done_s > 0) { /* the host's work since the last launch completed */
    const double gap = (t0 - d->done_s) - (d->hal_s - d->done_hal_s);
    const double lat = d->cd->caps.launch_latency_s;
    d->launch_hidden_s += gap <= 0 ? 0 : gap < lat ? gap : lat;
  }
  tsr_status_t s = h->vt->submit(h, cmd, fence);
  d->hal_s += tsr_now_s() - t0;
  d->submit_us = tsr_trace_now_us(o->ctx->trace);
  return s;
}

/* A device run in the trace, from its submit (or doorbell) to now. */
static void trace_run(tsr_exec_t *o, tsr_exec_dev_t *d, const char *what,
                      const tsr_hal_result_t *res) {
  tsr_trace_t *tr = o->ctx->trace;
  if (!tr) return;
  char args[128];
  snprintf(args, sizeof args, "\"descriptors\": %u, \"cycles\": %" PRIu64, res->desc_done,
           res->cycles);
  tsr_trace_complete(tr, d->trace_track, what, "device", d->submit_us,
                     tsr_trace_now_us(tr) - d->submit_us, args);
}

/* A run that completed: its cycles, descriptors and bytes counted. */
static void count_run(tsr_exec_dev_t *d, const tsr_hal_result_t *res) {
  d->done_s = tsr_now_s();
  d->done_hal_s = d->hal_s;
  d->cycles += res->cycles;
  d->tiles += res->desc_done;
  d->bytes_rd += res->bytes_rd;
}

tsr_status_t tsr_dio_wait(tsr_exec_t *o, tsr_exec_dev_t *d, uint64_t fence, const char *what,
                          tsr_hal_result_t *res) {
  tsr_hal_device_t *h = d->cd->hal;
  memset(res, 0, sizeof *res);
  double t0 = tsr_now_s();
  tsr_status_t s =
      h->vt->wait(h, fence, (uint64_t)o->ctx->opts.device_timeout_ms * 1000000ull, res);
  d->wait_wall_s += tsr_now_s() - t0;
  trace_run(o, d, what, res);
  if (s) return s;
  if (res->hw_status != TSR_HWERR_OK)
    return TSR_ERR(DEVICE, "%s refused descriptor %u: %s", d->cd->name, res->err_index,
                   tsr_hal_hwerr_name(res->hw_status));
  d->launches++;
  count_run(d, res);
  return TSR_OK;
}

tsr_status_t tsr_dio_doorbell(tsr_exec_t *o, tsr_exec_dev_t *d, uint32_t tail) {
  tsr_hal_device_t *h = d->cd->hal;
  double t0 = tsr_now_s();
  tsr_status_t s = h->vt->doorbell(h, d->q_fence, tail, 0);
  d->hal_s += tsr_now_s() - t0;
  d->submit_us = tsr_trace_now_us(o->ctx->trace);
  if (!s) d->doorbells++;
  return s;
}

tsr_status_t tsr_dio_progress(tsr_exec_t *o, tsr_exec_dev_t *d, uint32_t done, const char *what,
                              tsr_hal_result_t *res) {
  tsr_hal_device_t *h = d->cd->hal;
  tsr_hal_result_t now;
  memset(res, 0, sizeof *res);
  double t0 = tsr_now_s();
  tsr_status_t s = h->vt->progress(h, d->q_fence, done, d->q_timeout_ns, &now);
  d->wait_wall_s += tsr_now_s() - t0;
  if (s) return s;
  if (now.hw_status != TSR_HWERR_OK)
    return TSR_ERR(DEVICE, "%s refused descriptor %u: %s", d->cd->name, now.err_index,
                   tsr_hal_hwerr_name(now.hw_status));
  if (now.desc_done < done)
    return TSR_ERR(DEVICE, "%s: its queue ended after %u of %u descriptors", d->cd->name,
                   now.desc_done, done);
  const tsr_hal_result_t *p = &d->q_seen;
  res->desc_done = now.desc_done - p->desc_done;
  res->cycles = now.cycles - p->cycles;
  res->stall_cycles = now.stall_cycles - p->stall_cycles;
  res->bytes_rd = now.bytes_rd - p->bytes_rd;
  res->bytes_wr = now.bytes_wr - p->bytes_wr;
  res->macs = now.macs - p->macs;
  d->q_seen = now;
  trace_run(o, d, what, res);
  count_run(d, res);
  return TSR_OK;
}

tsr_status_t tsr_dio_alloc(tsr_exec_dev_t *d, uint64_t size, tsr_hal_buffer_t *out) {
  tsr_hal_device_t *h = d->cd->hal;
  if (d->sub) {
    tsr_status_t s = tsr_devmem_buffer_alloc(d->sub, d->cd->name, size ? size : 64, 64, out);
    return s ? tsr_status_annotate(s, "in the engine's window of %" PRIu64 " bytes",
                                   d->window.size)
             : TSR_OK;
  }
  return h->vt->alloc(h, size ? size : 64, 64, out);
}

void tsr_dio_free(tsr_exec_dev_t *d, tsr_hal_buffer_t *buf) {
  if (!buf->size) return;
  tsr_hal_device_t *h = d->cd->hal;
  if (d->sub) tsr_devmem_buffer_free(d->sub, buf);
  else h->vt->free(h, buf);
  memset(buf, 0, sizeof *buf);
}
