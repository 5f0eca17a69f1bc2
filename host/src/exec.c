/*
 * exec.c - the executor: runs planned matmul groups on the host or streams
 * them to a device as row tiles (see offload.h), with fallback, statistics
 * and tracing.
 */
#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"
#include "trace.h"

#define TSR_MAX_FAILURES 3 /* consecutive failed tiles before a device is lost */

/* Counts one host<->device copy for the link model in the stats. */
static inline void note_xfer(tsr_exec_dev_t *d, uint64_t bytes) {
  d->xfers++;
  d->xfer_bytes += bytes;
}

/* Widens the window [*lo, *hi) to cover buffer b. */
static inline void window_cover(uint64_t *lo, uint64_t *hi, const tsr_hal_buffer_t *b) {
  if (b->addr < *lo) *lo = b->addr;
  if (b->addr + b->size > *hi) *hi = b->addr + b->size;
}

static size_t weight_index(const tsr_exec_t *o, const tsr_node_t *n) {
  int32_t layer = n->layer < 0 ? o->model->cfg.n_layers : n->layer;
  return (size_t)layer * TSR_MM_COUNT + n->role;
}

static void free_slots(tsr_exec_dev_t *d) {
  tsr_hal_device_t *h = d->cd->hal;
  for (int s = 0; s < 2; s++) {
    if (d->a[s].size) h->vt->free(h, &d->a[s]);
    if (d->c[s].size) h->vt->free(h, &d->c[s]);
    if (d->ring[s].size) h->vt->free(h, &d->ring[s]);
    memset(&d->a[s], 0, sizeof d->a[s]);
    memset(&d->c[s], 0, sizeof d->c[s]);
    memset(&d->ring[s], 0, sizeof d->ring[s]);
  }
}

/* Staging slots on device d, sized for the largest group of either graph. */
static tsr_status_t alloc_slots(tsr_exec_t *o, tsr_exec_dev_t *d) {
  tsr_hal_device_t *h = d->cd->hal;
  int32_t rows = tsr_tile_rows(&d->cd->caps, o->prefill.T);
  d->a_cap = (uint64_t)rows * (uint64_t)o->k_max;
  d->c_cap = (uint64_t)rows * (uint64_t)o->group_n_max * 4;
  d->ring_cap = (uint64_t)o->desc_max * TSR_HW_DESC_BYTES;
  if (o->attn.kind != TSR_ATTN_REFERENCE) {
    /* attention: phase p (0 scores, 1 PV) uses slot p; A is Qq or P', C the
     * score or PV partials, the ring one descriptor per pair */
    const tsr_attn_work_t *w = &o->attn_work;
    uint64_t qa = (uint64_t)w->d.n_heads * (uint64_t)w->max_rows * (uint64_t)w->d.head_dim;
    uint64_t a = qa > w->s_cap ? qa : w->s_cap;
    uint64_t c = 4 * (w->s_cap > w->o_cap ? w->s_cap : w->o_cap);
    uint64_t r = (uint64_t)w->cap_pairs * TSR_HW_DESC_BYTES;
    if (a > d->a_cap) d->a_cap = a;
    if (c > d->c_cap) d->c_cap = c;
    if (r > d->ring_cap) d->ring_cap = r;
  }
  if (!d->a_cap) d->a_cap = 64;
  if (!d->c_cap) d->c_cap = 64;
  if (!d->ring_cap) d->ring_cap = 64;
  for (int s = 0; s < 2; s++) {
    TSR_RETURN_IF(h->vt->alloc(h, d->a_cap, 64, &d->a[s]));
    TSR_RETURN_IF(h->vt->alloc(h, d->c_cap, 64, &d->c[s]));
    TSR_RETURN_IF(h->vt->alloc(h, d->ring_cap, 64, &d->ring[s]));
  }
  return TSR_OK;
}

/* Uploads the weights of every node a plan put on a device, once. A weight
 * that does not fit moves its node back to the host. */
static tsr_status_t upload_weights(tsr_exec_t *o, tsr_graph_t *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_MATMUL || n->device < 0) continue;
    size_t wi = weight_index(o, n);
    if (o->weight_dev[wi] == n->device) continue;
    tsr_exec_dev_t *d = &o->devs[n->device];
    tsr_hal_device_t *h = d->cd->hal;
    if (o->weight_dev[wi] >= 0) {
      /* the other plan put it elsewhere: keep one resident copy per node */
      n->device = o->weight_dev[wi];
      snprintf(n->cause + strlen(n->cause), sizeof n->cause - strlen(n->cause),
               "; weights resident on %s", o->devs[n->device].cd->name);
      continue;
    }
    uint64_t bytes = (uint64_t)n->n * (uint64_t)n->k;
    tsr_status_t s = h->vt->alloc(h, bytes, 64, &o->weights[wi]);
    if (!s) s = h->vt->write(h, &o->weights[wi], 0, n->w->q.data, bytes);
    if (s) {
      if (o->weights[wi].size) h->vt->free(h, &o->weights[wi]);
      memset(&o->weights[wi], 0, sizeof o->weights[wi]);
      if (!o->ctx->opts.fallback)
        return tsr_status_annotate(s, "uploading %s of layer %d to %s",
                                   tsr_mm_role_name(n->role), n->layer, d->cd->name);
      snprintf(n->cause, sizeof n->cause, "weights do not fit on %s: %.120s", d->cd->name,
               tsr_status_message(s));
      tsr_status_free(s);
      n->device = TSR_PLACE_CPU;
      continue;
    }
    o->weight_dev[wi] = n->device;
    o->weight_bytes += bytes;
  }
  return TSR_OK;
}

