/*
 * test_hal.c - the HAL conformance suite.
 *
 * The same tests run against every backend that opens here: "fmodel" always,
 * "sim" when the RTL library loads (otherwise the program says it skipped
 * sim and why). Integer results are compared for equality with a naive
 * reference written here, independent of the library's kernels. Fault
 * injection (hang, fail, lost) uses the fmodel backend's options; a missing RTL
 * library must give UNAVAILABLE, never an abort. When both backends open,
 * the same rings run on both and must give identical memory and counters.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "driver/tsr_regmap.h"

#include "driver/devmem.h"
#include "driver/hal.h"
#include "driver/kernel_model.h"
#include "tsr_test.h"

#define WAIT_FOREVER UINT64_MAX
#define PATTERN 0xA5
#define MEM_OPTS "mem=16M"

/* Backends the conformance suites run against: "fmodel" and "sim" by
 * default, or the comma-separated list in $TSR_TEST_BACKENDS. Each entry
 * remembers whether it takes the mem= option (to keep tests small). */
#define MAX_BACKENDS 8
static struct { char name[32]; bool mem_opt; } g_list[MAX_BACKENDS];
static int g_n_list, g_next_suite;
static const char *g_backend; /* backend of the suite now running */
static bool g_mem_opt;

static uint64_t g_rng = 0x1234abcdull;
static uint32_t rnd(uint32_t n) { return (uint32_t)(tsr_test_splitmix64(&g_rng) % n); }

/* Opens g_backend with extra options (may be NULL). */
static tsr_hal_device_t *open_backend(const char *backend, const char *opts) {
  char spec[256];
  bool mem = !strcmp(backend, "fmodel") || !strcmp(backend, "sim") ||
             (!strcmp(backend, g_backend ? g_backend : "") && g_mem_opt);
  snprintf(spec, sizeof spec, "%s:%s%s%s", backend, mem ? MEM_OPTS : "",
           mem && opts ? "," : "", opts ? opts : "");
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open(spec, &dev);
  if (s) fprintf(stderr, "open %s: %s\n", spec, tsr_status_message(s));
  CU_ASSERT_PTR_NULL(s);
  tsr_status_free(s);
  return dev;
}

/* ------------------------------------------------------------------------ */
/* A ring of GEMM descriptors laid out in one buffer, and its checking.      */
/* ------------------------------------------------------------------------ */

typedef struct gcase {
  tsr_desc_t d;          /* as submitted (addresses filled by layout)       */
  uint64_t a_off, w_off, c_off, c_len; /* offsets in the buffer            */
  int8_t *a, *w;         /* host operands: (m, lda) and (n, ldw)            */
  size_t a_bytes, w_bytes; /* their sizes (fixed before any mutation)       */
  bool expect_written;   /* false for a descriptor that must not run        */
} gcase_t;

typedef struct ring_run {
  tsr_hal_buffer_t buf;
  uint64_t size, guard;      /* buffer size; guard bytes at both ends      */
  uint64_t ring_off;
  gcase_t *cases;
  uint32_t n;
  uint8_t *before;           /* buffer contents before the launch          */
  uint8_t *after;            /* buffer contents after the launch           */
  tsr_hal_result_t res;
} ring_run_t;

enum fill { FILL_RANDOM, FILL_MIN, FILL_MAX, FILL_EXTREME };

static void fill_i8(int8_t *p, size_t n, enum fill f) {
  for (size_t i = 0; i < n; i++) {
    switch (f) {
      case FILL_RANDOM: p[i] = (int8_t)(tsr_test_splitmix64(&g_rng) >> 56); break;
      case FILL_MIN: p[i] = -128; break;
      case FILL_MAX: p[i] = 127; break;
      case FILL_EXTREME: p[i] = (tsr_test_splitmix64(&g_rng) & 1) ? 127 : -128; break;
    }
  }
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Adds a GEMM case with padded strides (extra bytes per row, >= 0). */
static void add_case(gcase_t *c, uint32_t m, uint32_t n, uint32_t k, uint32_t pad_a,
                     uint32_t pad_w, uint32_t pad_c_words, enum fill fa, enum fill fw) {
  memset(c, 0, sizeof *c);
  c->d.opcode = TSR_OP_GEMM_I8_I32;
  c->d.m = m;
  c->d.n = n;
  c->d.k = k;
  c->d.lda = k + pad_a;
  c->d.ldw = k + pad_w;
  c->d.ldc = 4 * (n + pad_c_words);
  c->a_bytes = (size_t)m * c->d.lda;
  c->w_bytes = (size_t)n * c->d.ldw;
  c->a = malloc(c->a_bytes);
  c->w = malloc(c->w_bytes);
  fill_i8(c->a, (size_t)m * c->d.lda, fa);
  fill_i8(c->w, (size_t)n * c->d.ldw, fw);
  c->expect_written = true;
}

/* Lays the cases out after the ring in one buffer: guard | ring | (A W C)* |
 * guard. Addresses in the descriptors are filled in. */
static void layout(ring_run_t *r, tsr_hal_device_t *dev) {
  r->guard = 256;
  uint64_t off = r->guard;
  r->ring_off = off;
  off += (uint64_t)r->n * TSR_HW_DESC_BYTES;
  for (uint32_t i = 0; i < r->n; i++) {
    gcase_t *c = &r->cases[i];
    if (c->d.opcode != TSR_OP_GEMM_I8_I32 || !c->a) continue;
    c->a_off = off;
    off = align_up(off + c->a_bytes, 1 + rnd(8));
    c->w_off = off;
    off = align_up(off + c->w_bytes, 4);
    off += 64; /* a gap of pattern before C */
    c->c_off = off;
    c->c_len = (uint64_t)(c->d.m - 1) * c->d.ldc + 4ull * c->d.n;
    off = align_up(off + c->c_len + 64, 64);
  }
  r->size = off + r->guard;
  TSR_ASSERT_OK(dev->vt->alloc(dev, r->size, 4096, &r->buf));
  for (uint32_t i = 0; i < r->n; i++) {
    gcase_t *c = &r->cases[i];
    if (c->d.opcode != TSR_OP_GEMM_I8_I32 || !c->a) continue;
    c->d.a_addr = r->buf.addr + c->a_off;
    c->d.w_addr = r->buf.addr + c->w_off;
    c->d.c_addr = r->buf.addr + c->c_off;
  }
}

/* Writes pattern, operands and ring; window = [base+guard, base+size-guard)
 * unless the caller overrides; submits and waits. */
static void launch(ring_run_t *r, tsr_hal_device_t *dev, const tsr_hal_command_t *override) {
  r->before = malloc(r->size);
  r->after = malloc(r->size);
  memset(r->before, PATTERN, r->size);
  for (uint32_t i = 0; i < r->n; i++) {
    gcase_t *c = &r->cases[i];
    tsr_desc_pack(r->before + r->ring_off + (uint64_t)i * TSR_HW_DESC_BYTES, &c->d);
    if (c->d.opcode != TSR_OP_GEMM_I8_I32 || !c->a) continue;
    memcpy(r->before + c->a_off, c->a, c->a_bytes);
    memcpy(r->before + c->w_off, c->w, c->w_bytes);
  }
  TSR_ASSERT_OK(dev->vt->write(dev, &r->buf, 0, r->before, r->size));
  tsr_hal_command_t cmd = {.window_base = r->buf.addr + r->guard,
                           .window_size = r->size - 2 * r->guard,
                           .ring = r->buf.addr + r->ring_off,
                           .n_desc = r->n};
  if (override) cmd = *override;
  uint64_t fence = 0;
  TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, &fence));
  TSR_ASSERT_OK(dev->vt->wait(dev, fence, WAIT_FOREVER, &r->res));
  TSR_ASSERT_OK(dev->vt->read(dev, &r->buf, 0, r->after, r->size));
}

/* Naive reference: the int32 value of C[m][n] for case c. */
static int32_t ref_at(const gcase_t *c, uint32_t m, uint32_t n) {
  int64_t acc = 0;
  for (uint32_t k = 0; k < c->d.k; k++)
    acc += (int64_t)c->a[(size_t)m * c->d.lda + k] * c->w[(size_t)n * c->d.ldw + k];
  return (int32_t)acc;
}

/* Every byte of the buffer must be what it was, except the outputs of the
 * cases expected to run, which must equal the reference. Returns the number
 * of bad bytes/values (and prints the first few). */
static size_t verify(const ring_run_t *r) {
  uint8_t *expect = malloc(r->size);
  memcpy(expect, r->before, r->size);
  for (uint32_t i = 0; i < r->n; i++) {
    const gcase_t *c = &r->cases[i];
    if (!c->expect_written || c->d.opcode != TSR_OP_GEMM_I8_I32 || !c->a) continue;
    for (uint32_t m = 0; m < c->d.m; m++)
      for (uint32_t n = 0; n < c->d.n; n++)
        tsr_put_le32(expect + c->c_off + (uint64_t)m * c->d.ldc + 4ull * n,
                     (uint32_t)ref_at(c, m, n));
  }
  size_t bad = 0;
  for (uint64_t i = 0; i < r->size; i++)
    if (expect[i] != r->after[i] && bad++ < 5)
      fprintf(stderr, "  byte %" PRIu64 " of %" PRIu64 ": got 0x%02x, expected 0x%02x\n", i,
              r->size, r->after[i], expect[i]);
  free(expect);
  return bad;
}

