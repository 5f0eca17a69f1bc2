/*
 * test_isolation.c - engines with device-memory windows are isolated from
 * each other by the kernel, and devices turned off and on per engine change
 * nothing in the results.
 *
 * For every backend that opens here (fmodel always; sim when the RTL
 * library loads; opencl when an OpenCL platform is present; usb only with
 * the emulated board attached, which tests/e2e/isolation_usb.sh does by
 * running this program under scripts/usb-emu-run with
 * TSR_ISOLATION_BACKENDS=usb):
 *   - two engines of one context, each with a TSR_WINDOW_AUTO window: the
 *     windows are disjoint, every buffer of an engine lies in its own, and
 *     both evaluate to the host's int8 logits bit for bit;
 *   - a descriptor ring forged inside engine A's window whose operands or
 *     result point into engine B's window, launched with A's window as
 *     MEM_BASE/MEM_SIZE exactly as the executor launches: the kernel
 *     refuses it with ADDR_RANGE, not a byte of B's window changes, and B
 *     still evaluates to the same logits. The positive control (the same
 *     ring with every address in A's window) succeeds and its C equals a
 *     naive int8 product.
 * Then, on fmodel: devices turned off and on between evaluations
 * (tsr_engine_set_devices) with a rows split over two devices and a layer
 * split with int8 attention on the device: the logits stay bit-identical to
 * the host's, tsr_engine_devices() follows the mask, weights are released
 * (keep = 0) and uploaded again (visible in the window's allocator and the
 * engine's weight bytes), and only devices that are on count launches.
 *
 * TSR_ISOLATION_BACKENDS (comma-separated) replaces the default list
 * "fmodel,sim,opencl"; the devices on/off suite runs when fmodel is listed.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "driver/tsr_regmap.h"

#include "driver/devmem.h"
#include "driver/hal.h"
#include "host/src/offload.h"
#include "tsr_test.h"

/* The generated model: dim 48, hidden 100, 3 layers, 6 heads (3 KV heads,
 * head_dim 8), vocab 320. */
#define DIM 48
#define HIDDEN 100
#define LAYERS 3
#define HEADS 6
#define KV_HEADS 3
#define VOCAB 320
#define SEQ_LEN 64
#define HEAD_DIM (DIM / HEADS)

/* The token script every stream follows: a prefill chunk of PREFILL
 * tokens, then one decode step per remaining token. */
#define PREFILL 9
#define N_TOKENS 13
#define N_STEPS (1 + N_TOKENS - PREFILL)

#define WAIT_NS (120ull * 1000000000ull)
#define MAX_BACKENDS 8

static char model_path[512];

/* The host's logits of each script step: [0] reference attention, [1]
 * int8 dense attention; computed once. */
static float ref_logits[2][N_STEPS][VOCAB];
static bool ref_done[2];

static struct {
  char name[32];
} g_list[MAX_BACKENDS];
static int g_n_list, g_next_suite;
static const char *g_backend; /* backend of the suite now running */

static int32_t script_token(int i) { return (int32_t)((i * 97 + 11) % (VOCAB - 1)) + 1; }

/* ---- rigs and streams ---- */

typedef tsr_test_rig_t rig_t;

/* int8, 16 rows per pass, a window per device; `dense`: int8 dense
 * attention instead of the reference. */
static void engine_options(tsr_session_options_t *so, bool window, bool dense) {
  tsr_session_options_init(so);
  so->precision = TSR_PRECISION_INT8;
  so->max_batch_rows = 16;
  so->max_seq = SEQ_LEN;
  if (window) so->device_window_bytes = TSR_WINDOW_AUTO;
  if (dense) {
    tsr_status_t s = tsr_attn_pattern_parse("dense", &so->attn);
    CU_ASSERT_PTR_NULL(s);
    tsr_status_free(s);
  }
}

/* One sequence following the script on an engine. */
typedef struct {
  tsr_seq_t *seq;
  int step;
} stream_t;

/* Adds the stream's next step to batch b. */
static tsr_status_t stream_add(stream_t *st, tsr_batch_t *b, size_t *idx) {
  int32_t toks[PREFILL];
  const int first = st->step == 0 ? 0 : PREFILL + st->step - 1;
  const int n = st->step == 0 ? PREFILL : 1;
  for (int i = 0; i < n; i++) toks[i] = script_token(first + i);
  return tsr_batch_add(b, st->seq, toks, (size_t)n, true, idx);
}

/* Compares entry idx's logits with the host's for the stream's step, then
 * advances the stream. Returns the number of values that differ. */