/* Allocates the device copy of the int8 KV cache of every layer whose
 * attention a plan put on a device (one copy per layer, like weights). */
static tsr_status_t upload_kv(tsr_exec_t *o, tsr_graph_t *g) {
  for (int32_t i = 0; o->attn.kind != TSR_ATTN_REFERENCE && i < g->n_nodes; i++) {
    tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_ATTENTION || n->device < 0) continue;
    const int32_t l = n->layer;
    if (o->kv_dev[l] == n->device) continue;
    if (o->kv_dev[l] >= 0) {
      n->device = o->kv_dev[l];
      snprintf(n->cause + strlen(n->cause), sizeof n->cause - strlen(n->cause),
               "; KV cache resident on %s", o->devs[n->device].cd->name);
      continue;
    }
    tsr_exec_dev_t *d = &o->devs[n->device];
    tsr_hal_device_t *h = d->cd->hal;
    uint64_t bytes = tsr_attn_kv_bytes(&o->attn_dims);
    tsr_status_t s = h->vt->alloc(h, bytes, 64, &o->kv_buf[l]);
    if (s) {
      memset(&o->kv_buf[l], 0, sizeof o->kv_buf[l]);
      if (!o->ctx->opts.fallback)
        return tsr_status_annotate(s, "KV cache of layer %d on %s", l, d->cd->name);
      snprintf(n->cause, sizeof n->cause, "KV cache does not fit on %s: %.120s", d->cd->name,
               tsr_status_message(s));
      tsr_status_free(s);
      n->device = TSR_PLACE_CPU;
      continue;
    }
    o->kv_dev[l] = n->device;
    o->kv_ok[l] = true;
    o->kv_dev_bytes += bytes;
  }
  return TSR_OK;
}

static void size_staging(tsr_exec_t *o, const tsr_graph_t *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_MATMUL || n->group != i) continue;
    int32_t ns[8], sum = 0;
    for (int j = 0; j < n->group_size; j++) {
      ns[j] = g->nodes[i + j].n;
      sum += ns[j];
    }
    if (n->k > o->k_max) o->k_max = n->k;
    if (sum > o->group_n_max) o->group_n_max = sum;
    int32_t d = tsr_tile_descs(ns, n->group_size, TSR_TILE_N_CHUNK);
    if (d > o->desc_max) o->desc_max = d;
  }
}

tsr_status_t tsr_exec_create(tsr_context_t *ctx, tsr_model_t *model, tsr_precision_t prec,
                             int32_t prefill_rows, const tsr_attn_pattern_t *attn,
                             int32_t max_seq, tsr_exec_t **out) {
  *out = NULL;
  tsr_exec_t *o = calloc(1, sizeof(*o));
  if (!o) return TSR_ERR(RESOURCE_EXHAUSTED, "executor");
  o->ctx = ctx;
  o->model = model;
  o->precision = prec;
  o->n_devs = ctx->n_devs;
  const size_t n_w = (size_t)(model->cfg.n_layers + 1) * TSR_MM_COUNT;
  o->devs = calloc((size_t)o->n_devs, sizeof(tsr_exec_dev_t));
  o->weights = calloc(n_w, sizeof(tsr_hal_buffer_t));
  o->weight_dev = malloc(sizeof(int) * n_w);
  tsr_status_t s = TSR_OK;
  if (!o->devs || !o->weights || !o->weight_dev)
    s = TSR_ERR(RESOURCE_EXHAUSTED, "executor: %d devices", o->n_devs);
  for (size_t i = 0; !s && i < n_w; i++) o->weight_dev[i] = -1;
  if (attn) o->attn = *attn;
  if (!s && o->attn.kind != TSR_ATTN_REFERENCE) {
    const tsr_model_config_t *c = &model->cfg;
    const int32_t L = c->n_layers;
    o->attn_dims = (tsr_attn_dims_t){c->n_heads, c->n_kv_heads, c->head_dim, max_seq,
                                     o->attn.block};
    o->kv8 = calloc((size_t)L, sizeof *o->kv8);
    o->kv_buf = calloc((size_t)L, sizeof *o->kv_buf);
    o->kv_dev = malloc(sizeof(int) * (size_t)L);
    o->kv_ok = calloc((size_t)L, sizeof(bool));
    if (!o->kv8 || !o->kv_buf || !o->kv_dev || !o->kv_ok)
      s = TSR_ERR(RESOURCE_EXHAUSTED, "executor: KV caches of %d layers", L);
    for (int32_t l = 0; !s && l < L; l++) {
      o->kv_dev[l] = -1;
      s = tsr_attn_cache_init(&o->kv8[l], &o->attn_dims);
    }
    if (!s)
      s = tsr_attn_work_init(&o->attn_work, &o->attn_dims, &o->attn,
                             prefill_rows < max_seq ? prefill_rows : max_seq,
                             tsr_threadpool_size(ctx->pool));
  }
  if (!s) s = tsr_graph_build(model, 1, &o->decode);
  if (!s) s = tsr_graph_build(model, prefill_rows, &o->prefill);
  if (!s) {
    size_staging(o, &o->decode);
    size_staging(o, &o->prefill);
  }
  tsr_trace_t *tr = ctx->trace;
  o->track_cpu = tsr_trace_track(tr, "host: ops");
  o->track_copy = tsr_trace_track(tr, "host<->device copies");
  for (int i = 0; !s && i < o->n_devs; i++) {
    tsr_exec_dev_t *d = &o->devs[i];
    d->cd = &ctx->devs[i];
    if (!d->cd->hal) continue;
    d->usable = true;
    tsr_km_timing_init(&d->timing);
    d->timing.rows = d->cd->caps.array_rows;
    d->timing.cols = d->cd->caps.array_cols;
    d->timing.mem_bytes_per_cycle = d->cd->caps.mem_bytes_per_cycle;
    d->timing.clock_hz = d->cd->caps.clock_hz;
    char name[128];
    snprintf(name, sizeof name, "device %s: runs (host wall time%s)", d->cd->name,
             strncmp(d->cd->spec, "sim", 3) ? "" : " of the simulation");
    d->trace_track = tsr_trace_track(tr, name);
  }
  if (!s && (prec == TSR_PRECISION_INT8 || o->attn.kind != TSR_ATTN_REFERENCE)) {
    for (int i = 0; !s && i < o->n_devs; i++)
      if (o->devs[i].usable) {
        pthread_mutex_lock(&o->devs[i].cd->lock);
        s = alloc_slots(o, &o->devs[i]);
        pthread_mutex_unlock(&o->devs[i].cd->lock);
        if (s && ctx->opts.fallback) {
          tsr_ctx_warn(ctx, "%s: cannot allocate staging buffers, its work runs on the CPU: %s",
                       o->devs[i].cd->name, tsr_status_message(s));
          tsr_status_free(s);
          s = TSR_OK;
          free_slots(&o->devs[i]);
          o->devs[i].usable = false;
        }
      }
  }
  if (!s) s = tsr_plan_graph(o, &o->decode);
  if (!s) s = tsr_plan_graph(o, &o->prefill);
  if (!s) s = upload_weights(o, &o->decode);
  if (!s) s = upload_weights(o, &o->prefill);
  if (!s) s = upload_kv(o, &o->decode);
  if (!s) s = upload_kv(o, &o->prefill);
  if (s) {
    tsr_exec_destroy(o);
    return s;
  }
  *out = o;
  return TSR_OK;
}