static void ring_free(ring_run_t *r, tsr_hal_device_t *dev) {
  for (uint32_t i = 0; i < r->n; i++) {
    free(r->cases[i].a);
    free(r->cases[i].w);
  }
  free(r->cases);
  free(r->before);
  free(r->after);
  if (dev && r->buf.size) dev->vt->free(dev, &r->buf);
}

static uint64_t sum_macs(const ring_run_t *r) {
  uint64_t s = 0;
  for (uint32_t i = 0; i < r->n; i++)
    if (r->cases[i].d.opcode == TSR_OP_GEMM_I8_I32)
      s += (uint64_t)r->cases[i].d.m * r->cases[i].d.n * r->cases[i].d.k;
  return s;
}

/* Runs a ring that must succeed and checks result, counters and memory. */
static void run_and_check(tsr_hal_device_t *dev, ring_run_t *r) {
  layout(r, dev);
  launch(r, dev, NULL);
  CU_ASSERT_EQUAL(r->res.hw_status, TSR_HWERR_OK);
  if (r->res.hw_status)
    fprintf(stderr, "  hw_status %u (%s) at %u\n", r->res.hw_status,
            tsr_hal_hwerr_name(r->res.hw_status), r->res.err_index);
  CU_ASSERT_EQUAL(r->res.desc_done, r->n);
  CU_ASSERT_EQUAL(r->res.err_index, 0);
  CU_ASSERT_EQUAL(r->res.macs, sum_macs(r));
  uint64_t wr = 0;
  for (uint32_t i = 0; i < r->n; i++)
    if (r->cases[i].d.opcode == TSR_OP_GEMM_I8_I32)
      wr += 4ull * r->cases[i].d.m * r->cases[i].d.n;
  CU_ASSERT_EQUAL(r->res.bytes_wr, wr);
  CU_ASSERT(r->res.bytes_rd >= (uint64_t)r->n * TSR_HW_DESC_BYTES);
  CU_ASSERT(r->res.cycles > 0);
  CU_ASSERT_EQUAL(verify(r), 0);
}

/* ------------------------------------------------------------------------ */
/* Registry and allocator (backend-independent)                              */
/* ------------------------------------------------------------------------ */

static void test_registry(void) {
  size_t n = 0;
  const tsr_hal_vtable_t *const *b = tsr_hal_backends(&n);
  CU_ASSERT(n >= 2);
  CU_ASSERT_STRING_EQUAL(b[n - 1]->name, "fmodel"); /* the fallback comes last */
  CU_ASSERT_PTR_EQUAL(tsr_hal_find("fmodel"), b[n - 1]);
  CU_ASSERT_PTR_NULL(tsr_hal_find("cpu")); /* "cpu" is the host, never a HAL backend */
  CU_ASSERT_PTR_NOT_NULL(tsr_hal_find("sim"));
  CU_ASSERT_PTR_NULL(tsr_hal_find("nope"));
  tsr_hal_device_t *dev = (tsr_hal_device_t *)1;
  TSR_ASSERT_ERR(tsr_hal_open("nope", &dev), TSR_STATUS_NOT_FOUND, "nope");
  CU_ASSERT_PTR_NULL(dev);
  TSR_ASSERT_ERR(tsr_hal_open("", &dev), TSR_STATUS_INVALID_ARGUMENT, "empty");
  TSR_ASSERT_ERR(tsr_hal_open("cpu", &dev), TSR_STATUS_NOT_FOUND, "'fmodel'");
  TSR_ASSERT_ERR(tsr_hal_open("cpu:mem=2M", &dev), TSR_STATUS_NOT_FOUND, "fmodel:mem=2M");
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:bogus=1", &dev), TSR_STATUS_INVALID_ARGUMENT, "bogus");
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:mem=abc", &dev), TSR_STATUS_INVALID_ARGUMENT, "mem");
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:mem=1", &dev), TSR_STATUS_OUT_OF_RANGE, "mem");
  TSR_ASSERT_ERR(tsr_hal_open("fmodel:lost=3", &dev), TSR_STATUS_INVALID_ARGUMENT, "lost");
  CU_ASSERT_PTR_NULL(dev);
  TSR_ASSERT_OK(tsr_hal_open("fmodel:mem=2M,rows=8,cols=4,clock=250", &dev));
  if (dev) {
    tsr_hal_caps_t c;
    dev->vt->query_caps(dev, &c);
    CU_ASSERT_EQUAL(c.mem_size, 2u << 20);
    CU_ASSERT_EQUAL(c.array_rows, 8);
    CU_ASSERT_EQUAL(c.array_cols, 4);
    CU_ASSERT_DOUBLE_EQUAL(c.clock_hz, 250e6, 1);
    tsr_hal_close(dev);
  }
  CU_ASSERT_PTR_NOT_NULL(strstr(tsr_hal_hwerr_name(TSR_HWERR_ADDR_RANGE), "ADDR_RANGE"));
  CU_ASSERT_PTR_NOT_NULL(strstr(tsr_hal_hwerr_name(99), "unknown"));
}

static void test_devmem(void) {
  tsr_devmem_t *dm = NULL;
  TSR_ASSERT_ERR(tsr_devmem_create(0x1001, 4096, &dm), TSR_STATUS_INVALID_ARGUMENT, "aligned");
  TSR_ASSERT_OK(tsr_devmem_create(0x10000, 1 << 20, &dm));
  if (!dm) return;
  uint64_t a[64];
  TSR_ASSERT_ERR(tsr_devmem_alloc(dm, 0, 64, &a[0]), TSR_STATUS_INVALID_ARGUMENT, "0 bytes");
  TSR_ASSERT_ERR(tsr_devmem_alloc(dm, 10, 96, &a[0]), TSR_STATUS_INVALID_ARGUMENT, "power");
  TSR_ASSERT_ERR(tsr_devmem_alloc(dm, (1 << 20) + 1, 64, &a[0]),
                 TSR_STATUS_RESOURCE_EXHAUSTED, "exceeds");
  /* Random sizes and alignments: aligned, inside, non-overlapping. */
  for (int i = 0; i < 64; i++) {
    uint64_t align = 1ull << (rnd(7) + 4); /* 16 .. 1024 */
    uint64_t size = 1 + rnd(8000);
    TSR_ASSERT_OK(tsr_devmem_alloc(dm, size, align, &a[i]));
    CU_ASSERT_EQUAL(a[i] % (align < 64 ? 64 : align), 0);
    CU_ASSERT(a[i] >= 0x10000 && a[i] + size <= 0x10000 + (1 << 20));
    CU_ASSERT_EQUAL(tsr_devmem_size_of(dm, a[i]), size);
    CU_ASSERT(tsr_devmem_contains(dm, a[i], size));
    CU_ASSERT(!tsr_devmem_contains(dm, a[i], size + 1));
    for (int j = 0; j < i; j++) {
      uint64_t sj = tsr_devmem_size_of(dm, a[j]);
      CU_ASSERT(a[i] + size <= a[j] || a[j] + sj <= a[i]);
    }
  }
  /* Free in a scrambled order; double free is refused; all coalesces. */
  for (int i = 0; i < 64; i++) TSR_ASSERT_OK(tsr_devmem_free(dm, a[(i * 37) % 64]));
  TSR_ASSERT_ERR(tsr_devmem_free(dm, a[0]), TSR_STATUS_INVALID_ARGUMENT, "not the start");
  tsr_devmem_stats_t st;
  tsr_devmem_stats(dm, &st);
  CU_ASSERT_EQUAL(st.n_allocs, 0);
  CU_ASSERT_EQUAL(st.n_segments, 1);
  CU_ASSERT_EQUAL(st.largest_free, 1u << 20);
  /* Exhaustion: 16 blocks of 64 KiB fill it exactly; a 17th fails. */
  for (int i = 0; i < 16; i++) TSR_ASSERT_OK(tsr_devmem_alloc(dm, 65536, 64, &a[i]));
  TSR_ASSERT_ERR(tsr_devmem_alloc(dm, 1, 64, &a[16]), TSR_STATUS_RESOURCE_EXHAUSTED, "free");
  /* Freeing two neighbours makes room for one 128 KiB block (coalescing). */
  TSR_ASSERT_OK(tsr_devmem_free(dm, a[5]));
  TSR_ASSERT_OK(tsr_devmem_free(dm, a[6]));
  TSR_ASSERT_OK(tsr_devmem_alloc(dm, 131072, 64, &a[16]));
  CU_ASSERT_EQUAL(a[16], a[5]);
  /* Best fit: a small request goes to the smallest hole. */
  TSR_ASSERT_OK(tsr_devmem_free(dm, a[10]));
  TSR_ASSERT_OK(tsr_devmem_free(dm, a[12]));
  TSR_ASSERT_OK(tsr_devmem_free(dm, a[13]));
  TSR_ASSERT_OK(tsr_devmem_alloc(dm, 1000, 64, &a[17]));
  CU_ASSERT_EQUAL(a[17], a[10]);
  tsr_devmem_destroy(dm);
}

static void test_missing_rtl(void) {
  const char *old = getenv("TSR_RTL_LIB");
  char *saved = old ? strdup(old) : NULL;
  setenv("TSR_RTL_LIB", "/nonexistent/dir/libtessera_rtl.so", 1);
  tsr_hal_device_t *dev = (tsr_hal_device_t *)1;
  TSR_ASSERT_ERR(tsr_hal_open("sim", &dev), TSR_STATUS_UNAVAILABLE,
                 "/nonexistent/dir/libtessera_rtl.so");
  CU_ASSERT_PTR_NULL(dev);
  /* A file that exists but is not a shared library. */
  char path[512];
  snprintf(path, sizeof path, "%s/not_a_library.so", tsr_test_tmpdir());
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("not an ELF file\n", f);
    fclose(f);
  }
  setenv("TSR_RTL_LIB", path, 1);
  TSR_ASSERT_ERR(tsr_hal_open("sim:latency=10", &dev), TSR_STATUS_UNAVAILABLE,
                 "not_a_library.so");
  CU_ASSERT_PTR_NULL(dev);
  if (saved) setenv("TSR_RTL_LIB", saved, 1);
  else unsetenv("TSR_RTL_LIB");
  free(saved);
}

