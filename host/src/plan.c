/*
 * plan.c - the partitioner: places the graph's nodes on the host or on a
 * device, in explicit passes (ggml's scheduler is the model), recording the
 * cause of every placement.
 *
 *   pass 1  capability and layer split: light ops stay on the host; each
 *           layer belongs to one entry of the device list (contiguous
 *           ranges: model parallelism); a matmul is a candidate for that
 *           entry's device if the session is int8, the device is open and
 *           runs int8 GEMM, and K fits the device.
 *   pass 2  cost, per group (matmuls that read the same activations, sent
 *           as one upload and one launch): host time = the int8 kernel
 *           measured on this machine for the group's shapes; device time =
 *           the kernel's cycle model at the device's clock plus a launch per
 *           row tile; transfers = per-transfer latency plus bytes over the
 *           link bandwidth, counted as the executor issues them (per tile:
 *           activations and ring up, every member's result down). The policy
 *           decides: all, none, or auto (the faster side).
 *           int8 attention (--attn) is costed the same way per node: host
 *           time = its int8 GEMMs (tsr_attn_run_host) measured here for the
 *           graph's rows at mid-context; device time = the cycle model of
 *           the descriptors the pattern keeps, two launches; transfers = Q,
 *           P', rings and the KV append up, the partials down. Softmax and
 *           quantization run on the host either way and are not compared.
 *   pass 3  overrides from --place, which win over the cost model.
 * Weights that do not fit in device memory are moved back to the host when
 * they are uploaded (exec.c), with that cause.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offload.h"

/* Wall time of the host int8 kernel on this shape, with these weights (so
 * the measurement sees the real cache footprint): the fastest of several
 * runs, since on a shared machine the slow runs measure other processes. */
static double measure_cpu(const tsr_exec_t *o, const tsr_linear_t *w, int32_t m) {
  const size_t k = (size_t)w->cols, n = (size_t)w->rows;
  int8_t *a = malloc((size_t)m * k);
  int32_t *c = malloc(sizeof(int32_t) * (size_t)m * n);
  if (!a || !c) {
    free(a);
    free(c);
    return INFINITY;
  }
  for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (int8_t)(i * 37 + 11);
  double best = INFINITY;
  for (int r = 0; r < 7; r++) {
    double t0 = tsr_now_s();
    tsr_qgemm(o->ctx->pool, o->ctx->isa, c, n, a, k, &w->q, m);
    double t = tsr_now_s() - t0;
    if (t < best) best = t;
  }
  free(a);
  free(c);
  return best;
}

/* The int8 attention of one layer as the cost model sees it: the graph's
 * rows at mid-context. Fills the host time (measured), device time (cycle
 * model), transfer time and the density. */