static long stream_check(stream_t *st, const tsr_batch_t *b, size_t idx, int dense,
                         const char *what) {
  const float *l = tsr_batch_logits(b, idx);
  CU_ASSERT_PTR_NOT_NULL(l);
  long bad = VOCAB;
  if (l) {
    bad = 0;
    for (int v = 0; v < VOCAB; v++)
      bad += memcmp(&l[v], &ref_logits[dense][st->step][v], sizeof(float)) != 0;
  }
  if (bad)
    fprintf(stderr, "%s: step %d: %ld of %d logits differ from the host's\n", what, st->step,
            bad, VOCAB);
  st->step++;
  return bad;
}

/* Evaluates one step of each of the n streams in one batch and checks
 * their logits. */
static long eval_step(tsr_engine_t *e, stream_t *const *sts, int n, int dense,
                      const char *what) {
  tsr_batch_t *b = NULL;
  size_t idx[4];
  TSR_ASSERT_OK(tsr_batch_create(0, &b));
  if (!b) return VOCAB;
  tsr_status_t s = TSR_OK;
  for (int i = 0; !s && i < n; i++) s = stream_add(sts[i], b, &idx[i]);
  if (!s) s = tsr_engine_eval(e, b);
  long bad = 0;
  if (s) {
    fprintf(stderr, "%s: %s\n", what, tsr_status_message(s));
    bad = VOCAB;
  }
  TSR_ASSERT_OK(s);
  for (int i = 0; !bad && i < n; i++) bad += stream_check(sts[i], b, idx[i], dense, what);
  tsr_batch_destroy(b);
  return bad;
}

/* The host's logits of the script (reference or int8 dense attention). */
static bool need_ref(int dense) {
  if (ref_done[dense]) return true;
  rig_t r;
  tsr_session_options_t so;
  engine_options(&so, false, dense);
  tsr_engine_t *e = NULL;
  tsr_seq_t *seq = NULL;
  tsr_batch_t *b = NULL;
  tsr_status_t s = tsr_test_rig_open(&r, model_path, NULL, TSR_SPLIT_LAYERS, 60000);
  if (!s) s = tsr_engine_create(r.model, &so, &e);
  if (!s) s = tsr_seq_create(e, &seq);
  if (!s) s = tsr_batch_create(0, &b);
  stream_t st = {seq, 0};
  for (int k = 0; !s && k < N_STEPS; k++) {
    tsr_batch_clear(b);
    size_t idx;
    s = stream_add(&st, b, &idx);
    if (!s) s = tsr_engine_eval(e, b);
    const float *l = s ? NULL : tsr_batch_logits(b, idx);
    if (!s && !l) s = TSR_ERR(INTERNAL, "no logits");
    if (!s) memcpy(ref_logits[dense][k], l, sizeof(float) * VOCAB);
    st.step++;
  }
  TSR_ASSERT_OK(s);
  tsr_batch_destroy(b);
  tsr_seq_destroy(seq);
  tsr_engine_destroy(e);
  tsr_test_rig_close(&r);
  ref_done[dense] = true;
  return ref_done[dense];
}

/* ---- windows ---- */

static bool inside(const tsr_hal_buffer_t *b, uint64_t base, uint64_t size) {
  return b->size && b->addr >= base && b->addr + b->size <= base + size;
}

/* Resident weights of engine o on entry e: how many, and their bytes. */
static int resident_weights(const tsr_exec_t *o, int e, uint64_t *bytes) {
  const size_t n_w = (size_t)(LAYERS + 1) * TSR_MM_COUNT * (size_t)o->n_devs;
  int n = 0;
  uint64_t sum = 0;
  for (size_t i = (size_t)e; i < n_w; i += (size_t)o->n_devs) {
    if (!o->weight_on[i]) continue;
    n++;
    sum += o->weights[i].size;
  }
  if (bytes) *bytes = sum;
  return n;
}

/* The first resident weight buffer of engine o on entry e. */
static const tsr_hal_buffer_t *first_weight(const tsr_exec_t *o, int e) {
  const size_t n_w = (size_t)(LAYERS + 1) * TSR_MM_COUNT * (size_t)o->n_devs;
  for (size_t i = (size_t)e; i < n_w; i += (size_t)o->n_devs)
    if (o->weight_on[i]) return &o->weights[i];
  return NULL;
}

/* The int8 weight bytes of every matmul of the model, from its sizes:
 * q, k, v, o, gate, up, down per layer and the classifier. */
static uint64_t model_weight_bytes(void) {
  const uint64_t q = (uint64_t)HEADS * HEAD_DIM, kv = (uint64_t)KV_HEADS * HEAD_DIM;
  const uint64_t layer = q * DIM + 2 * kv * DIM + DIM * q + 3 * (uint64_t)HIDDEN * DIM;
  return LAYERS * layer + (uint64_t)VOCAB * DIM;
}

