/*
 * exec.c - the executor: resident weights, staging, and the one launch /
 * reset / retry / fallback path that matmul groups and int8 attention share
 * (see offload.h).
 *
 * A launch on a device is: the A operand up (one copy), the descriptor ring
 * up (one copy, which a matmul group's ring makes once: it stays resident
 * in device memory and is found again by its content), one command over a
 * window that covers the staging and the buffers the descriptors read, and
 * C back (one copy). A matmul group over
 * a batch of R rows is one launch per device it runs on, its ring carrying
 * every (member, column chunk, row chunk) descriptor. With the rows split
 * over several devices, every device's launch is queued before any is
 * waited for, and the host's own share runs meanwhile.
 */
#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "devio.h"
#include "offload.h"
#include "project.h"
#include "recover.h"
#include "trace.h"


/* Batch sizes an engine plans for: powers of two up to its rows per pass. */
#define TSR_PLAN_MAX 16

/* The resident copy of node n's weights on device dev (one per matmul
 * node of the graph: each expert has its own). */
static size_t weight_index(const tsr_exec_t *o, const tsr_node_t *n, int dev) {
  return (size_t)(n - o->graph.nodes) * (size_t)o->n_devs + (size_t)dev;
}

static size_t weight_count(const tsr_exec_t *o) {
  return (size_t)o->graph.n_nodes * (size_t)o->n_devs;
}

/* Widens the window [*lo, *hi) to cover buffer b. */
static inline void window_cover(uint64_t *lo, uint64_t *hi, const tsr_hal_buffer_t *b) {
  if (b->addr < *lo) *lo = b->addr;
  if (b->addr + b->size > *hi) *hi = b->addr + b->size;
}

/* A resident ring: its bytes at `off` in the arena (rings_host mirrors
 * them). */
#define TSR_RING_ENTRIES 1024
typedef struct tsr_ring_entry {
  uint64_t off;
  uint32_t bytes;
} tsr_ring_entry_t;

static tsr_status_t queue_close(tsr_exec_dev_t *d);

static void free_staging(tsr_exec_dev_t *d) {
  tsr_dio_free(d, &d->a);
  tsr_dio_free(d, &d->c);
  tsr_dio_free(d, &d->ring);
  tsr_dio_free(d, &d->rings);
  free(d->ring_host);
  free(d->rings_host);
  free(d->ring_ents);
  d->ring_host = d->rings_host = NULL;
  d->ring_ents = NULL;
  d->n_ring_ents = d->ring_next = 0;
  d->rings_used = 0;
}

/* Sizes the staging on device d for the largest launch of either kind. */
static void size_dev_staging(tsr_exec_t *o, tsr_exec_dev_t *d) {
  const int32_t R = o->max_rows;
  /* matmul: A = R rows of the widest input; C = R rows of the widest group;
   * ring: the most descriptors a group's launch of R rows takes */
  d->a_cap = (uint64_t)R * (uint64_t)o->k_max;
  d->c_cap = (uint64_t)R * (uint64_t)o->group_n_max * 4;
  const tsr_graph_t *g = &o->graph;
  int32_t descs = 1;
  uint64_t all = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_MATMUL || n->group != i) continue;
    int32_t ns[8], n_sum = 0;
    for (int j = 0; j < n->group_size; j++) n_sum += ns[j] = g->nodes[i + j].n;
    /* C: every K piece's partial sums */
    const int32_t kp = tsr_tile_k_pieces(&d->cd->caps, n->k);
    if ((uint64_t)R * (uint64_t)n_sum * 4 * (uint64_t)kp > d->c_cap)
      d->c_cap = (uint64_t)R * (uint64_t)n_sum * 4 * (uint64_t)kp;
    const int32_t nd = kp * tsr_tile_descs(ns, n->group_size, TSR_TILE_N_CHUNK, R,
                                           tsr_tile_m_chunk(&d->cd->caps));
    if (nd > descs) descs = nd;
    all += (uint64_t)nd;
  }
  d->ring_cap = (uint64_t)descs * TSR_HW_DESC_BYTES;
  /* resident rings: room for every group's ring of R rows four times over
   * (a few batch sizes in turn stay resident), 64 KiB to 16 MiB */
  d->rings_cap = 4 * all * TSR_HW_DESC_BYTES;
  if (d->rings_cap < ((uint64_t)64 << 10)) d->rings_cap = (uint64_t)64 << 10;
  if (d->rings_cap > ((uint64_t)16 << 20)) d->rings_cap = (uint64_t)16 << 20;
  if (o->attn.kind != TSR_ATTN_REFERENCE) {
    /* attention: A is Qq or P', C the score or PV partials, one descriptor
     * per pair */
    const tsr_attn_work_t *w = &o->attn_work;
    uint64_t qa = (uint64_t)w->d.n_heads * (uint64_t)w->max_rows * (uint64_t)w->d.head_dim;
    uint64_t a = qa > w->s_cap ? qa : w->s_cap;
    uint64_t c = 4 * (w->s_cap > w->o_cap ? w->s_cap : w->o_cap);
    uint64_t r = (uint64_t)w->cap_pairs * TSR_HW_DESC_BYTES;
    if (a > d->a_cap) d->a_cap = a;
    if (c > d->c_cap) d->c_cap = c;
    if (r > d->ring_cap) d->ring_cap = r;
  }
}

/* Allocates the staging sized by size_dev_staging. */
static tsr_status_t alloc_staging(tsr_exec_dev_t *d) {
  d->ring_host = malloc(d->ring_cap);
  if (!d->ring_host) return TSR_ERR(RESOURCE_EXHAUSTED, "ring of %" PRIu64 " bytes", d->ring_cap);
  TSR_RETURN_IF(tsr_dio_alloc(d, d->a_cap, &d->a));
  TSR_RETURN_IF(tsr_dio_alloc(d, d->c_cap, &d->c));
  TSR_RETURN_IF(tsr_dio_alloc(d, d->ring_cap, &d->ring));
  /* the arena is optional: without room for it every ring is copied */
  d->rings_host = malloc(d->rings_cap);
  d->ring_ents = calloc(TSR_RING_ENTRIES, sizeof *d->ring_ents);
  tsr_status_t s = d->rings_host && d->ring_ents && d->rings_cap
                       ? tsr_dio_alloc(d, d->rings_cap, &d->rings)
                       : TSR_ERR(RESOURCE_EXHAUSTED, "resident rings");
  if (s) {
    tsr_status_free(s);
    free(d->rings_host);
    free(d->ring_ents);
    d->rings_host = NULL;
    d->ring_ents = NULL;
    memset(&d->rings, 0, sizeof d->rings);
  }
  return TSR_OK;
}

/* Uploads the weights of every matmul some plan puts on a device: on that
 * device, or on every device of a rows split. The partitioner has checked
 * that they fit; an upload that fails anyway leaves the node to the host
 * (fallback) or fails the engine. */
double tsr_exec_bsr_density(tsr_exec_t *o, int32_t i) {
  const tsr_node_t *n = &o->graph.nodes[i];
  if (o->bsr_density[i] < 0)
    o->bsr_density[i] = tsr_tile_bsr_density(n->w->q.data, n->n, n->k, tsr_tile_bsr_bk(n->k));
  return o->bsr_density[i];
}