/* The analytic model: counters follow the formulas, cycles are sane. */
static void test_timing_model(void) {
  tsr_km_timing_t t;
  tsr_km_timing_init(&t);
  tsr_km_estimate_t e = {0};
  tsr_km_estimate_gemm(&t, 256, 256, 256, &e);
  CU_ASSERT_EQUAL(e.macs, 256ull * 256 * 256);
  CU_ASSERT_EQUAL(e.bytes_wr, 256ull * 256 * 4);
  CU_ASSERT(e.cycles >= 256ull * 256 * 256 / (t.rows * t.cols));
  /* GEMV is bound by the weights' bytes. */
  uint64_t c1 = tsr_km_gemm_cycles(&t, 1, 4096, 4096);
  CU_ASSERT(c1 >= (uint64_t)(4096.0 * 4096 / t.mem_bytes_per_cycle));
  CU_ASSERT(tsr_km_gemm_cycles(&t, 512, 512, 512) > tsr_km_gemm_cycles(&t, 256, 256, 256));
  tsr_hal_caps_t caps = {.array_rows = 32, .array_cols = 8, .clock_hz = 1e8,
                         .mem_bytes_per_cycle = 16};
  tsr_km_timing_t t2;
  tsr_km_timing_from_caps(&caps, &t2);
  CU_ASSERT_EQUAL(t2.rows, 32);
  CU_ASSERT_EQUAL(t2.cols, 8);
  CU_ASSERT_EQUAL(t2.k_chunk, t.k_chunk);
  CU_ASSERT_DOUBLE_EQUAL(t2.mem_bytes_per_cycle, 16, 1e-9);
  /* Counters follow the RTL's dataflow: K within one chunk reuses A across
   * n blocks, and W too when N fits one n block. */
  tsr_km_estimate_t e2 = {0};
  tsr_km_estimate_gemm(&t, 64, 64, 64, &e2);
  CU_ASSERT_EQUAL(e2.bytes_rd, 64 + 64 * 64 + 4 * 64 * 64);
  tsr_km_estimate_t e3 = {0};
  tsr_km_estimate_gemm(&t, 64, 16, 64, &e3);
  CU_ASSERT_EQUAL(e3.bytes_rd, 64 + 64 * 64 + 16 * 64);
  tsr_km_estimate_t e4 = {0};
  tsr_km_estimate_gemm(&t, 32, 32, 5000, &e4); /* two k chunks: no reuse */
  CU_ASSERT_EQUAL(e4.bytes_rd, 64 + 2ull * 32 * 5000 + 2ull * 32 * 5000);
}

/* ------------------------------------------------------------------------ */
/* Backend conformance (runs once per backend)                               */
/* ------------------------------------------------------------------------ */

static void test_caps(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  tsr_hal_caps_t c;
  dev->vt->query_caps(dev, &c);
  CU_ASSERT(c.name[0] != '\0');
  CU_ASSERT(c.array_rows > 0 && c.array_cols > 0);
  CU_ASSERT_EQUAL(c.max_dim, TSR_HW_MAX_DIM);
  if (g_mem_opt) CU_ASSERT_EQUAL(c.mem_size, 16u << 20);
  CU_ASSERT(c.clock_hz > 0 && c.mem_bytes_per_cycle > 0);
  CU_ASSERT(c.ops & (1u << TSR_OP_GEMM_I8_I32));
  tsr_hal_close(dev);
}

/* The first launch of a fresh device must run with the arguments written
 * before its ap_start (a kernel that latches them a cycle late runs the
 * previous launch's arguments: here all zero, so N_DESC 0 and no work). */