/* Every buffer engine o keeps on entry e (staging, weights) in its window. */
static void check_buffers_inside(const tsr_exec_t *o, int e, const char *name) {
  uint64_t base, size;
  tsr_exec_window(o, e, &base, &size);
  const tsr_exec_dev_t *d = &o->devs[e];
  CU_ASSERT_TRUE(inside(&d->a, base, size));
  CU_ASSERT_TRUE(inside(&d->c, base, size));
  CU_ASSERT_TRUE(inside(&d->ring, base, size));
  const size_t n_w = (size_t)(LAYERS + 1) * TSR_MM_COUNT * (size_t)o->n_devs;
  int outside = 0;
  for (size_t i = (size_t)e; i < n_w; i += (size_t)o->n_devs)
    outside += o->weight_on[i] && !inside(&o->weights[i], base, size);
  if (outside) fprintf(stderr, "%s: %d weight buffers outside the window\n", name, outside);
  CU_ASSERT_EQUAL(outside, 0);
}

static int init_backend_suite(void) {
  g_backend = g_list[g_next_suite++].name;
  return 0;
}

/* Two engines of one context with AUTO windows on g_backend. */
typedef struct {
  rig_t r;
  tsr_engine_t *a, *b;
} pair_t;

static bool pair_open(pair_t *p) {
  memset(p, 0, sizeof *p);
  tsr_session_options_t so;
  engine_options(&so, true, false);
  tsr_status_t s = tsr_test_rig_open(&p->r, model_path, g_backend, TSR_SPLIT_LAYERS, 60000);
  if (!s) s = tsr_engine_create(p->r.model, &so, &p->a);
  if (!s) s = tsr_engine_create(p->r.model, &so, &p->b);
  if (s) fprintf(stderr, "%s: %s\n", g_backend, tsr_status_message(s));
  TSR_ASSERT_OK(s);
  return p->a && p->b;
}

static void pair_close(pair_t *p) {
  tsr_engine_destroy(p->a);
  tsr_engine_destroy(p->b);
  tsr_test_rig_close(&p->r);
}

/* Runs the whole script on a new sequence of engine e and checks each
 * step against the host. Returns the logits that differ. */
static long run_script(tsr_engine_t *e, const char *what) {
  stream_t st = {NULL, 0};
  TSR_ASSERT_OK(tsr_seq_create(e, &st.seq));
  if (!st.seq) return VOCAB;
  stream_t *one[1] = {&st};
  long bad = 0;
  while (!bad && st.step < N_STEPS) bad += eval_step(e, one, 1, 0, what);
  tsr_seq_destroy(st.seq);
  return bad;
}

static void test_windows(void) {
  if (!need_ref(0)) return;
  pair_t p;
  if (!pair_open(&p)) {
    pair_close(&p);
    return;
  }
  const tsr_exec_t *A = p.a, *B = p.b;
  uint64_t ba, sa, bb, sb;
  tsr_exec_window(A, 0, &ba, &sa);
  tsr_exec_window(B, 0, &bb, &sb);
  CU_ASSERT_TRUE(sa > 0);
  CU_ASSERT_TRUE(sb > 0);
  CU_ASSERT_TRUE(ba + sa <= bb || bb + sb <= ba); /* disjoint */
  CU_ASSERT_PTR_EQUAL(A->devs[0].cd->hal, B->devs[0].cd->hal); /* one device */
  check_buffers_inside(A, 0, "engine A");
  check_buffers_inside(B, 0, "engine B");
  /* --offload all: every matmul's weights resident, in the window */
  uint64_t wa, wb;
  CU_ASSERT_EQUAL(resident_weights(A, 0, &wa), LAYERS * 7 + 1);
  CU_ASSERT_EQUAL(resident_weights(B, 0, &wb), LAYERS * 7 + 1);
  CU_ASSERT_EQUAL(wa, model_weight_bytes());
  CU_ASSERT_EQUAL(wb, model_weight_bytes());
  /* both evaluate, interleaved step by step, to the host's logits */
  stream_t sta = {NULL, 0}, stb = {NULL, 0};
  TSR_ASSERT_OK(tsr_seq_create(p.a, &sta.seq));
  TSR_ASSERT_OK(tsr_seq_create(p.b, &stb.seq));
  long bad = 0;
  stream_t *one_a[1] = {&sta}, *one_b[1] = {&stb};
  for (int k = 0; sta.seq && stb.seq && !bad && k < N_STEPS; k++) {
    bad += eval_step(p.a, one_a, 1, 0, "engine A");
    bad += eval_step(p.b, one_b, 1, 0, "engine B");
  }
  CU_ASSERT_EQUAL(bad, 0);
  tsr_device_stats_t da, db;
  CU_ASSERT_TRUE(tsr_engine_device_stats(p.a, 0, &da));
  CU_ASSERT_TRUE(tsr_engine_device_stats(p.b, 0, &db));
  CU_ASSERT_TRUE(da.launches > 0);
  CU_ASSERT_TRUE(db.launches > 0);
  CU_ASSERT_EQUAL(da.fallbacks, 0);
  CU_ASSERT_EQUAL(db.fallbacks, 0);
  printf("REPORT isolation %s: windows A [0x%" PRIx64 ", +%" PRIu64 ") B [0x%" PRIx64
         ", +%" PRIu64 ") disjoint; %" PRIu64 " + %" PRIu64 " launches, int8 logits = host\n",
         g_backend, ba, sa, bb, sb, da.launches, db.launches);
  tsr_seq_destroy(sta.seq);
  tsr_seq_destroy(stb.seq);
  pair_close(&p);
}