static tsr_status_t upload_weights(tsr_exec_t *o) {
  const tsr_graph_t *g = &o->graph;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_MATMUL) continue;
    for (int e = 0; e < o->n_devs; e++) {
      if (!tsr_exec_dev_live(o, e)) continue;
      bool want = false;
      for (int p = 0; p < o->n_plans && !want; p++) {
        const tsr_place_t *pc = &o->plans[p].at[i];
        want = pc->device == e ||
               (pc->device == TSR_PLACE_ROWS && (pc->rows_mask >> e & 1) && !o->devs[e].cd->host);
      }
      const size_t wi = weight_index(o, n, e);
      if (!want || o->weight_on[wi]) continue;
      tsr_exec_dev_t *d = &o->devs[e];
      /* block-sparse when its tiles are mostly zero and the device has
       * GEMM_BSR; else striped over the device's read ports when it has
       * several (tiles.c) */
      const uint32_t p = tsr_tile_w_channels(&d->cd->caps);
      uint64_t bytes = tsr_tile_w_bytes(n->n, n->k, p);
      tsr_status_t s = TSR_OK;
      uint8_t *packed = NULL;
      if (d->cd->caps.ops >> TSR_OP_GEMM_BSR_I8_I32 & 1) {
        const uint32_t bk = tsr_tile_bsr_bk(n->k);
        if (tsr_tile_bsr_wanted(&d->cd->caps, tsr_exec_bsr_density(o, i))) {
          s = tsr_tile_bsr_pack(n->w->q.data, n->n, n->k, bk, &o->weight_bsr[wi], &packed);
          if (!s) bytes = o->weight_bsr[wi].bytes;
        }
      }
      int8_t *striped = !packed && p > 1 ? malloc(bytes) : NULL;
      if (striped) tsr_tile_w_stripe(striped, n->w->q.data, n->n, n->k, p);
      const void *src = packed ? (const void *)packed
                               : striped ? (const void *)striped : (const void *)n->w->q.data;
      pthread_mutex_lock(&d->cd->lock);
      if (!s && !packed && p > 1 && !striped)
        s = TSR_ERR(RESOURCE_EXHAUSTED, "striping %" PRIu64 " bytes", bytes);
      if (!s) s = tsr_dio_alloc(d, bytes, &o->weights[wi]);
      if (!s) s = tsr_dio_write(o, d, &o->weights[wi], 0, src, bytes, false);
      if (s) tsr_dio_free(d, &o->weights[wi]);
      pthread_mutex_unlock(&d->cd->lock);
      free(striped);
      free(packed);
      if (s) tsr_tile_bsr_free(&o->weight_bsr[wi]);
      if (s) {
        if (!o->ctx->opts.fallback)
          return tsr_status_annotate(s, "uploading %s of layer %d to %s",
                                     tsr_mm_role_name(n->role), n->layer, d->cd->name);
        tsr_ctx_warn(o->ctx, "%s: uploading %s of layer %d failed, it runs on the CPU: %s",
                     d->cd->name, tsr_mm_role_name(n->role), n->layer, tsr_status_message(s));
        tsr_status_free(s);
        continue;
      }
      o->weight_on[wi] = true;
      o->weight_bytes += bytes;
      if (o->weight_bsr[wi].chunks) {
        d->bsr_mats++;
        d->bsr_stored += o->weight_bsr[wi].stored;
        d->bsr_total += o->weight_bsr[wi].total;
      }
    }
  }
  return TSR_OK;
}

/* Releases the weights resident on device e. */
static void release_weights(tsr_exec_t *o, int e) {
  const size_t n_w = weight_count(o);
  tsr_exec_dev_t *d = &o->devs[e];
  pthread_mutex_lock(&d->cd->lock);
  for (size_t i = (size_t)e; o->weights && o->weight_on && i < n_w; i += (size_t)o->n_devs) {
    if (!o->weight_on[i]) continue;
    o->weight_bytes -= o->weights[i].size;
    tsr_dio_free(d, &o->weights[i]);
    o->weight_on[i] = false;
    if (o->weight_bsr[i].chunks) {
      d->bsr_mats--;
      d->bsr_stored -= o->weight_bsr[i].stored;
      d->bsr_total -= o->weight_bsr[i].total;
    }
    tsr_tile_bsr_free(&o->weight_bsr[i]);
  }
  pthread_mutex_unlock(&d->cd->lock);
}

static uint64_t round_alloc(uint64_t n) {
  return (n + TSR_DEVMEM_MIN_ALIGN - 1) & ~(uint64_t)(TSR_DEVMEM_MIN_ALIGN - 1);
}

/* TSR_WINDOW_AUTO: room for everything the engine could keep on one
 * device: its staging, every matmul's weights, and the KV caches of every
 * layer for the sequences the partitioner reserves room for, each as the
 * allocator rounds it. */
static uint64_t auto_window(const tsr_exec_t *o, const tsr_exec_dev_t *d) {
  uint64_t b = round_alloc(d->a_cap) + round_alloc(d->c_cap) + round_alloc(d->ring_cap) +
               round_alloc(d->rings_cap);
  const tsr_graph_t *g = &o->graph;
  /* as upload_weights stores them: striped over the read ports (a
   * block-sparse copy is smaller) */
  const uint32_t p = tsr_tile_w_channels(&d->cd->caps);
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == TSR_NODE_MATMUL)
      b += round_alloc(tsr_tile_w_bytes(g->nodes[i].n, g->nodes[i].k, p));
  if (o->attn.kind != TSR_ATTN_REFERENCE)
    b += round_alloc(tsr_attn_kv_bytes(&o->attn_dims)) *
         (uint64_t)(o->model->layer1 - o->model->layer0) * TSR_PLAN_KV_RESERVE_SEQS;
  return b;
}

/* Reserves the engine's window of `size` bytes (TSR_WINDOW_AUTO: sized by
 * auto_window) on device d and its allocator. */
static tsr_status_t alloc_window(tsr_exec_t *o, tsr_exec_dev_t *d, uint64_t size) {
  tsr_hal_device_t *h = d->cd->hal;
  const uint64_t bytes = size == TSR_WINDOW_AUTO ? auto_window(o, d) : size;
  TSR_RETURN_IF_ERROR(h->vt->alloc(h, bytes, TSR_DEVMEM_MIN_ALIGN, &d->window),
                      "%s: a window of %" PRIu64 " bytes", d->cd->name, bytes);
  tsr_status_t s = tsr_devmem_create(d->window.addr, d->window.size, &d->sub);
  if (s) {
    h->vt->free(h, &d->window);
    memset(&d->window, 0, sizeof d->window);
  }
  return s;
}

static void free_window(tsr_exec_dev_t *d) {
  if (!d->window.size) return;
  tsr_devmem_destroy(d->sub);
  d->sub = NULL;
  d->cd->hal->vt->free(d->cd->hal, &d->window);
  memset(&d->window, 0, sizeof d->window);
}

void tsr_exec_window(const tsr_exec_t *o, int e, uint64_t *base, uint64_t *size) {
  *base = o->devs[e].window.addr;
  *size = o->devs[e].window.size;
}

static void size_staging(tsr_exec_t *o) {
  const tsr_graph_t *g = &o->graph;
  o->k_pieces = 1;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_MATMUL || n->group != i) continue;
    int32_t sum = 0;
    for (int j = 0; j < n->group_size; j++) sum += g->nodes[i + j].n;
    if (n->k > o->k_max) o->k_max = n->k;
    if (sum > o->group_n_max) o->group_n_max = sum;
    for (int e = 0; e < o->ctx->n_devs; e++) {
      const tsr_ctx_device_t *cd = &o->ctx->devs[e];
      const int32_t kp = cd->hal ? tsr_tile_k_pieces(&cd->caps, n->k) : 1;
      if (kp > o->k_pieces) o->k_pieces = kp;
    }
  }
  /* acc: a device share's C at r0 * n_sum * k_pieces (mm_prepare) */
  o->acc_n = (size_t)o->group_n_max * (size_t)o->k_pieces;
}

static int32_t max3(int32_t a, int32_t b, int32_t c) {
  int32_t m = a > b ? a : b;
  return m > c ? m : c;
}