void tsr_exec_destroy(tsr_exec_t *o) {
  if (!o) return;
  if (o->devs) {
    const size_t n_w = (size_t)(o->model->cfg.n_layers + 1) * TSR_MM_COUNT;
    for (size_t i = 0; o->weights && o->weight_dev && i < n_w; i++) {
      if (o->weight_dev[i] < 0) continue;
      tsr_hal_device_t *h = o->devs[o->weight_dev[i]].cd->hal;
      h->vt->free(h, &o->weights[i]);
    }
    for (int32_t l = 0; o->kv_dev && l < o->model->cfg.n_layers; l++)
      if (o->kv_dev[l] >= 0) {
        tsr_hal_device_t *h = o->devs[o->kv_dev[l]].cd->hal;
        h->vt->free(h, &o->kv_buf[l]);
      }
    for (int i = 0; i < o->n_devs; i++)
      if (o->devs[i].cd && o->devs[i].cd->hal) free_slots(&o->devs[i]);
  }
  for (int32_t l = 0; o->kv8 && l < o->model->cfg.n_layers; l++) tsr_attn_cache_free(&o->kv8[l]);
  free(o->kv8);
  free(o->kv_buf);
  free(o->kv_dev);
  free(o->kv_ok);
  tsr_attn_work_free(&o->attn_work);
  free(o->devs);
  free(o->weights);
  free(o->weight_dev);
  tsr_graph_free(&o->decode);
  tsr_graph_free(&o->prefill);
  free(o);
}

double tsr_exec_op_begin(tsr_exec_t *o, const tsr_node_t *n) {
  tsr_trace_begin(o->ctx->trace, o->track_cpu, tsr_node_op_name(n->op), "host", -1);
  return tsr_now_s();
}

void tsr_exec_op_end(tsr_exec_t *o, const tsr_node_t *n, double t0) {
  o->light_s[n->op] += tsr_now_s() - t0;
  o->light_calls[n->op]++;
  tsr_trace_end(o->ctx->trace, o->track_cpu, NULL, -1);
}

/* ---- host path ---- */

/* One member on the host: int8 kernel (or fp32 BLAS) and dequantization. */
static void host_matmul(tsr_exec_t *o, const tsr_node_t *n, int32_t row0, int32_t rows,
                        const float *x, float *out, const tsr_offload_scratch_t *sc) {
  const tsr_linear_t *w = n->w;
  if (o->precision == TSR_PRECISION_INT8) {
    int32_t *acc = sc->acc + (size_t)row0 * w->rows;
    tsr_qgemm(o->ctx->pool, o->ctx->isa, acc, (size_t)w->rows, sc->qa + (size_t)row0 * w->cols,
              (size_t)w->cols, &w->q, rows);
    tsr_dequantize(out + (size_t)row0 * w->rows, (size_t)w->rows, acc, (size_t)w->rows,
                   sc->qa_scale + row0, w->q.scale, rows, w->rows);
  } else if (rows == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, w->rows, w->cols, 1.0f, w->f32, w->cols,
                x + (size_t)row0 * w->cols, 1, 0.0f, out + (size_t)row0 * w->rows, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, w->rows, w->cols, 1.0f,
                x + (size_t)row0 * w->cols, w->cols, w->f32, w->cols, 0.0f,
                out + (size_t)row0 * w->rows, w->rows);
  }
}

