/* graph.c - building and printing the forward-pass graph (see graph.h). */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

const char *tsr_mm_role_name(tsr_mm_role_t r) {
  static const char *const names[TSR_MM_COUNT] = {
      "attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down", "output"};
  return (unsigned)r < TSR_MM_COUNT ? names[r] : "?";
}

const char *tsr_node_op_name(tsr_node_op_t op) {
  switch (op) {
    case TSR_NODE_EMBED: return "embed";
    case TSR_NODE_RMSNORM: return "rmsnorm";
    case TSR_NODE_MATMUL: return "matmul";
    case TSR_NODE_ROPE: return "rope+kv";
    case TSR_NODE_ATTENTION: return "attention";
    case TSR_NODE_ADD: return "add";
    case TSR_NODE_SWIGLU: return "swiglu";
  }
  return "?";
}

const char *tsr_tensor_name(tsr_tensor_id_t t) {
  static const char *const names[TSR_T_COUNT] = {"x", "xb", "q", "k", "v", "att",
                                                  "xb2", "hb", "hb2", "logits"};
  return (unsigned)t < TSR_T_COUNT ? names[t] : "?";
}

typedef struct {
  tsr_graph_t *g;
  int32_t cap;
} builder_t;

static tsr_node_t *push(builder_t *b, tsr_node_op_t op, int32_t layer, tsr_tensor_id_t in,
                        tsr_tensor_id_t out) {
  tsr_node_t *n = &b->g->nodes[b->g->n_nodes++];
  memset(n, 0, sizeof(*n));
  n->op = op;
  n->layer = layer;
  n->in = in;
  n->out = out;
  n->device = TSR_PLACE_CPU;
  n->group = b->g->n_nodes - 1;
  return n;
}

/* Appends a group of matmuls that all read `in`. */
static void push_group(builder_t *b, int32_t layer, tsr_tensor_id_t in, int count,
                       const tsr_mm_role_t *roles, const tsr_linear_t *const *ws,
                       const tsr_tensor_id_t *outs, int32_t T) {
  int32_t first = b->g->n_nodes;
  for (int i = 0; i < count; i++) {
    tsr_node_t *n = push(b, TSR_NODE_MATMUL, layer, in, outs[i]);
    n->role = roles[i];
    n->w = ws[i];
    n->m = T;
    n->n = ws[i]->rows;
    n->k = ws[i]->cols;
    n->group = first;
  }
  b->g->nodes[first].group_size = count;
}

tsr_status_t tsr_graph_build(const tsr_model_t *m, int32_t T, tsr_graph_t *out) {
  memset(out, 0, sizeof(*out));
  if (T < 1) return TSR_ERR(INVALID_ARGUMENT, "graph: batch of %d rows", T);
  const int32_t L = m->cfg.n_layers;
  builder_t b = {out, 1 + L * 15 + 2};
  out->nodes = calloc((size_t)b.cap, sizeof(tsr_node_t));
  if (!out->nodes) return TSR_ERR(RESOURCE_EXHAUSTED, "graph: %d nodes", b.cap);
  out->T = T;
  push(&b, TSR_NODE_EMBED, -1, TSR_T_X, TSR_T_X);
  for (int32_t l = 0; l < L; l++) {
    const tsr_layer_t *w = &m->layers[l];
    push(&b, TSR_NODE_RMSNORM, l, TSR_T_X, TSR_T_XB)->norm_w = w->rms_att;
    const tsr_mm_role_t qkv[3] = {TSR_MM_Q, TSR_MM_K, TSR_MM_V};
    const tsr_linear_t *qkv_w[3] = {&w->wq, &w->wk, &w->wv};
    const tsr_tensor_id_t qkv_out[3] = {TSR_T_Q, TSR_T_K, TSR_T_V};
    push_group(&b, l, TSR_T_XB, 3, qkv, qkv_w, qkv_out, T);
    push(&b, TSR_NODE_ROPE, l, TSR_T_Q, TSR_T_Q);
    push(&b, TSR_NODE_ATTENTION, l, TSR_T_Q, TSR_T_ATT);
    const tsr_mm_role_t o[1] = {TSR_MM_O};
    const tsr_linear_t *o_w[1] = {&w->wo};
    const tsr_tensor_id_t o_out[1] = {TSR_T_XB2};
    push_group(&b, l, TSR_T_ATT, 1, o, o_w, o_out, T);
    push(&b, TSR_NODE_ADD, l, TSR_T_XB2, TSR_T_X);
    push(&b, TSR_NODE_RMSNORM, l, TSR_T_X, TSR_T_XB)->norm_w = w->rms_ffn;
    const tsr_mm_role_t gu[2] = {TSR_MM_GATE, TSR_MM_UP};
    const tsr_linear_t *gu_w[2] = {&w->w1, &w->w3};
    const tsr_tensor_id_t gu_out[2] = {TSR_T_HB, TSR_T_HB2};
    push_group(&b, l, TSR_T_XB, 2, gu, gu_w, gu_out, T);
    push(&b, TSR_NODE_SWIGLU, l, TSR_T_HB2, TSR_T_HB);
    const tsr_mm_role_t d[1] = {TSR_MM_DOWN};
    const tsr_linear_t *d_w[1] = {&w->w2};
    const tsr_tensor_id_t d_out[1] = {TSR_T_XB2};
    push_group(&b, l, TSR_T_HB, 1, d, d_w, d_out, T);
    push(&b, TSR_NODE_ADD, l, TSR_T_XB2, TSR_T_X);
  }
  /* The classifier runs on the last row only. */
  push(&b, TSR_NODE_RMSNORM, -1, TSR_T_X, TSR_T_XB)->norm_w = m->rms_final;
  const tsr_mm_role_t cls[1] = {TSR_MM_OUTPUT};
  const tsr_linear_t *cls_w[1] = {&m->output};
  const tsr_tensor_id_t cls_out[1] = {TSR_T_LOGITS};
  push_group(&b, -1, TSR_T_XB, 1, cls, cls_w, cls_out, 1);
  return TSR_OK;
}

void tsr_graph_free(tsr_graph_t *g) {
  if (!g) return;
  free(g->nodes);
  memset(g, 0, sizeof(*g));
}

void tsr_graph_print(const tsr_graph_t *g, FILE *f, const char *const *device_names) {
  fprintf(f, "graph: %d nodes for batches of %d row%s\n", g->n_nodes, g->T, g->T == 1 ? "" : "s");
  fprintf(f, "%4s  %-10s %-8s %5s  %-14s %-16s %-8s  %s\n", "node", "op", "name", "layer",
          "in -> out", "shape (m,n,k)", "place", "cause");
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    char io[32], shape[32] = "";
    snprintf(io, sizeof io, "%s -> %s", tsr_tensor_name(n->in), tsr_tensor_name(n->out));
    if (n->op == TSR_NODE_MATMUL) snprintf(shape, sizeof shape, "%d,%d,%d", n->m, n->n, n->k);
    const char *place = n->device == TSR_PLACE_CPU ? "cpu" : device_names[n->device];
    fprintf(f, "%4d  %-10s %-8s %5d  %-14s %-16s %-8s  %s\n", i, tsr_node_op_name(n->op),
            n->op == TSR_NODE_MATMUL ? tsr_mm_role_name(n->role) : "", n->layer, io, shape,
            place, n->cause);
  }
}
