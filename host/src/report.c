/*
 * report.c - what `tessera plan` and `--stats` print: the placement of the
 * session's graph with causes and the modeled time split, and what actually
 * ran where. Device time is always cycles at the device's stated clock; the
 * host wall time spent waiting for a simulated device is printed apart and
 * labelled as simulation time.
 */
#include <inttypes.h>
#include <string.h>

#include "dist.h"
#include "offload.h"

static const char *place_name(const tsr_exec_t *o, const tsr_place_t *pc, char *buf,
                              size_t cap) {
  if (pc->device == TSR_PLACE_CPU) return "cpu";
  if (pc->device >= 0) return o->devs[pc->device].cd->name;
  size_t len = 0;
  buf[0] = '\0';
  for (int e = 0; e < o->n_devs && e < TSR_MAX_ROW_DEVICES; e++)
    if (pc->rows_mask >> e & 1)
      len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s%s", len ? "+" : "",
                              o->devs[e].cd->name);
  return buf;
}

static void print_plan_table(const tsr_exec_t *o, const tsr_plan_t *p, FILE *f) {
  const tsr_graph_t *g = &o->graph;
  const int32_t T = p->rows;
  fprintf(f, "\nbatch of %d row%s per evaluation: matmul placement\n", T, T == 1 ? "" : "s");
  fprintf(f, "  %5s %-9s %-18s %-7s %10s %10s %10s  %s\n", "layer", "op", "m x n x k", "place",
          "host us", "device us", "xfer us", "cause");
  int light = 0;
  const bool attn8 = o->attn.kind != TSR_ATTN_REFERENCE;
  char names[128];
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    const tsr_place_t *pc = &p->at[i];
    if (n->op == TSR_NODE_ATTENTION && attn8) {
      char shape[40];
      snprintf(shape, sizeof shape, "%dx(ctx)x%d B%d", T, o->attn_dims.head_dim, o->attn.block);
      fprintf(f, "  %5d %-9s %-18s %-7s %10.1f %10.1f %10.1f  %s\n", n->layer, "attention",
              shape, place_name(o, pc, names, sizeof names), pc->est_cpu_s * 1e6,
              pc->est_dev_s * 1e6, pc->est_xfer_s * 1e6, pc->cause);
      continue;
    }
    if (n->op != TSR_NODE_MATMUL) {
      light++;
      continue;
    }
    char shape[40];
    snprintf(shape, sizeof shape, "%dx%dx%d", T, n->n, n->k);
    char layer[24];
    if (n->layer < 0) snprintf(layer, sizeof layer, "-");
    else if (n->expert >= 0) snprintf(layer, sizeof layer, "%d:e%d", n->layer, n->expert);
    else snprintf(layer, sizeof layer, "%d", n->layer);
    fprintf(f, "  %5s %-9s %-18s %-7s %10.1f %10.1f %10.1f  %s\n", layer,
            tsr_mm_role_name(n->role), shape, place_name(o, pc, names, sizeof names),
            pc->est_cpu_s * 1e6, pc->est_dev_s * 1e6, pc->est_xfer_s * 1e6, pc->cause);
  }
  double cpu, xfer, dev;
  tsr_plan_totals(p, g, &cpu, &xfer, &dev);
  fprintf(f, "  + %d light ops (embedding, norms, RoPE, KV append, %sSwiGLU, residuals) on the "
             "host\n", light, attn8 ? "" : "attention, ");
  fprintf(f, "  projected per evaluation: host matmuls %.1f us, transfers %.1f us, device %.1f us "
             "(light ops not modeled; see --stats for measured time)\n",
          cpu * 1e6, xfer * 1e6, dev * 1e6);
}

/* One line per planned batch size: how much goes to the devices and the
 * modeled time per row, so where the devices start to pay. */
static void print_plan_summary(const tsr_exec_t *o, FILE *f) {
  const tsr_graph_t *g = &o->graph;
  fprintf(f, "\nby batch size (rows per evaluation; the executor uses the smallest planned "
             "size >= the batch):\n");
  fprintf(f, "  %6s %12s %14s %14s %14s %12s\n", "rows", "on devices", "host us/row",
          "device us/row", "xfer us/row", "modeled/row");
  for (int i = 0; i < o->n_plans; i++) {
    const tsr_plan_t *p = &o->plans[i];
    int on = 0, all = 0;
    for (int32_t j = 0; j < g->n_nodes; j++) {
      const tsr_node_t *n = &g->nodes[j];
      if (n->op != TSR_NODE_MATMUL && !(n->op == TSR_NODE_ATTENTION &&
                                        o->attn.kind != TSR_ATTN_REFERENCE))
        continue;
      all++;
      on += p->at[j].device != TSR_PLACE_CPU;
    }
    double cpu, xfer, dev;
    tsr_plan_totals(p, g, &cpu, &xfer, &dev);
    const double r = p->rows;
    char frac[32];
    snprintf(frac, sizeof frac, "%d of %d", on, all);
    fprintf(f, "  %6d %12s %14.2f %14.2f %14.2f %12.2f\n", p->rows, frac, cpu * 1e6 / r,
            dev * 1e6 / r, xfer * 1e6 / r, (cpu + dev + xfer) * 1e6 / r);
  }
}

