/*
 * offload.h - partitioning the graph across the host and the devices, and
 * executing the device part as streamed tiles.
 *
 * Internal header. One tsr_exec_t per session:
 *   plan.c  the partitioner: explicit passes over the graph (capability and
 *           layer split, cost model per matmul group, user overrides), each
 *           recording why a node went where it went;
 *   exec.c  the executor: weights uploaded once and resident; activations
 *           quantized on the host and streamed in row tiles through each
 *           device's queue, two tiles in flight (double buffering), one
 *           launch per tile carrying every descriptor of the group; results
 *           dequantized by the shared routine; failures reset the device,
 *           retry, then fall back to the host (contract 1 keeps the output
 *           identical).
 */
#ifndef TSR_OFFLOAD_H
#define TSR_OFFLOAD_H

#include "attn.h"
#include "graph.h"
#include "internal.h"
#include "driver/kernel_model.h"
#include "base/clock.h"

/* Per-role counters (a role's nodes in every layer together). */
typedef struct tsr_role_stats {
  uint64_t calls;         /* node executions                          */
  uint64_t device_calls;  /* of which ran (at least partly) on a device */
  uint64_t tiles;         /* descriptors run by devices               */
  uint64_t cycles;        /* device busy cycles (share of the launch) */
  double proj_s;          /* those cycles at the device clock         */
  uint64_t bytes_up, bytes_down;
  uint64_t fallbacks;     /* tiles run on the host after a failure    */
  double host_s;          /* wall time on the host for this role      */
  double model_cycles;    /* cycles the cost model predicted           */
} tsr_role_stats_t;

/* The int8 attention nodes (every layer together). */
typedef struct tsr_attn_stats {
  uint64_t calls;         /* node executions                            */
  uint64_t device_calls;  /* of which ran (at least partly) on a device */
  uint64_t rows;          /* query rows                                 */
  uint64_t pairs;         /* (query block, key block) pairs computed    */
  uint64_t dense_pairs;   /* pairs a dense causal mask would compute    */
  uint64_t descs;         /* descriptors run by devices                 */
  uint64_t cycles;        /* device busy cycles                         */
  double proj_s;          /* those cycles at the device clock           */
  uint64_t bytes_up, bytes_down; /* incl. the KV appends               */
  uint64_t kv_bytes;      /* int8 K and V bytes the pairs read          */
  uint64_t fallbacks;     /* phases run on the host after a failure     */
  double host_s;          /* wall time on the host (all of the op)      */
  double model_cycles;    /* cycles the cost model predicted            */
} tsr_attn_stats_t;

/* A device as one session uses it. */
typedef struct tsr_exec_dev {
  tsr_ctx_device_t *cd;      /* borrowed from the context */
  bool usable;               /* open, and not declared lost */
  tsr_km_timing_t timing;    /* cost model from the caps */
  tsr_hal_buffer_t a[2], c[2], ring[2]; /* staging slots, double-buffered */
  uint64_t a_cap, c_cap, ring_cap;
  int consecutive_failures;
  int trace_track;
  uint64_t launches, cycles, retries, fallbacks, resets;
  uint64_t xfers, xfer_bytes; /* host<->device copies (weights excluded) */
  double wait_wall_s;        /* host wall time spent waiting (simulation time for sim) */
  double host_overhead_s;    /* host time around device tiles, waits excluded */
  double hal_s;              /* of which inside the backend's write/read/submit */
  uint64_t tiles;
  double submit_us[2];       /* trace: when the tile in each slot was queued */
} tsr_exec_dev_t;

/* Scratch the session lends the executor. */
typedef struct tsr_offload_scratch {
  int8_t *qa;      /* (T, k) */
  float *qa_scale; /* (T)    */
  int32_t *acc;    /* (T, n) */
} tsr_offload_scratch_t;

