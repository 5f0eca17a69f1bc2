/*
 * plan.c - the partitioner: places the graph's nodes on the host or on a
 * device for one batch size, in explicit passes (ggml's scheduler is the
 * model), recording the cause of every placement in a plan beside the
 * graph (plan.h).
 *
 *   pass 1  capability and split: light ops stay on the host. With
 *           --split layers each layer belongs to one entry of the device
 *           list (contiguous ranges: model parallelism); with --split rows
 *           every layer belongs to all device entries, which share each
 *           batch's rows. A matmul is a candidate for its entry's device if
 *           the engine is int8, the device is open and runs int8 GEMM, K
 *           fits the device, and the device memory holds its weights (the
 *           budget: device memory less staging, less the KV caches of the
 *           sequences it may hold; weights are counted in graph order and
 *           what does not fit stays on the host, with that cause).
 *   pass 2  cost, per group (matmuls that read the same activations, sent
 *           as one upload and one launch): host time = the int8 kernel
 *           measured on this machine for the group's shapes; device time =
 *           the kernel's cycle model at the device's clock for the batch's
 *           rows plus one launch; transfers = per-transfer latency plus
 *           bytes over the link bandwidth, counted as the executor issues
 *           them (activations and ring up, every member's result down in
 *           one read): tsr_proj_group (project.c), which the crossover
 *           benchmark projects with too. With TSR_CPU_PROFILE set the host
 *           time is that fixed profile's instead of a measurement.
 *           With rows split, each device's share is costed and the slowest
 *           counts. The policy decides: all, none, or auto (the faster
 *           side).
 *           int8 attention (--attn) is costed the same way per node: host
 *           time = its int8 GEMMs (tsr_attn_run_host) measured here for the
 *           graph's rows at mid-context; device time = the cycle model of
 *           the descriptors the pattern keeps, two launches; transfers = Q,
 *           P', rings and the KV append up, the partials down. Softmax and
 *           quantization run on the host either way and are not compared.
 *   pass 3  overrides from --place, which win over the cost model (but not
 *           over capability or memory).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"
#include "project.h"

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
  for (int r = 0; r < 5; r++) {
    double t0 = tsr_now_s();
    tsr_qgemm(o->ctx->pool, o->ctx->isa, c, n, a, k, &w->q, m);
    double t = tsr_now_s() - t0;
    if (t < best) best = t;
  }
  free(a);
  free(c);
  return best;
}

/* The int8 attention of one layer as the cost model sees it: one row of one
 * sequence at mid-context (attention runs per sequence, so a batch costs
 * this once per sequence). Fills the host time (measured), device time
 * (cycle model), transfer time and the density. */
static void attn_measure(tsr_exec_t *o, int e, double *cpu, double *dev, double *xfer,
                         double *density) {
  tsr_attn_work_t *w = &o->attn_work;
  const tsr_attn_dims_t *d = &o->attn_dims;
  const int32_t rows = 1;
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
             2 * tsr_hal_ring_latency_s(caps);
      uint64_t a0, c0, a1, c1;
      tsr_attn_phase_bytes(w, 0, &a0, &c0);
      tsr_attn_phase_bytes(w, 1, &a1, &c1);
      double up = (double)(a0 + a1) + 2.0 * w->n_pairs * TSR_HW_DESC_BYTES +
                  2.0 * rows * d->n_kv_heads * d->head_dim;
      /* transfers: A and ring per phase, C per phase, K and V^T per kv head */
      int n_xfer = 6 + 2 * d->n_kv_heads;
      *xfer = tsr_hal_copy_latency_s(caps) * n_xfer +
              (caps->link_bytes_per_s > 0 ? (up + (double)(c0 + c1)) / caps->link_bytes_per_s : 0);
    }
  }
  tsr_attn_cache_free(&c);
  free(q);
}

/* attn_measure on device entry e (-1: the host alone), once per engine:
 * every plan asks the same question. */
static const tsr_attn_cost_t *attn_cost(tsr_exec_t *o, int e) {
  tsr_attn_cost_t *c = &o->attn_costs[e + 1];
  if (!c->measured) {
    attn_measure(o, e, &c->cpu_s, &c->dev_s, &c->xfer_s, &c->density);
    c->measured = true;
  }
  return c;
}