/* ---- device path ---- */

typedef struct {
  const tsr_node_t *m[8]; /* members on this device */
  float *out[8];
  int count;
  int32_t k, n_sum;
} dev_group_t;

/* Copies tile `t` (rows [r0, r0+rows)) into slot `s` and queues it. */
static tsr_status_t tile_submit(tsr_exec_t *o, tsr_exec_dev_t *d, const dev_group_t *gr,
                                int32_t r0, int32_t rows, int s,
                                const tsr_offload_scratch_t *sc, uint64_t *fence,
                                uint32_t *n_desc) {
  tsr_hal_device_t *h = d->cd->hal;
  tsr_trace_t *tr = o->ctx->trace;
  uint8_t ring[64 * TSR_HW_DESC_BYTES];
  uint8_t *rp = gr->count * 16 <= 64 ? ring : NULL;
  size_t ring_bytes = (size_t)o->desc_max * TSR_HW_DESC_BYTES;
  uint8_t *heap = NULL;
  if (!rp) {
    heap = malloc(ring_bytes);
    if (!heap) return TSR_ERR(RESOURCE_EXHAUSTED, "ring of %zu bytes", ring_bytes);
    rp = heap;
  }
  uint32_t nd = 0;
  uint64_t c_off = 0;
  for (int j = 0; j < gr->count; j++) {
    const tsr_node_t *n = gr->m[j];
    for (int32_t n0 = 0; n0 < n->n; n0 += TSR_TILE_N_CHUNK) {
      int32_t nn = n->n - n0 < TSR_TILE_N_CHUNK ? n->n - n0 : TSR_TILE_N_CHUNK;
      tsr_desc_t desc = {
          .opcode = TSR_OP_GEMM_I8_I32, .m = (uint32_t)rows, .n = (uint32_t)nn,
          .k = (uint32_t)gr->k, .lda = (uint32_t)gr->k, .ldw = (uint32_t)n->k,
          .ldc = (uint32_t)n->n * 4, .a_addr = d->a[s].addr,
          .w_addr = o->weights[weight_index(o, n)].addr + (uint64_t)n0 * (uint64_t)n->k,
          .c_addr = d->c[s].addr + c_off + (uint64_t)n0 * 4};
      tsr_desc_pack(rp + (size_t)nd * TSR_HW_DESC_BYTES, &desc);
      nd++;
    }
    c_off += (uint64_t)rows * (uint64_t)n->n * 4;
  }
  tsr_trace_begin(tr, o->track_copy, "write A + ring", "copy", -1);
  size_t a_bytes = (size_t)rows * (size_t)gr->k;
  double hal0 = tsr_now_s();
  tsr_status_t st = h->vt->write(h, &d->a[s], 0, sc->qa + (size_t)r0 * gr->k, a_bytes);
  if (!st) st = h->vt->write(h, &d->ring[s], 0, rp, (size_t)nd * TSR_HW_DESC_BYTES);
  d->hal_s += tsr_now_s() - hal0;
  note_xfer(d, a_bytes);
  note_xfer(d, (uint64_t)nd * TSR_HW_DESC_BYTES);
  char args[64];
  snprintf(args, sizeof args, "\"bytes\": %zu", a_bytes + (size_t)nd * TSR_HW_DESC_BYTES);
  tsr_trace_end(tr, o->track_copy, args, -1);
  free(heap);
  if (st) return st;
  uint64_t lo = d->a[s].addr, hi = d->a[s].addr;
  /* the window covers every staging buffer and the group's weights */
  for (int t = 0; t < 2; t++) {
    window_cover(&lo, &hi, &d->a[t]);
    window_cover(&lo, &hi, &d->c[t]);
    window_cover(&lo, &hi, &d->ring[t]);
  }
  for (int j = 0; j < gr->count; j++)
    window_cover(&lo, &hi, &o->weights[weight_index(o, gr->m[j])]);
  tsr_hal_command_t cmd = {.window_base = lo, .window_size = hi - lo, .ring = d->ring[s].addr,
                           .n_desc = nd};
  *n_desc = nd;
  for (int j = 0; j < gr->count; j++) {
    tsr_role_stats_t *rs = &o->roles[gr->m[j]->role];
    rs->bytes_up += (uint64_t)rows * (uint64_t)gr->k / (uint64_t)gr->count +
                    (uint64_t)nd * TSR_HW_DESC_BYTES / (uint64_t)gr->count;
  }
  d->submit_us[s] = tsr_trace_now_us(tr);
  hal0 = tsr_now_s();
  st = h->vt->submit(h, &cmd, fence);
  d->hal_s += tsr_now_s() - hal0;
  return st;
}