void tsr_exec_print_plan(const tsr_exec_t *o, FILE *f) {
  fprintf(f, "devices (%s split across the entries):\n",
          o->split == TSR_SPLIT_ROWS ? "each batch's rows" : "layers, in order,");
  for (int i = 0; i < o->n_devs; i++) {
    const tsr_ctx_device_t *cd = o->devs[i].cd;
    if (cd->host) {
      fprintf(f, "  dev%d %-7s the host CPU\n", i, cd->name);
    } else if (!cd->hal) {
      fprintf(f, "  dev%d %-7s unavailable: %s\n", i, cd->name, cd->unavailable);
    } else {
      const tsr_hal_caps_t *c = &cd->caps;
      fprintf(f, "  dev%d %-7s %s: %ux%u MACs at %.0f MHz, %u x %.0f B/cycle memory, link %.1f "
                 "GB/s + %.1f us%s, launch %.0f us%s; board %s\n",
              i, cd->name, c->name, c->array_rows, c->array_cols, c->clock_hz / 1e6,
              c->mem_ports ? c->mem_ports : 1, c->mem_bytes_per_cycle, c->link_bytes_per_s / 1e9,
              tsr_hal_copy_latency_s(c) * 1e6,
              (c->flags & TSR_HAL_CAP_HOST_MEM) ? " (host memory)" : "",
              c->launch_latency_s * 1e6,
              (c->flags & TSR_HAL_CAP_QUEUE) ? ", queue mode (a doorbell per ring)" : "",
              c->board[0] ? c->board : "none (the backend's own figures)");
    }
  }
  fprintf(f, "precision %s, offload policy %s%s%s, up to %d rows per evaluation\n",
          tsr_precision_name(o->precision),
          o->ctx->opts.offload == TSR_OFFLOAD_ALL    ? "all"
          : o->ctx->opts.offload == TSR_OFFLOAD_NONE ? "none"
                                                     : "auto",
          o->ctx->opts.placement ? ", overrides " : "",
          o->ctx->opts.placement ? o->ctx->opts.placement : "", o->max_rows);
  if (o->weight_bytes)
    fprintf(f, "weights resident on devices: %.2f MiB\n", (double)o->weight_bytes / 1048576.0);
  if (o->attn.kind != TSR_ATTN_REFERENCE) {
    char pat[96];
    tsr_attn_pattern_format(&o->attn, pat, sizeof pat);
    fprintf(f, "attention: int8 block-sparse, pattern %s (sizes in blocks of %d keys), KV "
               "cache of %d positions per sequence (%.2f MiB per sequence and layer on a "
               "device)\n",
            pat, o->attn.block, o->attn_dims.max_seq,
            (double)tsr_attn_kv_bytes(&o->attn_dims) / 1048576.0);
  }
  print_plan_table(o, &o->plans[0], f);
  if (o->n_plans > 1) print_plan_table(o, &o->plans[o->n_plans - 1], f);
  print_plan_summary(o, f);
}

void tsr_exec_print_graph(const tsr_exec_t *o, FILE *f) {
  const tsr_graph_t *g = &o->graph;
  for (int p = 0; p < o->n_plans; p += o->n_plans - 1 > 0 ? o->n_plans - 1 : 1) {
    const tsr_plan_t *pl = &o->plans[p];
    fprintf(f, "graph: %d nodes, placed for batches of %d row%s\n", g->n_nodes, pl->rows,
            pl->rows == 1 ? "" : "s");
    fprintf(f, "%4s  %-10s %-8s %5s  %-14s %-16s %-8s  %s\n", "node", "op", "name", "layer",
            "in -> out", "shape (m,n,k)", "place", "cause");
    char names[128];
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const tsr_node_t *n = &g->nodes[i];
      char io[32], shape[32] = "";
      snprintf(io, sizeof io, "%s -> %s", tsr_tensor_name(n->in), tsr_tensor_name(n->out));
      if (n->op == TSR_NODE_MATMUL)
        snprintf(shape, sizeof shape, "%d,%d,%d", pl->rows, n->n, n->k);
      fprintf(f, "%4d  %-10s %-8s %5d  %-14s %-16s %-8s  %s\n", i, tsr_node_op_name(n->op),
              n->op == TSR_NODE_MATMUL ? tsr_mm_role_name(n->role) : "", n->layer, io, shape,
              place_name(o, &pl->at[i], names, sizeof names), pl->at[i].cause);
    }
    if (o->n_plans == 1) break;
  }
}