static void test_first_launch(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  for (int launch_no = 0; launch_no < 2; launch_no++) {
    ring_run_t r = {0};
    r.n = 1 + (uint32_t)launch_no;
    r.cases = calloc(r.n, sizeof *r.cases);
    for (uint32_t i = 0; i < r.n; i++)
      add_case(&r.cases[i], 3 + launch_no, 5, 7, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
    layout(&r, dev);
    launch(&r, dev, NULL);
    if (r.res.desc_done != r.n)
      fprintf(stderr, "  launch %d ran %u of %u descriptors (status %u): were N_DESC/RING "
              "taken from the previous launch?\n", launch_no + 1, r.res.desc_done, r.n,
              r.res.hw_status);
    CU_ASSERT_EQUAL(r.res.hw_status, 0);
    CU_ASSERT_EQUAL(r.res.desc_done, r.n);
    CU_ASSERT_EQUAL(verify(&r), 0);
    ring_free(&r, dev);
  }
  tsr_hal_close(dev);
}

static void test_alloc(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  tsr_hal_buffer_t b[8];
  uint64_t aligns[8] = {64, 128, 256, 4096, 64, 65536, 1024, 64};
  uint64_t sizes[8] = {1, 64, 65, 4096, 100000, 7, 1 << 20, 3};
  for (int i = 0; i < 8; i++) {
    TSR_ASSERT_OK(dev->vt->alloc(dev, sizes[i], aligns[i], &b[i]));
    CU_ASSERT_EQUAL(b[i].addr % aligns[i], 0);
    CU_ASSERT_EQUAL(b[i].size, sizes[i]);
    for (int j = 0; j < i; j++)
      CU_ASSERT(b[i].addr + b[i].size <= b[j].addr || b[j].addr + b[j].size <= b[i].addr);
  }
  tsr_hal_buffer_t x;
  TSR_ASSERT_ERR(dev->vt->alloc(dev, 0, 64, &x), TSR_STATUS_INVALID_ARGUMENT, "0 bytes");
  TSR_ASSERT_ERR(dev->vt->alloc(dev, 64, 100, &x), TSR_STATUS_INVALID_ARGUMENT, "power");
  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  TSR_ASSERT_ERR(dev->vt->alloc(dev, caps.mem_size + (1u << 20), 64, &x),
                 TSR_STATUS_RESOURCE_EXHAUSTED, "");
  for (int i = 0; i < 8; i++) dev->vt->free(dev, &b[i]);
  /* Everything is free again: the whole memory fits in one block. */
  TSR_ASSERT_OK(dev->vt->alloc(dev, caps.mem_size, 64, &x));
  TSR_ASSERT_ERR(dev->vt->alloc(dev, 64, 64, &b[0]), TSR_STATUS_RESOURCE_EXHAUSTED, "");
  dev->vt->free(dev, &x);
  tsr_hal_close(dev);
}

static void test_copy(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  tsr_hal_buffer_t b;
  TSR_ASSERT_OK(dev->vt->alloc(dev, 1000, 64, &b));
  uint8_t in[1000], out[1000];
  for (int i = 0; i < 1000; i++) in[i] = (uint8_t)(i * 7 + 3);
  TSR_ASSERT_OK(dev->vt->write(dev, &b, 0, in, 1000));
  TSR_ASSERT_OK(dev->vt->read(dev, &b, 0, out, 1000));
  CU_ASSERT_EQUAL(memcmp(in, out, 1000), 0);
  TSR_ASSERT_OK(dev->vt->write(dev, &b, 999, in, 1));
  TSR_ASSERT_OK(dev->vt->read(dev, &b, 500, out, 500));
  CU_ASSERT_EQUAL(out[499], in[0]);
  TSR_ASSERT_OK(dev->vt->read(dev, &b, 1000, out, 0));
  TSR_ASSERT_ERR(dev->vt->write(dev, &b, 1, in, 1000), TSR_STATUS_OUT_OF_RANGE, "overruns");
  TSR_ASSERT_ERR(dev->vt->read(dev, &b, 1001, out, 0), TSR_STATUS_OUT_OF_RANGE, "offset");
  TSR_ASSERT_ERR(dev->vt->read(dev, &b, UINT64_MAX, out, 2), TSR_STATUS_OUT_OF_RANGE,
                 "overruns");
  tsr_hal_buffer_t forged = b;
  forged.size = 2000;
  TSR_ASSERT_ERR(dev->vt->write(dev, &forged, 0, in, 1500), TSR_STATUS_INVALID_ARGUMENT,
                 "live");
  tsr_hal_buffer_t stale = b;
  dev->vt->free(dev, &b);
  TSR_ASSERT_ERR(dev->vt->write(dev, &stale, 0, in, 10), TSR_STATUS_INVALID_ARGUMENT, "live");
  tsr_hal_close(dev);
}

/* Random shapes, strides and fills in one ring. */
static void test_gemm_random(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  bool sim = !strcmp(g_backend, "sim");
  ring_run_t r = {0};
  r.n = 24;
  r.cases = calloc(r.n, sizeof *r.cases);
  uint32_t i = 0;
  add_case(&r.cases[i++], 1, 1, 1, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);      /* K = 1 */
  add_case(&r.cases[i++], 17, 33, 1, 3, 0, 1, FILL_RANDOM, FILL_RANDOM);
  add_case(&r.cases[i++], 16, 16, 16, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
  add_case(&r.cases[i++], 15, 17, 31, 1, 2, 3, FILL_RANDOM, FILL_RANDOM);
  add_case(&r.cases[i++], 1, 100, 200, 0, 5, 0, FILL_RANDOM, FILL_RANDOM);  /* GEMV */
  add_case(&r.cases[i++], 64, 48, 80, 0, 0, 0, FILL_EXTREME, FILL_EXTREME);
  add_case(&r.cases[i++], 33, 1, 65, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
  add_case(&r.cases[i++], 3, 5, 7, 61, 1, 9, FILL_MAX, FILL_MIN);
  while (i < r.n) {
    uint32_t lim = sim ? 40 : 90;
    add_case(&r.cases[i++], 1 + rnd(lim), 1 + rnd(lim), 1 + rnd(2 * lim), rnd(3) ? 0 : rnd(40),
             rnd(3) ? 0 : rnd(40), rnd(3) ? 0 : rnd(5), (enum fill)rnd(4), (enum fill)rnd(4));
  }
  run_and_check(dev, &r);
  ring_free(&r, dev);
  tsr_hal_close(dev);
}

/* Long K with extreme values: the largest sums (2^14 per product). */
static void test_gemm_long_k(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  ring_run_t r = {0};
  r.n = 3;
  r.cases = calloc(r.n, sizeof *r.cases);
  add_case(&r.cases[0], 2, 3, TSR_HW_MAX_DIM, 0, 0, 0, FILL_MIN, FILL_MIN); /* 65535 * 2^14 */
  add_case(&r.cases[1], 1, 2, TSR_HW_MAX_DIM, 0, 0, 0, FILL_MIN, FILL_MAX);
  add_case(&r.cases[2], 17, 18, 4099, 0, 0, 0, FILL_EXTREME, FILL_EXTREME);
  run_and_check(dev, &r);
  ring_free(&r, dev);
  tsr_hal_close(dev);
}

/* Many descriptors (and NOPs) in one ring. */
static void test_gemm_many(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  ring_run_t r = {0};
  r.n = 300;
  r.cases = calloc(r.n, sizeof *r.cases);
  for (uint32_t i = 0; i < r.n; i++) {
    if (i % 50 == 7) {
      r.cases[i].d.opcode = TSR_OP_NOP;
      continue;
    }
    add_case(&r.cases[i], 1 + rnd(20), 1 + rnd(20), 1 + rnd(40), 0, 0, 0, FILL_RANDOM,
             FILL_RANDOM);
  }
  run_and_check(dev, &r);
  ring_free(&r, dev);
  tsr_hal_close(dev);
}

/* Several launches queued before any wait; waits in reverse order. */
static void test_queue(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  enum { NR = 4 };
  ring_run_t r[NR];
  uint64_t fence[NR];
  memset(r, 0, sizeof r);
  for (int j = 0; j < NR; j++) {
    r[j].n = 2;
    r[j].cases = calloc(2, sizeof *r[j].cases);
    add_case(&r[j].cases[0], 5 + j, 9, 30, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
    add_case(&r[j].cases[1], 20, 3 + j, 17, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
    layout(&r[j], dev);
    r[j].before = malloc(r[j].size);
    r[j].after = malloc(r[j].size);
    memset(r[j].before, PATTERN, r[j].size);
    for (uint32_t i = 0; i < 2; i++) {
      gcase_t *c = &r[j].cases[i];
      tsr_desc_pack(r[j].before + r[j].ring_off + i * TSR_HW_DESC_BYTES, &c->d);
      memcpy(r[j].before + c->a_off, c->a, c->a_bytes);
      memcpy(r[j].before + c->w_off, c->w, c->w_bytes);
    }
    TSR_ASSERT_OK(dev->vt->write(dev, &r[j].buf, 0, r[j].before, r[j].size));
    tsr_hal_command_t cmd = {.window_base = r[j].buf.addr, .window_size = r[j].size,
                             .ring = r[j].buf.addr + r[j].ring_off, .n_desc = 2};
    TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, &fence[j]));
  }
  for (int j = NR - 1; j >= 0; j--) {
    TSR_ASSERT_OK(dev->vt->wait(dev, fence[j], WAIT_FOREVER, &r[j].res));
    CU_ASSERT_EQUAL(r[j].res.hw_status, 0);
    CU_ASSERT_EQUAL(r[j].res.desc_done, 2);
  }
  /* Waiting again on a finished fence gives the same result. */
  tsr_hal_result_t again;
  TSR_ASSERT_OK(dev->vt->wait(dev, fence[0], 0, &again));
  CU_ASSERT_EQUAL(again.macs, r[0].res.macs);
  TSR_ASSERT_ERR(dev->vt->wait(dev, fence[NR - 1] + 1, 0, NULL), TSR_STATUS_INVALID_ARGUMENT,
                 "never issued");
  for (int j = 0; j < NR; j++) {
    TSR_ASSERT_OK(dev->vt->read(dev, &r[j].buf, 0, r[j].after, r[j].size));
    CU_ASSERT_EQUAL(verify(&r[j]), 0);
    ring_free(&r[j], dev);
  }
  tsr_hal_close(dev);
}

/* One refusal case: descriptor 1 of a 3-descriptor ring is broken by `mut`;
 * the launch must stop there with `code`, descriptor 0 must be written,
 * nothing else (descriptor 2's output, guards, gaps) may change. */
typedef void (*mutate_fn)(tsr_desc_t *d, const ring_run_t *r);

static void check_refusal(tsr_hal_device_t *dev, const char *what, mutate_fn mut,
                          uint32_t code) {
  ring_run_t r = {0};
  r.n = 3;
  r.cases = calloc(3, sizeof *r.cases);
  for (int i = 0; i < 3; i++)
    add_case(&r.cases[i], 9, 21, 13, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
  layout(&r, dev);
  mut(&r.cases[1].d, &r);
  r.cases[1].expect_written = false;
  r.cases[2].expect_written = false;
  launch(&r, dev, NULL);
  if (r.res.hw_status != code || r.res.err_index != 1 || r.res.desc_done != 1)
    fprintf(stderr, "  refusal '%s': status %u (%s) index %u done %u; expected %u (%s)\n",
            what, r.res.hw_status, tsr_hal_hwerr_name(r.res.hw_status), r.res.err_index,
            r.res.desc_done, code, tsr_hal_hwerr_name(code));
  CU_ASSERT_EQUAL(r.res.hw_status, code);
  CU_ASSERT_EQUAL(r.res.err_index, 1);
  CU_ASSERT_EQUAL(r.res.desc_done, 1);
  CU_ASSERT_EQUAL(r.res.macs, 9ull * 21 * 13);
  CU_ASSERT_EQUAL(r.res.bytes_wr, 9ull * 21 * 4);
  size_t bad = verify(&r);
  if (bad) fprintf(stderr, "  refusal '%s': %zu bytes changed that must not\n", what, bad);
  CU_ASSERT_EQUAL(bad, 0);
  ring_free(&r, dev);
}

static uint64_t win_lo(const ring_run_t *r) { return r->buf.addr + r->guard; }
static uint64_t win_hi(const ring_run_t *r) { return r->buf.addr + r->size - r->guard; }

static void m_opcode(tsr_desc_t *d, const ring_run_t *r) { d->opcode = 7; }
static void m_opcode_hi(tsr_desc_t *d, const ring_run_t *r) { d->opcode = 0x80000001u; }
static void m_flags(tsr_desc_t *d, const ring_run_t *r) { d->flags = 1; }
static void m_nch(tsr_desc_t *d, const ring_run_t *r) { d->w_nch = 64; } /* above any ports */
static void m_cstride(tsr_desc_t *d, const ring_run_t *r) { d->w_cstride = 1u << 31; }
static void m_m0(tsr_desc_t *d, const ring_run_t *r) { d->m = 0; }
static void m_n0(tsr_desc_t *d, const ring_run_t *r) { d->n = 0; }
static void m_k0(tsr_desc_t *d, const ring_run_t *r) { d->k = 0; }
static void m_kbig(tsr_desc_t *d, const ring_run_t *r) { d->k = TSR_HW_MAX_DIM + 1; d->lda = d->ldw = d->k; }
static void m_mbig(tsr_desc_t *d, const ring_run_t *r) { d->m = 0xFFFFFFFFu; }
static void m_lda(tsr_desc_t *d, const ring_run_t *r) { d->lda = d->k - 1; }
static void m_ldw(tsr_desc_t *d, const ring_run_t *r) { d->ldw = d->k - 1; }
static void m_ldc(tsr_desc_t *d, const ring_run_t *r) { d->ldc = 4 * d->n - 4; }
static void m_ldc_odd(tsr_desc_t *d, const ring_run_t *r) { d->ldc = 4 * d->n + 2; }
static void m_c_unaligned(tsr_desc_t *d, const ring_run_t *r) { d->c_addr += 2; }
static void m_a_below(tsr_desc_t *d, const ring_run_t *r) { d->a_addr = win_lo(r) - 1; }
static void m_a_tail(tsr_desc_t *d, const ring_run_t *r) {
  d->a_addr = win_hi(r) - (uint64_t)(d->m - 1) * d->lda - d->k + 1;
}
static void m_a_wrap(tsr_desc_t *d, const ring_run_t *r) { d->a_addr = UINT64_MAX - 8; }
static void m_w_above(tsr_desc_t *d, const ring_run_t *r) { d->w_addr = win_hi(r); }
static void m_w_stride(tsr_desc_t *d, const ring_run_t *r) { d->ldw = 0x7FFFFFFFu; }
static void m_c_below(tsr_desc_t *d, const ring_run_t *r) { d->c_addr = win_lo(r) - 64; }
static void m_c_tail(tsr_desc_t *d, const ring_run_t *r) {
  d->c_addr = win_hi(r) - (uint64_t)(d->m - 1) * d->ldc - 4ull * d->n + 4;
}
/* Several faults at once: the documented order decides which is reported. */
static void m_opcode_and_dims(tsr_desc_t *d, const ring_run_t *r) { d->opcode = 9; d->m = 0; }
static void m_dims_and_stride(tsr_desc_t *d, const ring_run_t *r) { d->k = 0; d->ldc = 1; }
static void m_stride_and_addr(tsr_desc_t *d, const ring_run_t *r) { d->lda = 1; d->a_addr = 0; }

static void test_refusals(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  static const struct { const char *what; mutate_fn fn; uint32_t code; } cases[] = {
      {"unknown opcode", m_opcode, TSR_HWERR_BAD_OPCODE},
      {"opcode high bit", m_opcode_hi, TSR_HWERR_BAD_OPCODE},
      {"flags != 0", m_flags, TSR_HWERR_BAD_OPCODE},
      {"W_NCH above the ports", m_nch, TSR_HWERR_BAD_STRIDE},
      {"W_CSTRIDE with one channel", m_cstride, TSR_HWERR_BAD_STRIDE},
      {"M = 0", m_m0, TSR_HWERR_BAD_DIMS},
      {"N = 0", m_n0, TSR_HWERR_BAD_DIMS},
      {"K = 0", m_k0, TSR_HWERR_BAD_DIMS},
      {"K > MAX_DIM", m_kbig, TSR_HWERR_BAD_DIMS},
      {"M huge", m_mbig, TSR_HWERR_BAD_DIMS},
      {"LDA < K", m_lda, TSR_HWERR_BAD_STRIDE},
      {"LDW < K", m_ldw, TSR_HWERR_BAD_STRIDE},
      {"LDC < 4N", m_ldc, TSR_HWERR_BAD_STRIDE},
      {"LDC % 4", m_ldc_odd, TSR_HWERR_BAD_STRIDE},
      {"C_ADDR % 4", m_c_unaligned, TSR_HWERR_BAD_STRIDE},
      {"A below window", m_a_below, TSR_HWERR_ADDR_RANGE},
      {"A tail past window", m_a_tail, TSR_HWERR_ADDR_RANGE},
      {"A address wraps", m_a_wrap, TSR_HWERR_ADDR_RANGE},
      {"W at window end", m_w_above, TSR_HWERR_ADDR_RANGE},
      {"W stride past window", m_w_stride, TSR_HWERR_ADDR_RANGE},
      {"C below window", m_c_below, TSR_HWERR_ADDR_RANGE},
      {"C tail past window", m_c_tail, TSR_HWERR_ADDR_RANGE},
      {"opcode before dims", m_opcode_and_dims, TSR_HWERR_BAD_OPCODE},
      {"dims before stride", m_dims_and_stride, TSR_HWERR_BAD_DIMS},
      {"stride before address", m_stride_and_addr, TSR_HWERR_BAD_STRIDE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_refusal(dev, cases[i].what, cases[i].fn, cases[i].code);
  tsr_hal_close(dev);
}

/* The ring itself outside the window or misaligned: nothing runs. */
static void test_ring_refusals(void) {
  tsr_hal_device_t *dev = open_backend(g_backend, NULL);
  if (!dev) return;
  for (int variant = 0; variant < 4; variant++) {
    ring_run_t r = {0};
    r.n = 2;
    r.cases = calloc(2, sizeof *r.cases);
    add_case(&r.cases[0], 4, 4, 4, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
    add_case(&r.cases[1], 4, 4, 4, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
    r.cases[0].expect_written = r.cases[1].expect_written = false;
    layout(&r, dev);
    tsr_hal_command_t cmd = {.window_base = win_lo(&r), .window_size = win_hi(&r) - win_lo(&r),
                             .ring = r.buf.addr + r.ring_off, .n_desc = 2};
    if (variant == 0) cmd.ring += 32;                                  /* misaligned   */
    if (variant == 1) cmd.window_base += 64, cmd.window_size -= 64;   /* ring below   */
    if (variant == 2) cmd.n_desc = (uint32_t)((cmd.window_size) / 64) + 1; /* too long */
    if (variant == 3) cmd.n_desc = 0xFFFFFFFFu;                        /* huge         */
    launch(&r, dev, &cmd);
    CU_ASSERT_EQUAL(r.res.hw_status, TSR_HWERR_RING_RANGE);
    CU_ASSERT_EQUAL(r.res.err_index, 0);
    CU_ASSERT_EQUAL(r.res.desc_done, 0);
    CU_ASSERT_EQUAL(r.res.macs, 0);
    CU_ASSERT_EQUAL(r.res.bytes_wr, 0);
    CU_ASSERT_EQUAL(verify(&r), 0);
    ring_free(&r, dev);
  }
  tsr_hal_close(dev);
}

/* Wait with a timeout, then reset, then the device works again. */
static void test_timeout_reset(void) {
  bool cpu = !strcmp(g_backend, "fmodel");
  if (!cpu && strcmp(g_backend, "sim")) {
    tsr_test_skip("no way to make backend %s hang or run slowly on purpose", g_backend);
    return;
  }
  /* fmodel: command 2 hangs. sim: command 2 is long and gets no time. */
  tsr_hal_device_t *dev = open_backend(g_backend, cpu ? "hang=2" : NULL);
  if (!dev) return;
  ring_run_t r[3];
  memset(r, 0, sizeof r);
  uint64_t fence[3];
  for (int j = 0; j < 3; j++) {
    r[j].n = 1;
    r[j].cases = calloc(1, sizeof *r[j].cases);
    uint32_t k = (j == 1 && !cpu) ? 60000 : 20;
    add_case(&r[j].cases[0], 32, 32, k, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
    layout(&r[j], dev);
    r[j].before = malloc(r[j].size);
    r[j].after = malloc(r[j].size);
    memset(r[j].before, PATTERN, r[j].size);
    gcase_t *c = &r[j].cases[0];
    tsr_desc_pack(r[j].before + r[j].ring_off, &c->d);
    memcpy(r[j].before + c->a_off, c->a, c->a_bytes);
    memcpy(r[j].before + c->w_off, c->w, c->w_bytes);
    TSR_ASSERT_OK(dev->vt->write(dev, &r[j].buf, 0, r[j].before, r[j].size));
  }
  for (int j = 0; j < 2; j++) {
    tsr_hal_command_t cmd = {.window_base = r[j].buf.addr, .window_size = r[j].size,
                             .ring = r[j].buf.addr + r[j].ring_off, .n_desc = 1};
    TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, &fence[j]));
  }
  TSR_ASSERT_OK(dev->vt->wait(dev, fence[0], WAIT_FOREVER, &r[0].res));
  CU_ASSERT_EQUAL(r[0].res.hw_status, 0);
  TSR_ASSERT_ERR(dev->vt->wait(dev, fence[1], 20 * 1000 * 1000, NULL),
                 TSR_STATUS_DEADLINE_EXCEEDED, "not done");
  TSR_ASSERT_ERR(dev->vt->wait(dev, fence[1], 0, NULL), TSR_STATUS_DEADLINE_EXCEEDED,
                 "not done");
  TSR_ASSERT_OK(dev->vt->reset(dev));
  TSR_ASSERT_ERR(dev->vt->wait(dev, fence[1], WAIT_FOREVER, NULL), TSR_STATUS_DEVICE,
                 "aborted");
  /* Buffers survive a reset; the next command runs normally. */
  tsr_hal_command_t cmd = {.window_base = r[2].buf.addr, .window_size = r[2].size,
                           .ring = r[2].buf.addr + r[2].ring_off, .n_desc = 1};
  TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, &fence[2]));
  TSR_ASSERT_OK(dev->vt->wait(dev, fence[2], WAIT_FOREVER, &r[2].res));
  CU_ASSERT_EQUAL(r[2].res.hw_status, 0);
  CU_ASSERT_EQUAL(r[2].res.desc_done, 1);
  for (int j = 0; j < 3; j += 2) {
    TSR_ASSERT_OK(dev->vt->read(dev, &r[j].buf, 0, r[j].after, r[j].size));
    CU_ASSERT_EQUAL(verify(&r[j]), 0);
  }
  for (int j = 0; j < 3; j++) ring_free(&r[j], dev);
  tsr_hal_close(dev);
}

/* ------------------------------------------------------------------------ */
/* fmodel-only fault injection                                                 */
/* ------------------------------------------------------------------------ */

static void test_cpu_fail(void) {
  tsr_hal_device_t *dev = open_backend("fmodel", "fail=2");
  if (!dev) return;
  for (int j = 1; j <= 3; j++) {
    ring_run_t r = {0};
    r.n = 1;
    r.cases = calloc(1, sizeof *r.cases);
    add_case(&r.cases[0], 5, 6, 7, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
    r.cases[0].expect_written = j != 2;
    layout(&r, dev);
    launch(&r, dev, NULL);
    CU_ASSERT_EQUAL(r.res.hw_status, j == 2 ? TSR_HWERR_AXI_ERROR : TSR_HWERR_OK);
    CU_ASSERT_EQUAL(r.res.desc_done, j == 2 ? 0 : 1);
    CU_ASSERT_EQUAL(verify(&r), 0);
    ring_free(&r, dev);
  }
  tsr_hal_close(dev);
}

static void test_cpu_lost(void) {
  tsr_hal_device_t *dev = open_backend("fmodel", "lost");
  if (!dev) return;
  tsr_hal_caps_t c;
  dev->vt->query_caps(dev, &c);
  tsr_hal_buffer_t b;
  TSR_ASSERT_ERR(dev->vt->alloc(dev, 64, 64, &b), TSR_STATUS_UNAVAILABLE, "lost");
  b = (tsr_hal_buffer_t){.addr = 0x80000000ull, .size = 64};
  uint8_t x[64] = {0};
  TSR_ASSERT_ERR(dev->vt->write(dev, &b, 0, x, 64), TSR_STATUS_UNAVAILABLE, "lost");
  TSR_ASSERT_ERR(dev->vt->read(dev, &b, 0, x, 64), TSR_STATUS_UNAVAILABLE, "lost");
  tsr_hal_command_t cmd = {.window_base = b.addr, .window_size = 64, .ring = b.addr, .n_desc = 1};
  uint64_t fence = 7;
  TSR_ASSERT_ERR(dev->vt->submit(dev, &cmd, &fence), TSR_STATUS_UNAVAILABLE, "lost");
  CU_ASSERT_EQUAL(fence, 0);
  TSR_ASSERT_ERR(dev->vt->wait(dev, 1, 0, NULL), TSR_STATUS_UNAVAILABLE, "lost");
  TSR_ASSERT_ERR(dev->vt->reset(dev), TSR_STATUS_UNAVAILABLE, "lost");
  dev->vt->free(dev, &b);
  tsr_hal_close(dev);
}

/* Thousands of launches: old results are forgotten, recent ones kept. */
static void test_cpu_many_fences(void) {
  tsr_hal_device_t *dev = open_backend("fmodel", NULL);
  if (!dev) return;
  tsr_hal_buffer_t b;
  TSR_ASSERT_OK(dev->vt->alloc(dev, 64, 64, &b));
  uint8_t nop[TSR_HW_DESC_BYTES];
  tsr_desc_t d = {.opcode = TSR_OP_NOP};
  tsr_desc_pack(nop, &d);
  TSR_ASSERT_OK(dev->vt->write(dev, &b, 0, nop, sizeof nop));
  tsr_hal_command_t cmd = {.window_base = b.addr, .window_size = 64, .ring = b.addr, .n_desc = 1};
  uint64_t first = 0, fence = 0;
  int bad = 0;
  for (int i = 0; i < 5000; i++) {
    tsr_status_t s = dev->vt->submit(dev, &cmd, &fence);
    if (i == 0) first = fence;
    tsr_hal_result_t r;
    if (!s) s = dev->vt->wait(dev, fence, WAIT_FOREVER, &r);
    if (s || r.desc_done != 1) bad++;
    tsr_status_free(s);
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(fence, first + 4999);
  TSR_ASSERT_OK(dev->vt->wait(dev, fence - 100, 0, NULL));
  TSR_ASSERT_ERR(dev->vt->wait(dev, first, 0, NULL), TSR_STATUS_NOT_FOUND, "no longer kept");
  dev->vt->free(dev, &b);
  tsr_hal_close(dev);
}

/* ------------------------------------------------------------------------ */
/* fmodel and sim side by side                                                 */
/* ------------------------------------------------------------------------ */

/* Runs the same ring (same seed) on both backends; memory after the launch
 * and every counter but the cycle counts must be identical. */
static void cross_one(uint64_t seed, uint32_t n_desc, uint32_t lim, mutate_fn broken) {
  tsr_hal_device_t *devs[2] = {open_backend("fmodel", NULL), open_backend("sim", NULL)};
  ring_run_t r[2];
  memset(r, 0, sizeof r);
  for (int b = 0; b < 2 && devs[b]; b++) {
    g_rng = seed;
    r[b].n = n_desc;
    r[b].cases = calloc(n_desc, sizeof *r[b].cases);
    for (uint32_t i = 0; i < n_desc; i++)
      add_case(&r[b].cases[i], 1 + rnd(lim), 1 + rnd(lim), 1 + rnd(3 * lim), rnd(2) * rnd(9),
               0, rnd(2), (enum fill)rnd(4), (enum fill)rnd(4));
    layout(&r[b], devs[b]);
    if (broken) {
      broken(&r[b].cases[n_desc / 2].d, &r[b]);
      for (uint32_t i = n_desc / 2; i < n_desc; i++) r[b].cases[i].expect_written = false;
    }
    launch(&r[b], devs[b], NULL);
    CU_ASSERT_EQUAL(verify(&r[b]), 0);
  }
  if (devs[0] && devs[1]) {
    CU_ASSERT_EQUAL(r[0].size, r[1].size);
    CU_ASSERT_EQUAL(r[0].res.hw_status, r[1].res.hw_status);
    CU_ASSERT_EQUAL(r[0].res.err_index, r[1].res.err_index);
    CU_ASSERT_EQUAL(r[0].res.desc_done, r[1].res.desc_done);
    CU_ASSERT_EQUAL(r[0].res.macs, r[1].res.macs);
    CU_ASSERT_EQUAL(r[0].res.bytes_rd, r[1].res.bytes_rd);
    CU_ASSERT_EQUAL(r[0].res.bytes_wr, r[1].res.bytes_wr);
    /* The ring holds absolute addresses, which differ between devices. */
    uint64_t ring_end = r[0].ring_off + (uint64_t)n_desc * TSR_HW_DESC_BYTES;
    if (r[0].size == r[1].size) {
      CU_ASSERT_EQUAL(memcmp(r[0].after, r[1].after, r[0].ring_off), 0);
      CU_ASSERT_EQUAL(memcmp(r[0].after + ring_end, r[1].after + ring_end, r[0].size - ring_end), 0);
    }
    if (r[0].res.bytes_rd != r[1].res.bytes_rd || r[0].res.cycles)
      printf("REPORT cross seed %" PRIu64 ": fmodel cycles %" PRIu64 " (modeled), sim %" PRIu64
             " (RTL); bytes_rd fmodel %" PRIu64 " sim %" PRIu64 "\n", seed, r[0].res.cycles,
             r[1].res.cycles, r[0].res.bytes_rd, r[1].res.bytes_rd);
    /* The cycle model against the RTL: measured when the bounds were set,
     * modeled / RTL = 0.985 .. 1.011 over these six rings; bounds 0.95 .. 1.05. */
    if (r[1].res.cycles) {
      double ratio = (double)r[0].res.cycles / (double)r[1].res.cycles;
      if (ratio < 0.95 || ratio > 1.05)
        fprintf(stderr, "seed %" PRIu64 ": modeled / RTL cycles %.3f outside 0.95 .. 1.05\n", seed,
                ratio);
      CU_ASSERT_TRUE(ratio >= 0.95 && ratio <= 1.05);
    }
  }
  for (int b = 0; b < 2; b++) {
    ring_free(&r[b], devs[b]);
    tsr_hal_close(devs[b]);
  }
}

static void test_cross_random(void) {
  cross_one(11, 6, 40, NULL);
  cross_one(12, 20, 12, NULL);
  cross_one(13, 3, 70, NULL);
}

static void test_cross_refusal(void) {
  cross_one(21, 5, 20, m_c_tail);
  cross_one(22, 5, 20, m_opcode);
  cross_one(23, 4, 20, m_lda);
}

/* ------------------------------------------------------------------------ */
/* Queue mode: one launch over a ring of slots the host refills              */
/* ------------------------------------------------------------------------ */

#define Q_SLOTS 4

/* A queue of `n` GEMM cases over Q_SLOTS slots: operands written, the
 * queue-mode launch submitted (nothing published yet). */
static void queue_open(tsr_hal_device_t *dev, ring_run_t *r, uint32_t n, uint64_t *fence) {
  memset(r, 0, sizeof *r);
  r->n = n;
  r->cases = calloc(n, sizeof *r->cases);
  for (uint32_t i = 0; i < n; i++)
    add_case(&r->cases[i], 1 + rnd(i % 3 ? 20 : 2), 1 + rnd(40), 1 + rnd(300), rnd(5), rnd(5),
             rnd(3), FILL_RANDOM, i == 3 ? FILL_EXTREME : FILL_RANDOM);
  layout(r, dev);
  r->before = malloc(r->size);
  r->after = malloc(r->size);
  memset(r->before, PATTERN, r->size);
  for (uint32_t i = 0; i < n; i++) {
    const gcase_t *c = &r->cases[i];
    memcpy(r->before + c->a_off, c->a, c->a_bytes);
    memcpy(r->before + c->w_off, c->w, c->w_bytes);
  }
  TSR_ASSERT_OK(dev->vt->write(dev, &r->buf, 0, r->before, r->size));
  tsr_hal_command_t cmd = {.window_base = r->buf.addr + r->guard,
                           .window_size = r->size - 2 * r->guard,
                           .ring = r->buf.addr + r->ring_off, .n_desc = Q_SLOTS,
                           .flags = TSR_HAL_CMD_QUEUE};
  TSR_ASSERT_OK(dev->vt->submit(dev, &cmd, fence));
}

/* Writes descriptors [from, to) of r into their slots (i % Q_SLOTS), on
 * the device and in r->before (the expected final memory). */
static void queue_fill(tsr_hal_device_t *dev, ring_run_t *r, uint32_t from, uint32_t to) {
  for (uint32_t i = from; i < to; i++) {
    uint8_t *slot = r->before + r->ring_off + (uint64_t)(i % Q_SLOTS) * TSR_HW_DESC_BYTES;
    tsr_desc_pack(slot, &r->cases[i].d);
    TSR_ASSERT_OK(dev->vt->write(dev, &r->buf, r->ring_off + (uint64_t)(i % Q_SLOTS) *
                                 TSR_HW_DESC_BYTES, slot, TSR_HW_DESC_BYTES));
  }
}

static tsr_hal_device_t *open_queue_backend(const char *extra) {
  char opts[96];
  snprintf(opts, sizeof opts, "queue=1%s%s", extra ? "," : "", extra ? extra : "");
  char spec[160];
  snprintf(spec, sizeof spec, "%s:" MEM_OPTS ",%s", g_backend, opts);
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open(spec, &dev);
  if (s && tsr_status_code(s) == TSR_STATUS_UNAVAILABLE) {
    tsr_test_skip("%s", tsr_status_message(s));
    tsr_status_free(s);
    return NULL;
  }
  TSR_ASSERT_OK(s);
  return dev;
}

/* Descriptors published in batches of 1, 3, 2, 4, 1 over 4 slots (the
 * slots reused as they free up): every result equals the naive product,
 * nothing else in the buffer changes, progress() reports each batch done
 * and the counters grow with it, the launch ends only when closed. A
 * backend without queue mode refuses such a launch. */
static void test_queue_mode(void) {
  if (strcmp(g_backend, "fmodel") && strcmp(g_backend, "sim")) {
    tsr_hal_device_t *dev = open_backend(g_backend, NULL);
    if (!dev) return;
    tsr_hal_caps_t caps;
    dev->vt->query_caps(dev, &caps);
    CU_ASSERT_FALSE(caps.flags & TSR_HAL_CAP_QUEUE);
    tsr_hal_buffer_t b;
    TSR_ASSERT_OK(dev->vt->alloc(dev, 4096, 4096, &b));
    tsr_hal_command_t cmd = {.window_base = b.addr, .window_size = b.size, .ring = b.addr,
                             .n_desc = 1, .flags = TSR_HAL_CMD_QUEUE};
    uint64_t f = 0;
    TSR_ASSERT_ERR(dev->vt->submit(dev, &cmd, &f), TSR_STATUS_INVALID_ARGUMENT, "queue mode");
    dev->vt->free(dev, &b);
    tsr_hal_close(dev);
    return;
  }
  tsr_hal_device_t *dev = open_queue_backend(NULL);
  if (!dev) return;
  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  CU_ASSERT_TRUE(caps.flags & TSR_HAL_CAP_QUEUE);
  CU_ASSERT_TRUE(caps.doorbell_latency_s > 0);
  ring_run_t r;
  uint64_t fence = 0;
  g_rng = 0x51; /* the cases again below, as one launch */
  queue_open(dev, &r, 11, &fence);
  const uint32_t batch[] = {1, 3, 2, 4, 1};
  uint32_t tail = 0;
  tsr_hal_result_t res, prev;
  memset(&prev, 0, sizeof prev);
  for (size_t b = 0; b < sizeof batch / sizeof batch[0]; b++) {
    queue_fill(dev, &r, tail, tail + batch[b]);
    tail += batch[b];
    TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, tail, 0));
    TSR_ASSERT_OK(dev->vt->progress(dev, fence, tail, WAIT_FOREVER, &res));
    CU_ASSERT_EQUAL(res.hw_status, 0);
    CU_ASSERT_EQUAL(res.desc_done, tail);
    CU_ASSERT_TRUE(res.cycles > prev.cycles && res.macs > prev.macs);
    prev = res;
    /* still running: a wait that does not block times out */
    TSR_ASSERT_ERR(dev->vt->wait(dev, fence, 0, NULL), TSR_STATUS_DEADLINE_EXCEEDED, "not done");
  }
  /* the host may not run ahead of the slots, nor go back */
  TSR_ASSERT_ERR(dev->vt->doorbell(dev, fence, tail + Q_SLOTS + 1, 0),
                 TSR_STATUS_INVALID_ARGUMENT, "slots");
  TSR_ASSERT_ERR(dev->vt->doorbell(dev, fence, tail - 1, 0), TSR_STATUS_INVALID_ARGUMENT,
                 "behind");
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, tail, 1));
  TSR_ASSERT_OK(dev->vt->wait(dev, fence, WAIT_FOREVER, &r.res));
  CU_ASSERT_EQUAL(r.res.hw_status, 0);
  CU_ASSERT_EQUAL(r.res.desc_done, 11);
  CU_ASSERT_EQUAL(r.res.macs, sum_macs(&r));
  /* no work after the last batch: the close costs the finish's few cycles */
  CU_ASSERT_TRUE(r.res.cycles >= prev.cycles && r.res.cycles <= prev.cycles + 8);
  TSR_ASSERT_ERR(dev->vt->doorbell(dev, fence, tail, 0), TSR_STATUS_INVALID_ARGUMENT, "closed");
  TSR_ASSERT_OK(dev->vt->read(dev, &r.buf, 0, r.after, r.size));
  CU_ASSERT_EQUAL(verify(&r), 0);
  /* the same descriptors as one launch of their own: the queue's cycles are
   * theirs (it waits uncounted between doorbells) */
  const uint64_t q_cycles = r.res.cycles;
  ring_free(&r, dev);
  memset(&r, 0, sizeof r);
  g_rng = 0x51;
  queue_open(dev, &r, 11, &fence);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 0, 1));
  TSR_ASSERT_OK(dev->vt->wait(dev, fence, WAIT_FOREVER, NULL));
  for (uint32_t i = 0; i < 11; i++)
    tsr_desc_pack(r.before + r.ring_off + (uint64_t)i * TSR_HW_DESC_BYTES, &r.cases[i].d);
  TSR_ASSERT_OK(dev->vt->write(dev, &r.buf, r.ring_off, r.before + r.ring_off,
                               11 * TSR_HW_DESC_BYTES));
  tsr_hal_command_t one = {.window_base = r.buf.addr + r.guard,
                           .window_size = r.size - 2 * r.guard,
                           .ring = r.buf.addr + r.ring_off, .n_desc = 11};
  uint64_t f1 = 0;
  TSR_ASSERT_OK(dev->vt->submit(dev, &one, &f1));
  TSR_ASSERT_OK(dev->vt->wait(dev, f1, WAIT_FOREVER, &r.res));
  CU_ASSERT_EQUAL(r.res.desc_done, 11);
  /* measured: equal on the RTL, one cycle less in the model (its launch's
   * fixed cycle); a few cycles a doorbell allowed */
  CU_ASSERT_TRUE(q_cycles <= r.res.cycles + 5 * 8 && q_cycles + 5 * 8 >= r.res.cycles);
  printf("REPORT %s queue mode: 11 descriptors in 5 doorbells over %d slots, %" PRIu64
         " cycles; as one launch %" PRIu64 " cycles\n", g_backend, Q_SLOTS, q_cycles,
         r.res.cycles);
  ring_free(&r, dev);

  /* a refused descriptor ends the queue: its absolute index, nothing after
   * it runs, and the launch is over */
  queue_open(dev, &r, 6, &fence);
  r.cases[4].d.m = 0;
  r.cases[4].expect_written = false;
  r.cases[5].expect_written = false;
  queue_fill(dev, &r, 0, 3);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 3, 0));
  TSR_ASSERT_OK(dev->vt->progress(dev, fence, 3, WAIT_FOREVER, &res));
  queue_fill(dev, &r, 3, 6);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 6, 0));
  TSR_ASSERT_OK(dev->vt->progress(dev, fence, 6, WAIT_FOREVER, &res));
  CU_ASSERT_EQUAL(res.hw_status, TSR_HWERR_BAD_DIMS);
  CU_ASSERT_EQUAL(res.err_index, 4);
  CU_ASSERT_EQUAL(res.desc_done, 4);
  TSR_ASSERT_OK(dev->vt->wait(dev, fence, WAIT_FOREVER, &r.res));
  CU_ASSERT_EQUAL(r.res.hw_status, TSR_HWERR_BAD_DIMS);
  TSR_ASSERT_ERR(dev->vt->doorbell(dev, fence, 6, 0), TSR_STATUS_DEVICE, "ended");
  TSR_ASSERT_OK(dev->vt->read(dev, &r.buf, 0, r.after, r.size));
  CU_ASSERT_EQUAL(verify(&r), 0);
  ring_free(&r, dev);

  /* a launch submitted behind an open queue runs once it is closed; a
   * queue closed with nothing published ends at once */
  queue_open(dev, &r, 2, &fence);
  ring_run_t plain;
  memset(&plain, 0, sizeof plain);
  plain.n = 1;
  plain.cases = calloc(1, sizeof *plain.cases);
  add_case(&plain.cases[0], 3, 5, 7, 0, 0, 0, FILL_RANDOM, FILL_RANDOM);
  layout(&plain, dev);
  plain.before = malloc(plain.size);
  plain.after = malloc(plain.size);
  memset(plain.before, PATTERN, plain.size);
  tsr_desc_pack(plain.before + plain.ring_off, &plain.cases[0].d);
  memcpy(plain.before + plain.cases[0].a_off, plain.cases[0].a, plain.cases[0].a_bytes);
  memcpy(plain.before + plain.cases[0].w_off, plain.cases[0].w, plain.cases[0].w_bytes);
  TSR_ASSERT_OK(dev->vt->write(dev, &plain.buf, 0, plain.before, plain.size));
  tsr_hal_command_t pc = {.window_base = plain.buf.addr, .window_size = plain.size,
                          .ring = plain.buf.addr + plain.ring_off, .n_desc = 1};
  uint64_t pf = 0;
  TSR_ASSERT_OK(dev->vt->submit(dev, &pc, &pf));
  queue_fill(dev, &r, 0, 2);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 2, 0));
  TSR_ASSERT_OK(dev->vt->progress(dev, fence, 2, WAIT_FOREVER, &res));
  TSR_ASSERT_ERR(dev->vt->wait(dev, pf, 0, NULL), TSR_STATUS_DEADLINE_EXCEEDED, "not done");
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 2, 1));
  TSR_ASSERT_OK(dev->vt->wait(dev, pf, WAIT_FOREVER, &plain.res));
  CU_ASSERT_EQUAL(plain.res.hw_status, 0);
  TSR_ASSERT_OK(dev->vt->wait(dev, fence, WAIT_FOREVER, &r.res));
  CU_ASSERT_EQUAL(r.res.desc_done, 2);
  TSR_ASSERT_OK(dev->vt->read(dev, &plain.buf, 0, plain.after, plain.size));
  CU_ASSERT_EQUAL(verify(&plain), 0);
  TSR_ASSERT_OK(dev->vt->read(dev, &r.buf, 0, r.after, r.size));
  CU_ASSERT_EQUAL(verify(&r), 0);
  ring_free(&plain, dev);
  ring_free(&r, dev);
  queue_open(dev, &r, 1, &fence);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 0, 1));
  TSR_ASSERT_OK(dev->vt->wait(dev, fence, WAIT_FOREVER, &r.res));
  CU_ASSERT_EQUAL(r.res.hw_status, 0);
  CU_ASSERT_EQUAL(r.res.desc_done, 0);
  ring_free(&r, dev);

  /* a reset aborts a queue waiting for its doorbell; the device works on */
  queue_open(dev, &r, 2, &fence);
  TSR_ASSERT_OK(dev->vt->reset(dev));
  TSR_ASSERT_ERR(dev->vt->wait(dev, fence, WAIT_FOREVER, NULL), TSR_STATUS_DEVICE, "aborted");
  ring_free(&r, dev);
  ring_run_t again;
  memset(&again, 0, sizeof again);
  again.n = 2;
  again.cases = calloc(2, sizeof *again.cases);
  add_case(&again.cases[0], 2, 9, 33, 1, 0, 0, FILL_RANDOM, FILL_RANDOM);
  add_case(&again.cases[1], 1, 17, 64, 0, 3, 1, FILL_RANDOM, FILL_RANDOM);
  run_and_check(dev, &again);
  ring_free(&again, dev);
  tsr_hal_close(dev);
}