/* ---- forged descriptors ---- */

typedef struct {
  tsr_hal_device_t *h;
  const tsr_exec_dev_t *d; /* engine A's device: its window and staging */
  uint64_t base, size;     /* A's window */
} launcher_t;

static tsr_status_t win_write(const launcher_t *L, uint64_t addr, const void *src, size_t n) {
  return L->h->vt->write(L->h, &L->d->window, addr - L->d->window.addr, src, n);
}

static tsr_status_t win_read(const launcher_t *L, uint64_t addr, void *dst, size_t n) {
  return L->h->vt->read(L->h, &L->d->window, addr - L->d->window.addr, dst, n);
}

/* Packs `n` descriptors into A's staging ring and launches them with A's
 * window as MEM_BASE/MEM_SIZE, as the executor's launch does. */
static tsr_status_t launch_ring(const launcher_t *L, const tsr_desc_t *descs, uint32_t n,
                                tsr_hal_result_t *res) {
  uint8_t ring[4 * TSR_HW_DESC_BYTES];
  for (uint32_t i = 0; i < n; i++) tsr_desc_pack(ring + i * TSR_HW_DESC_BYTES, &descs[i]);
  memset(res, 0, sizeof *res);
  TSR_RETURN_IF(win_write(L, L->d->ring.addr, ring, (size_t)n * TSR_HW_DESC_BYTES));
  tsr_hal_command_t cmd = {.window_base = L->base, .window_size = L->size,
                           .ring = L->d->ring.addr, .n_desc = n};
  uint64_t fence = 0;
  TSR_RETURN_IF(L->h->vt->submit(L->h, &cmd, &fence));
  return L->h->vt->wait(L->h, fence, WAIT_NS, res);
}

/* Shapes of the control GEMM: odd sizes, K across several array passes. */
#define GM 5
#define GN 7
#define GK 37

/* The positive control: A and W in A's staging A, C in its staging C;
 * the result equals the naive product. Returns the mismatches. */
static long control_gemm(const launcher_t *L, tsr_desc_t *desc, uint64_t seed) {
  int8_t a[GM * GK], w[GN * GK];
  int32_t c[GM * GN], want[GM * GN];
  for (int i = 0; i < GM * GK; i++) a[i] = (int8_t)tsr_test_splitmix64(&seed);
  for (int i = 0; i < GN * GK; i++) w[i] = (int8_t)tsr_test_splitmix64(&seed);
  a[0] = -128;
  w[0] = -128; /* the extremes */
  const uint64_t a_addr = L->d->a.addr, w_addr = L->d->a.addr + 256, c_addr = L->d->c.addr;
  *desc = (tsr_desc_t){.opcode = TSR_OP_GEMM_I8_I32, .m = GM, .n = GN, .k = GK, .lda = GK,
                       .ldw = GK, .ldc = GN * 4, .a_addr = a_addr, .w_addr = w_addr,
                       .c_addr = c_addr};
  memset(c, 0x5A, sizeof c);
  TSR_ASSERT_OK(win_write(L, a_addr, a, sizeof a));
  TSR_ASSERT_OK(win_write(L, w_addr, w, sizeof w));
  TSR_ASSERT_OK(win_write(L, c_addr, c, sizeof c));
  tsr_hal_result_t res;
  TSR_ASSERT_OK(launch_ring(L, desc, 1, &res));
  CU_ASSERT_EQUAL(res.hw_status, TSR_HWERR_OK);
  CU_ASSERT_EQUAL(res.desc_done, 1);
  TSR_ASSERT_OK(win_read(L, c_addr, c, sizeof c));
  tsr_test_ref_gemm_i8(want, GN, a, GK, w, GK, GM, GN, GK);
  long bad = 0;
  for (int i = 0; i < GM * GN; i++) bad += c[i] != want[i];
  if (bad || res.hw_status)
    fprintf(stderr, "%s: control GEMM: status %s, %ld of %d values differ\n", g_backend,
            tsr_hal_hwerr_name(res.hw_status), bad, GM * GN);
  return bad;
}