/* The forward pass's scratch for max_rows rows. */
static tsr_status_t alloc_scratch(tsr_exec_t *o) {
  const tsr_model_config_t *c = &o->model->cfg;
  const size_t R = (size_t)o->max_rows;
  const size_t q_dim = (size_t)c->n_heads * c->head_dim;
  const size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim;
  const size_t widest_in = (size_t)max3(c->dim, c->hidden_dim, (int32_t)q_dim);
  size_t widest_out = (size_t)max3(c->hidden_dim, c->vocab_size, c->dim);
  if (o->acc_n > widest_out) widest_out = o->acc_n;
  const int n_threads = tsr_threadpool_size(o->ctx->pool);
  o->x = malloc(sizeof(float) * R * (size_t)c->dim);
  o->xb = malloc(sizeof(float) * R * widest_in);
  o->xb2 = malloc(sizeof(float) * R * (size_t)c->dim);
  o->hb = malloc(sizeof(float) * R * (size_t)c->hidden_dim);
  o->hb2 = malloc(sizeof(float) * R * (size_t)c->hidden_dim);
  o->q = malloc(sizeof(float) * R * q_dim);
  o->k = malloc(sizeof(float) * R * kv_dim);
  o->v = malloc(sizeof(float) * R * kv_dim);
  o->att = malloc(sizeof(float) * (size_t)n_threads * TSR_ATTN_ROW_BLOCK * (size_t)o->max_seq);
  o->logits = malloc(sizeof(float) * R * (size_t)c->vocab_size);
  o->logit_rows = malloc(sizeof(int32_t) * R);
  o->attn_block_entry = malloc(sizeof(int32_t) * R);
  o->attn_block_row = malloc(sizeof(int32_t) * R);
  o->pass = malloc(sizeof(tsr_pass_entry_t) * R);
  o->qa = malloc(R * widest_in);
  o->qa_scale = malloc(sizeof(float) * R);
  o->acc = malloc(sizeof(int32_t) * R * widest_out);
  const size_t E = (size_t)c->n_experts;
  if (E) {
    o->route = malloc(sizeof(float) * R * E);
    o->moe_in = malloc(sizeof(float) * R * (size_t)c->dim);
    o->moe_out = malloc(sizeof(float) * R * (size_t)c->dim);
    o->moe_rows = malloc(sizeof(int32_t) * R * E);
    o->moe_w = malloc(sizeof(float) * R * E);
    o->moe_count = calloc(E, sizeof(int32_t));
    o->expert_rows = calloc(E * (size_t)c->n_layers, sizeof(uint64_t));
    o->expert_recent = calloc(E * (size_t)c->n_layers, sizeof(double));
    o->next_replan = TSR_MOE_REPLAN_PASSES;
    if (!o->route || !o->moe_in || !o->moe_out || !o->moe_rows || !o->moe_w ||
        !o->moe_count || !o->expert_rows || !o->expert_recent)
      return TSR_ERR(RESOURCE_EXHAUSTED, "engine: expert routing for %zu rows", R);
  }
  if (o->precision == TSR_PRECISION_BF16) {
    o->xh = malloc(sizeof(uint16_t) * R * widest_in);
    if (!o->xh) return TSR_ERR(RESOURCE_EXHAUSTED, "engine: bf16 activations for %zu rows", R);
  }
  if (!o->x || !o->xb || !o->xb2 || !o->hb || !o->hb2 || !o->q || !o->k || !o->v || !o->att ||
      !o->logits || !o->logit_rows || !o->attn_block_entry ||
      !o->attn_block_row || !o->pass || !o->qa || !o->qa_scale ||
      !o->acc)
    return TSR_ERR(RESOURCE_EXHAUSTED, "engine: scratch for %zu rows", R);
  return TSR_OK;
}

tsr_status_t tsr_exec_create(tsr_model_t *model, const tsr_session_options_t *opts,
                             tsr_exec_t **out) {
  *out = NULL;
  tsr_context_t *ctx = model->ctx;
  const tsr_model_config_t *c = &model->cfg;
  tsr_exec_t *o = calloc(1, sizeof(*o));
  if (!o) return TSR_ERR(RESOURCE_EXHAUSTED, "engine");
  pthread_mutex_init(&o->lock, NULL);
  o->ctx = ctx;
  o->model = model;
  o->precision = opts->precision;
  o->hkern = tsr_hgemm_kernel(ctx->isa, opts->precision == TSR_PRECISION_BF16 ? TSR_HALF_BF16
                                                                             : TSR_HALF_F16);
  o->kv_type = opts->kv_type;
  o->split = ctx->opts.split;
  o->max_seq = opts->max_seq ? opts->max_seq : c->seq_len;
  o->max_rows = opts->max_batch_rows;
  o->window_bytes = opts->device_window_bytes;
  o->attn = opts->attn;
  o->n_devs = ctx->n_devs;
  o->devs = calloc((size_t)o->n_devs, sizeof(tsr_exec_dev_t));
  tsr_status_t s = TSR_OK;
  if (!o->devs) s = TSR_ERR(RESOURCE_EXHAUSTED, "engine: %d devices", o->n_devs);
  if (!s && o->attn.kind != TSR_ATTN_REFERENCE) {
    o->attn_dims = (tsr_attn_dims_t){c->n_heads, c->n_kv_heads, c->head_dim, o->max_seq,
                                     o->attn.block};
    s = tsr_attn_work_init(&o->attn_work, &o->attn_dims, &o->attn,
                           o->max_rows < o->max_seq ? o->max_rows : o->max_seq,
                           tsr_threadpool_size(ctx->pool));
    o->attn_costs = calloc((size_t)o->n_devs + 1, sizeof *o->attn_costs);
    if (!s && !o->attn_costs) s = TSR_ERR(RESOURCE_EXHAUSTED, "engine: attention costs");
  }
  if (!s) s = tsr_graph_build(model, &o->graph);
  if (!s) {
    const size_t n_w = weight_count(o);
    o->weights = calloc(n_w ? n_w : 1, sizeof(tsr_hal_buffer_t));
    o->weight_on = calloc(n_w ? n_w : 1, sizeof(bool));
    o->weight_bsr = calloc(n_w ? n_w : 1, sizeof(tsr_tile_bsr_t));
    o->bsr_density = malloc(sizeof(double) * (size_t)(o->graph.n_nodes ? o->graph.n_nodes : 1));
    for (int32_t i = 0; o->bsr_density && i < o->graph.n_nodes; i++) o->bsr_density[i] = -1;
    if (!o->weights || !o->weight_on || !o->weight_bsr || !o->bsr_density)
      s = TSR_ERR(RESOURCE_EXHAUSTED, "engine: weights of %d devices", o->n_devs);
  }
  if (!s) {
    size_staging(o);
    s = alloc_scratch(o);
  }
  tsr_trace_t *tr = ctx->trace;
  o->track_cpu = tsr_trace_track(tr, "host: ops");
  o->track_copy = tsr_trace_track(tr, "host<->device copies");
  const bool int8_work = o->precision == TSR_PRECISION_INT8 || o->attn.kind != TSR_ATTN_REFERENCE;
  for (int i = 0; !s && i < o->n_devs; i++) {
    tsr_exec_dev_t *d = &o->devs[i];
    d->cd = &ctx->devs[i];
    d->on = i >= 64 || (opts->device_mask >> i & 1);
    if (!d->cd->hal) continue;
    pthread_mutex_lock(&d->cd->lock);
    d->rs.usable = !d->cd->lost;
    pthread_mutex_unlock(&d->cd->lock);
    tsr_km_timing_init(&d->timing);
    d->timing.rows = d->cd->caps.array_rows;
    d->timing.cols = d->cd->caps.array_cols;
    d->timing.mem_bytes_per_cycle = d->cd->caps.mem_bytes_per_cycle;
    d->timing.clock_hz = d->cd->caps.clock_hz;
    if (d->cd->caps.mem_ports) d->timing.ports = d->cd->caps.mem_ports; /* board channels */
    if (d->cd->caps.mem_latency) d->timing.mem_latency = d->cd->caps.mem_latency;
    char name[128];
    snprintf(name, sizeof name, "device %s: runs (host wall time%s)", d->cd->name,
             strncmp(d->cd->spec, "sim", 3) ? "" : " of the simulation");
    d->trace_track = tsr_trace_track(tr, name);
    if (!int8_work || !d->rs.usable) continue;
    size_dev_staging(o, d);
    pthread_mutex_lock(&d->cd->lock);
    /* a device in queue mode keeps one launch running over everything the
     * engine has on it: the engine's window (sized automatically unless
     * given); without room for one the engine launches each ring */
    if (o->window_bytes) s = alloc_window(o, d, o->window_bytes);
    else if (d->cd->caps.flags & TSR_HAL_CAP_QUEUE)
      tsr_status_free(alloc_window(o, d, TSR_WINDOW_AUTO));
    if (!s) s = alloc_staging(d);
    if (s) {
      free_staging(d);
      free_window(d);
    }
    pthread_mutex_unlock(&d->cd->lock);
    if (s && ctx->opts.fallback) {
      tsr_ctx_warn(ctx, "%s: cannot allocate the engine's window or staging buffers, its "
                        "work runs on the CPU: %s", d->cd->name, tsr_status_message(s));
      tsr_status_free(s);
      s = TSR_OK;
      d->rs.usable = false;
    }
  }
  /* plans: 1, 2, 4, ... and max_rows itself */
  if (!s) {
    o->plans = calloc(TSR_PLAN_MAX, sizeof(tsr_plan_t));
    if (!o->plans) s = TSR_ERR(RESOURCE_EXHAUSTED, "engine: plans");
  }
  for (int32_t r = 1; !s && o->n_plans < TSR_PLAN_MAX; r *= 2) {
    const int32_t rows = r < o->max_rows ? r : o->max_rows;
    s = tsr_plan_build(o, rows, &o->plans[o->n_plans]);
    if (!s) o->n_plans++;
    if (rows == o->max_rows) break;
  }
  if (!s) s = upload_weights(o);
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
    const size_t n_w = weight_count(o);
    for (size_t i = 0; o->weights && o->weight_on && i < n_w; i++) {
      if (!o->weight_on[i]) continue;
      tsr_exec_dev_t *d = &o->devs[i % (size_t)o->n_devs];
      pthread_mutex_lock(&d->cd->lock);
      tsr_dio_free(d, &o->weights[i]);
      pthread_mutex_unlock(&d->cd->lock);
    }
    for (int i = 0; i < o->n_devs; i++) {
      tsr_exec_dev_t *d = &o->devs[i];
      if (!d->cd || !d->cd->hal) continue;
      pthread_mutex_lock(&d->cd->lock);
      tsr_status_free(queue_close(d));
      free_staging(d);
      free_window(d);
      pthread_mutex_unlock(&d->cd->lock);
    }
  }
  for (int p = 0; o->plans && p < o->n_plans; p++) tsr_plan_free(&o->plans[p]);
  free(o->plans);
  tsr_attn_work_free(&o->attn_work);
  free(o->attn_costs);
  free(o->devs);
  free(o->weights);
  free(o->weight_on);
  for (size_t i = 0; o->devs && o->weight_bsr && i < weight_count(o); i++)
    tsr_tile_bsr_free(&o->weight_bsr[i]);
  free(o->weight_bsr);
  free(o->bsr_density);
  tsr_graph_free(&o->graph);
  free(o->x);
  free(o->xb);
  free(o->xb2);
  free(o->hb);
  free(o->hb2);
  free(o->q);
  free(o->k);
  free(o->v);
  free(o->att);
  free(o->logits);
  free(o->logit_rows);
  free(o->attn_block_entry);
  free(o->attn_block_row);
  free(o->pass);
  free(o->qa);
  free(o->qa_scale);
  free(o->acc);
  free(o->xh);
  free(o->route);
  free(o->moe_in);
  free(o->moe_out);
  free(o->moe_rows);
  free(o->moe_w);
  free(o->moe_count);
  free(o->expert_rows);
  free(o->expert_recent);
  pthread_mutex_destroy(&o->lock);
  free(o);
}

