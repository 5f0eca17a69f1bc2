/*
 * test_offload.c - the partitioner, the executor and the trace: placements
 * and their causes under given device parameters and batch sizes, descriptor
 * counts of odd shapes (bit-exact against the host), launches of a rows
 * split in flight together, fallback and --no-fallback, queue mode and K in
 * pieces, and the Chrome trace as valid JSON with balanced events on the
 * expected tracks.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host/src/offload.h"
#include "tsr_test.h"

static char small_model[512], odd_model[512], big_model[512], kbig_model[512];

static int setup(void) {
  return tsr_test_gen_model(small_model, sizeof small_model, "small", 64, 172, 5, 8, 4, 512,
                            128, 5) ||
         /* odd everything: dims not multiples of 16, classifier above one N chunk */
         tsr_test_gen_model(odd_model, sizeof odd_model, "odd", 72, 200, 3, 6, 3,
                            TSR_TILE_N_CHUNK + 3, 128, 5) ||
         tsr_test_gen_model(big_model, sizeof big_model, "big", 1024, 2816, 1, 16, 16, 512, 128,
                            5) ||
         /* ffn_down's K = 4200: two K pieces on a device with several ports */
         tsr_test_gen_model(kbig_model, sizeof kbig_model, "kbig", 64, 4200, 2, 8, 4, 512, 128,
                            5);
}

/* --split for the next rig_open. */
static tsr_split_t rig_split = TSR_SPLIT_LAYERS;

typedef struct {
  tsr_context_t *ctx;
  tsr_model_t *model;
  tsr_session_t *sess;
} rig_t;

static tsr_status_t rig_open(rig_t *r, const char *model, const char *devices,
                             tsr_offload_t policy, const char *place, bool fallback,
                             const char *trace, tsr_precision_t prec) {
  memset(r, 0, sizeof *r);
  tsr_context_options_t o;
  tsr_context_options_init(&o);
  /* One thread: the host cost measurements then do not depend on how busy
   * the machine's other cores are. */
  o.n_threads = 1;
  o.devices = devices;
  o.offload = policy;
  o.placement = place;
  o.fallback = fallback;
  o.trace_path = trace;
  o.quiet = true;
  o.device_timeout_ms = 300;
  o.split = rig_split;
  tsr_status_t s = tsr_context_create(&o, &r->ctx);
  if (!s) s = tsr_model_load(r->ctx, model, NULL, &r->model);
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = prec;
  if (!s) s = tsr_session_create(r->model, &so, &r->sess);
  return s;
}

static void rig_close(rig_t *r) {
  tsr_session_destroy(r->sess);
  tsr_model_destroy(r->model);
  tsr_context_destroy(r->ctx);
}

/* Every matmul of the engine's plan for `rows` rows placed on `dev`
 * (TSR_PLACE_CPU for the host) with a cause containing `needle`. */
static void expect_all(const tsr_exec_t *e, int32_t rows, int dev, const char *needle) {
  const tsr_graph_t *g = &e->graph;
  const tsr_plan_t *pl = tsr_exec_plan(e, rows);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tsr_node_t *n = &g->nodes[i];
    const tsr_place_t *pc = &pl->at[i];
    if (n->op != TSR_NODE_MATMUL) {
      CU_ASSERT_EQUAL(pc->device, TSR_PLACE_CPU);
      continue;
    }
    if (pc->device != dev || !strstr(pc->cause, needle))
      fprintf(stderr, "node %d (%s, layer %d): device %d, cause '%s'; wanted %d '%s'\n", i,
              tsr_mm_role_name(n->role), n->layer, pc->device, pc->cause, dev, needle);
    CU_ASSERT_EQUAL(pc->device, dev);
    CU_ASSERT_PTR_NOT_NULL(strstr(pc->cause, needle));
  }
}

/* Tiny matmuls: a 70 us launch and 25 us per transfer cost more than the
 * host's microseconds, so the cost model keeps everything on the host. */