typedef struct tsr_exec {
  tsr_context_t *ctx;
  tsr_model_t *model;
  tsr_precision_t precision;
  tsr_graph_t decode;  /* T = 1 */
  tsr_graph_t prefill; /* T = prefill_rows */
  tsr_exec_dev_t *devs; /* (n_devs), one per context device entry */
  int n_devs;
  tsr_hal_buffer_t *weights; /* (n_layers + 1) * TSR_MM_COUNT, resident copies */
  int *weight_dev;           /* device of each, -1 = none */
  uint64_t weight_bytes;
  int32_t k_max, group_n_max, desc_max; /* staging sizes */
  tsr_role_stats_t roles[TSR_MM_COUNT];
  /* int8 attention (attn.kind != TSR_ATTN_REFERENCE) */
  tsr_attn_pattern_t attn;
  tsr_attn_dims_t attn_dims;
  tsr_attn_cache_t *kv8;     /* (n_layers) host copies of the int8 KV cache */
  tsr_attn_work_t attn_work; /* scratch of one call */
  tsr_hal_buffer_t *kv_buf;  /* (n_layers) the cache in device memory */
  int *kv_dev;               /* its device, -1 = none */
  bool *kv_ok;               /* device copy complete (an append failed: false) */
  uint64_t kv_dev_bytes;
  tsr_attn_stats_t attn_stats;
  double light_s[8];         /* host time per light op kind (tsr_node_op_t) */
  uint64_t light_calls[8];
  int track_cpu, track_copy;
} tsr_exec_t;

/* `attn` (borrowed, NULL = the fp32 reference attention) selects the int8
 * attention path for a KV cache of max_seq positions. */
tsr_status_t tsr_exec_create(tsr_context_t *ctx, tsr_model_t *model, tsr_precision_t prec,
                             int32_t prefill_rows, const tsr_attn_pattern_t *attn,
                             int32_t max_seq, tsr_exec_t **out);
void tsr_exec_destroy(tsr_exec_t *o);

/* The planned graph for a batch of T rows. */
static inline const tsr_graph_t *tsr_exec_graph(const tsr_exec_t *o, int32_t T) {
  return T == 1 ? &o->decode : &o->prefill;
}

/* Runs the matmul group that starts at node `leader` of graph `g` for T
 * rows: outs[i] (T, n_i) = x (T, k) . W_i^T for each member i. */
tsr_status_t tsr_exec_matmul_group(tsr_exec_t *o, const tsr_graph_t *g, int32_t leader,
                                      int32_t T, const float *x, float *const *outs,
                                      const tsr_offload_scratch_t *sc);

/* Runs int8 attention node `node` of `g` (attn.kind != REFERENCE) for T
 * rows at positions pos0..: appends k, v (T, kv_dim) to the layer's int8
 * cache (host and device copies), then out (T, q_dim) = attention of q over
 * positions <= each row's, on the node's device or the host. */
tsr_status_t tsr_exec_attention(tsr_exec_t *o, const tsr_graph_t *g, int32_t node,
                                int32_t pos0, int32_t T, const float *q, const float *k,
                                const float *v, float *out);

/* Host-time accounting and tracing of a light op. */
double tsr_exec_op_begin(tsr_exec_t *o, const tsr_node_t *n);
void tsr_exec_op_end(tsr_exec_t *o, const tsr_node_t *n, double t0);

/* plan.c: places every node of `g` (see the passes there). */
tsr_status_t tsr_plan_graph(tsr_exec_t *o, tsr_graph_t *g);
/* Modeled per-evaluation seconds of `g` as planned: host matmuls (measured
 * kernel time), transfers (link model), device (cycle model). */
void tsr_plan_totals(const tsr_exec_t *o, const tsr_graph_t *g, double *cpu_s,
                     double *xfer_s, double *dev_s);

/* Row tiles of a T-row matmul group on a device: rows per tile, and the
 * descriptors one tile needs for members of n[i] outputs (N split into
 * chunks of at most `n_chunk`). Exposed for the tests. */
int32_t tsr_tile_rows(const tsr_hal_caps_t *caps, int32_t T);
int32_t tsr_tile_descs(const int32_t *n, int count, int32_t n_chunk);
#define TSR_TILE_N_CHUNK 4096

/* The executor of a session (forward.c), for tests and reports. */
tsr_exec_t *tsr_session_exec(const tsr_session_t *s);

/* report.c */
void tsr_exec_print_plan(const tsr_exec_t *o, FILE *f);
void tsr_exec_print_stats(const tsr_exec_t *o, FILE *f);
void tsr_exec_get_stats(const tsr_exec_t *o, tsr_session_stats_t *out);

#endif
