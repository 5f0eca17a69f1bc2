/* graph.c - building and printing the forward-pass graph (see graph.h). */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

const char *tsr_mm_role_name(tsr_mm_role_t r) {
  static const char *const names[TSR_MM_COUNT] = {
      "attn_q",       "attn_k",        "attn_v",      "attn_out",     "ffn_gate",
      "ffn_up",       "ffn_down",      "output",      "ffn_gate_inp", "ffn_gate_exps",
      "ffn_up_exps",  "ffn_down_exps"};
  return (unsigned)r < TSR_MM_COUNT ? names[r] : "?";
}

const char *tsr_node_op_name(tsr_node_op_t op) {
  switch (op) {
    case TSR_NODE_EMBED: return "embed";
    case TSR_NODE_RMSNORM: return "rmsnorm";
    case TSR_NODE_MATMUL: return "matmul";
    case TSR_NODE_ROPE: return "rope";
    case TSR_NODE_KV_APPEND: return "kv_append";
    case TSR_NODE_ATTENTION: return "attention";
    case TSR_NODE_ADD: return "add";
    case TSR_NODE_SWIGLU: return "swiglu";
    case TSR_NODE_MOE_ROUTE: return "moe_route";
    case TSR_NODE_MOE_COMBINE: return "moe_combine";
    case TSR_NODE_OP_COUNT: break;
  }
  return "?";
}

const char *tsr_tensor_name(tsr_tensor_id_t t) {
  static const char *const names[TSR_T_COUNT] = {"x",   "xb",  "q",      "k",     "v",
                                                  "att", "xb2", "hb",     "hb2",   "logits",
                                                  "route", "moe_in", "moe_out"};
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
  n->group = b->g->n_nodes - 1;
  n->expert = -1;
  return n;
}

/* Appends a group of matmuls that all read `in`. */
static void push_group(builder_t *b, int32_t layer, tsr_tensor_id_t in, int count,
                       const tsr_mm_role_t *roles, const tsr_linear_t *const *ws,
                       const tsr_tensor_id_t *outs) {
  int32_t first = b->g->n_nodes;
  for (int i = 0; i < count; i++) {
    tsr_node_t *n = push(b, TSR_NODE_MATMUL, layer, in, outs[i]);
    n->role = roles[i];
    n->w = ws[i];
    n->n = ws[i]->rows;
    n->k = ws[i]->cols;
    n->group = first;
  }
  b->g->nodes[first].group_size = count;
}