/* Waits for a tile and brings its int32 results back into the outputs. */
static tsr_status_t tile_finish(tsr_exec_t *o, tsr_exec_dev_t *d, const dev_group_t *gr,
                                int32_t r0, int32_t rows, int s, uint64_t fence,
                                const tsr_offload_scratch_t *sc) {
  tsr_hal_device_t *h = d->cd->hal;
  tsr_trace_t *tr = o->ctx->trace;
  tsr_hal_result_t res;
  memset(&res, 0, sizeof res);
  double t0 = tsr_now_s();
  tsr_status_t st =
      h->vt->wait(h, fence, (uint64_t)o->ctx->opts.device_timeout_ms * 1000000ull, &res);
  d->wait_wall_s += tsr_now_s() - t0;
  char args[200];
  snprintf(args, sizeof args,
           "\"rows\": %d, \"descriptors\": %u, \"cycles\": %" PRIu64
           ", \"projected_us\": %.3f, \"status\": %u",
           rows, res.desc_done, res.cycles, (double)res.cycles / d->timing.clock_hz * 1e6,
           res.hw_status);
  if (tr)
    tsr_trace_complete(tr, d->trace_track, tsr_mm_role_name(gr->m[0]->role), "device",
                       d->submit_us[s], tsr_trace_now_us(tr) - d->submit_us[s], args);
  if (st) return st;
  if (res.hw_status != TSR_HWERR_OK)
    return TSR_ERR(DEVICE, "%s refused descriptor %u: %s", d->cd->name, res.err_index,
                   tsr_hal_hwerr_name(res.hw_status));
  d->launches++;
  d->cycles += res.cycles;
  d->tiles += res.desc_done;
  double macs_total = 0;
  for (int j = 0; j < gr->count; j++) macs_total += (double)gr->m[j]->n;
  tsr_trace_begin(tr, o->track_copy, "read C", "copy", -1);
  uint64_t c_off = 0;
  for (int j = 0; j < gr->count && !st; j++) {
    const tsr_node_t *n = gr->m[j];
    int32_t *acc = sc->acc + (size_t)r0 * (size_t)n->n;
    size_t bytes = (size_t)rows * (size_t)n->n * 4;
    double hal0 = tsr_now_s();
    st = h->vt->read(h, &d->c[s], c_off, acc, bytes);
    d->hal_s += tsr_now_s() - hal0;
    note_xfer(d, bytes);
    c_off += bytes;
    if (st) break;
    tsr_dequantize(gr->out[j] + (size_t)r0 * n->n, (size_t)n->n, acc, (size_t)n->n,
                   sc->qa_scale + r0, n->w->q.scale, rows, n->n);
    tsr_role_stats_t *rs = &o->roles[n->role];
    double share = (double)n->n / macs_total;
    rs->cycles += (uint64_t)llround((double)res.cycles * share);
    rs->proj_s += (double)res.cycles * share / d->timing.clock_hz;
    rs->bytes_down += bytes;
    rs->tiles += (uint64_t)((n->n + TSR_TILE_N_CHUNK - 1) / TSR_TILE_N_CHUNK);
  }
  snprintf(args, sizeof args, "\"bytes\": %" PRIu64, c_off);
  tsr_trace_end(tr, o->track_copy, args, -1);
  return st;
}

/* The failure policy of device work (matmul tiles, attention launches): a
 * device that says it is gone is not retried; otherwise reset it and call
 * retry(arg) up to the context's retries. Returns TSR_OK with *fall_back
 * false when a retry succeeded, TSR_OK with *fall_back true when the caller
 * must run the work on the host (warned with `what`, counted), or the error
 * when fallback is off. Consumes `first`. */
static tsr_status_t device_recover(tsr_exec_t *o, tsr_exec_dev_t *d, tsr_status_t first,
                                   tsr_status_t (*retry)(void *arg), void *arg,
                                   const char *what, bool *fall_back) {
  tsr_hal_device_t *h = d->cd->hal;
  tsr_status_t err = first;
  *fall_back = false;
  if (tsr_status_code(err) == TSR_STATUS_UNAVAILABLE && d->usable) {
    d->usable = false;
    tsr_ctx_warn(o->ctx, "%s is gone (%s); its work runs on the CPU from now on", d->cd->name,
                 tsr_status_message(err));
  }
  for (int attempt = 0; d->usable && attempt <= o->ctx->opts.retries; attempt++) {
    tsr_status_free(h->vt->reset(h));
    d->resets++;
    if (attempt == o->ctx->opts.retries) break;
    d->retries++;
    tsr_ctx_warn(o->ctx, "%s: %s; reset, retry %d of %d", d->cd->name, tsr_status_message(err),
                 attempt + 1, o->ctx->opts.retries);
    tsr_status_t s = retry(arg);
    if (!s) {
      tsr_status_free(err);
      d->consecutive_failures = 0;
      return TSR_OK;
    }
    tsr_status_free(err);
    err = s;
  }
  if (!o->ctx->opts.fallback)
    return tsr_status_annotate(err, "%s failed (fallback is off)", d->cd->name);
  d->fallbacks++;
  if (++d->consecutive_failures >= TSR_MAX_FAILURES && d->usable) {
    d->usable = false;
    tsr_ctx_warn(o->ctx, "%s failed %d times in a row; its work runs on the CPU from now on",
                 d->cd->name, TSR_MAX_FAILURES);
  }
  tsr_ctx_warn(o->ctx, "%s: %s; %s fall back to the CPU", d->cd->name, tsr_status_message(err),
               what);
  tsr_status_free(err);
  *fall_back = true;
  return TSR_OK;
}

