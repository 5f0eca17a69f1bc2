/*
 * graph.h - the llama forward pass as a graph of nodes over tensors.
 *
 * Internal header. The graph is built from a loaded model for a batch of T
 * rows (T = 1: decode; T > 1: prefill). Nodes are in execution order; every
 * node reads and writes named activation tensors of T rows. Matmul nodes
 * that read the same tensor form a group (q/k/v, gate/up): the partitioner
 * places a group as one unit, and the executor sends it to a device as one
 * upload and one launch.
 *
 * The forward pass (forward.c) interprets this graph, so what the plan
 * prints is what runs.
 */
#ifndef TSR_GRAPH_H
#define TSR_GRAPH_H

#include <stdint.h>
#include <stdio.h>

#include "internal.h"

typedef enum tsr_node_op {
  TSR_NODE_EMBED,     /* x = tok_embd[token]                         */
  TSR_NODE_RMSNORM,   /* out = rmsnorm(in) * weight                   */
  TSR_NODE_MATMUL,    /* out = in . W^T (int8 or fp32)               */
  TSR_NODE_ROPE,      /* q, k rotated in place; k, v into the cache  */
  TSR_NODE_ATTENTION, /* out = softmax(q k^T / sqrt(hs)) v, causal   */
  TSR_NODE_ADD,       /* x += in                                      */
  TSR_NODE_SWIGLU,    /* gate = silu(gate) * up                       */
} tsr_node_op_t;

/* Activation tensors: each is (T, width) in the session's scratch. */
typedef enum tsr_tensor_id {
  TSR_T_X,      /* residual stream (dim)        */
  TSR_T_XB,     /* normed input (dim)           */
  TSR_T_Q,      /* queries (q_dim)              */
  TSR_T_K,      /* keys (kv_dim)                */
  TSR_T_V,      /* values (kv_dim)              */
  TSR_T_ATT,    /* attention output (q_dim)     */
  TSR_T_XB2,    /* projection output (dim)      */
  TSR_T_HB,     /* FFN gate (hidden)            */
  TSR_T_HB2,    /* FFN up (hidden)              */
  TSR_T_LOGITS, /* logits of the last row (vocab) */
  TSR_T_COUNT
} tsr_tensor_id_t;

/* Matmul roles; also the names used by --place. */
typedef enum tsr_mm_role {
  TSR_MM_Q, TSR_MM_K, TSR_MM_V, TSR_MM_O, TSR_MM_GATE, TSR_MM_UP, TSR_MM_DOWN, TSR_MM_OUTPUT,
  TSR_MM_COUNT
} tsr_mm_role_t;

const char *tsr_mm_role_name(tsr_mm_role_t r); /* "attn_q", ..., "output" */
const char *tsr_node_op_name(tsr_node_op_t op);
const char *tsr_tensor_name(tsr_tensor_id_t t);

#define TSR_PLACE_CPU (-1)

typedef struct tsr_node {
  tsr_node_op_t op;
  int32_t layer;      /* -1 for the embedding and the classifier  */
  tsr_tensor_id_t in, out;
  /* matmul only */
  tsr_mm_role_t role;
  const tsr_linear_t *w; /* (n, k), borrowed from the model */
  int32_t m, n, k;       /* rows of this batch, out and in features */
  int32_t group;         /* index of the first node of its group    */
  int32_t group_size;    /* nodes in the group (set on the first)   */
  const float *norm_w;   /* rmsnorm only: weight (dim)              */
  /* placement, filled by the partitioner */
  int32_t device;        /* index into the executor's devices, or TSR_PLACE_CPU */
  char cause[192];       /* why it went there                        */
  double est_cpu_s, est_dev_s, est_xfer_s; /* cost model, per call    */
} tsr_node_t;

typedef struct tsr_graph {
  int32_t T;        /* rows per evaluation this graph was built for */
  tsr_node_t *nodes;
  int32_t n_nodes;
} tsr_graph_t;

/* Builds the graph of `m` for batches of T rows. */
tsr_status_t tsr_graph_build(const tsr_model_t *m, int32_t T, tsr_graph_t *out);
void tsr_graph_free(tsr_graph_t *g);
/* One line per node: index, op, layer, shapes, tensors, placement, cause. */
void tsr_graph_print(const tsr_graph_t *g, FILE *f, const char *const *device_names);

#endif