static void attn_cost(tsr_exec_t *o, int e, int32_t T, double *cpu, double *dev, double *xfer,
                      double *density) {
  tsr_attn_work_t *w = &o->attn_work;
  const tsr_attn_dims_t *d = &o->attn_dims;
  int32_t rows = T < w->max_rows ? T : w->max_rows;
  int32_t pos0 = d->max_seq / 2;
  if (pos0 + rows > d->max_seq) pos0 = d->max_seq - rows;
  const size_t q_dim = (size_t)d->n_heads * d->head_dim;
  float *q = malloc(sizeof(float) * (size_t)rows * q_dim);
  tsr_attn_cache_t c;
  *cpu = *dev = *xfer = 0;
  *density = 1;
  tsr_status_t cs = q ? tsr_attn_cache_init(&c, d) : TSR_ERR(RESOURCE_EXHAUSTED, "queries");
  if (cs) {
    tsr_status_free(cs);
    free(q);
    *cpu = INFINITY;
    return;
  }
  for (size_t i = 0; i < (size_t)rows * q_dim; i++) q[i] = (float)((int)(i * 37 + 11) % 255 - 127);
  tsr_status_t s = tsr_attn_prepare(w, &c, q, pos0, rows);
  if (s) {
    tsr_status_free(s);
    *cpu = INFINITY;
  } else {
    *density = w->dense_pairs ? (double)w->n_pairs / (double)w->dense_pairs : 1;
    double best = INFINITY;
    for (int r = 0; r < 5; r++) {
      double t0 = tsr_now_s();
      tsr_attn_run_host(w, &c, 0, o->ctx->pool, o->ctx->isa);
      tsr_attn_run_host(w, &c, 1, o->ctx->pool, o->ctx->isa);
      double t = tsr_now_s() - t0;
      if (t < best) best = t;
    }
    *cpu = best;
    if (e >= 0) {
      const tsr_exec_dev_t *dv = &o->devs[e];
      const tsr_hal_caps_t *caps = &dv->cd->caps;
      *dev = (double)tsr_attn_model_cycles(w, &dv->timing) / dv->timing.clock_hz +
             2 * caps->launch_latency_s;
      uint64_t a0, c0, a1, c1;
      tsr_attn_phase_bytes(w, 0, &a0, &c0);
      tsr_attn_phase_bytes(w, 1, &a1, &c1);
      double up = (double)(a0 + a1) + 2.0 * w->n_pairs * TSR_HW_DESC_BYTES +
                  2.0 * rows * d->n_kv_heads * d->head_dim;
      /* transfers: A and ring per phase, C per phase, K and V^T per kv head */
      int n_xfer = 6 + 2 * d->n_kv_heads;
      *xfer = caps->link_latency_s * n_xfer +
              (caps->link_bytes_per_s > 0 ? (up + (double)(c0 + c1)) / caps->link_bytes_per_s : 0);
    }
  }
  tsr_attn_cache_free(&c);
  free(q);
}

/* Which entry of the device list owns `layer` (-1: the classifier, which
 * goes with the last layer). */
static int layer_entry(const tsr_exec_t *o, int32_t layer) {
  const int32_t L = o->model->cfg.n_layers;
  if (layer < 0) layer = L - 1;
  return (int)((int64_t)layer * o->n_devs / L);
}

/* Launches and transfers of a group as the executor will issue them: the
 * rows go in tiles; each tile is one launch with two copies in (its
 * activation rows, its descriptor ring) and one copy out per member. */
static void transfer_cost(const tsr_hal_caps_t *c, int32_t m, int32_t k, const int32_t *ns,
                          int count, double *xfer, int32_t *launches) {
  const int32_t tile_rows = tsr_tile_rows(c, m);
  const int32_t tiles = (m + tile_rows - 1) / tile_rows;
  const int32_t descs = tsr_tile_descs(ns, count, TSR_TILE_N_CHUNK);
  double bytes = (double)m * k + (double)tiles * descs * TSR_HW_DESC_BYTES;
  for (int i = 0; i < count; i++) bytes += 4.0 * m * ns[i];
  *xfer = c->link_latency_s * tiles * (2 + count) +
          (c->link_bytes_per_s > 0 ? bytes / c->link_bytes_per_s : 0);
  *launches = tiles;
}