const tsr_plan_t *tsr_exec_plan(const tsr_exec_t *o, int32_t R) {
  for (int p = 0; p < o->n_plans; p++)
    if (o->plans[p].rows >= R) return &o->plans[p];
  return &o->plans[o->n_plans - 1];
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

/* ---- the launch path (matmul groups and attention phases) ---- */

/* One launch: A (a_bytes from a) into the staging A, the ring already
 * packed in d->ring_host (n_desc descriptors), C (c_bytes) back into c.
 * `extra` are the buffers the descriptors read besides the staging (the
 * group's weights, a sequence's KV cache); the window covers them. */
typedef struct launch {
  tsr_exec_dev_t *d;
  const void *a;
  size_t a_bytes;
  uint32_t n_desc;
  const tsr_hal_buffer_t *extra[8];
  int n_extra;
  void *c;
  size_t c_bytes;
  const char *what;
  bool resident; /* the ring may stay resident (a matmul group's) */
  /* state */
  size_t ring_up; /* ring bytes the last submit copied (0: found resident) */
  uint32_t q_target; /* queue mode: descriptors the queue has run when this
                        launch is done (0: a launch of its own) */
  uint64_t fence;
  tsr_hal_result_t res;
} launch_t;

/* A launch with its engine (for the retry). */
typedef struct {
  launch_t l;
  tsr_exec_t *o;
} launch_ctx_t;

/* Window of a launch: the engine's window, or the staging and the `extra`
 * buffers. */
static void launch_window(const launch_t *l, uint64_t *lo, uint64_t *hi) {
  const tsr_exec_dev_t *d = l->d;
  if (d->window.size) { /* the engine's window, whatever the launch touches */
    *lo = d->window.addr;
    *hi = d->window.addr + d->window.size;
    return;
  }
  *lo = d->a.addr;
  *hi = d->a.addr + d->a.size;
  window_cover(lo, hi, &d->c);
  window_cover(lo, hi, &d->ring);
  if (d->rings.size) window_cover(lo, hi, &d->rings);
  for (int i = 0; i < l->n_extra; i++) window_cover(lo, hi, l->extra[i]);
}

/* Empties the resident rings (the next launches upload theirs again). */
static void rings_forget(tsr_exec_dev_t *d) {
  d->n_ring_ents = d->ring_next = 0;
  d->rings_used = 0;
}

/* The device address of the ring packed in d->ring_host (n bytes): a
 * resident copy of the same bytes, or one uploaded now into the arena
 * (emptied when full), or the plain staging ring when it does not fit;
 * *copied = the bytes copied. The arena's entries are compared from the one
 * after the last hit, since a pass launches its groups in the same order
 * every step: a hit is usually the first comparison. */
static tsr_status_t ring_place(tsr_exec_t *o, tsr_exec_dev_t *d, size_t n, bool resident,
                               uint64_t *addr, size_t *copied) {
  *copied = n;
  if (!resident || !d->rings.size || n > d->rings_cap) {
    TSR_RETURN_IF(tsr_dio_write(o, d, &d->ring, 0, d->ring_host, n, true));
    *addr = d->ring.addr;
    return TSR_OK;
  }
  for (uint32_t i = 0; i < d->n_ring_ents; i++) {
    const uint32_t e = (d->ring_next + i) % d->n_ring_ents;
    const tsr_ring_entry_t *r = &d->ring_ents[e];
    if (r->bytes != n || memcmp(d->rings_host + r->off, d->ring_host, n)) continue;
    d->ring_next = e + 1;
    d->ring_hits++;
    *addr = d->rings.addr + r->off;
    *copied = 0;
    return TSR_OK;
  }
  const uint64_t size = (n + TSR_HW_DESC_BYTES - 1) / TSR_HW_DESC_BYTES * TSR_HW_DESC_BYTES;
  if (d->rings_used + size > d->rings_cap || d->n_ring_ents == TSR_RING_ENTRIES)
    rings_forget(d);
  const uint64_t off = d->rings_used;
  TSR_RETURN_IF(tsr_dio_write(o, d, &d->rings, off, d->ring_host, n, true));
  memcpy(d->rings_host + off, d->ring_host, n);
  d->ring_ents[d->n_ring_ents++] = (tsr_ring_entry_t){off, (uint32_t)n};
  d->ring_next = d->n_ring_ents;
  d->rings_used += size;
  d->ring_uploads++;
  *addr = d->rings.addr + off;
  return TSR_OK;
}

/* ---- queue mode ---- */

/* Slots of the queue: the staging ring, 64 bytes a descriptor. */
static uint32_t queue_slots(const tsr_exec_dev_t *d) {
  return (uint32_t)(d->ring.size / TSR_HW_DESC_BYTES);
}

/* Whether launch l goes to the device's queue: the device runs queue mode
 * and the engine has a window on it (the queue's launch covers it all). */
static bool queue_used(const tsr_exec_dev_t *d, const launch_t *l) {
  const tsr_hal_vtable_t *vt = d->cd->hal->vt;
  return (d->cd->caps.flags & TSR_HAL_CAP_QUEUE) && vt->doorbell && vt->progress &&
         d->window.size && l->n_desc && l->n_desc <= queue_slots(d);
}

/* Forgets the running queue (after a failure: the recovery resets the
 * device; a queue that still runs is closed, best effort). */
static void queue_forget(tsr_exec_dev_t *d) {
  if (d->q_fence) {
    tsr_hal_device_t *h = d->cd->hal;
    tsr_status_free(h->vt->doorbell(h, d->q_fence, d->q_tail, 1));
  }
  d->q_fence = 0;
  if (d->cd->q_holder == d) d->cd->q_holder = NULL;
}

/* Closes the running queue and waits for its launch to end (the device's
 * lock held). Every ring it ran was already waited for; a queue that does
 * not end cleanly is reset. */
static tsr_status_t queue_release(void *holder) {
  tsr_exec_dev_t *d = holder;
  if (d->cd->q_holder == d) d->cd->q_holder = NULL;
  if (!d->q_fence) return TSR_OK;
  tsr_hal_device_t *h = d->cd->hal;
  const uint64_t fence = d->q_fence;
  d->q_fence = 0;
  tsr_hal_result_t r;
  tsr_status_t s = h->vt->doorbell(h, fence, d->q_tail, 1);
  if (!s) s = h->vt->wait(h, fence, d->q_timeout_ns, &r);
  if (!s && r.hw_status == TSR_HWERR_OK) return TSR_OK;
  tsr_status_free(s);
  return h->vt->reset(h);
}

/* Opens the device's queue for this engine if it has none: closes another
 * user's, then submits the queue-mode launch over the staging ring. */
static tsr_status_t queue_claim(tsr_exec_t *o, tsr_exec_dev_t *d) {
  TSR_RETURN_IF(tsr_ctx_device_claim(d->cd, d));
  if (d->q_fence) return TSR_OK;
  tsr_hal_command_t cmd = {.window_base = d->window.addr, .window_size = d->window.size,
                           .ring = d->ring.addr, .n_desc = queue_slots(d),
                           .flags = TSR_HAL_CMD_QUEUE};
  d->q_timeout_ns = (uint64_t)o->ctx->opts.device_timeout_ms * 1000000ull;
  TSR_RETURN_IF(tsr_dio_submit(o, d, &cmd, &d->q_fence));
  d->q_tail = 0;
  memset(&d->q_seen, 0, sizeof d->q_seen);
  d->launches++;
  d->q_opens++;
  d->cd->q_holder = d;
  d->cd->q_release = queue_release;
  return TSR_OK;
}

/* Launch l through the queue: A up, its descriptors into the next slots
 * (two copies where they wrap), a doorbell. */
static tsr_status_t queue_submit(tsr_exec_t *o, launch_t *l) {
  tsr_exec_dev_t *d = l->d;
  TSR_RETURN_IF(queue_claim(o, d));
  TSR_RETURN_IF(tsr_dio_write(o, d, &d->a, 0, l->a, l->a_bytes, true));
  const uint32_t slots = queue_slots(d), slot = d->q_tail % slots;
  const uint32_t first = l->n_desc < slots - slot ? l->n_desc : slots - slot;
  TSR_RETURN_IF(tsr_dio_write(o, d, &d->ring, (uint64_t)slot * TSR_HW_DESC_BYTES, d->ring_host,
                              (size_t)first * TSR_HW_DESC_BYTES, true));
  if (first < l->n_desc)
    TSR_RETURN_IF(tsr_dio_write(o, d, &d->ring, 0,
                                d->ring_host + (size_t)first * TSR_HW_DESC_BYTES,
                                (size_t)(l->n_desc - first) * TSR_HW_DESC_BYTES, true));
  l->ring_up = (size_t)l->n_desc * TSR_HW_DESC_BYTES;
  TSR_RETURN_IF(tsr_dio_doorbell(o, d, d->q_tail + l->n_desc));
  d->q_tail += l->n_desc;
  l->q_target = d->q_tail;
  l->fence = d->q_fence;
  return TSR_OK;
}

/* Closes the engine's queue on d, if it holds one (the device's lock
 * held). */
static tsr_status_t queue_close(tsr_exec_dev_t *d) {
  if (!d->cd || !d->cd->hal || d->cd->q_holder != d) return TSR_OK;
  return queue_release(d);
}

static tsr_status_t launch_submit(tsr_exec_t *o, launch_t *l) {
  tsr_exec_dev_t *d = l->d;
  if (!d->rs.usable) return TSR_ERR(UNAVAILABLE, "%s is not usable", d->cd->name);
  l->q_target = 0;
  if (queue_used(d, l)) return queue_submit(o, l);
  TSR_RETURN_IF(tsr_ctx_device_claim(d->cd, NULL));
  TSR_RETURN_IF(tsr_dio_write(o, d, &d->a, 0, l->a, l->a_bytes, true));
  uint64_t ring;
  TSR_RETURN_IF(ring_place(o, d, (size_t)l->n_desc * TSR_HW_DESC_BYTES, l->resident, &ring,
                           &l->ring_up));
  uint64_t lo, hi;
  launch_window(l, &lo, &hi);
  tsr_hal_command_t cmd = {.window_base = lo, .window_size = hi - lo, .ring = ring,
                           .n_desc = l->n_desc};
  return tsr_dio_submit(o, d, &cmd, &l->fence);
}

static tsr_status_t launch_finish(tsr_exec_t *o, launch_t *l) {
  if (l->q_target) TSR_RETURN_IF(tsr_dio_progress(o, l->d, l->q_target, l->what, &l->res));
  else TSR_RETURN_IF(tsr_dio_wait(o, l->d, l->fence, l->what, &l->res));
  return tsr_dio_read(o, l->d, &l->d->c, 0, l->c, l->c_bytes);
}

/* The retry of a failed launch: the same launch again, synchronously. */
static tsr_status_t launch_sync(void *arg) {
  launch_ctx_t *lc = arg;
  TSR_RETURN_IF(launch_submit(lc->o, &lc->l));
  return launch_finish(lc->o, &lc->l);
}

/* Completes a submitted launch (`pending` is what submit returned): on
 * failure resets, retries, and sets *host when the caller must compute it on
 * the host. */
static tsr_status_t launch_complete(tsr_exec_t *o, launch_ctx_t *lc, tsr_status_t pending,
                                    const char *what, bool *host) {
  *host = false;
  tsr_exec_dev_t *d = lc->l.d;
  tsr_status_t s = pending ? pending : launch_finish(o, &lc->l);
  if (!s) {
    tsr_recover_ok(&d->rs);
    return TSR_OK;
  }
  /* whatever failed, the retry uploads its ring again (and opens a new
   * queue) */
  rings_forget(d);
  queue_forget(d);
  const tsr_recover_ops_t ops = {launch_sync, NULL, lc};
  s = tsr_recover(o->ctx, d->cd->hal, d->cd->name, &d->rs, s, &ops, what, host, NULL);
  if (d->rs.gone) d->cd->lost = true;
  return s;
}

/* ---- matmul groups ---- */

/* fp32 BLAS on the pool: each task one slice of W's rows (the output's
 * columns), OpenBLAS single-threaded inside it, so one set of threads runs
 * every op of a pass (OpenBLAS's own threads would spin and yield against
 * the pool's). Each output element is one BLAS dot product either way. */
typedef struct {
  const tsr_linear_t *w;
  int32_t rows, slice;
  const float *x;
  float *out;
} sgemm_args_t;

static void sgemm_task(void *arg, int task, int thread) {
  (void)thread;
  const sgemm_args_t *a = arg;
  const int32_t n0 = task * a->slice;
  const int32_t n = a->w->rows - n0 < a->slice ? a->w->rows - n0 : a->slice;
  if (n <= 0) return;
  const float *w = a->w->f32 + (size_t)n0 * a->w->cols;
  if (a->rows == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, a->w->cols, 1.0f, w, a->w->cols, a->x, 1, 0.0f,
                a->out + n0, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->rows, n, a->w->cols, 1.0f, a->x,
                a->w->cols, w, a->w->cols, 0.0f, a->out + n0, a->w->rows);
}

static void host_sgemm(tsr_exec_t *o, const tsr_linear_t *w, int32_t rows, const float *x,
                       float *out) {
  const int nt = tsr_threadpool_size(o->ctx->pool);
  /* slices of whole 64-byte lines of output, at least 64 columns each */
  int32_t slice = (w->rows + nt - 1) / nt;
  slice = (slice + 15) / 16 * 16;
  if (slice < 64) slice = 64;
  const int tasks = (w->rows + slice - 1) / slice;
  sgemm_args_t a = {w, rows, slice, x, out};
  tsr_threadpool_run(o->ctx->pool, tasks, sgemm_task, &a);
}

/* One member on the host, rows [r0, r0+rows): int8 kernel and
 * dequantization, the fp16/bf16 kernels, or fp32 BLAS. */
static void host_matmul(tsr_exec_t *o, const tsr_node_t *n, int32_t r0, int32_t rows,
                        const float *x, float *out, const tsr_offload_scratch_t *sc) {
  const tsr_linear_t *w = n->w;
  if (o->precision == TSR_PRECISION_INT8) {
    int32_t *acc = sc->acc + (size_t)r0 * w->rows;
    if (w->qs.row_start && rows < TSR_QSPARSE_TILE) /* pruned: the stored tiles only */
      tsr_qsparse_gemm(o->ctx->pool, o->ctx->isa, acc, (size_t)w->rows,
                       sc->qa + (size_t)r0 * w->cols, (size_t)w->cols, &w->qs, rows);
    else
      tsr_qgemm(o->ctx->pool, o->ctx->isa, acc, (size_t)w->rows, sc->qa + (size_t)r0 * w->cols,
                (size_t)w->cols, &w->q, rows);
    tsr_dequantize(out + (size_t)r0 * w->rows, (size_t)w->rows, acc, (size_t)w->rows,
                   sc->qa_scale + r0, w->q.scale, rows, w->rows);
  } else if (o->precision == TSR_PRECISION_FP16) {
    tsr_hgemm_f16(o->ctx->pool, o->hkern, out + (size_t)r0 * w->rows, (size_t)w->rows,
                  x + (size_t)r0 * w->cols, (size_t)w->cols, w->f16, (size_t)w->cols, rows,
                  w->rows, w->cols);
  } else if (o->precision == TSR_PRECISION_BF16) {
    tsr_hgemm_bf16(o->ctx->pool, o->hkern, out + (size_t)r0 * w->rows, (size_t)w->rows,
                   sc->xh + (size_t)r0 * w->cols, (size_t)w->cols, w->bf16, (size_t)w->cols,
                   rows, w->rows, w->cols);
  } else {
    host_sgemm(o, w, rows, x + (size_t)r0 * w->cols, out + (size_t)r0 * w->rows);
  }
}

/* The members of a group that share one placement. */
typedef struct {
  const tsr_node_t *m[8];
  float *out[8];
  int count;
  int32_t k, n_sum;
} members_t;

static void host_members(tsr_exec_t *o, const members_t *gr, int32_t r0, int32_t rows,
                         const float *x, const tsr_offload_scratch_t *sc) {
  double h0 = tsr_now_s();
  tsr_trace_begin(o->ctx->trace, o->track_cpu, tsr_mm_role_name(gr->m[0]->role), "host", -1);
  for (int j = 0; j < gr->count; j++) host_matmul(o, gr->m[j], r0, rows, x, gr->out[j], sc);
  tsr_trace_end(o->ctx->trace, o->track_cpu, NULL, -1);
  double dt = (tsr_now_s() - h0) / gr->count;
  for (int j = 0; j < gr->count; j++) o->roles[gr->m[j]->role].host_s += dt;
}

/* A device's share of a group: rows [r0, r0+rows). The C of member j lies
 * at acc + r0 * n_sum + rows * (sum of the earlier members' n). */
typedef struct {
  launch_ctx_t lc;
  const members_t *gr;
  int32_t r0, rows;
  tsr_status_t pending;
  bool locked;
  double host0, waited0;
  uint32_t bsr_nd; /* of its descriptors, GEMM_BSR ones */
  int32_t k_pieces; /* K pieces of its descriptors (tsr_tile_k_pieces) */
} mm_share_t;

/* Packs the share's ring into d->ring_host and fills its launch. */
static void mm_prepare(tsr_exec_t *o, mm_share_t *sh, tsr_exec_dev_t *d,
                       const tsr_offload_scratch_t *sc) {
  const members_t *gr = sh->gr;
  const int32_t mc = tsr_tile_m_chunk(&d->cd->caps);
  /* K in pieces (tiles.c): piece q's partial sums are C block q of the
   * member (rows x n int32 each), added by mm_account */
  const int32_t kp = tsr_tile_k_pieces(&d->cd->caps, gr->k);
  uint32_t nd = 0;
  uint64_t c_off = 0;
  sh->bsr_nd = 0;
  for (int j = 0; j < gr->count; j++) {
    const tsr_node_t *n = gr->m[j];
    const size_t wi = weight_index(o, n, (int)(d - o->devs));
    const tsr_hal_buffer_t *w = &o->weights[wi];
    const tsr_tile_bsr_t *bsr = &o->weight_bsr[wi];
    const uint64_t block = (uint64_t)sh->rows * (uint64_t)n->n * 4;
    for (int32_t n0 = 0; n0 < n->n; n0 += TSR_TILE_N_CHUNK) {
      const int32_t nn = n->n - n0 < TSR_TILE_N_CHUNK ? n->n - n0 : TSR_TILE_N_CHUNK;
      for (int32_t m0 = 0; m0 < sh->rows; m0 += mc) {
        const int32_t mm = sh->rows - m0 < mc ? sh->rows - m0 : mc;
        for (int32_t q = 0; q < kp; q++) {
          const int32_t k0 = q * TSR_TILE_K_CHUNK;
          const int32_t kk = kp == 1 ? gr->k
                             : gr->k - k0 < TSR_TILE_K_CHUNK ? gr->k - k0 : TSR_TILE_K_CHUNK;
          tsr_desc_t desc = {
              .opcode = TSR_OP_GEMM_I8_I32, .m = (uint32_t)mm, .n = (uint32_t)nn,
              .k = (uint32_t)kk, .lda = (uint32_t)gr->k, .ldw = (uint32_t)n->k,
              .ldc = (uint32_t)n->n * 4,
              .a_addr = d->a.addr + (uint64_t)m0 * (uint64_t)gr->k + (uint64_t)k0,
              .c_addr = d->c.addr + c_off + block * (uint64_t)q +
                        ((uint64_t)m0 * (uint64_t)n->n + (uint64_t)n0) * 4};
          if (bsr->chunks) {
            tsr_tile_bsr_desc(&desc, w->addr, bsr, n0);
            sh->bsr_nd++;
          } else {
            tsr_tile_w_desc(&desc, w->addr, n->n, n0, n->k, tsr_tile_w_channels(&d->cd->caps));
            desc.w_addr += (uint64_t)k0;
          }
          tsr_desc_pack(d->ring_host + (size_t)nd * TSR_HW_DESC_BYTES, &desc);
          nd++;
        }
      }
    }
    c_off += block * (uint64_t)kp;
  }
  sh->k_pieces = kp;
  launch_t *l = &sh->lc.l;
  memset(l, 0, sizeof *l);
  l->d = d;
  l->a = sc->qa + (size_t)sh->r0 * gr->k;
  l->a_bytes = (size_t)sh->rows * (size_t)gr->k;
  l->n_desc = nd;
  for (int j = 0; j < gr->count; j++)
    l->extra[l->n_extra++] = &o->weights[weight_index(o, gr->m[j], (int)(d - o->devs))];
  l->c = sc->acc + (size_t)sh->r0 * (size_t)gr->n_sum * (size_t)o->k_pieces;
  l->c_bytes = (size_t)c_off;
  l->what = tsr_mm_role_name(gr->m[0]->role);
  l->resident = true;
  sh->lc.o = o;
}

/* After a share's launch: dequantizes every member's rows, counts. */
static void mm_account(tsr_exec_t *o, mm_share_t *sh, const tsr_offload_scratch_t *sc) {
  const members_t *gr = sh->gr;
  tsr_exec_dev_t *d = sh->lc.l.d;
  int32_t *c = sc->acc + (size_t)sh->r0 * (size_t)gr->n_sum * (size_t)o->k_pieces;
  const double macs_total = (double)gr->n_sum;
  const uint64_t cycles = sh->lc.l.res.cycles;
  uint64_t c_off = 0;
  d->rows += (uint64_t)sh->rows;
  d->bsr_descs += sh->bsr_nd;
  for (int j = 0; j < gr->count; j++) {
    const tsr_node_t *n = gr->m[j];
    /* the K pieces' partial sums added into the first (int32, exact) */
    const size_t block = (size_t)sh->rows * (size_t)n->n;
    for (int32_t q = 1; q < sh->k_pieces; q++)
      for (size_t e = 0; e < block; e++) c[c_off + e] += c[c_off + block * (size_t)q + e];
    tsr_dequantize(gr->out[j] + (size_t)sh->r0 * n->n, (size_t)n->n, c + c_off, (size_t)n->n,
                   sc->qa_scale + sh->r0, n->w->q.scale, sh->rows, n->n);
    c_off += block * (size_t)sh->k_pieces;
    tsr_role_stats_t *rs = &o->roles[n->role];
    const double share = (double)n->n / macs_total;
    rs->cycles += (uint64_t)llround((double)cycles * share);
    rs->proj_s += (double)cycles * share / d->timing.clock_hz;
    rs->bytes_up += (uint64_t)((double)(sh->lc.l.a_bytes + sh->lc.l.ring_up) * share);
    rs->bytes_down += (uint64_t)sh->rows * (uint64_t)n->n * 4 * (uint64_t)sh->k_pieces;
    rs->tiles += (uint64_t)(sh->lc.l.n_desc * share + 0.5);
  }
}

/* Runs members `gr` over rows [0, R) on the devices `devs` (n_devs of
 * them, shares by tsr_rows_share; a host entry computes its share here). */
static tsr_status_t run_members(tsr_exec_t *o, const members_t *gr, const int *devs, int nd,
                                int32_t R, const float *x, const tsr_offload_scratch_t *sc) {
  mm_share_t sh[TSR_MAX_ROW_DEVICES];
  tsr_status_t err = TSR_OK;
  /* queue every device share first (devices locked in ascending order) */
  for (int i = 0; i < nd; i++) {
    mm_share_t *s = &sh[i];
    memset(s, 0, sizeof *s);
    s->gr = gr;
    s->r0 = tsr_rows_share(R, nd, i);
    s->rows = tsr_rows_share(R, nd, i + 1) - s->r0;
    tsr_exec_dev_t *d = &o->devs[devs[i]];
    if (!s->rows || d->cd->host) continue;
    bool resident = d->rs.usable;
    for (int j = 0; j < gr->count && resident; j++)
      resident = o->weight_on[weight_index(o, gr->m[j], devs[i])];
    if (!resident) continue; /* lost, or its weights never made it: host */
    for (int j = 0; j < gr->count; j++) {
      /* what the cost model predicts: a copy stored block-sparse priced by
       * the walk over its tile density, as the partitioner prices it */
      const tsr_node_t *mj = gr->m[j];
      const tsr_tile_bsr_t *bsr = &o->weight_bsr[weight_index(o, mj, devs[i])];
      o->roles[mj->role].device_calls++;
      const uint32_t mm = (uint32_t)s->rows, mn = (uint32_t)mj->n, mk = (uint32_t)gr->k;
      o->roles[mj->role].model_cycles +=
          (double)(bsr->chunks ? tsr_proj_bsr_cycles(&d->timing, mm, mn, mk,
                                                     tsr_exec_bsr_density(
                                                         o, (int32_t)(mj - o->graph.nodes)))
                               : tsr_proj_pieces_cycles(&d->cd->caps, &d->timing, mm, mn, mk,
                                                        false));
    }
    pthread_mutex_lock(&d->cd->lock);
    s->locked = true;
    s->host0 = tsr_now_s();
    s->waited0 = d->wait_wall_s;
    mm_prepare(o, s, d, sc);
    s->pending = launch_submit(o, &s->lc.l);
  }
  /* the host's shares (rows of host entries and of devices that cannot):
   * computed and dequantized before any device's C is read back into acc */
  for (int i = 0; i < nd; i++)
    if (sh[i].rows && !sh[i].locked) host_members(o, gr, sh[i].r0, sh[i].rows, x, sc);
  /* then wait for the devices in order */
  for (int i = 0; i < nd; i++) {
    mm_share_t *s = &sh[i];
    if (!s->locked) continue;
    tsr_exec_dev_t *d = s->lc.l.d;
    if (!err) {
      char what[96];
      snprintf(what, sizeof what, "%d row(s) of %s (layer %d)", s->rows,
               tsr_mm_role_name(gr->m[0]->role), gr->m[0]->layer);
      bool host = false;
      err = launch_complete(o, &s->lc, s->pending, what, &host);
      if (!err && host) {
        for (int j = 0; j < gr->count; j++) o->roles[gr->m[j]->role].fallbacks++;
        host_members(o, gr, s->r0, s->rows, x, sc);
      } else if (!err) {
        mm_account(o, s, sc);
      }
    } else {
      /* an earlier share failed with fallback off: drain this one */
      tsr_status_free(s->pending ? s->pending : launch_finish(o, &s->lc.l));
    }
    d->host_overhead_s += (tsr_now_s() - s->host0) - (d->wait_wall_s - s->waited0);
    pthread_mutex_unlock(&d->cd->lock);
  }
  return err;
}

tsr_status_t tsr_exec_matmul_group(tsr_exec_t *o, const tsr_plan_t *plan, int32_t leader,
                                   int32_t R, const float *x, float *const *outs,
                                   const tsr_offload_scratch_t *sc) {
  const tsr_graph_t *g = &o->graph;
  const tsr_node_t *lead = &g->nodes[leader];
  const int cnt = lead->group_size;
  if (o->precision == TSR_PRECISION_INT8) tsr_quantize_rows(sc->qa, sc->qa_scale, x, R, lead->k);
  if (o->precision == TSR_PRECISION_BF16)
    tsr_bf16_round(o->hkern, sc->xh, x, (size_t)R * (size_t)lead->k);
  for (int j = 0; j < cnt; j++) {
    o->roles[g->nodes[leader + j].role].calls++;
    o->roles[g->nodes[leader + j].role].rows += (uint64_t)R;
  }
  /* Members by placement: the members of one placement go out together. */
  bool done[8] = {false};
  for (int j0 = 0; j0 < cnt; j0++) {
    if (done[j0]) continue;
    const tsr_place_t *p0 = &plan->at[leader + j0];
    members_t gr = {.count = 0, .k = lead->k};
    for (int j = j0; j < cnt; j++) {
      const tsr_place_t *pj = &plan->at[leader + j];
      if (done[j] || pj->device != p0->device || pj->rows_mask != p0->rows_mask) continue;
      done[j] = true;
      gr.m[gr.count] = &g->nodes[leader + j];
      gr.out[gr.count++] = outs[j];
      gr.n_sum += g->nodes[leader + j].n;
    }
    if (p0->device == TSR_PLACE_CPU) {
      host_members(o, &gr, 0, R, x, sc);
      continue;
    }
    /* the entries that take rows now: host entries, and devices that are
     * on (a device turned off leaves its share to the others) */
    int devs[TSR_MAX_ROW_DEVICES], nd = 0;
    if (p0->device == TSR_PLACE_ROWS) {
      for (int e = 0; e < o->n_devs && e < TSR_MAX_ROW_DEVICES; e++)
        if ((p0->rows_mask >> e & 1) && (o->devs[e].cd->host || o->devs[e].on)) devs[nd++] = e;
    } else if (o->devs[p0->device].on) {
      devs[nd++] = p0->device;
    }
    if (!nd) {
      host_members(o, &gr, 0, R, x, sc);
      continue;
    }
    TSR_RETURN_IF(run_members(o, &gr, devs, nd, R, x, sc));
  }
  return TSR_OK;
}

/* ---- sequences' KV caches on the devices ---- */

/* The device that runs layer l's attention for sequence s under some plan,
 * or -1. Rows split: the sequences are spread over the capable devices by
 * creation order. */
static int seq_kv_device(const tsr_exec_t *o, const tsr_seq_t *s, int32_t node) {
  for (int p = o->n_plans - 1; p >= 0; p--) {
    const tsr_place_t *pc = &o->plans[p].at[node];
    if (pc->device >= 0) return pc->device;
    if (pc->device != TSR_PLACE_ROWS) continue;
    int devs[TSR_MAX_ROW_DEVICES], nd = 0;
    for (int e = 0; e < o->n_devs && e < TSR_MAX_ROW_DEVICES; e++)
      if ((pc->rows_mask >> e & 1) && !o->devs[e].cd->host) devs[nd++] = e;
    if (nd) return devs[s->id % (uint64_t)nd];
  }
  return -1;
}

tsr_status_t tsr_exec_seq_attach(tsr_exec_t *o, tsr_seq_t *s) {
  if (o->attn.kind == TSR_ATTN_REFERENCE) return TSR_OK;
  const tsr_graph_t *g = &o->graph;
  const uint64_t bytes = tsr_attn_kv_bytes(&o->attn_dims);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_ATTENTION) continue;
    const int32_t l = n->layer;
    const int e = seq_kv_device(o, s, i);
    if (e < 0) continue;
    tsr_exec_dev_t *d = &o->devs[e];
    if (!d->on) continue; /* off: this sequence's attention runs on the host */
    pthread_mutex_lock(&d->cd->lock);
    tsr_status_t st = d->rs.usable && !d->cd->lost
                          ? tsr_dio_alloc(d, bytes, &s->kv_buf[l])
                          : TSR_ERR(UNAVAILABLE, "%s is not usable", d->cd->name);
    pthread_mutex_unlock(&d->cd->lock);
    if (st) {
      if (!o->ctx->opts.fallback)
        return tsr_status_annotate(st, "KV cache of layer %d on %s", l, d->cd->name);
      tsr_ctx_warn(o->ctx, "%s: no room for a sequence's KV cache of layer %d, its attention "
                           "runs on the CPU: %s", d->cd->name, l, tsr_status_message(st));
      tsr_status_free(st);
      continue;
    }
    s->kv_dev[l] = e;
    s->kv_ok[l] = true;
  }
  return TSR_OK;
}