typedef struct {
  tsr_exec_t *o;
  tsr_exec_dev_t *d;
  const dev_group_t *gr;
  int32_t r0, rows;
  const tsr_offload_scratch_t *sc;
} tile_retry_t;

static tsr_status_t tile_retry(void *arg) {
  tile_retry_t *a = arg;
  uint64_t fence = 0;
  uint32_t nd = 0;
  tsr_status_t s = tile_submit(a->o, a->d, a->gr, a->r0, a->rows, 0, a->sc, &fence, &nd);
  if (!s) s = tile_finish(a->o, a->d, a->gr, a->r0, a->rows, 0, fence, a->sc);
  return s;
}

/* A tile that failed: reset, retry, then run it on the host. */
static tsr_status_t tile_recover(tsr_exec_t *o, tsr_exec_dev_t *d, const dev_group_t *gr,
                                 int32_t r0, int32_t rows, const float *x,
                                 const tsr_offload_scratch_t *sc, tsr_status_t first) {
  tile_retry_t arg = {o, d, gr, r0, rows, sc};
  char what[96];
  snprintf(what, sizeof what, "%d row(s) of %s (layer %d)", rows,
           tsr_mm_role_name(gr->m[0]->role), gr->m[0]->layer);
  bool fall_back = false;
  TSR_RETURN_IF(device_recover(o, d, first, tile_retry, &arg, what, &fall_back));
  if (!fall_back) return TSR_OK;
  /* (when the device is gone, later groups go to the CPU without this path) */
  for (int j = 0; j < gr->count; j++) {
    o->roles[gr->m[j]->role].fallbacks++;
    host_matmul(o, gr->m[j], r0, rows, x, gr->out[j], sc);
  }
  return TSR_OK;
}

/* Streams the group's rows to device d in tiles, two in flight. */
static tsr_status_t run_on_device(tsr_exec_t *o, tsr_exec_dev_t *d, const dev_group_t *gr,
                                  int32_t T, const float *x, const tsr_offload_scratch_t *sc) {
  const int32_t tr = tsr_tile_rows(&d->cd->caps, T);
  const int32_t n_tiles = (T + tr - 1) / tr;
  uint64_t fence[2] = {0, 0};
  bool queued[2] = {false, false};
  tsr_status_t pending[2] = {TSR_OK, TSR_OK};
  uint32_t nd = 0;
  double host0 = tsr_now_s(), waited0 = d->wait_wall_s;
  bool broken = !d->usable;
  for (int32_t t = 0; t < n_tiles; t++) {
    int32_t r0 = t * tr, rows = T - r0 < tr ? T - r0 : tr;
    int s = t % 2;
    /* Tile t was queued in the previous iteration (or is queued now for
     * the first); queue t+1 before waiting on t. */
    if (t == 0 && !broken) {
      pending[s] = tile_submit(o, d, gr, r0, rows, s, sc, &fence[s], &nd);
      queued[s] = true;
    }
    if (t + 1 < n_tiles && !broken) {
      int32_t r1 = r0 + tr, rows1 = T - r1 < tr ? T - r1 : tr;
      pending[1 - s] = tile_submit(o, d, gr, r1, rows1, 1 - s, sc, &fence[1 - s], &nd);
      queued[1 - s] = true;
    }
    tsr_status_t st = pending[s];
    pending[s] = TSR_OK;
    if (broken && !queued[s]) st = TSR_ERR(UNAVAILABLE, "%s is not usable", d->cd->name);
    else if (!st) st = tile_finish(o, d, gr, r0, rows, s, fence[s], sc);
    queued[s] = false;
    if (st) {
      /* The queue is in an unknown state: recover this tile on its own and
       * run the rest one at a time. */
      if (!broken && queued[1 - s]) {
        tsr_status_free(pending[1 - s]);
        pending[1 - s] = TSR_OK;
        queued[1 - s] = false;
      }
      broken = true;
      TSR_RETURN_IF(tile_recover(o, d, gr, r0, rows, x, sc, st));
      if (d->usable) broken = false;
      else continue;
      /* re-queue the next tile, which the reset dropped */
      if (t + 1 < n_tiles) {
        int32_t r1 = r0 + tr, rows1 = T - r1 < tr ? T - r1 : tr;
        pending[1 - s] = tile_submit(o, d, gr, r1, rows1, 1 - s, sc, &fence[1 - s], &nd);
        queued[1 - s] = true;
      }
    } else {
      d->consecutive_failures = 0;
    }
  }
  d->host_overhead_s += (tsr_now_s() - host0) - (d->wait_wall_s - waited0);
  return TSR_OK;
}