/* Fault injection counts doorbells as submissions: fail=3 (the launch,
 * then doorbell 2) ends the queue with a refusal at the first descriptor of
 * that doorbell, having run the first batch; hang=2 (the first doorbell)
 * never completes, and a reset recovers. */
static void test_queue_faults(void) {
  if (strcmp(g_backend, "fmodel") && strcmp(g_backend, "sim")) {
    tsr_test_skip("no queue mode on backend %s", g_backend);
    return;
  }
  tsr_hal_device_t *dev = open_queue_backend("fail=3");
  if (!dev) return;
  ring_run_t r;
  uint64_t fence = 0;
  tsr_hal_result_t res;
  queue_open(dev, &r, 4, &fence);
  r.cases[2].expect_written = r.cases[3].expect_written = false;
  queue_fill(dev, &r, 0, 2);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 2, 0));
  TSR_ASSERT_OK(dev->vt->progress(dev, fence, 2, WAIT_FOREVER, &res));
  CU_ASSERT_EQUAL(res.hw_status, 0);
  queue_fill(dev, &r, 2, 4);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 4, 0));
  TSR_ASSERT_OK(dev->vt->progress(dev, fence, 4, WAIT_FOREVER, &res));
  CU_ASSERT_NOT_EQUAL(res.hw_status, 0);
  CU_ASSERT_EQUAL(res.err_index, 2);
  CU_ASSERT_EQUAL(res.desc_done, 2);
  TSR_ASSERT_OK(dev->vt->read(dev, &r.buf, 0, r.after, r.size));
  CU_ASSERT_EQUAL(verify(&r), 0);
  ring_free(&r, dev);
  tsr_hal_close(dev);

  dev = open_queue_backend("hang=2");
  if (!dev) return;
  queue_open(dev, &r, 1, &fence);
  queue_fill(dev, &r, 0, 1);
  TSR_ASSERT_OK(dev->vt->doorbell(dev, fence, 1, 0));
  TSR_ASSERT_ERR(dev->vt->progress(dev, fence, 1, 30 * 1000 * 1000, &res),
                 TSR_STATUS_DEADLINE_EXCEEDED, "not done");
  TSR_ASSERT_OK(dev->vt->reset(dev));
  TSR_ASSERT_ERR(dev->vt->wait(dev, fence, WAIT_FOREVER, NULL), TSR_STATUS_DEVICE, "aborted");
  ring_free(&r, dev);
  tsr_hal_close(dev);
}