tsr_status_t tsr_graph_build(const tsr_model_t *m, tsr_graph_t *out) {
  memset(out, 0, sizeof(*out));
  const int32_t L = m->cfg.n_layers;
  builder_t b = {out, 1 + L * (16 + 6 * m->cfg.n_experts) + 2};
  out->nodes = calloc((size_t)b.cap, sizeof(tsr_node_t));
  if (!out->nodes) return TSR_ERR(RESOURCE_EXHAUSTED, "graph: %d nodes", b.cap);
  /* this process's layers only (a pipeline rank), the ends on rank 0 */
  if (m->ends) push(&b, TSR_NODE_EMBED, -1, TSR_T_X, TSR_T_X);
  for (int32_t l = m->layer0; l < m->layer1; l++) {
    const tsr_layer_t *w = &m->layers[l];
    push(&b, TSR_NODE_RMSNORM, l, TSR_T_X, TSR_T_XB)->norm_w = w->rms_att;
    const tsr_mm_role_t qkv[3] = {TSR_MM_Q, TSR_MM_K, TSR_MM_V};
    const tsr_linear_t *qkv_w[3] = {&w->wq, &w->wk, &w->wv};
    const tsr_tensor_id_t qkv_out[3] = {TSR_T_Q, TSR_T_K, TSR_T_V};
    push_group(&b, l, TSR_T_XB, 3, qkv, qkv_w, qkv_out);
    push(&b, TSR_NODE_ROPE, l, TSR_T_Q, TSR_T_Q);
    push(&b, TSR_NODE_KV_APPEND, l, TSR_T_K, TSR_T_K);
    push(&b, TSR_NODE_ATTENTION, l, TSR_T_Q, TSR_T_ATT);
    const tsr_mm_role_t o[1] = {TSR_MM_O};
    const tsr_linear_t *o_w[1] = {&w->wo};
    const tsr_tensor_id_t o_out[1] = {TSR_T_XB2};
    push_group(&b, l, TSR_T_ATT, 1, o, o_w, o_out);
    push(&b, TSR_NODE_ADD, l, TSR_T_XB2, TSR_T_X);
    push(&b, TSR_NODE_RMSNORM, l, TSR_T_X, TSR_T_XB)->norm_w = w->rms_ffn;
    if (w->n_experts) {
      const tsr_mm_role_t r[1] = {TSR_MM_ROUTER};
      const tsr_linear_t *r_w[1] = {&w->router};
      const tsr_tensor_id_t r_out[1] = {TSR_T_ROUTE};
      push_group(&b, l, TSR_T_XB, 1, r, r_w, r_out);
      push(&b, TSR_NODE_MOE_ROUTE, l, TSR_T_ROUTE, TSR_T_MOE_OUT);
      for (int32_t e = 0; e < w->n_experts; e++) {
        const int32_t first = out->n_nodes;
        const tsr_mm_role_t egu[2] = {TSR_MM_EXP_GATE, TSR_MM_EXP_UP};
        const tsr_linear_t *egu_w[2] = {&w->exp_gate[e], &w->exp_up[e]};
        const tsr_tensor_id_t egu_out[2] = {TSR_T_HB, TSR_T_HB2};
        push_group(&b, l, TSR_T_MOE_IN, 2, egu, egu_w, egu_out);
        push(&b, TSR_NODE_SWIGLU, l, TSR_T_HB2, TSR_T_HB);
        const tsr_mm_role_t ed[1] = {TSR_MM_EXP_DOWN};
        const tsr_linear_t *ed_w[1] = {&w->exp_down[e]};
        const tsr_tensor_id_t ed_out[1] = {TSR_T_XB2};
        push_group(&b, l, TSR_T_HB, 1, ed, ed_w, ed_out);
        push(&b, TSR_NODE_MOE_COMBINE, l, TSR_T_XB2, TSR_T_MOE_OUT);
        for (int32_t i = first; i < out->n_nodes; i++) out->nodes[i].expert = e;
      }
      push(&b, TSR_NODE_ADD, l, TSR_T_MOE_OUT, TSR_T_X);
      continue;
    }
    const tsr_mm_role_t gu[2] = {TSR_MM_GATE, TSR_MM_UP};
    const tsr_linear_t *gu_w[2] = {&w->w1, &w->w3};
    const tsr_tensor_id_t gu_out[2] = {TSR_T_HB, TSR_T_HB2};
    push_group(&b, l, TSR_T_XB, 2, gu, gu_w, gu_out);
    push(&b, TSR_NODE_SWIGLU, l, TSR_T_HB2, TSR_T_HB);
    const tsr_mm_role_t d[1] = {TSR_MM_DOWN};
    const tsr_linear_t *d_w[1] = {&w->w2};
    const tsr_tensor_id_t d_out[1] = {TSR_T_XB2};
    push_group(&b, l, TSR_T_HB, 1, d, d_w, d_out);
    push(&b, TSR_NODE_ADD, l, TSR_T_XB2, TSR_T_X);
  }
  /* The final norm and the classifier run on the rows that want logits. */
  if (!m->ends) return TSR_OK;
  push(&b, TSR_NODE_RMSNORM, -1, TSR_T_X, TSR_T_XB)->norm_w = m->rms_final;
  const tsr_mm_role_t cls[1] = {TSR_MM_OUTPUT};
  const tsr_linear_t *cls_w[1] = {&m->output};
  const tsr_tensor_id_t cls_out[1] = {TSR_T_LOGITS};
  push_group(&b, -1, TSR_T_XB, 1, cls, cls_w, cls_out);
  return TSR_OK;
}

void tsr_graph_free(tsr_graph_t *g) {
  if (!g) return;
  free(g->nodes);
  memset(g, 0, sizeof(*g));
}