tsr_status_t tsr_exec_matmul_group(tsr_exec_t *o, const tsr_graph_t *g, int32_t leader,
                                   int32_t T, const float *x, float *const *outs,
                                   const tsr_offload_scratch_t *sc) {
  const tsr_node_t *lead = &g->nodes[leader];
  const int cnt = lead->group_size;
  const int32_t k = lead->k;
  double t0 = tsr_now_s();
  if (o->precision == TSR_PRECISION_INT8) tsr_quantize_rows(sc->qa, sc->qa_scale, x, T, k);
  /* Members by placement: each device's members go out together. */
  for (int dev = -1; dev < o->n_devs; dev++) {
    dev_group_t gr = {.count = 0, .k = k};
    for (int j = 0; j < cnt; j++) {
      const tsr_node_t *n = &g->nodes[leader + j];
      int place = n->device;
      if (place >= 0 && !o->devs[place].usable) place = TSR_PLACE_CPU; /* lost mid-run */
      if (place != dev) continue;
      gr.m[gr.count] = n;
      gr.out[gr.count++] = outs[j];
      gr.n_sum += n->n;
      o->roles[n->role].calls++;
    }
    if (!gr.count) continue;
    if (dev < 0) {
      double h0 = tsr_now_s();
      tsr_trace_begin(o->ctx->trace, o->track_cpu, tsr_mm_role_name(gr.m[0]->role), "host", -1);
      for (int j = 0; j < gr.count; j++) host_matmul(o, gr.m[j], 0, T, x, gr.out[j], sc);
      tsr_trace_end(o->ctx->trace, o->track_cpu, NULL, -1);
      double dt = (tsr_now_s() - h0) / gr.count;
      for (int j = 0; j < gr.count; j++) o->roles[gr.m[j]->role].host_s += dt;
      continue;
    }
    tsr_exec_dev_t *d = &o->devs[dev];
    for (int j = 0; j < gr.count; j++) {
      o->roles[gr.m[j]->role].device_calls++;
      o->roles[gr.m[j]->role].model_cycles +=
          (double)tsr_km_gemm_cycles(&d->timing, (uint32_t)T, (uint32_t)gr.m[j]->n,
                                     (uint32_t)k);
    }
    pthread_mutex_lock(&d->cd->lock);
    tsr_status_t s = run_on_device(o, d, &gr, T, x, sc);
    pthread_mutex_unlock(&d->cd->lock);
    if (s) return s;
  }
  (void)t0;
  return TSR_OK;
}

/* ---- int8 attention ---- */

typedef struct {
  tsr_exec_t *o;
  tsr_exec_dev_t *d;
  int32_t layer;
  int phase;
} attn_launch_t;

/* One attention phase on a device: A and the ring into slot `phase`, one
 * launch over the window of the staging slots and the layer's cache, C
 * back into the work's partials. */
static tsr_status_t attn_launch(void *arg) {
  attn_launch_t *a = arg;
  tsr_exec_t *o = a->o;
  tsr_exec_dev_t *d = a->d;
  tsr_hal_device_t *h = d->cd->hal;
  tsr_trace_t *tr = o->ctx->trace;
  tsr_attn_work_t *w = &o->attn_work;
  const int s = a->phase;
  const tsr_hal_buffer_t *kv = &o->kv_buf[a->layer];
  uint64_t a_bytes, c_bytes;
  tsr_attn_phase_bytes(w, s, &a_bytes, &c_bytes);
  const size_t ring_bytes = (size_t)w->n_pairs * TSR_HW_DESC_BYTES;
  uint8_t *ring = malloc(ring_bytes);
  if (!ring) return TSR_ERR(RESOURCE_EXHAUSTED, "attention ring of %zu bytes", ring_bytes);
  tsr_attn_pack(w, s, d->a[s].addr, kv->addr, d->c[s].addr, ring);
  tsr_trace_begin(tr, o->track_copy, "write attention A + ring", "copy", -1);
  tsr_status_t st = h->vt->write(h, &d->a[s], 0, tsr_attn_phase_a(w, s), a_bytes);
  if (!st) st = h->vt->write(h, &d->ring[s], 0, ring, ring_bytes);
  tsr_trace_end(tr, o->track_copy, NULL, -1);
  free(ring);
  if (st) return st;
  note_xfer(d, a_bytes);
  note_xfer(d, ring_bytes);
  o->attn_stats.bytes_up += a_bytes + ring_bytes;
  uint64_t lo = kv->addr, hi = kv->addr + kv->size;
  window_cover(&lo, &hi, &d->a[s]);
  window_cover(&lo, &hi, &d->c[s]);
  window_cover(&lo, &hi, &d->ring[s]);
  tsr_hal_command_t cmd = {.window_base = lo, .window_size = hi - lo, .ring = d->ring[s].addr,
                           .n_desc = (uint32_t)w->n_pairs};
  uint64_t fence = 0;
  double sub_us = tsr_trace_now_us(tr);
  TSR_RETURN_IF(h->vt->submit(h, &cmd, &fence));
  tsr_hal_result_t res;
  memset(&res, 0, sizeof res);
  double t0 = tsr_now_s();
  st = h->vt->wait(h, fence, (uint64_t)o->ctx->opts.device_timeout_ms * 1000000ull, &res);
  d->wait_wall_s += tsr_now_s() - t0;
  if (tr) {
    char args[160];
    snprintf(args, sizeof args, "\"layer\": %d, \"descriptors\": %u, \"cycles\": %" PRIu64,
             a->layer, res.desc_done, res.cycles);
    tsr_trace_complete(tr, d->trace_track, s ? "attention P.V" : "attention Q.K",
                       "device", sub_us, tsr_trace_now_us(tr) - sub_us, args);
  }
  if (st) return st;
  if (res.hw_status != TSR_HWERR_OK)
    return TSR_ERR(DEVICE, "%s refused attention descriptor %u: %s", d->cd->name,
                   res.err_index, tsr_hal_hwerr_name(res.hw_status));
  d->launches++;
  d->cycles += res.cycles;
  d->tiles += res.desc_done;
  o->attn_stats.cycles += res.cycles;
  o->attn_stats.proj_s += (double)res.cycles / d->timing.clock_hz;
  o->attn_stats.descs += res.desc_done;
  st = h->vt->read(h, &d->c[s], 0, tsr_attn_phase_c(w, s), c_bytes);
  if (!st) {
    o->attn_stats.bytes_down += c_bytes;
    note_xfer(d, c_bytes);
  }
  return st;
}