static void test_forged(void) {
  if (!need_ref(0)) return;
  pair_t p;
  if (!pair_open(&p)) {
    pair_close(&p);
    return;
  }
  /* B has run: its weights, staging and results are in its window */
  CU_ASSERT_EQUAL(run_script(p.b, "engine B before"), 0);
  const tsr_exec_t *A = p.a, *B = p.b;
  const tsr_exec_dev_t *dA = &A->devs[0], *dB = &B->devs[0];
  uint64_t bb, sb;
  launcher_t L = {dA->cd->hal, dA, 0, 0};
  tsr_exec_window(A, 0, &L.base, &L.size);
  tsr_exec_window(B, 0, &bb, &sb);
  const tsr_hal_buffer_t *wB = first_weight(B, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(wB);
  CU_ASSERT_TRUE_FATAL(inside(wB, bb, sb));
  CU_ASSERT_TRUE_FATAL(L.size > 0 && sb > 0);
  uint8_t *before = malloc(sb), *after = malloc(sb);
  CU_ASSERT_PTR_NOT_NULL_FATAL(before);
  CU_ASSERT_PTR_NOT_NULL_FATAL(after);
  tsr_ctx_device_t *cd = dA->cd;
  pthread_mutex_lock(&cd->lock); /* as an engine's launch holds it */
  TSR_ASSERT_OK(L.h->vt->read(L.h, &dB->window, 0, before, sb));

  tsr_desc_t good;
  long bad = control_gemm(&L, &good, 1);
  CU_ASSERT_EQUAL(bad, 0);

  /* the forged descriptors: the good one with addresses moved into B */
  const uint64_t c_bytes = (uint64_t)GM * GN * 4;
  struct {
    const char *what;
    uint64_t a, w, c;
  } forged[] = {
      {"C onto B's weights", good.a_addr, good.w_addr, wB->addr},
      {"C onto B's staging C", good.a_addr, good.w_addr, dB->c.addr},
      {"W from B's weights", good.a_addr, wB->addr, good.c_addr},
      {"A from B's staging A", dB->a.addr, good.w_addr, good.c_addr},
      {"all operands in B", dB->a.addr, wB->addr, dB->c.addr},
      {"C at B's window start", good.a_addr, good.w_addr, bb},
      {"C's tail past A's window", good.a_addr, good.w_addr,
       (L.base + L.size - c_bytes / 2) & ~(uint64_t)3},
  };
  int refused = 0, n_forged = (int)(sizeof forged / sizeof forged[0]);
  int32_t pattern[GM * GN], got[GM * GN];
  memset(pattern, 0xC3, sizeof pattern);
  for (int f = 0; f < n_forged; f++) {
    tsr_desc_t d = good;
    d.a_addr = forged[f].a;
    d.w_addr = forged[f].w;
    d.c_addr = forged[f].c;
    TSR_ASSERT_OK(win_write(&L, good.c_addr, pattern, sizeof pattern));
    tsr_hal_result_t res;
    TSR_ASSERT_OK(launch_ring(&L, &d, 1, &res));
    if (res.hw_status != TSR_HWERR_ADDR_RANGE)
      fprintf(stderr, "%s: forged descriptor (%s): status %s, want ADDR_RANGE\n", g_backend,
              forged[f].what, tsr_hal_hwerr_name(res.hw_status));
    CU_ASSERT_EQUAL(res.hw_status, TSR_HWERR_ADDR_RANGE);
    CU_ASSERT_EQUAL(res.err_index, 0);
    CU_ASSERT_EQUAL(res.desc_done, 0);
    refused += res.hw_status == TSR_HWERR_ADDR_RANGE;
    /* a refused descriptor writes nothing, in A's window either */
    TSR_ASSERT_OK(win_read(&L, good.c_addr, got, sizeof got));
    CU_ASSERT_EQUAL(memcmp(got, pattern, sizeof got), 0);
  }
  /* a ring whose second descriptor is forged: the first runs, the second
   * is refused and named */
  tsr_desc_t two[2] = {good, good};
  two[1].c_addr = wB->addr;
  tsr_hal_result_t res2;
  TSR_ASSERT_OK(launch_ring(&L, two, 2, &res2));
  CU_ASSERT_EQUAL(res2.hw_status, TSR_HWERR_ADDR_RANGE);
  CU_ASSERT_EQUAL(res2.err_index, 1);
  CU_ASSERT_EQUAL(res2.desc_done, 1);
  refused += res2.hw_status == TSR_HWERR_ADDR_RANGE;
  /* the device still computes after the refusals */
  CU_ASSERT_EQUAL(control_gemm(&L, &good, 2), 0);

  TSR_ASSERT_OK(L.h->vt->read(L.h, &dB->window, 0, after, sb));
  pthread_mutex_unlock(&cd->lock);
  uint64_t changed = 0;
  for (uint64_t i = 0; i < sb; i++) changed += before[i] != after[i];
  if (changed)
    fprintf(stderr, "%s: %" PRIu64 " bytes of B's window changed\n", g_backend, changed);
  CU_ASSERT_EQUAL(changed, 0);
  /* both engines still evaluate to the host's logits (A's staging was
   * scratch for the forged launches) */
  CU_ASSERT_EQUAL(run_script(p.b, "engine B after"), 0);
  CU_ASSERT_EQUAL(run_script(p.a, "engine A after"), 0);
  printf("REPORT isolation %s: %d of %d forged rings refused with ADDR_RANGE, %" PRIu64
         " bytes of the other window compared, %" PRIu64 " changed\n",
         g_backend, refused, n_forged + 1, sb, changed);
  free(before);
  free(after);
  pair_close(&p);
}

/* ---- devices turned off and on ---- */

/* Checks, after tsr_engine_set_devices on an engine of n device entries
 * (no host entry), the engine's devices and resident weights (count,
 * window allocator, weight bytes) against what should be there: every
 * weight on entry e when has[e], none otherwise. */
static void check_residency(const tsr_engine_t *eng, uint64_t mask, const bool *has,
                            const uint64_t *used_full, int n) {
  const tsr_exec_t *o = eng;
  uint64_t total = 0;
  CU_ASSERT_EQUAL(tsr_engine_devices(eng), mask & ((1ull << n) - 1));
  for (int e = 0; e < n; e++) {
    uint64_t bytes;
    const int cnt = resident_weights(o, e, &bytes);
    CU_ASSERT_EQUAL(cnt, has[e] ? LAYERS * 7 + 1 : 0);
    CU_ASSERT_EQUAL(bytes, has[e] ? model_weight_bytes() : 0);
    total += bytes;
    /* the window's allocator: the weights' bytes (every size here a
     * multiple of the allocator's rounding) out while released */
    tsr_devmem_stats_t ds;
    tsr_devmem_stats(o->devs[e].sub, &ds);
    CU_ASSERT_EQUAL(used_full[e] - ds.used, has[e] ? 0 : model_weight_bytes());
  }
  tsr_session_stats_t st;
  tsr_engine_get_stats(eng, &st);
  if (st.weight_bytes != total)
    fprintf(stderr, "weight_bytes %" PRIu64 ", resident %" PRIu64 "\n", st.weight_bytes, total);
  CU_ASSERT_EQUAL(st.weight_bytes, total);
}

/* One step of a schedule: the mask and keep set before it. */
typedef struct {
  uint64_t mask, keep;
} sched_t;

/* "fmodel,fmodel", rows split, reference attention: the devices turned off
 * and on between the steps of one sequence. */
static void test_rows_split_on_off(void) {
  if (!need_ref(0)) return;
  rig_t r;
  tsr_session_options_t so;
  engine_options(&so, true, false);
  tsr_engine_t *eng = NULL;
  TSR_ASSERT_OK(tsr_test_rig_open(&r, model_path, "fmodel,fmodel", TSR_SPLIT_ROWS, 60000));
  if (r.model) TSR_ASSERT_OK(tsr_engine_create(r.model, &so, &eng));
  if (!eng) {
    tsr_test_rig_close(&r);
    return;
  }
  const tsr_exec_t *o = eng;
  CU_ASSERT_EQUAL(tsr_engine_device_count(eng), 2);
  CU_ASSERT_EQUAL(tsr_engine_devices(eng), 3u);
  tsr_device_stats_t ds;
  CU_ASSERT_FALSE(tsr_engine_device_stats(eng, 2, &ds));
  CU_ASSERT_FALSE(tsr_engine_device_stats(eng, -1, &ds));
  uint64_t used_full[2];
  for (int e = 0; e < 2; e++) {
    tsr_devmem_stats_t st;
    tsr_devmem_stats(o->devs[e].sub, &st);
    used_full[e] = st.used;
  }
  bool has[2] = {true, true};
  check_residency(eng, 3, has, used_full, 2);
  /* each step: which devices are on, and which of those turned off keep
   * their weights */
  const sched_t sched[] = {
      {3, 0}, /* both */
      {1, 0}, /* device 1 off, weights released */
      {2, 0}, /* device 1 back (weights uploaded again), device 0 released */
      {0, 1}, /* none: the host computes; device 0 keeps nothing, 1 keeps */
      {3, 0}, /* both again */
  };
  _Static_assert(sizeof sched / sizeof sched[0] == N_STEPS, "one schedule entry per step");
  /* two sequences per batch: every device that is on gets rows (a single
   * decode row would go to the last device of the split alone) */
  stream_t s1 = {NULL, 0}, s2 = {NULL, 0};
  TSR_ASSERT_OK(tsr_seq_create(eng, &s1.seq));
  TSR_ASSERT_OK(tsr_seq_create(eng, &s2.seq));
  stream_t *both[2] = {&s1, &s2};
  long bad = 0;
  for (int k = 0; s1.seq && s2.seq && k < N_STEPS; k++) {
    TSR_ASSERT_OK(tsr_engine_set_devices(eng, sched[k].mask, sched[k].keep));
    for (int e = 0; e < 2; e++) {
      const bool on = sched[k].mask >> e & 1, keep = sched[k].keep >> e & 1;
      has[e] = on || (has[e] && keep);
    }
    check_residency(eng, sched[k].mask, has, used_full, 2);
    uint64_t l0[2];
    for (int e = 0; e < 2; e++) {
      CU_ASSERT_TRUE(tsr_engine_device_stats(eng, e, &ds));
      l0[e] = ds.launches;
    }
    char what[64];
    snprintf(what, sizeof what, "rows split, mask %" PRIu64, sched[k].mask);
    bad += eval_step(eng, both, 2, 0, what);
    for (int e = 0; e < 2; e++) {
      tsr_engine_device_stats(eng, e, &ds);
      const bool on = sched[k].mask >> e & 1;
      if (on != (ds.launches > l0[e]))
        fprintf(stderr, "step %d, device %d (%s): launches %" PRIu64 " -> %" PRIu64 "\n", k, e,
                on ? "on" : "off", l0[e], ds.launches);
      CU_ASSERT_EQUAL(on, ds.launches > l0[e]);
      CU_ASSERT_EQUAL(ds.fallbacks, 0);
    }
  }
  CU_ASSERT_EQUAL(bad, 0);
  tsr_seq_destroy(s1.seq);
  tsr_seq_destroy(s2.seq);
  tsr_engine_destroy(eng);
  tsr_test_rig_close(&r);
}

/* "fmodel,cpu", layers split, int8 dense attention with the KV caches on
 * the device: a sequence keeps going while the device is turned off (its
 * attention moves to the host), one is created while it is off, another
 * after it is back on; all in batches together. */
static void test_layer_split_attention_on_off(void) {
  if (!need_ref(1)) return;
  rig_t r;
  tsr_session_options_t so;
  engine_options(&so, true, true);
  tsr_engine_t *eng = NULL;
  TSR_ASSERT_OK(tsr_test_rig_open(&r, model_path, "fmodel,cpu", TSR_SPLIT_LAYERS, 60000));
  if (r.model) TSR_ASSERT_OK(tsr_engine_create(r.model, &so, &eng));
  if (!eng) {
    tsr_test_rig_close(&r);
    return;
  }
  const tsr_exec_t *o = eng;
  tsr_device_stats_t ds;
  CU_ASSERT_EQUAL(tsr_engine_device_count(eng), 2);
  CU_ASSERT_EQUAL(tsr_engine_devices(eng), 3u);
  CU_ASSERT_FALSE(tsr_engine_device_stats(eng, 1, &ds)); /* the host */
  const int n_resident = resident_weights(o, 0, NULL); /* its layers' matmuls */
  CU_ASSERT_TRUE(n_resident > 0 && n_resident < LAYERS * 7 + 1);
  stream_t s1 = {NULL, 0}, s2 = {NULL, 0}, s3 = {NULL, 0};
  TSR_ASSERT_OK(tsr_seq_create(eng, &s1.seq));
  if (!s1.seq) goto done;
  int on_dev = 0;
  for (int l = 0; l < LAYERS; l++) on_dev += s1.seq->kv_dev[l] == 0;
  CU_ASSERT_TRUE(on_dev > 0); /* its KV cache lives on the device */
  long bad = 0;
  stream_t *b1[1] = {&s1};
  bad += eval_step(eng, b1, 1, 1, "attention, on");
  bad += eval_step(eng, b1, 1, 1, "attention, on");
  CU_ASSERT_TRUE(tsr_engine_device_stats(eng, 0, &ds));
  const uint64_t launches_on = ds.launches;
  CU_ASSERT_TRUE(launches_on > 0);
  /* off, weights released: s1 goes on, s2 is created meanwhile */
  TSR_ASSERT_OK(tsr_engine_set_devices(eng, 0, 0));
  CU_ASSERT_EQUAL(tsr_engine_devices(eng), 2u); /* the cpu entry stays */
  CU_ASSERT_EQUAL(resident_weights(o, 0, NULL), 0);
  TSR_ASSERT_OK(tsr_seq_create(eng, &s2.seq));
  if (!s2.seq) goto done;
  for (int l = 0; l < LAYERS; l++) CU_ASSERT_EQUAL(s2.seq->kv_dev[l], -1);
  stream_t *b12[2] = {&s1, &s2};
  bad += eval_step(eng, b12, 2, 1, "attention, off");
  tsr_engine_device_stats(eng, 0, &ds);
  CU_ASSERT_EQUAL(ds.launches, launches_on); /* nothing while off */
  /* on again: the weights come back; s3 gets its KV cache on the device */
  TSR_ASSERT_OK(tsr_engine_set_devices(eng, 1, 0));
  CU_ASSERT_EQUAL(tsr_engine_devices(eng), 3u);
  CU_ASSERT_EQUAL(resident_weights(o, 0, NULL), n_resident);
  bad += eval_step(eng, b12, 2, 1, "attention, on again");
  tsr_engine_device_stats(eng, 0, &ds);
  CU_ASSERT_TRUE(ds.launches > launches_on);
  TSR_ASSERT_OK(tsr_seq_create(eng, &s3.seq));
  if (!s3.seq) goto done;
  on_dev = 0;
  for (int l = 0; l < LAYERS; l++) on_dev += s3.seq->kv_dev[l] == 0;
  CU_ASSERT_TRUE(on_dev > 0);
  stream_t *b123[3] = {&s1, &s2, &s3};
  bad += eval_step(eng, b123, 3, 1, "attention, three sequences");
  while (s2.step < N_STEPS && s3.step < N_STEPS) {
    stream_t *b23[2] = {&s2, &s3};
    bad += eval_step(eng, b23, 2, 1, "attention, two sequences");
  }
  CU_ASSERT_EQUAL(bad, 0);
  tsr_device_stats_t fin;
  tsr_engine_device_stats(eng, 0, &fin);
  CU_ASSERT_EQUAL(fin.fallbacks, 0);
done:
  tsr_seq_destroy(s1.seq);
  tsr_seq_destroy(s2.seq);
  tsr_seq_destroy(s3.seq);
  tsr_engine_destroy(eng);
  tsr_test_rig_close(&r);
}

static void test_set_devices_errors(void) {
  TSR_ASSERT_ERR(tsr_engine_set_devices(NULL, 1, 0), TSR_STATUS_INVALID_ARGUMENT, "engine");
  CU_ASSERT_EQUAL(tsr_engine_devices(NULL), 0u);
  CU_ASSERT_EQUAL(tsr_engine_device_count(NULL), 0);
}

/* ---- main ---- */

static int setup(void) {
  return tsr_test_gen_model(model_path, sizeof model_path, "isolation", DIM, HIDDEN, LAYERS,
                            HEADS, KV_HEADS, VOCAB, SEQ_LEN, 13);
}

int main(void) {
  if (setup()) return 1;
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  const char *env = getenv("TSR_ISOLATION_BACKENDS");
  char list[256];
  snprintf(list, sizeof list, "%s", env && *env ? env : "fmodel,sim,opencl");
  bool have_fmodel = false, have_usb = false;
  for (char *save = NULL, *name = strtok_r(list, ",", &save); name && g_n_list < MAX_BACKENDS;
       name = strtok_r(NULL, ",", &save)) {
    have_usb = have_usb || !strcmp(name, "usb");
    char what[96];
    snprintf(what, sizeof what, "isolation on %s (every case)", name);
    tsr_hal_device_t *dev = NULL;
    tsr_status_t st = tsr_hal_open(name, &dev);
    if (st) {
      tsr_test_skip_named(what, "%s does not open here: %s", name, tsr_status_message(st));
      tsr_status_free(st);
      continue;
    }
    tsr_hal_caps_t caps;
    dev->vt->query_caps(dev, &caps);
    tsr_hal_close(dev);
    if (caps.flags & TSR_HAL_CAP_NO_COMPUTE) {
      tsr_test_skip_named(what, "%s computes nothing here", name);
      continue;
    }
    snprintf(g_list[g_n_list].name, sizeof g_list[g_n_list].name, "%s", name);
    g_n_list++;
    have_fmodel = have_fmodel || !strcmp(name, "fmodel");
    char title[96];
    snprintf(title, sizeof title, "isolation on %s", name);
    CU_pSuite s = CU_add_suite(title, init_backend_suite, NULL); /* CUnit copies the name */
    CU_add_test(s, "two engines: disjoint windows, logits = host", test_windows);
    CU_add_test(s, "forged cross-window descriptors refused, other window unchanged",
                test_forged);
  }
  if (!have_usb)
    tsr_test_skip_named("isolation on usb (every case)",
                        "the emulated board is attached by tests/e2e/isolation_usb.sh "
                        "(scripts/usb-emu-run, TSR_ISOLATION_BACKENDS=usb)");
  if (have_fmodel) {
    CU_pSuite s = CU_add_suite("devices on and off", NULL, NULL);
    CU_add_test(s, "rows split over two devices", test_rows_split_on_off);
    CU_add_test(s, "layer split with int8 attention on the device",
                test_layer_split_attention_on_off);
    CU_add_test(s, "argument errors", test_set_devices_errors);
  }
  return tsr_test_run_all();
}