/* The time device d's work would take on its board (see
 * tsr_session_stats_t.board_projected_s); parts returned separately. */
static double board_time(const tsr_exec_dev_t *d, double *cycles_s, double *launch_s,
                         double *link_s) {
  const tsr_hal_caps_t *c = &d->cd->caps;
  *cycles_s = d->timing.clock_hz > 0 ? (double)d->cycles / d->timing.clock_hz : 0;
  /* launches queued ahead (ap_ctrl_chain): the part of each launch's
   * latency that the host's work before it covers does not add */
  *launch_s = (double)d->launches * c->launch_latency_s - d->launch_hidden_s;
  if (*launch_s < 0) *launch_s = 0;
  /* queue mode: each ring costs a doorbell instead; it follows the host
   * work that writes its input, so nothing hides it */
  *launch_s += (double)d->doorbells * c->doorbell_latency_s;
  *link_s = (double)d->xfers * tsr_hal_copy_latency_s(c) +
            (c->link_bytes_per_s > 0 ? (double)d->xfer_bytes / c->link_bytes_per_s : 0);
  /* the runtime's own host work around the launches counts; the time inside
   * the backend's copy and submit calls does not: on the board the copies are
   * the link model's, and a model or simulator's copies are not a board's */
  const double runtime_s = d->host_overhead_s - d->hal_s;
  return *cycles_s + *launch_s + *link_s + (runtime_s > 0 ? runtime_s : 0);
}

void tsr_exec_get_stats(const tsr_exec_t *o, tsr_session_stats_t *out) {
  memset(out, 0, sizeof(*out));
  for (int r = 0; r < TSR_MM_COUNT; r++) {
    const tsr_role_stats_t *s = &o->roles[r];
    out->bytes_to_device += s->bytes_up;
    out->bytes_from_device += s->bytes_down;
    out->fallbacks += s->fallbacks;
    out->cpu_s += s->host_s;
  }
  for (int i = 0; i < TSR_NODE_OP_COUNT; i++) out->light_s += o->light_s[i];
  out->cpu_s += out->light_s;
  for (int i = 0; i < o->n_devs; i++) {
    const tsr_exec_dev_t *d = &o->devs[i];
    out->device_calls += d->launches;
    out->device_tiles += d->tiles;
    out->device_cycles += d->cycles;
    if (d->timing.clock_hz > 0) out->device_projected_s += (double)d->cycles / d->timing.clock_hz;
    if (d->cd->hal) {
      double cyc, launch, link;
      out->board_projected_s += board_time(d, &cyc, &launch, &link);
    }
    out->retries += d->rs.retries;
  }
  out->weight_bytes = o->weight_bytes;
  const tsr_attn_stats_t *a = &o->attn_stats;
  out->bytes_to_device += a->bytes_up;
  out->bytes_from_device += a->bytes_down;
  out->fallbacks += a->fallbacks;
  out->attn_blocks = a->pairs;
  out->attn_dense_blocks = a->dense_pairs;
  out->attn_kv_bytes = a->kv_bytes;
  out->attn_rows = a->rows;
}

/* Mixture of experts: per layer, the rows routed to each expert and where
 * its matmuls are placed (the plan of the largest batch). */
static void print_experts(const tsr_exec_t *o, FILE *f) {
  const tsr_model_config_t *c = &o->model->cfg;
  if (!c->n_experts || !o->expert_rows || !o->n_plans) return;
  const tsr_graph_t *g = &o->graph;
  const tsr_plan_t *p = &o->plans[o->n_plans - 1];
  fprintf(f, "experts: rows routed (%d of %d per row) and placement per layer (the plans "
             "rebuilt %" PRIu64 " times from the experts' recent popularity)\n",
          c->n_experts_used, c->n_experts, o->moe_replans);
  for (int32_t l = o->model->layer0; l < o->model->layer1; l++) {
    fprintf(f, "  layer %d:", l);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const tsr_node_t *n = &g->nodes[i];
      if (n->layer != l || n->op != TSR_NODE_MATMUL || n->role != TSR_MM_EXP_GATE) continue;
      char names[128];
      fprintf(f, " %d:%" PRIu64 "@%s", n->expert,
              o->expert_rows[(size_t)l * (size_t)c->n_experts + (size_t)n->expert],
              place_name(o, &p->at[i], names, sizeof names));
    }
    fputc('\n', f);
  }
}