/* Applies "--place op=where,..." to the graph. */
static tsr_status_t apply_overrides(tsr_exec_t *o, tsr_graph_t *g, const char *spec) {
  const char *p = spec;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[96];
    if (len == 0 || len >= sizeof item)
      return TSR_ERR(INVALID_ARGUMENT, "placement '%s': bad item at offset %zu", spec,
                     (size_t)(p - spec));
    memcpy(item, p, len);
    item[len] = '\0';
    char *eq = strchr(item, '=');
    if (!eq) return TSR_ERR(INVALID_ARGUMENT, "placement item '%s': expected op=where", item);
    *eq = '\0';
    const char *op = item, *where = eq + 1;
    bool roles[TSR_MM_COUNT] = {false};
    const bool attention = o->attn.kind != TSR_ATTN_REFERENCE &&
                           (!strcmp(op, "attention") || !strcmp(op, "all"));
    bool any = !strcmp(op, "attention");
    for (int r = 0; r < TSR_MM_COUNT; r++) {
      bool attn = r <= TSR_MM_O, ffn = r >= TSR_MM_GATE && r <= TSR_MM_DOWN;
      roles[r] = !strcmp(op, tsr_mm_role_name((tsr_mm_role_t)r)) || !strcmp(op, "all") ||
                 (attn && !strcmp(op, "attn")) || (ffn && !strcmp(op, "ffn"));
      any |= roles[r];
    }
    if (!any)
      return TSR_ERR(INVALID_ARGUMENT,
                     "placement item '%s=%s': unknown op '%s' (known: attn_q, attn_k, attn_v, "
                     "attn_out, ffn_gate, ffn_up, ffn_down, output, attn, ffn, attention, all)",
                     op, where, op);
    /* where: cpu, devN, or a device name (its first entry, or its own
     * entry when it owns the layer). */
    int dev = -2;
    if (!strcmp(where, "cpu")) dev = TSR_PLACE_CPU;
    else if (!strncmp(where, "dev", 3) && where[3] >= '0' && where[3] <= '9') {
      char *e = NULL;
      long v = strtol(where + 3, &e, 10);
      if (*e == '\0' && v >= 0 && v < o->n_devs) dev = (int)v;
    } else {
      for (int d = 0; d < o->n_devs && dev == -2; d++)
        if (!strcmp(o->devs[d].cd->name, where) || !strcmp(o->devs[d].cd->spec, where)) dev = d;
    }
    if (dev == -2)
      return TSR_ERR(INVALID_ARGUMENT, "placement item '%s=%s': no device '%s' in the list",
                     op, where, where);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      tsr_node_t *n = &g->nodes[i];
      const bool attn_node = n->op == TSR_NODE_ATTENTION && attention;
      if (!attn_node && (n->op != TSR_NODE_MATMUL || !roles[n->role])) continue;
      int target = dev;
      if (target >= 0 && (o->devs[target].cd->host || !o->devs[target].usable ||
                          (o->devs[target].cd->caps.flags & TSR_HAL_CAP_NO_COMPUTE) ||
                          (!attn_node && o->precision != TSR_PRECISION_INT8))) {
        snprintf(n->cause, sizeof n->cause, "--place %s=%s, but %s: host", op, where,
                 o->precision != TSR_PRECISION_INT8 ? "fp32 runs on the host only"
                                                    : "that entry cannot compute");
        n->device = TSR_PLACE_CPU;
        continue;
      }
      n->device = target;
      snprintf(n->cause, sizeof n->cause, "--place %s=%s", op, where);
    }
    p = end ? end + 1 : p + len;
  }
  return TSR_OK;
}