void tsr_exec_seq_detach(tsr_exec_t *o, tsr_seq_t *s) {
  for (int32_t l = 0; s->kv_dev && l < o->model->cfg.n_layers; l++) {
    if (s->kv_dev[l] < 0) continue;
    tsr_exec_dev_t *d = &o->devs[s->kv_dev[l]];
    pthread_mutex_lock(&d->cd->lock);
    tsr_dio_free(d, &s->kv_buf[l]);
    pthread_mutex_unlock(&d->cd->lock);
    s->kv_dev[l] = -1;
  }
}

typedef struct {
  tsr_exec_t *o;
  tsr_exec_dev_t *d;
  const tsr_hal_buffer_t *buf;
} kv_emit_t;

static tsr_status_t kv_emit(void *arg, uint64_t off, const void *src, size_t n) {
  kv_emit_t *a = arg;
  a->o->attn_stats.bytes_up += n;
  return tsr_dio_write(a->o, a->d, a->buf, off, src, n, true);
}

tsr_status_t tsr_exec_kv_append(tsr_exec_t *o, tsr_seq_t *s, int32_t l, int32_t pos0,
                                int32_t T, const float *k, const float *v) {
  tsr_attn_cache_append(&s->kv8[l], &o->attn_dims, k, v, pos0, T);
  if (s->kv_dev[l] < 0 || !s->kv_ok[l]) return TSR_OK;
  /* the device copy follows every append */
  tsr_exec_dev_t *d = &o->devs[s->kv_dev[l]];
  if (!d->on) { /* turned off: the device copy stops following */
    s->kv_ok[l] = false;
    return TSR_OK;
  }
  tsr_status_t st = d->rs.usable ? TSR_OK : TSR_ERR(UNAVAILABLE, "%s is not usable", d->cd->name);
  if (!st) {
    kv_emit_t arg = {o, d, &s->kv_buf[l]};
    pthread_mutex_lock(&d->cd->lock);
    st = tsr_attn_cache_ranges(&s->kv8[l], &o->attn_dims, pos0, T, kv_emit, &arg);
    pthread_mutex_unlock(&d->cd->lock);
  }
  if (st) {
    if (!o->ctx->opts.fallback)
      return tsr_status_annotate(st, "appending to the KV cache of layer %d on %s (fallback "
                                     "is off)", l, d->cd->name);
    if (d->rs.usable)
      tsr_ctx_warn(o->ctx, "%s: %s; attention of layer %d runs on the CPU for this sequence "
                           "from now on", d->cd->name, tsr_status_message(st), l);
    tsr_status_free(st);
    s->kv_ok[l] = false;
  }
  return TSR_OK;
}