void tsr_exec_print_stats(const tsr_exec_t *o, FILE *f) {
  fprintf(f, "\nstats: per op (all layers together), %" PRIu64 " evaluations of %.1f rows on "
             "average\n", o->passes, o->passes ? (double)o->pass_rows / (double)o->passes : 0.0);
  fprintf(f, "  %-9s %7s %7s %8s %11s %11s %12s %12s %10s %10s %6s\n", "op", "calls", "on dev",
          "tiles", "bytes up", "bytes down", "dev cycles", "model cyc", "dev ms*", "host ms",
          "fallbk");
  for (int r = 0; r < TSR_MM_COUNT; r++) {
    const tsr_role_stats_t *s = &o->roles[r];
    if (!s->calls) continue;
    fprintf(f, "  %-9s %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %11" PRIu64 " %11" PRIu64
               " %12" PRIu64 " %12.0f %10.3f %10.3f %6" PRIu64 "\n",
            tsr_mm_role_name((tsr_mm_role_t)r), s->calls, s->device_calls, s->tiles, s->bytes_up,
            s->bytes_down, s->cycles, s->model_cycles, s->proj_s * 1e3, s->host_s * 1e3,
            s->fallbacks);
  }
  const tsr_attn_stats_t *a = &o->attn_stats;
  if (a->calls)
    fprintf(f, "  %-9s %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %11" PRIu64 " %11" PRIu64
               " %12" PRIu64 " %12.0f %10.3f %10.3f %6" PRIu64 "\n",
            "attention", a->calls, a->device_calls, a->descs, a->bytes_up, a->bytes_down,
            a->cycles, a->model_cycles, a->proj_s * 1e3, o->light_s[TSR_NODE_ATTENTION] * 1e3,
            a->fallbacks);
  for (int op = 0; op < TSR_NODE_OP_COUNT; op++) {
    if (!o->light_calls[op] || op == TSR_NODE_MATMUL) continue;
    if (op == TSR_NODE_ATTENTION && a->calls) continue;
    fprintf(f, "  %-9s %7" PRIu64 " %7s %8s %11s %11s %12s %12s %10s %10.3f\n",
            tsr_node_op_name((tsr_node_op_t)op), o->light_calls[op], "-", "-", "-", "-", "-", "-",
            "-", o->light_s[op] * 1e3);
  }
  fprintf(f, "  * dev ms: device cycles at the device's stated clock (projected hardware time)\n");
  print_experts(o, f);
  if (a->calls) {
    char pat[96];
    tsr_attn_pattern_format(&o->attn, pat, sizeof pat);
    const double tokens = (double)a->rows / (double)(o->model->layer1 - o->model->layer0);
    fprintf(f, "attention %s: %" PRIu64 " of %" PRIu64 " causal block pairs computed "
               "(density %.1f%%), %" PRIu64 " skipped; KV read %" PRIu64 " B = %.0f B per "
               "token (all layers), %.0f per token and layer\n",
            pat, a->pairs, a->dense_pairs,
            a->dense_pairs ? 100.0 * (double)a->pairs / (double)a->dense_pairs : 0.0,
            a->dense_pairs - a->pairs, a->kv_bytes, tokens > 0 ? (double)a->kv_bytes / tokens : 0,
            a->rows ? (double)a->kv_bytes / (double)a->rows : 0.0);
  }
  for (int i = 0; i < o->n_devs; i++) {
    const tsr_exec_dev_t *d = &o->devs[i];
    if (!d->cd->hal) continue;
    double proj = d->timing.clock_hz > 0 ? (double)d->cycles / d->timing.clock_hz : 0;
    fprintf(f, "device %s (%s): %" PRIu64 " launches, %" PRIu64 " tiles, %" PRIu64
               " cycles = %.3f ms at %.0f MHz; retries %" PRIu64 ", resets %" PRIu64
               ", tiles fallen back %" PRIu64 "%s\n",
            d->cd->name, d->cd->caps.name, d->launches, d->tiles, d->cycles, proj * 1e3,
            d->timing.clock_hz / 1e6, d->rs.retries, d->rs.resets, d->rs.fallbacks,
            d->rs.usable ? "" : " (lost: its work moved to the CPU)");
    const tsr_hal_caps_t *c = &d->cd->caps;
    double cyc_s, launch_s, link_s;
    (void)board_time(d, &cyc_s, &launch_s, &link_s);
    fprintf(f, "  projected on the board: device %.3f ms (cycles) + launches %.3f ms (%" PRIu64
               " x %.0f us, less %.3f ms hidden behind the host's work before them: queued "
               "ahead, ap_ctrl_chain",
            cyc_s * 1e3, launch_s * 1e3, d->launches, c->launch_latency_s * 1e6,
            d->launch_hidden_s * 1e3);
    if (d->doorbells)
      fprintf(f, "; and %" PRIu64 " doorbells x %.1f us", d->doorbells,
              c->doorbell_latency_s * 1e6);
    fprintf(f, ") + transfers %.3f ms (%" PRIu64 " copies, %" PRIu64
               " bytes, at %.1f GB/s + %.1f us each%s)\n",
            link_s * 1e3, d->xfers, d->xfer_bytes, c->link_bytes_per_s / 1e9,
            tsr_hal_copy_latency_s(c) * 1e6,
            (c->flags & TSR_HAL_CAP_HOST_MEM) ? ": host memory the kernel reaches" : "");
    if (d->doorbells && o->passes)
      fprintf(f, "  queue mode: %" PRIu64 " rings on %" PRIu64 " queue launch(es), %.2f rings "
                 "per evaluation\n",
              d->doorbells, d->launches, (double)d->doorbells / (double)o->passes);
    const int32_t layers = o->model->layer1 - o->model->layer0;
    if (o->passes && layers > 0)
      fprintf(f, "  launches: %.2f per evaluation, %.2f per evaluation and layer (%d layers; a "
                 "decode evaluation is one token per sequence), %.3f per row evaluated\n",
              (double)d->launches / (double)o->passes,
              (double)d->launches / (double)o->passes / layers, layers,
              o->pass_rows ? (double)d->launches / (double)o->pass_rows : 0.0);
    /* rings: launches of their own, and those a queue ran */
    const uint64_t rings = d->launches - d->q_opens + d->doorbells;
    const double per = rings ? 1e6 / (double)rings : 0.0;
    fprintf(f, "  host wall time waiting for it: %.3f ms%s\n", d->wait_wall_s * 1e3,
            strncmp(d->cd->spec, "sim", 3) ? "" : " (simulation time, not hardware time)");
    fprintf(f, "  host cost around its rings: %.3f ms, %.2f us per ring: runtime %.2f us "
               "(descriptors, bookkeeping, dequantization) + backend copies/submit %.2f us; "
               "%" PRIu64 " matmul rows, %.1f per ring\n",
            d->host_overhead_s * 1e3, d->host_overhead_s * per,
            (d->host_overhead_s - d->hal_s) * per, d->hal_s * per, d->rows,
            rings ? (double)d->rows / (double)rings : 0.0);
    fprintf(f, "  device memory read by its launches: %" PRIu64 " bytes (BYTES_RD)\n",
            d->bytes_rd);
    if (d->rings.size)
      fprintf(f, "  resident rings: %" PRIu64 " matmul launches found their ring in device "
                 "memory, %" PRIu64 " uploaded it (%" PRIu64 " of %" PRIu64 " arena bytes in "
                 "use)\n",
              d->ring_hits, d->ring_uploads, d->rings_used, d->rings_cap);
    if (d->bsr_mats)
      fprintf(f, "  block-sparse weights: %u matrices stored for GEMM_BSR (%" PRIu64 " of %" PRIu64
                 " tiles of %d rows, %.1f %%), %" PRIu64 " GEMM_BSR descriptors run\n",
              d->bsr_mats, d->bsr_stored, d->bsr_total, TSR_HW_BSR_BN,
              d->bsr_total ? 100.0 * (double)d->bsr_stored / (double)d->bsr_total : 0.0,
              d->bsr_descs);
    if (d->cd->hal->vt->print_stats) d->cd->hal->vt->print_stats(d->cd->hal, f);
  }
  tsr_session_stats_t t;
  tsr_exec_get_stats(o, &t);
  fprintf(f, "totals: host ops %.3f ms, device %.3f ms projected (%" PRIu64 " cycles), %" PRIu64
             " B to devices, %" PRIu64 " B from devices, %" PRIu64 " B of weights resident, %"
             PRIu64 " fallbacks, %" PRIu64 " retries\n",
          t.cpu_s * 1e3, t.device_projected_s * 1e3, t.device_cycles, t.bytes_to_device,
          t.bytes_from_device, t.weight_bytes, t.fallbacks, t.retries);
  tsr_dist_print_stats(o, f);
}
