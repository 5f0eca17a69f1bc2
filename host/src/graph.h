/*
 * graph.h - the llama forward pass as a graph of nodes over tensors.
 *
 * Internal header. The graph is built once from a loaded model; it has no
 * batch size: every evaluation runs it over the R rows of a batch (the
 * tokens of every sequence in it, stacked). Nodes are in execution order;
 * every node reads and writes named activation tensors of R rows. Matmul
 * nodes that read the same tensor form a group (q/k/v, gate/up): the
 * partitioner places a group as one unit, and the executor sends it to a
 * device as one upload and one launch.
 *
 * Placement is not stored here: a plan (plan.h) lies beside the graph, one
 * per batch size the partitioner considered. The forward pass (forward.c)
 * interprets this graph, so what the plan prints is what runs.
 */
#ifndef TSR_GRAPH_H
#define TSR_GRAPH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "internal.h"

typedef enum tsr_node_op {
  TSR_NODE_EMBED,     /* x = tok_embd[token]                         */
  TSR_NODE_RMSNORM,   /* out = rmsnorm(in) * weight                   */
  TSR_NODE_MATMUL,    /* out = in . W^T (int8 or fp32)               */
  TSR_NODE_ROPE,      /* q, k rotated in place at each row's position */
  TSR_NODE_KV_APPEND, /* k, v of each row into its sequence's cache  */
  TSR_NODE_ATTENTION, /* out = softmax(q k^T / sqrt(hs)) v, causal,
                         per sequence over its own cache             */
  TSR_NODE_ADD,       /* x += in                                      */
  TSR_NODE_SWIGLU,    /* gate = silu(gate) * up                       */
  TSR_NODE_MOE_ROUTE, /* per row: softmax of the router's logits, the top
                         n_experts_used experts and their weights
                         (renormalized over them); moe_out = 0        */
  TSR_NODE_MOE_COMBINE, /* moe_out[row] += weight * in, the rows routed
                           to the node's expert                       */
  TSR_NODE_OP_COUNT
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
  TSR_T_LOGITS, /* logits of the rows that asked for them (vocab) */
  TSR_T_ROUTE,  /* router logits (n_experts)    */
  TSR_T_MOE_IN, /* the rows routed to one expert, gathered (dim) */
  TSR_T_MOE_OUT, /* weighted sum of the experts' outputs (dim) */
  TSR_T_COUNT
} tsr_tensor_id_t;

/* Matmul roles; also the names used by --place. */
typedef enum tsr_mm_role {
  TSR_MM_Q, TSR_MM_K, TSR_MM_V, TSR_MM_O, TSR_MM_GATE, TSR_MM_UP, TSR_MM_DOWN, TSR_MM_OUTPUT,
  TSR_MM_ROUTER, TSR_MM_EXP_GATE, TSR_MM_EXP_UP, TSR_MM_EXP_DOWN, /* mixture of experts */
  TSR_MM_COUNT
} tsr_mm_role_t;

const char *tsr_mm_role_name(tsr_mm_role_t r); /* "attn_q", ..., "output" */
const char *tsr_node_op_name(tsr_node_op_t op);
const char *tsr_tensor_name(tsr_tensor_id_t t);

typedef struct tsr_node {
  tsr_node_op_t op;
  int32_t layer;      /* -1 for the embedding and the classifier  */
  int32_t expert;     /* the expert whose rows it runs on, else -1 */
  tsr_tensor_id_t in, out;
  /* matmul only */
  tsr_mm_role_t role;
  const tsr_linear_t *w; /* (n, k), borrowed from the model */
  int32_t n, k;          /* out and in features                     */
  int32_t group;         /* index of the first node of its group    */
  int32_t group_size;    /* nodes in the group (set on the first)   */
  const float *norm_w;   /* rmsnorm only: weight (dim)              */
} tsr_node_t;

typedef struct tsr_graph {
  tsr_node_t *nodes;
  int32_t n_nodes;
} tsr_graph_t;

/* Mixture of experts: the nodes of an expert (its gate/up group, swiglu,
 * down, combine) run on the rows routed to it (gathered into moe_in), and
 * are skipped when none is. */

/* Builds the graph of `m`. */
tsr_status_t tsr_graph_build(const tsr_model_t *m, tsr_graph_t *out);
void tsr_graph_free(tsr_graph_t *g);
/* True for the nodes after the last layer (final norm, classifier): they
 * run on the rows that asked for logits only. */
static inline bool tsr_node_is_final(const tsr_node_t *n) {
  return n->layer < 0 && n->op != TSR_NODE_EMBED;
}

#endif