/* ------------------------------------------------------------------------ */

/* Suites run in registration order: each backend suite takes the next
 * entry of g_list. */
static int init_backend_suite(void) {
  g_backend = g_list[g_next_suite].name;
  g_mem_opt = g_list[g_next_suite].mem_opt;
  g_next_suite++;
  return 0;
}

static void add_backend_suite(const char *name) {
  char title[64];
  snprintf(title, sizeof title, "backend %s", name);
  CU_pSuite s = CU_add_suite(title, init_backend_suite, NULL);
  CU_add_test(s, "caps", test_caps);
  CU_add_test(s, "first launches use their own arguments", test_first_launch);
  CU_add_test(s, "alloc/free/alignment/exhaustion", test_alloc);
  CU_add_test(s, "write/read range checks", test_copy);
  CU_add_test(s, "gemm random shapes and strides", test_gemm_random);
  CU_add_test(s, "gemm long K, extreme values", test_gemm_long_k);
  CU_add_test(s, "gemm many descriptors in one ring", test_gemm_many);
  CU_add_test(s, "queued launches", test_queue);
  CU_add_test(s, "descriptor refusals", test_refusals);
  CU_add_test(s, "ring refusals", test_ring_refusals);
  CU_add_test(s, "wait timeout, reset, recovery", test_timeout_reset);
  CU_add_test(s, "queue mode: doorbells, progress, close, refusals", test_queue_mode);
  CU_add_test(s, "queue mode: fault injection", test_queue_faults);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("hal", NULL, NULL);
  CU_add_test(s, "registry and open specs", test_registry);
  CU_add_test(s, "device-memory allocator", test_devmem);
  CU_add_test(s, "missing RTL library is UNAVAILABLE", test_missing_rtl);
  CU_add_test(s, "analytic timing model", test_timing_model);

  /* Which backends: fmodel and sim, or $TSR_TEST_BACKENDS; each that opens. */
  const char *env = getenv("TSR_TEST_BACKENDS");
  char list[256];
  snprintf(list, sizeof list, "%s", env && *env ? env : "fmodel,sim");
  bool have_cpu = false, have_sim = false;
  for (char *save = NULL, *name = strtok_r(list, ",", &save); name && g_n_list < MAX_BACKENDS;
       name = strtok_r(NULL, ",", &save)) {
    char spec[128];
    tsr_hal_device_t *dev = NULL;
    bool mem_opt = true;
    snprintf(spec, sizeof spec, "%s:" MEM_OPTS, name);
    tsr_status_t st = tsr_hal_open(spec, &dev);
    if (st && tsr_status_code(st) == TSR_STATUS_INVALID_ARGUMENT) { /* no mem= option */
      tsr_status_free(st);
      mem_opt = false;
      st = tsr_hal_open(name, &dev);
    }
    if (st) {
      char what[64];
      snprintf(what, sizeof what, "backend %s (every case)", name);
      tsr_test_skip_named(what, "%s does not open here: %s", name, tsr_status_message(st));
      printf("REPORT test_hal: backend %s skipped (%s)\n", name,
             tsr_status_code_name(tsr_status_code(st)));
      tsr_status_free(st);
      continue;
    }
    tsr_hal_close(dev);
    snprintf(g_list[g_n_list].name, sizeof g_list[g_n_list].name, "%s", name);
    g_list[g_n_list].mem_opt = mem_opt;
    g_n_list++;
    add_backend_suite(name);
    have_cpu = have_cpu || !strcmp(name, "fmodel");
    have_sim = have_sim || !strcmp(name, "sim");
  }
  if (have_cpu) {
    s = CU_add_suite("fmodel fault injection and queue", NULL, NULL);
    CU_add_test(s, "fail=N", test_cpu_fail);
    CU_add_test(s, "lost", test_cpu_lost);
    CU_add_test(s, "thousands of fences", test_cpu_many_fences);
  } else {
    tsr_test_skip_named("fmodel fault injection and queue (every case)",
                        "the fmodel backend is not in the list or did not open");
  }
  if (have_cpu && have_sim) {
    s = CU_add_suite("fmodel vs sim", NULL, NULL);
    CU_add_test(s, "identical results and counters", test_cross_random);
    CU_add_test(s, "identical refusals", test_cross_refusal);
  } else {
    tsr_test_skip_named("fmodel vs sim (every case)", "needs both backends; %s did not open",
                        have_cpu ? "sim" : "fmodel");
  }
  return tsr_test_run_all();
}