/* Which entry of the device list owns `layer` under --split layers (-1:
 * the classifier, which goes with the last layer). */
static int layer_entry(const tsr_exec_t *o, int32_t layer) {
  /* the layers this process holds (a pipeline rank holds a range) */
  const tsr_model_t *m = o->model;
  const int32_t L = m->layer1 - m->layer0;
  if (L <= 0) return 0;
  if (layer < 0) layer = m->layer1 - 1;
  return (int)((int64_t)(layer - m->layer0) * o->n_devs / L);
}

/* Why device entry e cannot run int8 work, or NULL. */
static const char *entry_unfit(const tsr_exec_t *o, int e, char *buf, size_t cap) {
  const tsr_exec_dev_t *d = &o->devs[e];
  if (d->cd->host) {
    snprintf(buf, cap, "entry %d is the host (cpu)", e);
  } else if (!d->rs.usable) {
    snprintf(buf, cap, "%.30s unavailable: %.100s", d->cd->spec,
             d->cd->unavailable[0] ? d->cd->unavailable : "declared lost");
  } else if (d->cd->caps.flags & TSR_HAL_CAP_NO_COMPUTE) {
    snprintf(buf, cap, "%s computes nothing (%.100s)", d->cd->name, d->cd->caps.name);
  } else if (!(d->cd->caps.ops & (1u << TSR_OP_GEMM_I8_I32))) {
    snprintf(buf, cap, "%s has no int8 GEMM", d->cd->name);
  } else {
    return NULL;
  }
  return buf;
}

/* Applies "--place op=where,..." to the plan. */
static tsr_status_t apply_overrides(tsr_exec_t *o, tsr_plan_t *pl, const bool *capable,
                                    const char *spec) {
  const tsr_graph_t *g = &o->graph;
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
      bool attn = r <= TSR_MM_O, ffn = (r >= TSR_MM_GATE && r <= TSR_MM_DOWN) || r >= TSR_MM_ROUTER;
      roles[r] = !strcmp(op, tsr_mm_role_name((tsr_mm_role_t)r)) || !strcmp(op, "all") ||
                 (attn && !strcmp(op, "attn")) || (ffn && !strcmp(op, "ffn"));
      any |= roles[r];
    }
    /* experts: every expert's matmuls; expertN or expertA-B: those experts' */
    long e_lo = 0, e_hi = LONG_MAX;
    if (!strncmp(op, "expert", 6)) {
      const char *q = op + 6;
      bool ok = !strcmp(q, "s");
      if (!ok && *q >= '0' && *q <= '9') {
        char *e = NULL;
        e_lo = e_hi = strtol(q, &e, 10);
        if (*e == '-' && e[1] >= '0' && e[1] <= '9') e_hi = strtol(e + 1, &e, 10);
        ok = *e == '\0' && e_lo <= e_hi && e_hi < o->model->cfg.n_experts;
        if (!ok)
          return TSR_ERR(OUT_OF_RANGE,
                         "placement item '%s=%s': experts '%s' are not a range inside [0, %d) "
                         "(the model has %d experts)",
                         op, where, q, o->model->cfg.n_experts, o->model->cfg.n_experts);
      }
      if (ok) {
        if (!o->model->cfg.n_experts)
          return TSR_ERR(INVALID_ARGUMENT, "placement item '%s=%s': the model has no experts",
                         op, where);
        roles[TSR_MM_EXP_GATE] = roles[TSR_MM_EXP_UP] = roles[TSR_MM_EXP_DOWN] = any = true;
      }
    }
    if (!any)
      return TSR_ERR(INVALID_ARGUMENT,
                     "placement item '%s=%s': unknown op '%s' (known: attn_q, attn_k, attn_v, "
                     "attn_out, ffn_gate, ffn_up, ffn_down, output, ffn_gate_inp, "
                     "ffn_gate_exps, ffn_up_exps, ffn_down_exps, attn, ffn, attention, "
                     "experts, expertN, expertA-B, all)",
                     op, where, op);
    /* where: cpu, devN, or a device name (its first entry) */
    int dev = -3;
    if (!strcmp(where, "cpu")) dev = TSR_PLACE_CPU;
    else if (!strncmp(where, "dev", 3) && where[3] >= '0' && where[3] <= '9') {
      char *e = NULL;
      long v = strtol(where + 3, &e, 10);
      if (*e == '\0' && v >= 0 && v < o->n_devs) dev = (int)v;
    } else {
      for (int d = 0; d < o->n_devs && dev == -3; d++)
        if (!strcmp(o->devs[d].cd->name, where) || !strcmp(o->devs[d].cd->spec, where)) dev = d;
    }
    if (dev == -3)
      return TSR_ERR(INVALID_ARGUMENT, "placement item '%s=%s': no device '%s' in the list",
                     op, where, where);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const tsr_node_t *n = &g->nodes[i];
      tsr_place_t *pc = &pl->at[i];
      const bool attn_node = n->op == TSR_NODE_ATTENTION && attention;
      if (!attn_node && (n->op != TSR_NODE_MATMUL || !roles[n->role])) continue;
      if (n->expert >= 0 && (n->expert < e_lo || n->expert > e_hi)) continue;
      if (dev == TSR_PLACE_CPU) {
        pc->device = TSR_PLACE_CPU;
        snprintf(pc->cause, sizeof pc->cause, "--place %s=%s", op, where);
        continue;
      }
      char why[160];
      const char *unfit = entry_unfit(o, dev, why, sizeof why);
      if (!unfit && !attn_node && o->precision != TSR_PRECISION_INT8)
        unfit = "only int8 matmuls run on devices";
      if (!unfit && !capable[(size_t)i * o->n_devs + dev])
        unfit = "the node does not fit that device (size or memory)";
      if (unfit) {
        snprintf(pc->cause, sizeof pc->cause, "--place %.20s=%.20s, but %.120s: host", op, where,
                 unfit);
        pc->device = TSR_PLACE_CPU;
        continue;
      }
      pc->device = dev;
      snprintf(pc->cause, sizeof pc->cause, "--place %s=%s", op, where);
    }
    p = end ? end + 1 : p + len;
  }
  return TSR_OK;
}