/* ---- int8 attention ---- */

tsr_status_t tsr_exec_attention(tsr_exec_t *o, const tsr_plan_t *plan, int32_t node,
                                tsr_seq_t *s, int32_t pos0, int32_t T, const float *q,
                                float *out) {
  const tsr_node_t *n = &o->graph.nodes[node];
  const int32_t l = n->layer;
  tsr_attn_work_t *w = &o->attn_work;
  tsr_attn_cache_t *c = &s->kv8[l];
  tsr_attn_stats_t *as = &o->attn_stats;
  tsr_threadpool_t *pool = o->ctx->pool;
  double t0 = tsr_now_s();
  TSR_RETURN_IF(tsr_attn_prepare(w, c, q, pos0, T));
  const int place = plan->at[node].device;
  int dev = place == TSR_PLACE_CPU ? -1 : s->kv_dev[l];
  if (dev >= 0 && (!tsr_exec_dev_live(o, dev) || !s->kv_ok[l] ||
                   (place >= 0 && place != dev)))
    dev = -1;
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
      launch_ctx_t lc;
      memset(&lc, 0, sizeof lc);
      lc.o = o;
      launch_t *L = &lc.l;
      uint64_t a_bytes, c_bytes;
      tsr_attn_phase_bytes(w, phase, &a_bytes, &c_bytes);
      L->d = d;
      L->a = tsr_attn_phase_a(w, phase);
      L->a_bytes = (size_t)a_bytes;
      L->n_desc = (uint32_t)w->n_pairs;
      L->extra[L->n_extra++] = &s->kv_buf[l];
      L->c = tsr_attn_phase_c(w, phase);
      L->c_bytes = (size_t)c_bytes;
      L->what = phase ? "attention P.V" : "attention Q.K";
      char what[96];
      snprintf(what, sizeof what, "%d row(s) of attention (layer %d, %s)", T, l,
               phase ? "P.V" : "Q.K");
      double h0 = tsr_now_s(), waited0;
      pthread_mutex_lock(&d->cd->lock);
      waited0 = d->wait_wall_s;
      tsr_attn_pack(w, phase, d->a.addr, s->kv_buf[l].addr, d->c.addr, d->ring_host);
      tsr_status_t pending = launch_submit(o, L);
      tsr_status_t st = launch_complete(o, &lc, pending, what, &host);
      if (!st && !host) {
        as->bytes_up += a_bytes + (uint64_t)w->n_pairs * TSR_HW_DESC_BYTES;
        as->bytes_down += c_bytes;
        as->cycles += L->res.cycles;
        as->proj_s += (double)L->res.cycles / d->timing.clock_hz;
        as->descs += L->res.desc_done;
      }
      if (host) as->fallbacks++;
      d->host_overhead_s += (tsr_now_s() - h0) - (d->wait_wall_s - waited0);
      pthread_mutex_unlock(&d->cd->lock);
      if (st) return st;
    }
    if (host) tsr_attn_run_host(w, c, phase, pool, o->ctx->isa);
  }
  tsr_attn_output(w, out, pool);
  as->host_s += tsr_now_s() - t0;
  return TSR_OK;
}