tsr_status_t tsr_plan_graph(tsr_exec_t *o, tsr_graph_t *g) {
  const tsr_exec_t *co = o;
  /* Measured host times, cached by shape within this plan. */
  struct { int32_t m, n, k; double s; } cache[32];
  int n_cache = 0;

  /* pass 1: capability and layer split */
  for (int32_t i = 0; i < g->n_nodes; i++) {
    tsr_node_t *n = &g->nodes[i];
    n->device = TSR_PLACE_CPU;
    n->est_cpu_s = n->est_dev_s = n->est_xfer_s = 0;
    if (n->op == TSR_NODE_ATTENTION && o->attn.kind != TSR_ATTN_REFERENCE) {
      int e = layer_entry(co, n->layer);
      const tsr_exec_dev_t *d = &co->devs[e];
      if (d->cd->host)
        snprintf(n->cause, sizeof n->cause, "layer split: this layer belongs to entry %d (cpu)", e);
      else if (!d->usable)
        snprintf(n->cause, sizeof n->cause, "%.40s unavailable: %.120s", d->cd->spec,
                 d->cd->unavailable[0] ? d->cd->unavailable : "declared lost");
      else if ((d->cd->caps.flags & TSR_HAL_CAP_NO_COMPUTE) ||
               !(d->cd->caps.ops & (1u << TSR_OP_GEMM_I8_I32)))
        snprintf(n->cause, sizeof n->cause, "%s has no int8 GEMM", d->cd->name);
      else if ((uint32_t)o->attn_dims.head_dim > d->cd->caps.max_dim ||
               (uint32_t)o->attn.block > d->cd->caps.max_dim)
        snprintf(n->cause, sizeof n->cause, "head_dim %d or block %d exceeds %s's limit %u",
                 o->attn_dims.head_dim, o->attn.block, d->cd->name, d->cd->caps.max_dim);
      else
        n->device = e;
      continue;
    }
    if (n->op != TSR_NODE_MATMUL) {
      snprintf(n->cause, sizeof n->cause, "light op: runs on the host");
      continue;
    }
    int e = layer_entry(co, n->layer);
    const tsr_exec_dev_t *d = &co->devs[e];
    if (o->precision != TSR_PRECISION_INT8)
      snprintf(n->cause, sizeof n->cause, "fp32 precision: devices run int8 only");
    else if (d->cd->host)
      snprintf(n->cause, sizeof n->cause, "layer split: this layer belongs to entry %d (cpu)", e);
    else if (!d->usable)
      snprintf(n->cause, sizeof n->cause, "%.40s unavailable: %.120s", d->cd->spec,
               d->cd->unavailable[0] ? d->cd->unavailable : "declared lost");
    else if (d->cd->caps.flags & TSR_HAL_CAP_NO_COMPUTE)
      snprintf(n->cause, sizeof n->cause, "%s computes nothing (%.100s)", d->cd->name,
               d->cd->caps.name);
    else if (!(d->cd->caps.ops & (1u << TSR_OP_GEMM_I8_I32)))
      snprintf(n->cause, sizeof n->cause, "%s has no int8 GEMM", d->cd->name);
    else if ((uint32_t)n->k > d->cd->caps.max_dim)
      snprintf(n->cause, sizeof n->cause, "K=%d exceeds %s's limit %u", n->k, d->cd->name,
               d->cd->caps.max_dim);
    else
      n->device = e; /* candidate, decided in pass 2 */
  }

  /* pass 2: cost model per group, then the policy. The host side is only
   * measured when some device could take work. */
  bool any_device = false;
  for (int d = 0; d < o->n_devs; d++) any_device |= o->devs[d].usable;
  /* Attention nodes: one measurement per graph (every layer has the same
   * shape); density and the cost land in the cause. */
  double a_cpu = -1, a_dev = 0, a_xfer = 0, a_dens = 1;
  int a_e = -2;
  for (int32_t i = 0; o->attn.kind != TSR_ATTN_REFERENCE && i < g->n_nodes; i++) {
    tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_ATTENTION) continue;
    int e = n->device;
    if (a_cpu < 0 || (e >= 0 && e != a_e)) {
      attn_cost(o, e, g->T, &a_cpu, &a_dev, &a_xfer, &a_dens);
      a_e = e;
    }
    n->est_cpu_s = a_cpu;
    if (e < 0) {
      snprintf(n->cause + strlen(n->cause), sizeof n->cause - strlen(n->cause),
               "; density %.0f%%", 100 * a_dens);
      continue;
    }
    n->est_dev_s = a_dev;
    n->est_xfer_s = a_xfer;
    const char *dname = co->devs[e].cd->name;
    switch (o->ctx->opts.offload) {
      case TSR_OFFLOAD_ALL:
        snprintf(n->cause, sizeof n->cause, "--offload all; density %.0f%%", 100 * a_dens);
        break;
      case TSR_OFFLOAD_NONE:
        n->device = TSR_PLACE_CPU;
        snprintf(n->cause, sizeof n->cause, "--offload none; density %.0f%%", 100 * a_dens);
        break;
      default:
        if (!(a_dev + a_xfer < a_cpu)) n->device = TSR_PLACE_CPU;
        snprintf(n->cause, sizeof n->cause,
                 "cost: %s %.1f us + transfers %.1f us %s host %.1f us (int8 GEMMs at "
                 "mid-context, density %.0f%%)",
                 dname, a_dev * 1e6, a_xfer * 1e6, n->device >= 0 ? "<" : ">=", a_cpu * 1e6,
                 100 * a_dens);
        break;
    }
  }

  for (int32_t i = 0; any_device && i < g->n_nodes; i++) {
    tsr_node_t *lead = &g->nodes[i];
    if (lead->op != TSR_NODE_MATMUL || lead->group != i) continue;
    int cnt = lead->group_size;
    double cpu = 0, dev = 0, xfer = 0;
    int32_t ns[8];
    int e = lead->device;
    for (int j = 0; j < cnt; j++) {
      tsr_node_t *n = &g->nodes[i + j];
      ns[j] = n->n;
      double s = -1;
      for (int c = 0; c < n_cache; c++)
        if (cache[c].m == n->m && cache[c].n == n->n && cache[c].k == n->k) s = cache[c].s;
      if (s < 0 && o->precision == TSR_PRECISION_INT8) {
        s = measure_cpu(co, n->w, n->m);
        if (n_cache < 32) cache[n_cache++] = (__typeof__(cache[0])){n->m, n->n, n->k, s};
      }
      n->est_cpu_s = s > 0 ? s : 0;
      cpu += n->est_cpu_s;
      if (e >= 0) {
        const tsr_exec_dev_t *d = &co->devs[e];
        n->est_dev_s = (double)tsr_km_gemm_cycles(&d->timing, (uint32_t)n->m, (uint32_t)n->n,
                                                  (uint32_t)n->k) / d->timing.clock_hz;
        dev += n->est_dev_s;
      }
    }
    if (e < 0) continue; /* pass 1 already decided: host */
    const tsr_hal_caps_t *caps = &co->devs[e].cd->caps;
    int32_t launches = 1;
    transfer_cost(caps, lead->m, lead->k, ns, cnt, &xfer, &launches);
    dev += caps->launch_latency_s * launches;
    for (int j = 0; j < cnt; j++) {
      tsr_node_t *n = &g->nodes[i + j];
      n->est_xfer_s = xfer / cnt;
      n->est_dev_s += caps->launch_latency_s * launches / cnt;
    }
    const char *dname = co->devs[e].cd->name;
    int place;
    char cause[192];
    switch (o->ctx->opts.offload) {
      case TSR_OFFLOAD_ALL:
        place = e;
        snprintf(cause, sizeof cause, "--offload all");
        break;
      case TSR_OFFLOAD_NONE:
        place = TSR_PLACE_CPU;
        snprintf(cause, sizeof cause, "--offload none");
        break;
      default:
        place = dev + xfer < cpu ? e : TSR_PLACE_CPU;
        snprintf(cause, sizeof cause, "%s: %s %.1f us + transfers %.1f us %s host %.1f us",
                 place >= 0 ? "cost" : "cost", dname, dev * 1e6, xfer * 1e6,
                 place >= 0 ? "<" : ">=", cpu * 1e6);
        break;
    }
    for (int j = 0; j < cnt; j++) {
      tsr_node_t *n = &g->nodes[i + j];
      n->device = place;
      snprintf(n->cause, sizeof n->cause, "%s", cause);
    }
  }

  /* pass 3: user overrides */
  if (o->ctx->opts.placement && *o->ctx->opts.placement)
    TSR_RETURN_IF(apply_overrides(o, g, o->ctx->opts.placement));
  return TSR_OK;
}

void tsr_plan_totals(const tsr_exec_t *o, const tsr_graph_t *g, double *cpu_s,
                     double *xfer_s, double *dev_s) {
  (void)o;
  *cpu_s = *xfer_s = *dev_s = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    if (n->op != TSR_NODE_MATMUL && n->op != TSR_NODE_ATTENTION) continue;
    if (n->device == TSR_PLACE_CPU) {
      *cpu_s += n->est_cpu_s;
    } else {
      *xfer_s += n->est_xfer_s;
      *dev_s += n->est_dev_s;
    }
  }
}

int32_t tsr_tile_rows(const tsr_hal_caps_t *caps, int32_t T) {
  int32_t r = caps->array_rows ? (int32_t)caps->array_rows : 16;
  return T < r ? T : r;
}

int32_t tsr_tile_descs(const int32_t *n, int count, int32_t n_chunk) {
  int32_t d = 0;
  for (int i = 0; i < count; i++) d += (n[i] + n_chunk - 1) / n_chunk;
  return d;
}