typedef struct {
  tsr_exec_t *o;
  tsr_exec_dev_t *d;
  int32_t layer;
} kv_emit_t;

static tsr_status_t kv_emit(void *arg, uint64_t off, const void *src, size_t n) {
  kv_emit_t *a = arg;
  tsr_hal_device_t *h = a->d->cd->hal;
  a->o->attn_stats.bytes_up += n;
  note_xfer(a->d, n);
  return h->vt->write(h, &a->o->kv_buf[a->layer], off, src, n);
}

tsr_status_t tsr_exec_attention(tsr_exec_t *o, const tsr_graph_t *g, int32_t node,
                                int32_t pos0, int32_t T, const float *q, const float *k,
                                const float *v, float *out) {
  const tsr_node_t *n = &g->nodes[node];
  const int32_t l = n->layer;
  tsr_attn_work_t *w = &o->attn_work;
  tsr_attn_cache_t *c = &o->kv8[l];
  tsr_attn_stats_t *as = &o->attn_stats;
  tsr_threadpool_t *pool = o->ctx->pool;
  double t0 = tsr_now_s();
  tsr_attn_cache_append(c, &o->attn_dims, k, v, pos0, T);
  /* The device copy follows every append, wherever this graph runs it. */
  if (o->kv_dev[l] >= 0 && o->kv_ok[l]) {
    tsr_exec_dev_t *d = &o->devs[o->kv_dev[l]];
    tsr_status_t s = d->usable ? TSR_OK : TSR_ERR(UNAVAILABLE, "%s is not usable", d->cd->name);
    if (!s) {
      kv_emit_t arg = {o, d, l};
      pthread_mutex_lock(&d->cd->lock);
      s = tsr_attn_cache_ranges(c, &o->attn_dims, pos0, T, kv_emit, &arg);
      pthread_mutex_unlock(&d->cd->lock);
    }
    if (s) {
      if (!o->ctx->opts.fallback)
        return tsr_status_annotate(s, "appending to the KV cache of layer %d on %s (fallback "
                                      "is off)", l, d->cd->name);
      if (d->usable)
        tsr_ctx_warn(o->ctx, "%s: %s; attention of layer %d runs on the CPU from now on",
                     d->cd->name, tsr_status_message(s), l);
      tsr_status_free(s);
      o->kv_ok[l] = false;
    }
  }
  TSR_RETURN_IF(tsr_attn_prepare(w, c, q, pos0, T));
  int dev = n->device;
  if (dev >= 0 && (!o->devs[dev].usable || o->kv_dev[l] != dev || !o->kv_ok[l]))
    dev = TSR_PLACE_CPU;
  as->calls++;
  as->rows += (uint64_t)T;
  as->pairs += (uint64_t)w->n_pairs;
  as->dense_pairs += w->dense_pairs;
  as->kv_bytes += 2 * tsr_attn_kv_read(w, 0);
  if (dev >= 0) {
    as->device_calls++;
    as->model_cycles += (double)tsr_attn_model_cycles(w, &o->devs[dev].timing);
  }
  for (int phase = 0; phase < 2; phase++) {
    if (phase == 1) tsr_attn_softmax(w, c, pool);
    bool host = dev < 0 || !w->n_pairs;
    if (!host) {
      tsr_exec_dev_t *d = &o->devs[dev];
      attn_launch_t arg = {o, d, l, phase};
      double h0 = tsr_now_s(), waited0 = d->wait_wall_s;
      pthread_mutex_lock(&d->cd->lock);
      tsr_status_t s = d->usable ? attn_launch(&arg)
                                 : TSR_ERR(UNAVAILABLE, "%s is not usable", d->cd->name);
      if (s) {
        char what[96];
        snprintf(what, sizeof what, "%d row(s) of attention (layer %d, %s)", T, l,
                 phase ? "P.V" : "Q.K");
        s = device_recover(o, d, s, attn_launch, &arg, what, &host);
        if (host) as->fallbacks++;
      }
      pthread_mutex_unlock(&d->cd->lock);
      d->host_overhead_s += (tsr_now_s() - h0) - (d->wait_wall_s - waited0);
      if (s) return s;
    }
    if (host) tsr_attn_run_host(w, c, phase, pool, o->ctx->isa);
  }
  tsr_attn_output(w, out, pool);
  as->host_s += tsr_now_s() - t0;
  return TSR_OK;
}