/* ---- experts placed by their popularity ---- */

tsr_status_t tsr_exec_moe_replan(tsr_exec_t *o) {
  const tsr_model_config_t *c = &o->model->cfg;
  if (!c->n_experts || o->passes < o->next_replan) return TSR_OK;
  o->next_replan = o->passes + TSR_MOE_REPLAN_PASSES;
  bool devices = false;
  for (int e = 0; e < o->n_devs; e++) devices |= o->devs[e].cd->hal && o->devs[e].on;
  if (!devices || o->ctx->opts.offload != TSR_OFFLOAD_AUTO) return TSR_OK;
  for (int p = 0; p < o->n_plans; p++) {
    tsr_plan_t fresh;
    TSR_RETURN_IF(tsr_plan_build(o, o->plans[p].rows, &fresh));
    tsr_plan_free(&o->plans[p]);
    o->plans[p] = fresh;
  }
  o->moe_replans++;
  /* an exponential window: the older rows count half at each replan */
  const size_t n = (size_t)c->n_layers * (size_t)c->n_experts;
  for (size_t i = 0; i < n; i++) o->expert_recent[i] *= 0.5;
  return upload_weights(o);
}

/* ---- devices turned on and off ---- */

tsr_status_t tsr_engine_set_devices(tsr_engine_t *o, uint64_t mask, uint64_t keep) {
  if (!o) return TSR_ERR(INVALID_ARGUMENT, "engine: NULL");
  pthread_mutex_lock(&o->lock); /* between passes: nothing of ours in flight */
  for (int e = 0; e < o->n_devs && e < 64; e++) {
    tsr_exec_dev_t *d = &o->devs[e];
    const bool on = mask >> e & 1;
    if (d->cd->host) continue;
    d->on = on;
    if (!on && d->cd->hal) { /* its queue ends with its turn */
      pthread_mutex_lock(&d->cd->lock);
      tsr_status_free(queue_close(d));
      pthread_mutex_unlock(&d->cd->lock);
    }
    if (!on && !(keep >> e & 1) && d->cd->hal) release_weights(o, e);
  }
  tsr_status_t s = upload_weights(o);
  pthread_mutex_unlock(&o->lock);
  return s;
}

uint64_t tsr_engine_devices(const tsr_engine_t *o) {
  uint64_t m = 0;
  for (int e = 0; o && e < o->n_devs && e < 64; e++)
    if (o->devs[e].cd->host || tsr_exec_dev_live(o, e)) m |= 1ull << e;
  return m;
}

int tsr_engine_device_count(const tsr_engine_t *o) { return o ? o->n_devs : 0; }

bool tsr_engine_device_stats(const tsr_engine_t *o, int e, tsr_device_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!o || e < 0 || e >= o->n_devs || !o->devs[e].cd->hal) return false;
  const tsr_exec_dev_t *d = &o->devs[e];
  out->commands = out->launches = d->launches;
  out->descriptors = d->tiles;
  out->cycles = d->cycles;
  out->fallbacks = d->rs.fallbacks;
  out->retries = d->rs.retries;
  out->resets = d->rs.resets;
  out->bytes_to_device = d->xfer_bytes; /* both directions: the device keeps one count */
  return true;
}