/* Bytes of device memory the engine's staging takes on each device. */
static uint64_t staging_bytes(const tsr_exec_dev_t *d) { return d->a_cap + d->c_cap + d->ring_cap; }


/* Rows a matmul group runs on in a batch of `rows`: all of them, or for an
 * expert its expected share: rows * experts_used * its fraction of the
 * rows routed in that layer lately (expert_recent; uniform before any
 * routing), rounded up. */
static int32_t group_rows(const tsr_exec_t *o, const tsr_node_t *n, int32_t rows) {
  const tsr_model_config_t *c = &o->model->cfg;
  if (n->expert < 0 || !c->n_experts) return rows;
  double share = 1.0 / c->n_experts;
  if (o->expert_recent) {
    double all = 0;
    const double *er = o->expert_recent + (size_t)n->layer * (size_t)c->n_experts;
    for (int32_t e = 0; e < c->n_experts; e++) all += er[e];
    if (all > 0) share = er[n->expert] / all;
  }
  const double want = ceil((double)rows * c->n_experts_used * share);
  return want < 1 ? 1 : want > rows ? rows : (int32_t)want;
}

tsr_status_t tsr_plan_build(tsr_exec_t *o, int32_t rows, tsr_plan_t *out) {
  const tsr_graph_t *g = &o->graph;
  memset(out, 0, sizeof *out);
  out->rows = rows;
  out->at = calloc((size_t)g->n_nodes, sizeof(tsr_place_t));
  /* capable[node * n_devs + dev]: the node could run on the device */
  bool *capable = calloc((size_t)g->n_nodes * (size_t)(o->n_devs ? o->n_devs : 1), 1);
  uint64_t *budget = calloc((size_t)(o->n_devs ? o->n_devs : 1), sizeof(uint64_t));
  if (!out->at || !capable || !budget) {
    free(capable);
    free(budget);
    tsr_plan_free(out);
    return TSR_ERR(RESOURCE_EXHAUSTED, "plan: %d nodes", g->n_nodes);
  }
  const bool rows_split = o->split == TSR_SPLIT_ROWS;
  const bool attn8 = o->attn.kind != TSR_ATTN_REFERENCE;
  /* Memory budget per device: what is left after staging and room for the
   * KV caches of a few sequences in every layer it may run attention for. */
  const uint64_t kv_seq = attn8 ? tsr_attn_kv_bytes(&o->attn_dims) : 0;
  for (int e = 0; e < o->n_devs; e++) {
    const tsr_exec_dev_t *d = &o->devs[e];
    if (!d->rs.usable) continue;
    uint64_t mem = d->sub ? d->window.size : d->cd->caps.mem_size, need = staging_bytes(d);
    const tsr_model_t *m = o->model;
    int32_t layers = rows_split ? m->layer1 - m->layer0 : 0;
    for (int32_t l = m->layer0; !rows_split && l < m->layer1; l++) layers += layer_entry(o, l) == e;
    need += kv_seq * (uint64_t)layers * TSR_PLAN_KV_RESERVE_SEQS;
    budget[e] = mem > need ? mem - need : 0;
  }

  /* pass 1: capability, split and memory */
  char why[160];
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    tsr_place_t *pc = &out->at[i];
    pc->device = TSR_PLACE_CPU;
    const bool mm = n->op == TSR_NODE_MATMUL, at = n->op == TSR_NODE_ATTENTION && attn8;
    if (!mm && !at) {
      snprintf(pc->cause, sizeof pc->cause, "light op: runs on the host");
      continue;
    }
    if (mm && o->precision != TSR_PRECISION_INT8) {
      snprintf(pc->cause, sizeof pc->cause, "%s precision: devices run int8 only",
               tsr_precision_name(o->precision));
      continue;
    }
    /* the entries this node may use */
    int cand = 0, first_ok = -1;
    pc->cause[0] = '\0';
    /* Under a layer split an expert may go to any device: its layer's entry
     * first, then the next ones (its weights counted where it is placed by
     * default); the others are there for --place. */
    const bool any_entry = !rows_split && n->expert >= 0;
    for (int j = 0; j < o->n_devs; j++) {
      const int e = any_entry ? (layer_entry(o, n->layer) + j) % o->n_devs : j;
      if (!rows_split && !any_entry && layer_entry(o, n->layer) != e) continue;
      const tsr_exec_dev_t *d = &o->devs[e];
      const char *unfit = entry_unfit(o, e, why, sizeof why);
      char lim[96];
      if (!unfit && mm && (uint32_t)n->k > d->cd->caps.max_dim) {
        snprintf(lim, sizeof lim, "K=%d exceeds %s's limit %u", n->k, d->cd->name,
                 d->cd->caps.max_dim);
        unfit = lim;
      }
      if (!unfit && at && ((uint32_t)o->attn_dims.head_dim > d->cd->caps.max_dim ||
                           (uint32_t)o->attn.block > d->cd->caps.max_dim)) {
        snprintf(lim, sizeof lim, "head_dim %d or block %d exceeds %s's limit %u",
                 o->attn_dims.head_dim, o->attn.block, d->cd->name, d->cd->caps.max_dim);
        unfit = lim;
      }
      if (!unfit && mm) {
        /* as the allocator rounds it */
        const uint64_t wb = (tsr_tile_w_bytes(n->n, n->k, tsr_tile_w_channels(&d->cd->caps)) +
                             TSR_DEVMEM_MIN_ALIGN - 1) & ~(uint64_t)(TSR_DEVMEM_MIN_ALIGN - 1);
        if (wb > budget[e]) {
          snprintf(lim, sizeof lim, "weights do not fit on %s (%.1f MiB, %.1f MiB left)",
                   d->cd->name, (double)wb / 1048576.0, (double)budget[e] / 1048576.0);
          unfit = lim;
        } else if (!any_entry || first_ok < 0) {
          budget[e] -= wb;
        }
      }
      if (unfit) {
        if (d->cd->host && !rows_split)
          snprintf(pc->cause, sizeof pc->cause, "layer split: this layer belongs to entry %d "
                                                "(cpu)", e);
        else if (!pc->cause[0] || !rows_split)
          snprintf(pc->cause, sizeof pc->cause, "%.180s", unfit);
        continue;
      }
      capable[(size_t)i * o->n_devs + e] = true;
      cand++;
      if (first_ok < 0) first_ok = e;
    }
    if (!cand) continue;
    pc->device = rows_split ? TSR_PLACE_ROWS : first_ok; /* candidate, decided in pass 2 */
    if (rows_split)
      for (int e = 0; e < o->n_devs && e < 64; e++)
        if (o->devs[e].cd->host || capable[(size_t)i * o->n_devs + e]) pc->rows_mask |= 1ull << e;
  }

  /* pass 2: cost model per group, then the policy. The host side is only
   * measured when some device could take work (or taken from a fixed CPU
   * profile, TSR_CPU_PROFILE). */
  tsr_cpu_profile_t cpu_prof;
  bool cpu_fixed = false;
  tsr_status_t ps = tsr_proj_cpu_profile_env(&cpu_prof, &cpu_fixed);
  if (ps) {
    free(capable);
    free(budget);
    tsr_plan_free(out);
    return ps;
  }
  struct { int32_t m, n, k; double s; } cache[32];
  int n_cache = 0;
  for (int32_t i = 0; attn8 && i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    tsr_place_t *pc = &out->at[i];
    if (n->op != TSR_NODE_ATTENTION) continue;
    /* attention runs per sequence: a decode batch of `rows` sequences is
     * `rows` one-row calls; costed as one call of one row each, times rows,
     * at the first capable device (rows split: each sequence has one) */
    int e = pc->device == TSR_PLACE_ROWS ? -1 : pc->device;
    for (int d = 0; e < 0 && pc->device == TSR_PLACE_ROWS && d < o->n_devs; d++)
      if (capable[(size_t)i * o->n_devs + d]) e = d;
    const tsr_attn_cost_t *ac = attn_cost(o, e);
    const double a_cpu = ac->cpu_s, a_dev = ac->dev_s, a_xfer = ac->xfer_s,
                 a_dens = ac->density;
    pc->est_cpu_s = a_cpu * rows;
    if (pc->device == TSR_PLACE_CPU) {
      snprintf(pc->cause + strlen(pc->cause), sizeof pc->cause - strlen(pc->cause),
               "; density %.0f%%", 100 * a_dens);
      continue;
    }
    pc->est_dev_s = a_dev * rows;
    pc->est_xfer_s = a_xfer * rows;
    const char *dname = o->devs[e].cd->name;
    switch (o->ctx->opts.offload) {
      case TSR_OFFLOAD_ALL:
        snprintf(pc->cause, sizeof pc->cause, "--offload all; density %.0f%%", 100 * a_dens);
        break;
      case TSR_OFFLOAD_NONE:
        pc->device = TSR_PLACE_CPU;
        snprintf(pc->cause, sizeof pc->cause, "--offload none; density %.0f%%", 100 * a_dens);
        break;
      default:
        if (!(a_dev + a_xfer < a_cpu)) pc->device = TSR_PLACE_CPU;
        snprintf(pc->cause, sizeof pc->cause,
                 "cost: %s %.1f us + transfers %.1f us %s host %.1f us per sequence (int8 "
                 "GEMMs at mid-context, density %.0f%%)",
                 dname, a_dev * 1e6, a_xfer * 1e6, pc->device != TSR_PLACE_CPU ? "<" : ">=",
                 a_cpu * 1e6, 100 * a_dens);
        break;
    }
  }

  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *lead = &g->nodes[i];
    if (lead->op != TSR_NODE_MATMUL || lead->group != i) continue;
    const int cnt = lead->group_size;
    const int place0 = out->at[i].device;
    if (place0 == TSR_PLACE_CPU) continue; /* pass 1 already decided: host */
    const int32_t grows = group_rows(o, lead, rows); /* an expert: its expected share */
    double cpu = 0, dev = 0, xfer = 0;
    int32_t ns[8];
    for (int j = 0; j < cnt; j++) {
      const tsr_node_t *n = &g->nodes[i + j];
      ns[j] = n->n;
      double t = -1;
      for (int c = 0; c < n_cache; c++)
        if (cache[c].m == grows && cache[c].n == n->n && cache[c].k == n->k) t = cache[c].s;
      if (t < 0) {
        t = cpu_fixed ? tsr_proj_cpu_matmul_s(&cpu_prof, grows, n->n, n->k)
                      : measure_cpu(o, n->w, grows);
        if (n_cache < 32) cache[n_cache++] = (__typeof__(cache[0])){grows, n->n, n->k, t};
      }
      out->at[i + j].est_cpu_s = t;
      cpu += t;
    }
    /* the devices and their shares of the rows */
    int devs[64], nd = 0;
    if (place0 == TSR_PLACE_ROWS) {
      for (int e = 0; e < o->n_devs && nd < 64; e++)
        if (out->at[i].rows_mask >> e & 1) devs[nd++] = e;
    } else {
      devs[nd++] = place0;
    }
    double worst = 0, worst_x = 0, host_share = 0;
    char dname[64] = "";
    for (int x = 0; x < nd; x++) {
      const int32_t m = tsr_rows_share(grows, nd, x + 1) - tsr_rows_share(grows, nd, x);
      if (m <= 0) continue;
      const tsr_exec_dev_t *d = &o->devs[devs[x]];
      if (d->cd->host || !capable[(size_t)i * o->n_devs + devs[x]]) {
        host_share += cpu * m / grows;
        continue;
      }
      /* weights this device would store block-sparse are priced so */
      double dens[8];
      bool any_bsr = false;
      for (int j = 0; j < cnt; j++) {
        dens[j] = -1;
        if (d->cd->caps.ops >> TSR_OP_GEMM_BSR_I8_I32 & 1) {
          const double dj = tsr_exec_bsr_density(o, i + j);
          if (tsr_tile_bsr_wanted(&d->cd->caps, dj)) dens[j] = dj, any_bsr = true;
        }
      }
      double t = 0, tx = 0;
      tsr_proj_group(&d->cd->caps, &d->timing, m, lead->k, ns, any_bsr ? dens : NULL, cnt, &t,
                     &tx);
      if (t + tx > worst + worst_x) {
        worst = t;
        worst_x = tx;
      }
      if (!dname[0]) snprintf(dname, sizeof dname, "%s", d->cd->name);
      else if (nd > 1 && strlen(dname) < 40) strcat(dname, "+");
    }
    if (host_share > worst + worst_x) { /* the host's share is the critical path */
      worst = host_share;
      worst_x = 0;
    }
    dev = worst;
    xfer = worst_x;
    for (int j = 0; j < cnt; j++) {
      tsr_place_t *pc = &out->at[i + j];
      pc->est_xfer_s = xfer / cnt;
      pc->est_dev_s = dev / cnt;
    }
    int place;
    char cause[192];
    switch (o->ctx->opts.offload) {
      case TSR_OFFLOAD_ALL:
        place = place0;
        snprintf(cause, sizeof cause, "--offload all%s", place0 == TSR_PLACE_ROWS ?
                 "; rows split across the devices" : "");
        break;
      case TSR_OFFLOAD_NONE:
        place = TSR_PLACE_CPU;
        snprintf(cause, sizeof cause, "--offload none");
        break;
      default:
        place = dev + xfer < cpu ? place0 : TSR_PLACE_CPU;
        snprintf(cause, sizeof cause, "cost: %s %.1f us + transfers %.1f us %s host %.1f us%s",
                 dname, dev * 1e6, xfer * 1e6, place != TSR_PLACE_CPU ? "<" : ">=", cpu * 1e6,
                 cpu_fixed ? " (CPU profile)" : "");
        break;
    }
    for (int j = 0; j < cnt; j++) {
      tsr_place_t *pc = &out->at[i + j];
      pc->device = place;
      pc->rows_mask = out->at[i].rows_mask;
      snprintf(pc->cause, sizeof pc->cause, "%s", cause);
    }
  }

  /* pass 3: user overrides */
  tsr_status_t st = TSR_OK;
  if (o->ctx->opts.placement && *o->ctx->opts.placement)
    st = apply_overrides(o, out, capable, o->ctx->opts.placement);
  free(capable);
  free(budget);
  if (st) tsr_plan_free(out);
  return st;
}

void tsr_plan_free(tsr_plan_t *p) {
  if (!p) return;
  free(p->at);
  memset(p, 0, sizeof *p);
}

void tsr_plan_totals(const tsr_plan_t *p, const tsr_graph_t *g, double *cpu_s,
                     double *xfer_s, double *dev_s) {
  *cpu_s = *xfer_s = *dev_s = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    const tsr_place_t *pc = &p->at[i];
    if (n->op != TSR_NODE_MATMUL && n->op != TSR_NODE_ATTENTION) continue;
    if (pc->device == TSR_PLACE_CPU) {
      *cpu_s += pc->est_cpu_s;
    } else {
      *xfer_s += pc->est_xfer_s;
      *dev_s += pc->est_dev_s;
    }
  }
}