static void test_small_stays_on_host(void) {
  rig_t r;
  TSR_ASSERT_OK(rig_open(&r, small_model, "fmodel", TSR_OFFLOAD_AUTO, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (r.sess) {
    tsr_exec_t *e = tsr_session_exec(r.sess);
    expect_all(e, 1, TSR_PLACE_CPU, ">= host");
    expect_all(e, 4, TSR_PLACE_CPU, ">= host");
  }
  rig_close(&r);
}

/* A large batch's GEMMs on a big, fast array beat a host of 20 GB/s and
 * 200 int8 GMAC/s (TSR_CPU_PROFILE: this machine's own speed would decide
 * the smaller ones; one row is not asserted). */
static void test_large_prefill_goes_to_device(void) {
  rig_t r;
  setenv("TSR_CPU_PROFILE", "20,200", 1);
  TSR_ASSERT_OK(rig_open(&r, big_model, "fmodel:rows=128,cols=128,clock=2000,bw=512",
                         TSR_OFFLOAD_AUTO, NULL, true, NULL, TSR_PRECISION_INT8));
  unsetenv("TSR_CPU_PROFILE");
  if (r.sess) {
    tsr_exec_t *e = tsr_session_exec(r.sess);
    int on_dev = 0;
    const tsr_plan_t *pl = tsr_exec_plan(e, 64), *one = tsr_exec_plan(e, 1);
    CU_ASSERT_EQUAL(pl->rows, 64);
    CU_ASSERT_EQUAL(one->rows, 1);
    for (int32_t i = 0; i < e->graph.n_nodes; i++) {
      const tsr_node_t *n = &e->graph.nodes[i];
      if (n->op != TSR_NODE_MATMUL || n->layer < 0) continue;
      CU_ASSERT_EQUAL(pl->at[i].device, 0);
      CU_ASSERT_PTR_NOT_NULL(strstr(pl->at[i].cause, "< host"));
      on_dev += pl->at[i].device == 0;
    }
    CU_ASSERT_EQUAL(on_dev, 7);
    CU_ASSERT_TRUE(e->weight_bytes >= (uint64_t)7 * 1024 * 1024);
  }
  rig_close(&r);
}

static void test_policies_and_overrides(void) {
  rig_t r;
  TSR_ASSERT_OK(rig_open(&r, small_model, "fmodel", TSR_OFFLOAD_ALL, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (r.sess) expect_all(tsr_session_exec(r.sess), 1, 0, "--offload all");
  rig_close(&r);
  TSR_ASSERT_OK(rig_open(&r, small_model, "fmodel", TSR_OFFLOAD_NONE, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (r.sess) expect_all(tsr_session_exec(r.sess), 1, TSR_PLACE_CPU, "--offload none");
  rig_close(&r);
  TSR_ASSERT_OK(rig_open(&r, small_model, "fmodel", TSR_OFFLOAD_ALL, NULL, true, NULL,
                         TSR_PRECISION_FP32));
  if (r.sess) expect_all(tsr_session_exec(r.sess), 1, TSR_PLACE_CPU, "fp32 precision");
  rig_close(&r);
  /* --place: ffn on the host, attn_q explicitly on dev0, the rest by policy */
  TSR_ASSERT_OK(rig_open(&r, small_model, "fmodel", TSR_OFFLOAD_NONE, "ffn=cpu,attn_q=dev0",
                         true, NULL, TSR_PRECISION_INT8));
  if (r.sess) {
    const tsr_exec_t *e = tsr_session_exec(r.sess);
    const tsr_graph_t *g = &e->graph;
    const tsr_plan_t *pl = tsr_exec_plan(e, 1);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const tsr_node_t *n = &g->nodes[i];
      const tsr_place_t *pc = &pl->at[i];
      if (n->op != TSR_NODE_MATMUL) continue;
      if (n->role == TSR_MM_Q) {
        CU_ASSERT_EQUAL(pc->device, 0);
        CU_ASSERT_STRING_EQUAL(pc->cause, "--place attn_q=dev0");
      } else if (n->role >= TSR_MM_GATE && n->role <= TSR_MM_DOWN) {
        CU_ASSERT_EQUAL(pc->device, TSR_PLACE_CPU);
        CU_ASSERT_STRING_EQUAL(pc->cause, "--place ffn=cpu");
      } else {
        CU_ASSERT_EQUAL(pc->device, TSR_PLACE_CPU);
        CU_ASSERT_STRING_EQUAL(pc->cause, "--offload none");
      }
    }
  }
  rig_close(&r);
  const char *bad[] = {"ffn", "mlp=cpu", "ffn=tpu0", "ffn=dev7", ",", "attn_q=cpu,,"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tsr_status_t s = rig_open(&r, small_model, "fmodel", TSR_OFFLOAD_AUTO, bad[i], true, NULL,
                              TSR_PRECISION_INT8);
    CU_ASSERT_EQUAL(tsr_status_code(s), TSR_STATUS_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(tsr_status_message(s), "placement"));
    CU_ASSERT_PTR_NULL(r.sess);
    tsr_status_free(s);
    rig_close(&r);
  }
}

/* Two entries, five layers: layers 0-2 on the first, 3-4 and the
 * classifier on the host. */
static void test_layer_split(void) {
  rig_t r;
  TSR_ASSERT_OK(rig_open(&r, small_model, "fmodel,cpu", TSR_OFFLOAD_ALL, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (r.sess) {
    const tsr_exec_t *e = tsr_session_exec(r.sess);
    const tsr_graph_t *g = &e->graph;
    const tsr_plan_t *pl = tsr_exec_plan(e, 1);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const tsr_node_t *n = &g->nodes[i];
      if (n->op != TSR_NODE_MATMUL) continue;
      bool first = n->layer >= 0 && n->layer <= 2;
      CU_ASSERT_EQUAL(pl->at[i].device, first ? 0 : TSR_PLACE_CPU);
      if (!first) CU_ASSERT_PTR_NOT_NULL(strstr(pl->at[i].cause, "layer split"));
    }
  }
  rig_close(&r);
}

static void test_tile_arithmetic(void) {
  int32_t n1[] = {1}, n2[] = {4096, 4097, 8193}, n3[] = {72, 24, 24};
  CU_ASSERT_EQUAL(tsr_tile_descs(n1, 1, 4096, 1, 4096), 1);
  CU_ASSERT_EQUAL(tsr_tile_descs(n2, 3, 4096, 64, 4096), 1 + 2 + 3);
  CU_ASSERT_EQUAL(tsr_tile_descs(n3, 3, 4096, 64, 4096), 3);
  CU_ASSERT_EQUAL(tsr_tile_descs(n3, 3, 7, 16, 16), 11 + 4 + 4);
  CU_ASSERT_EQUAL(tsr_tile_descs(n3, 3, 7, 17, 16), 2 * (11 + 4 + 4));
  /* row shares of a split: contiguous, covering, as even as can be */
  CU_ASSERT_EQUAL(tsr_rows_share(7, 2, 0), 0);
  CU_ASSERT_EQUAL(tsr_rows_share(7, 2, 1), 3);
  CU_ASSERT_EQUAL(tsr_rows_share(7, 2, 2), 7);
  CU_ASSERT_EQUAL(tsr_rows_share(1, 3, 1), 0);
  CU_ASSERT_EQUAL(tsr_rows_share(1, 3, 3), 1);
}

/* Logits after a 37-token prefill and 5 decode steps. */
static void run_tokens(tsr_session_t *s, float *out, int vocab) {
  int32_t toks[37];
  for (int i = 0; i < 37; i++) toks[i] = (i * 131 + 7) % vocab;
  const float *l = NULL;
  TSR_ASSERT_OK(tsr_session_eval(s, toks, 37, &l));
  for (int i = 0; i < 5 && l; i++) {
    int32_t t = (i * 17 + 3) % vocab;
    TSR_ASSERT_OK(tsr_session_eval(s, &t, 1, &l));
  }
  if (l) memcpy(out, l, sizeof(float) * (size_t)vocab);
}

/* The host's int8 logits of run_tokens on `model`. */
static void host_logits(const char *model, float *out, int vocab) {
  rig_t r;
  TSR_ASSERT_OK(rig_open(&r, model, "cpu", TSR_OFFLOAD_AUTO, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (r.sess) run_tokens(r.sess, out, vocab);
  rig_close(&r);
}

/* Odd shapes through the device path give the host's int8 logits exactly:
 * 37 rows = tiles of 16+16+5, N = 4099 split into two descriptors. */
static void test_odd_shapes_bit_exact(void) {
  const int vocab = TSR_TILE_N_CHUNK + 3;
  float *host = calloc(vocab, sizeof(float)), *dev = calloc(vocab, sizeof(float));
  rig_t r;
  TSR_ASSERT_OK(rig_open(&r, odd_model, "cpu", TSR_OFFLOAD_AUTO, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (r.sess) run_tokens(r.sess, host, vocab);
  rig_close(&r);
  TSR_ASSERT_OK(rig_open(&r, odd_model, "fmodel", TSR_OFFLOAD_ALL, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (r.sess) {
    run_tokens(r.sess, dev, vocab);
    tsr_session_stats_t st;
    tsr_session_get_stats(r.sess, &st);
    /* the prefill sends 3 row tiles per group; the classifier carries two
     * descriptors per launch, so there are more tiles than launches */
    CU_ASSERT_TRUE(st.device_calls > 0);
    CU_ASSERT_EQUAL(st.fallbacks, 0);
    CU_ASSERT_TRUE(st.device_tiles > st.device_calls);
  }
  rig_close(&r);
  CU_ASSERT_EQUAL(memcmp(host, dev, sizeof(float) * (size_t)vocab), 0);
  free(host);
  free(dev);
}

/* Runs matmul group `lead` of e over R rows of random input (seed) on the
 * device and counts the values that differ from the naive product of the
 * same quantized input. */
static long group_vs_naive(tsr_exec_t *e, int32_t lead, int32_t R, uint64_t seed) {
  const tsr_plan_t *pl = tsr_exec_plan(e, R);
  const tsr_node_t *ld = &e->graph.nodes[lead];
  const int cnt = ld->group_size;
  const int32_t k = ld->k;
  int32_t n_sum = 0;
  for (int j = 0; j < cnt; j++) n_sum += e->graph.nodes[lead + j].n;
  float *x = malloc(sizeof(float) * (size_t)R * (size_t)k), *outs[8];
  for (size_t t = 0; t < (size_t)R * (size_t)k; t++)
    x[t] = (float)((double)(tsr_test_splitmix64(&seed) >> 11) / 4503599627370496.0 - 1.0);
  for (int j = 0; j < cnt; j++)
    outs[j] = malloc(sizeof(float) * (size_t)R * (size_t)e->graph.nodes[lead + j].n);
  /* (acc: room for every K piece's partial sums, exec.c mm_prepare) */
  tsr_offload_scratch_t sc = {malloc((size_t)R * (size_t)k), malloc(sizeof(float) * (size_t)R),
                              malloc(sizeof(int32_t) * (size_t)R * (size_t)n_sum *
                                     (size_t)e->k_pieces),
                              NULL};
  long bad = 0;
  tsr_status_t st = tsr_exec_matmul_group(e, pl, lead, R, x, outs, &sc);
  CU_ASSERT_EQUAL(tsr_status_code(st), TSR_STATUS_OK);
  tsr_status_free(st);
  int8_t *xq = malloc((size_t)R * (size_t)k);
  float *xs = malloc(sizeof(float) * (size_t)R);
  tsr_quantize_rows(xq, xs, x, R, k);
  for (int j = 0; j < cnt; j++) {
    const tsr_node_t *nd = &e->graph.nodes[lead + j];
    int32_t *c = malloc(sizeof(int32_t) * (size_t)R * (size_t)nd->n);
    float *want = malloc(sizeof(float) * (size_t)R * (size_t)nd->n);
    tsr_test_ref_gemm_i8(c, (size_t)nd->n, xq, (size_t)k, nd->w->q.data, (size_t)k, R, nd->n, k);
    tsr_dequantize(want, (size_t)nd->n, c, (size_t)nd->n, xs, nd->w->q.scale, R, nd->n);
    long b = 0;
    for (size_t t = 0; t < (size_t)R * (size_t)nd->n; t++) b += want[t] != outs[j][t];
    if (b)
      fprintf(stderr, "group %d member %d (%s, layer %d, %d x %d x %d): %ld of %zu values "
              "differ from the naive reference\n", lead, j, tsr_mm_role_name(nd->role),
              nd->layer, R, nd->n, k, b, (size_t)R * (size_t)nd->n);
    bad += b;
    free(c);
    free(want);
    free(outs[j]);
  }
  free(x);
  free(xq);
  free(xs);
  free(sc.qa);
  free(sc.qa_scale);
  free(sc.acc);
  return bad;
}

/* Opens the odd model on fmodel with every matmul there and runs a few
 * tokens (weights quantized and resident); false (and closed) without a
 * session. */
static bool odd_rig(rig_t *r, float *logits, int vocab) {
  TSR_ASSERT_OK(rig_open(r, odd_model, "fmodel", TSR_OFFLOAD_ALL, NULL, true, NULL,
                         TSR_PRECISION_INT8));
  if (!r->sess) {
    rig_close(r);
    return false;
  }
  run_tokens(r->sess, logits, vocab);
  return true;
}

/* The device path against an independent reference: every matmul group of
 * the odd model run by the executor on the functional model over 37 rows
 * (row tiles 16+16+5; the classifier's N = 4099 in two descriptors) gives
 * the int32 products of a naive loop, dequantized by the shared routine.
 * (The logits check above compares with the host, whose kernel the
 * functional model uses too, so it cannot catch an arithmetic error.) */
static void test_groups_equal_naive(void) {
  enum { R = 37 };
  const int vocab = TSR_TILE_N_CHUNK + 3;
  float *logits = calloc((size_t)vocab, sizeof(float));
  rig_t r;
  if (!odd_rig(&r, logits, vocab)) {
    free(logits);
    return;
  }
  tsr_session_stats_t st0;
  tsr_session_get_stats(r.sess, &st0);
  tsr_exec_t *e = tsr_session_exec(r.sess);
  const tsr_plan_t *pl = tsr_exec_plan(e, R);
  int groups = 0, classifier = 0;
  long bad = 0;
  for (int32_t i = 0; i < e->graph.n_nodes; i++) {
    const tsr_node_t *lead = &e->graph.nodes[i];
    if (lead->op != TSR_NODE_MATMUL || lead->group != i) continue;
    const int cnt = lead->group_size;
    bool on_dev = true;
    for (int j = 0; j < cnt; j++) {
      on_dev = on_dev && pl->at[i + j].device == 0;
      classifier += e->graph.nodes[i + j].n > TSR_TILE_N_CHUNK;
    }
    CU_ASSERT_TRUE(on_dev); /* --offload all */
    if (!on_dev || cnt > 8) continue;
    bad += group_vs_naive(e, i, R, 99 + (uint64_t)i);
    groups++;
  }
  tsr_session_stats_t st;
  tsr_session_get_stats(r.sess, &st);
  CU_ASSERT_EQUAL(st.fallbacks, 0);
  CU_ASSERT_TRUE(st.device_tiles > st0.device_tiles + (uint64_t)groups); /* it ran there */
  CU_ASSERT_TRUE(groups > 3);
  CU_ASSERT_EQUAL(classifier, 1);
  CU_ASSERT_EQUAL(bad, 0);
  printf("REPORT offload: %d matmul groups on fmodel over %d rows equal the naive reference\n",
         groups, (int)R);
  rig_close(&r);
  free(logits);
}

/* A matmul group's ring stays in device memory: the same group over the
 * same rows again finds it (no upload) and computes the new input right;
 * other rows or another group upload theirs; every result equals the
 * naive product. */
static void test_resident_rings(void) {
  const int vocab = TSR_TILE_N_CHUNK + 3;
  float *logits = calloc((size_t)vocab, sizeof(float));
  rig_t r;
  if (!odd_rig(&r, logits, vocab)) {
    free(logits);
    return;
  }
  tsr_exec_t *e = tsr_session_exec(r.sess);
  tsr_exec_dev_t *d = &e->devs[0];
  CU_ASSERT_TRUE(d->rings.size > 0);
  int32_t lead[2] = {-1, -1};
  for (int32_t i = 0, n = 0; i < e->graph.n_nodes && n < 2; i++)
    if (e->graph.nodes[i].op == TSR_NODE_MATMUL && e->graph.nodes[i].group == i) lead[n++] = i;
  CU_ASSERT_TRUE(lead[1] >= 0);
  if (lead[1] < 0) {
    rig_close(&r);
    free(logits);
    return;
  }
  long bad = group_vs_naive(e, lead[0], 3, 1);
  const uint64_t up0 = d->ring_uploads, hit0 = d->ring_hits;
  for (uint64_t seed = 2; seed < 5; seed++) bad += group_vs_naive(e, lead[0], 3, seed);
  CU_ASSERT_EQUAL(d->ring_uploads, up0);    /* found again, three times */
  CU_ASSERT_EQUAL(d->ring_hits, hit0 + 3);
  bad += group_vs_naive(e, lead[0], 5, 6);  /* other rows: another ring */
  CU_ASSERT_EQUAL(d->ring_uploads, up0 + 1);
  bad += group_vs_naive(e, lead[1], 3, 7);  /* another group */
  CU_ASSERT_EQUAL(d->ring_uploads, up0 + 2);
  bad += group_vs_naive(e, lead[0], 3, 8);  /* the first one is still there */
  CU_ASSERT_EQUAL(d->ring_uploads, up0 + 2);
  CU_ASSERT_EQUAL(d->ring_hits, hit0 + 4);
  CU_ASSERT_EQUAL(bad, 0);
  rig_close(&r);
  free(logits);
}

/* Queue mode (one launch kept running, a doorbell per group) with K in
 * pieces (4 read ports, ffn_down's K = 4200): every group equals the naive
 * product, the logits equal the host's, and the device ran one queue-mode
 * launch for every ring. A second engine on the same device closes the
 * first one's queue to run its own, and the first reopens it; a failed and
 * a hung doorbell are retried and the logits do not change. */
static void test_queue_mode(void) {
  enum { R = 5 };
  const int vocab = 512;
  float ref[512], got[512];
  rig_t r;
  host_logits(kbig_model, ref, vocab);
  TSR_ASSERT_OK(rig_open(&r, kbig_model, "fmodel:ports=4,queue=1", TSR_OFFLOAD_ALL, NULL, true,
                         NULL, TSR_PRECISION_INT8));
  if (!r.sess) {
    rig_close(&r);
    return;
  }
  run_tokens(r.sess, got, vocab);
  CU_ASSERT_EQUAL(memcmp(ref, got, sizeof ref), 0);
  tsr_exec_t *e = tsr_session_exec(r.sess);
  tsr_exec_dev_t *d = &e->devs[0];
  CU_ASSERT_TRUE(d->cd->caps.flags & TSR_HAL_CAP_QUEUE);
  CU_ASSERT_EQUAL(e->k_pieces, 2);
  CU_ASSERT_EQUAL(d->q_opens, 1);
  CU_ASSERT_EQUAL(d->launches, 1);
  CU_ASSERT_TRUE(d->doorbells >= 6 * 4 * 2); /* 6 evaluations, 4 groups a layer, 2 layers */
  long bad = 0;
  int groups = 0;
  for (int32_t i = 0; i < e->graph.n_nodes; i++)
    if (e->graph.nodes[i].op == TSR_NODE_MATMUL && e->graph.nodes[i].group == i) {
      bad += group_vs_naive(e, i, R, 40 + (uint64_t)i);
      groups++;
    }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(d->q_opens, 1);
  printf("REPORT offload queue mode: %d groups equal the naive reference (ffn_down in %d K "
         "pieces), %" PRIu64 " doorbells on %" PRIu64 " launch\n",
         groups, e->k_pieces, d->doorbells, d->launches);
  /* a second engine on the device: the queues take turns */
  tsr_model_t *m2 = NULL;
  tsr_session_t *s2 = NULL;
  TSR_ASSERT_OK(tsr_model_load(r.ctx, kbig_model, NULL, &m2));
  tsr_session_options_t so;
  tsr_session_options_init(&so);
  so.precision = TSR_PRECISION_INT8;
  if (m2) TSR_ASSERT_OK(tsr_session_create(m2, &so, &s2));
  if (s2) {
    float got2[512];
    run_tokens(s2, got2, vocab);
    CU_ASSERT_EQUAL(memcmp(ref, got2, sizeof ref), 0);
    tsr_exec_dev_t *d2 = &tsr_session_exec(s2)->devs[0];
    CU_ASSERT_EQUAL(d2->q_opens, 1);
    CU_ASSERT_PTR_EQUAL(d->cd->q_holder, d2);
    /* the first engine again: it closes the second's queue, opens its own */
    int32_t lead = 0;
    while (lead < e->graph.n_nodes && e->graph.nodes[lead].op != TSR_NODE_MATMUL) lead++;
    CU_ASSERT_EQUAL(group_vs_naive(e, lead, R, 7), 0);
    CU_ASSERT_EQUAL(d->q_opens, 2);
    CU_ASSERT_PTR_EQUAL(d->cd->q_holder, d);
  }
  tsr_session_destroy(s2);
  tsr_model_destroy(m2);
  rig_close(&r);
  /* faults in queue mode: submission 6 (a doorbell) fails, 9 hangs */
  const char *faults[] = {"fmodel:ports=4,queue=1,fail=6", "fmodel:ports=4,queue=1,hang=9"};
  for (int f = 0; f < 2; f++) {
    TSR_ASSERT_OK(rig_open(&r, kbig_model, faults[f], TSR_OFFLOAD_ALL, NULL, true, NULL,
                           TSR_PRECISION_INT8));
    if (r.sess) {
      run_tokens(r.sess, got, vocab);
      CU_ASSERT_EQUAL(memcmp(ref, got, sizeof ref), 0);
      const tsr_exec_dev_t *dv = &tsr_session_exec(r.sess)->devs[0];
      CU_ASSERT_TRUE(dv->rs.retries >= 1);
      CU_ASSERT_TRUE(dv->q_opens >= 2); /* the retry opened a new queue */
    }
    rig_close(&r);
  }
}

/* Faults: a failed command is retried; with no retries it falls back; a
 * hang trips the watchdog; a lost device moves work to the host; with
 * fallback off each of these is an error. The logits never change. */
static void test_fallback(void) {
  const int vocab = 512;
  float ref[512], got[512];
  rig_t r;
  host_logits(small_model, ref, vocab);
  struct {
    const char *dev;
    int retries;
    bool expect_fallback;
  } cases[] = {
      {"fmodel:fail=20", 1, false},
      {"fmodel:fail=20", 0, true},
      {"fmodel:hang=9", 0, true},
      {"fmodel:lost", 1, false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    memset(&r, 0, sizeof r);
    tsr_context_options_t o;
    tsr_context_options_init(&o);
    o.devices = cases[c].dev;
    o.offload = TSR_OFFLOAD_ALL;
    o.retries = cases[c].retries;
    o.device_timeout_ms = 200;
    o.quiet = true;
    TSR_ASSERT_OK(tsr_context_create(&o, &r.ctx));
    TSR_ASSERT_OK(tsr_model_load(r.ctx, small_model, NULL, &r.model));
    tsr_session_options_t so;
    tsr_session_options_init(&so);
    so.precision = TSR_PRECISION_INT8;
    TSR_ASSERT_OK(tsr_session_create(r.model, &so, &r.sess));
    memset(got, 0, sizeof got);
    if (r.sess) run_tokens(r.sess, got, vocab);
    CU_ASSERT_EQUAL(memcmp(ref, got, sizeof ref), 0);
    tsr_session_stats_t st;
    if (r.sess) {
      tsr_session_get_stats(r.sess, &st);
      if (cases[c].expect_fallback) CU_ASSERT_TRUE(st.fallbacks >= 1);
      if (cases[c].retries && strstr(cases[c].dev, "fail")) CU_ASSERT_TRUE(st.retries >= 1);
      printf("REPORT fallback %-16s retries=%d: %llu fallbacks, %llu retries, output unchanged\n",
             cases[c].dev, cases[c].retries, (unsigned long long)st.fallbacks,
             (unsigned long long)st.retries);
    }
    rig_close(&r);
    /* --no-fallback: the same fault is an error */
    memset(&r, 0, sizeof r);
    o.fallback = false;
    tsr_status_t s = tsr_context_create(&o, &r.ctx);
    if (!s) s = tsr_model_load(r.ctx, small_model, NULL, &r.model);
    if (!s) s = tsr_session_create(r.model, &so, &r.sess);
    if (!s && cases[c].expect_fallback) {
      int32_t toks[37];
      for (int i = 0; i < 37; i++) toks[i] = (i * 131 + 7) % vocab;
      s = tsr_session_eval(r.sess, toks, 37, NULL);
      for (int i = 0; !s && i < 5; i++) s = tsr_session_eval(r.sess, &toks[i], 1, NULL);
    }
    if (cases[c].expect_fallback || strstr(cases[c].dev, "lost")) {
      CU_ASSERT_PTR_NOT_NULL(s);
      if (s) printf("REPORT --no-fallback %s: %s\n", cases[c].dev, tsr_status_message(s));
    }
    tsr_status_free(s);
    rig_close(&r);
  }
}

/* ---- a small JSON checker for the trace ---- */

typedef struct {
  const char *p;
  int ok;
} js_t;

static void ws(js_t *j) { while (isspace((unsigned char)*j->p)) j->p++; }
static void value(js_t *j);
static void string(js_t *j) {
  if (*j->p != '"') { j->ok = 0; return; }
  for (j->p++; *j->p && *j->p != '"'; j->p++)
    if (*j->p == '\\') j->p++;
  if (*j->p != '"') j->ok = 0;
  else j->p++;
}
static void value(js_t *j) {
  ws(j);
  if (!j->ok) return;
  if (*j->p == '{' || *j->p == '[') {
    char close = *j->p == '{' ? '}' : ']';
    bool obj = *j->p == '{';
    j->p++;
    ws(j);
    if (*j->p == close) { j->p++; return; }
    for (;;) {
      if (obj) {
        ws(j); string(j); ws(j);
        if (*j->p != ':') { j->ok = 0; return; }
        j->p++;
      }
      value(j);
      ws(j);
      if (!j->ok) return;
      if (*j->p == ',') { j->p++; continue; }
      if (*j->p == close) { j->p++; return; }
      j->ok = 0;
      return;
    }
  } else if (*j->p == '"') {
    string(j);
  } else {
    char *end;
    strtod(j->p, &end);
    if (end == j->p) {
      if (!strncmp(j->p, "true", 4)) end = (char *)j->p + 4;
      else if (!strncmp(j->p, "false", 5)) end = (char *)j->p + 5;
      else if (!strncmp(j->p, "null", 4)) end = (char *)j->p + 4;
      else { j->ok = 0; return; }
    }
    j->p = end;
  }
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
  if (b) b[n] = '\0';
  fclose(f);
  return b;
}

/* The trace is one JSON array; it names the host, copy and device tracks;
 * B/E events balance per track; device runs are complete events, and with
 * the rows split over two devices their launches overlap (the second device
 * was queued before the first finished). */
static void test_trace(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/trace.json", tsr_test_tmpdir());
  rig_t r;
  rig_split = TSR_SPLIT_ROWS;
  TSR_ASSERT_OK(rig_open(&r, small_model, "fmodel,fmodel", TSR_OFFLOAD_ALL, NULL, true, path,
                         TSR_PRECISION_INT8));
  rig_split = TSR_SPLIT_LAYERS;
  float l[512];
  if (r.sess) run_tokens(r.sess, l, 512);
  rig_close(&r);
  char *txt = slurp(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
  js_t j = {txt, 1};
  value(&j);
  ws(&j);
  CU_ASSERT_TRUE(j.ok && *j.p == '\0');
  CU_ASSERT_PTR_NOT_NULL(strstr(txt, "\"name\": \"host: ops\""));
  CU_ASSERT_PTR_NOT_NULL(strstr(txt, "\"name\": \"host<->device copies\""));
  CU_ASSERT_PTR_NOT_NULL(strstr(txt, "device fmodel0: runs"));
  /* balance per tid, and overlap of device runs */
  int depth[16] = {0}, bad = 0, xs = 0, overlaps = 0;
  double last_end = -1;
  for (const char *p = txt; (p = strstr(p, "{\"ph\": \"")); p++) {
    char ph = p[8];
    const char *tid = strstr(p, "\"tid\": ");
    int t = tid ? atoi(tid + 7) : 0;
    if (t < 0 || t >= 16) continue;
    if (ph == 'B') depth[t]++;
    if (ph == 'E' && --depth[t] < 0) bad++;
    if (ph == 'X') {
      xs++;
      double ts = atof(strstr(p, "\"ts\": ") + 6), dur = atof(strstr(p, "\"dur\": ") + 7);
      if (last_end > ts) overlaps++; /* began before the previous run ended */
      last_end = ts + dur;
    }
  }
  for (int t = 0; t < 16; t++) bad += depth[t] != 0;
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_TRUE(xs > 60);
  CU_ASSERT_TRUE(overlaps > 0);
  printf("REPORT trace: %d device runs, %d began while the previous was in flight\n", xs,
         overlaps);
  free(txt);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("offload", setup, NULL);
  CU_add_test(s, "small matmuls stay on the host", test_small_stays_on_host);
  CU_add_test(s, "large prefill goes to the device", test_large_prefill_goes_to_device);
  CU_add_test(s, "policies and overrides", test_policies_and_overrides);
  CU_add_test(s, "layer split across entries", test_layer_split);
  CU_add_test(s, "tile arithmetic", test_tile_arithmetic);
  CU_add_test(s, "odd shapes bit-exact through the device", test_odd_shapes_bit_exact);
  CU_add_test(s, "matmul groups on the device == naive reference", test_groups_equal_naive);
  CU_add_test(s, "a matmul group's ring stays resident, results exact", test_resident_rings);
  CU_add_test(s, "fallback and --no-fallback", test_fallback);
  CU_add_test(s, "queue mode, K in pieces, two engines, faults", test_queue_mode);
  CU_add_test(s, "trace is JSON, balanced, split launches in flight together", test_trace);
  return tsr_test_run_all();
}
