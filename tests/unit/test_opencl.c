/*
 * test_opencl.c - the opencl backend against the fmodel functional model.
 *
 * Every launch runs on both backends from the same memory image (random
 * bytes everywhere, so a stray or missing write shows): the results (STATUS,
 * ERR_INDEX, DESC_DONE, cycles and counters) and the whole buffer afterwards
 * must be identical, and the buffer must be what the descriptors that ran
 * give when computed by a naive loop written in the tests. Shapes: random, odd, long K; rings of many descriptors
 * with NOPs, overwrites and read-after-write between descriptors; every
 * refusal code and the order of the checks. Then queueing, timeouts and
 * reset, option errors, and UNAVAILABLE (never an abort) when the loader,
 * the platform or PoCL's cache directory is missing: those run in a fresh
 * copy of this program (--probe SPEC) with the environment changed, since
 * an ICD loader reads its environment once per process.
 *
 * Without an OpenCL device the program prints why and exits 77 (skip).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/tsr_regmap.h"

#include "driver/hal.h"
#include "driver/hal_impl.h"
#include "tsr_test.h"

#define MEM_OPTS "mem=16M"
#define BUF_BYTES (4u << 20)
#define FOREVER UINT64_MAX

static uint64_t g_rng = 0x5eed0c1ull;
static uint32_t rnd(uint32_t n) { return (uint32_t)(tsr_test_splitmix64(&g_rng) % n); }

/* Both devices with one buffer each at the same device address. */
typedef struct pair {
  tsr_hal_device_t *cpu, *ocl;
  tsr_hal_buffer_t bc, bo;
  uint8_t *img;           /* (BUF_BYTES) what both buffers hold before a launch */
  uint8_t *out_c, *out_o; /* (BUF_BYTES) after */
  uint64_t base;          /* device address of the buffer */
} pair_t;

static bool pair_open(pair_t *p) {
  memset(p, 0, sizeof *p);
  TSR_ASSERT_OK(tsr_hal_open("fmodel:" MEM_OPTS, &p->cpu));
  TSR_ASSERT_OK(tsr_hal_open("opencl:" MEM_OPTS, &p->ocl));
  if (!p->cpu || !p->ocl) return false;
  TSR_ASSERT_OK(p->cpu->vt->alloc(p->cpu, BUF_BYTES, 4096, &p->bc));
  TSR_ASSERT_OK(p->ocl->vt->alloc(p->ocl, BUF_BYTES, 4096, &p->bo));
  CU_ASSERT_EQUAL(p->bc.addr, p->bo.addr);
  p->base = p->bo.addr;
  p->img = malloc(BUF_BYTES);
  p->out_c = malloc(BUF_BYTES);
  p->out_o = malloc(BUF_BYTES);
  for (size_t i = 0; i < BUF_BYTES; i += 8) {
    uint64_t r = tsr_test_splitmix64(&g_rng);
    memcpy(p->img + i, &r, 8);
  }
  return p->bc.addr == p->bo.addr;
}

static void pair_close(pair_t *p) {
  if (p->cpu) p->cpu->vt->free(p->cpu, &p->bc);
  if (p->ocl) p->ocl->vt->free(p->ocl, &p->bo);
  tsr_hal_close(p->cpu);
  tsr_hal_close(p->ocl);
  free(p->img);
  free(p->out_c);
  free(p->out_o);
}

static void put_desc(pair_t *p, uint64_t off, const tsr_desc_t *d) {
  tsr_desc_pack(p->img + off, d);
}

/* The independent expectation of a launch: the first `done` descriptors of
 * the ring run in order on a copy of p->img, each read from memory as the
 * previous ones left it (a GEMM may overwrite later descriptors or another's
 * operands), a GEMM computed by tsr_test_ref_gemm_i8. Returns the number of
 * bytes of `got` that differ from it (plus descriptors that ran outside the
 * buffer). */
static size_t ref_ring_diff(const pair_t *p, const tsr_hal_command_t *cmd, uint32_t done,
                            const uint8_t *got) {
  uint8_t *mem = malloc(BUF_BYTES);
  CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
  memcpy(mem, p->img, BUF_BYTES);
  size_t bad = 0;
  for (uint32_t i = 0; i < done && !bad; i++) {
    uint64_t at = cmd->ring + 64ull * i - p->base;
    /* A descriptor outside the buffer (device memory the test never wrote)
     * is taken to write nothing here; if it did, the comparison shows it. */
    if (cmd->ring < p->base || at + TSR_HW_DESC_BYTES > BUF_BYTES) break;
    tsr_desc_t d;
    tsr_desc_unpack(&d, mem + at);
    if (d.opcode != TSR_OP_GEMM_I8_I32) continue; /* a NOP */
    uint64_t a_end = (uint64_t)(d.m - 1) * d.lda + d.k, w_end = (uint64_t)(d.n - 1) * d.ldw + d.k;
    uint64_t c_end = (uint64_t)(d.m - 1) * d.ldc + 4ull * d.n;
    if (d.a_addr < p->base || d.a_addr - p->base + a_end > BUF_BYTES || d.w_addr < p->base ||
        d.w_addr - p->base + w_end > BUF_BYTES || d.c_addr < p->base ||
        d.c_addr - p->base + c_end > BUF_BYTES) {
      fprintf(stderr, "descriptor %u ran but reaches outside the buffer\n", i);
      bad++;
      break;
    }
    int32_t *c = malloc(sizeof(int32_t) * d.m * d.n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    tsr_test_ref_gemm_i8(c, d.n, (const int8_t *)mem + (d.a_addr - p->base), d.lda,
                         (const int8_t *)mem + (d.w_addr - p->base), d.ldw, (int32_t)d.m,
                         (int32_t)d.n, (int32_t)d.k);
    for (uint32_t r = 0; r < d.m; r++)
      for (uint32_t j = 0; j < d.n; j++) {
        uint8_t *o = mem + (d.c_addr - p->base) + (uint64_t)r * d.ldc + 4ull * j;
        uint32_t v = (uint32_t)c[(size_t)r * d.n + j];
        o[0] = (uint8_t)v, o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)(v >> 16), o[3] = (uint8_t)(v >> 24);
      }
    free(c);
  }
  size_t first = 0;
  for (size_t i = 0; i < BUF_BYTES; i++)
    if (mem[i] != got[i] && bad++ == 0) first = i;
  if (bad)
    fprintf(stderr, "memory differs from the naive reference in %zu bytes, first at offset %zu\n",
            bad, first);
  free(mem);
  return bad;
}

/* Runs `cmd` on both from p->img; asserts identical results and memory,
 * and memory equal to the naive reference. Returns the opencl result in
 * *res. */
static void pair_run(pair_t *p, const tsr_hal_command_t *cmd, tsr_hal_result_t *res) {
  tsr_hal_result_t rc, ro;
  uint64_t fc = 0, fo = 0;
  TSR_ASSERT_OK(p->cpu->vt->write(p->cpu, &p->bc, 0, p->img, BUF_BYTES));
  TSR_ASSERT_OK(p->ocl->vt->write(p->ocl, &p->bo, 0, p->img, BUF_BYTES));
  TSR_ASSERT_OK(p->cpu->vt->submit(p->cpu, cmd, &fc));
  TSR_ASSERT_OK(p->ocl->vt->submit(p->ocl, cmd, &fo));
  TSR_ASSERT_OK(p->cpu->vt->wait(p->cpu, fc, FOREVER, &rc));
  TSR_ASSERT_OK(p->ocl->vt->wait(p->ocl, fo, FOREVER, &ro));
  CU_ASSERT_EQUAL(ro.hw_status, rc.hw_status);
  CU_ASSERT_EQUAL(ro.err_index, rc.err_index);
  CU_ASSERT_EQUAL(ro.desc_done, rc.desc_done);
  CU_ASSERT_EQUAL(ro.cycles, rc.cycles);
  CU_ASSERT_EQUAL(ro.stall_cycles, rc.stall_cycles);
  CU_ASSERT_EQUAL(ro.bytes_rd, rc.bytes_rd);
  CU_ASSERT_EQUAL(ro.bytes_wr, rc.bytes_wr);
  CU_ASSERT_EQUAL(ro.macs, rc.macs);
  if (memcmp(&ro, &rc, sizeof ro))
    fprintf(stderr, "results differ: cpu status %u idx %u done %u cyc %" PRIu64 " rd %" PRIu64
            " | opencl status %u idx %u done %u cyc %" PRIu64 " rd %" PRIu64 "\n",
            rc.hw_status, rc.err_index, rc.desc_done, rc.cycles, rc.bytes_rd, ro.hw_status,
            ro.err_index, ro.desc_done, ro.cycles, ro.bytes_rd);
  TSR_ASSERT_OK(p->cpu->vt->read(p->cpu, &p->bc, 0, p->out_c, BUF_BYTES));
  TSR_ASSERT_OK(p->ocl->vt->read(p->ocl, &p->bo, 0, p->out_o, BUF_BYTES));
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < BUF_BYTES; i++)
    if (p->out_c[i] != p->out_o[i] && diff++ == 0) first = i;
  if (diff)
    fprintf(stderr, "memory differs in %zu bytes, first at offset %zu (cpu %02x, opencl %02x)\n",
            diff, first, p->out_c[first], p->out_o[first]);
  CU_ASSERT_EQUAL(diff, 0);
  CU_ASSERT_EQUAL(ref_ring_diff(p, cmd, ro.desc_done, p->out_o), 0);
  if (res) *res = ro;
}

/* Lays out a GEMM at the bump pointer *off (in the buffer); strides get
 * the given padding. Returns the descriptor. */
static tsr_desc_t layout_gemm(pair_t *p, uint64_t *off, uint32_t m, uint32_t n, uint32_t k,
                              uint32_t pad_a, uint32_t pad_w, uint32_t pad_c) {
  tsr_desc_t d = {.opcode = TSR_OP_GEMM_I8_I32, .m = m, .n = n, .k = k,
                  .lda = k + pad_a, .ldw = k + pad_w, .ldc = 4 * (n + pad_c)};
  uint64_t o = *off + rnd(7);
  d.a_addr = p->base + o;
  o += (uint64_t)(m - 1) * d.lda + k + rnd(9);
  d.w_addr = p->base + o;
  o += (uint64_t)(n - 1) * d.ldw + k;
  o = (o + 3) & ~3ull;
  d.c_addr = p->base + o;
  o += (uint64_t)(m - 1) * d.ldc + 4ull * n;
  *off = (o + 63) & ~63ull;
  CU_ASSERT_FATAL(*off <= BUF_BYTES);
  return d;
}

static tsr_hal_command_t whole(const pair_t *p, uint64_t ring_off, uint32_t n) {
  tsr_hal_command_t c = {.window_base = p->base, .window_size = BUF_BYTES,
                         .ring = p->base + ring_off, .n_desc = n};
  return c;
}

/* ------------------------------------------------------------------------ */

static void test_random_shapes(void) {
  pair_t p;
  if (!pair_open(&p)) goto out;
  for (int iter = 0; iter < 12; iter++) {
    uint64_t off = 4096;
    uint32_t lim = iter < 6 ? 40 : 300;
    tsr_desc_t d = layout_gemm(&p, &off, 1 + rnd(lim), 1 + rnd(lim), 1 + rnd(2 * lim),
                               rnd(2) ? 0 : rnd(50), rnd(2) ? 0 : rnd(50), rnd(2) ? 0 : rnd(5));
    put_desc(&p, 0, &d);
    tsr_hal_command_t cmd = whole(&p, 0, 1);
    tsr_hal_result_t r;
    pair_run(&p, &cmd, &r);
    CU_ASSERT_EQUAL(r.hw_status, 0);
    CU_ASSERT_EQUAL(r.desc_done, 1);
    CU_ASSERT_EQUAL(r.macs, (uint64_t)d.m * d.n * d.k);
  }
out:
  pair_close(&p);
}

static void test_odd_shapes(void) {
  static const uint32_t shapes[][3] = {
      {1, 1, 1},   {1, 1, 15},  {1, 1, 16},   {1, 1, 17},  {17, 1, 1},   {1, 33, 15},
      {3, 5, 16},  {16, 16, 16}, {17, 17, 33}, {31, 7, 257}, {2, 3, 4095}, {1, 300, 1000},
      {129, 65, 3}, {5, 1, 65535},
  };
  pair_t p;
  if (!pair_open(&p)) goto out;
  uint32_t n = sizeof shapes / sizeof shapes[0];
  uint64_t off = 4096;
  for (uint32_t i = 0; i < n; i++) {
    tsr_desc_t d = layout_gemm(&p, &off, shapes[i][0], shapes[i][1], shapes[i][2], i % 3, i % 2,
                               i % 4 == 1);
    put_desc(&p, 64 * i, &d);
  }
  /* Extreme operands in the long-K case: the largest exact sums. */
  tsr_desc_t last;
  tsr_desc_unpack(&last, p.img + 64 * (n - 1));
  memset(p.img + (last.a_addr - p.base), 0x80, (size_t)(last.m - 1) * last.lda + last.k);
  memset(p.img + (last.w_addr - p.base), 0x80, last.k);
  tsr_hal_command_t cmd = whole(&p, 0, n);
  tsr_hal_result_t r;
  pair_run(&p, &cmd, &r);
  CU_ASSERT_EQUAL(r.hw_status, 0);
  CU_ASSERT_EQUAL(r.desc_done, n);
  int32_t c00;
  memcpy(&c00, p.out_o + (last.c_addr - p.base), 4);
  CU_ASSERT_EQUAL(c00, 65535 * 16384);
out:
  pair_close(&p);
}

/* A ring of many descriptors: NOPs, two writing the same C (the later
 * wins), one reading what the previous wrote. */
static void test_ring(void) {
  pair_t p;
  if (!pair_open(&p)) goto out;
  uint64_t off = 8192;
  uint32_t n = 40;
  for (uint32_t i = 0; i < n; i++) {
    tsr_desc_t d = {.opcode = TSR_OP_NOP};
    if (i % 7 != 3) d = layout_gemm(&p, &off, 1 + rnd(24), 1 + rnd(24), 1 + rnd(70), rnd(3), 0, 0);
    put_desc(&p, 64 * i, &d);
  }
  /* 40: same C as 39, different shape in K. 41: its A is 39's C bytes. */
  tsr_desc_t d39;
  tsr_desc_unpack(&d39, p.img + 64 * 39);
  tsr_desc_t d40 = layout_gemm(&p, &off, d39.m, d39.n, 5, 0, 0, 0);
  d40.c_addr = d39.c_addr;
  d40.ldc = d39.ldc;
  put_desc(&p, 64 * 40, &d40);
  tsr_desc_t d41 = layout_gemm(&p, &off, 2, 3, 4 * d39.n, 0, 0, 0);
  d41.a_addr = d39.c_addr;
  d41.lda = d39.ldc;
  put_desc(&p, 64 * 41, &d41);
  tsr_hal_command_t cmd = whole(&p, 0, 42);
  tsr_hal_result_t r;
  pair_run(&p, &cmd, &r);
  CU_ASSERT_EQUAL(r.hw_status, 0);
  CU_ASSERT_EQUAL(r.desc_done, 42);
out:
  pair_close(&p);
}

/* A GEMM whose C overwrites its own ring entry and the next one: the
 * kernel runs each descriptor as it was when fetched. */
static void test_ring_self_overwrite(void) {
  pair_t p;
  if (!pair_open(&p)) goto out;
  uint64_t off = 8192;
  tsr_desc_t d = layout_gemm(&p, &off, 4, 8, 20, 0, 0, 0);
  d.c_addr = p.base + 0; /* C covers descriptors 0 and 1 (128 bytes) */
  put_desc(&p, 0, &d);
  tsr_desc_t d1 = layout_gemm(&p, &off, 2, 2, 2, 0, 0, 0);
  put_desc(&p, 64, &d1);
  tsr_hal_command_t cmd = whole(&p, 0, 2);
  pair_run(&p, &cmd, NULL); /* descriptor 1 is garbage now: both refuse alike */
out:
  pair_close(&p);
}

typedef void (*mutate_fn)(tsr_desc_t *d, uint64_t base);
static void m_opcode(tsr_desc_t *d, uint64_t b) { d->opcode = 7; }
static void m_flags(tsr_desc_t *d, uint64_t b) { d->flags = 1; }
static void m_nch(tsr_desc_t *d, uint64_t b) { d->w_nch = 2; } /* one read port */
static void m_nop_flags(tsr_desc_t *d, uint64_t b) { d->opcode = TSR_OP_NOP, d->flags = 2; }
static void m_m0(tsr_desc_t *d, uint64_t b) { d->m = 0; }
static void m_n0(tsr_desc_t *d, uint64_t b) { d->n = 0; }
static void m_kbig(tsr_desc_t *d, uint64_t b) { d->k = TSR_HW_MAX_DIM + 1; }
static void m_lda(tsr_desc_t *d, uint64_t b) { d->lda = d->k - 1; }
static void m_ldw(tsr_desc_t *d, uint64_t b) { d->ldw = d->k - 1; }
static void m_ldc_small(tsr_desc_t *d, uint64_t b) { d->ldc = 4 * d->n - 4; }
static void m_ldc_odd(tsr_desc_t *d, uint64_t b) { d->ldc += 2; }
static void m_c_align(tsr_desc_t *d, uint64_t b) { d->c_addr += 1; }
static void m_a_low(tsr_desc_t *d, uint64_t b) { d->a_addr = b - 1; }
static void m_w_high(tsr_desc_t *d, uint64_t b) { d->w_addr = b + BUF_BYTES - d->k + 1; }
static void m_c_high(tsr_desc_t *d, uint64_t b) { d->c_addr = b + BUF_BYTES - 4; }
static void m_a_wrap(tsr_desc_t *d, uint64_t b) { d->a_addr = UINT64_MAX - 3; }
static void m_lda_huge(tsr_desc_t *d, uint64_t b) { d->lda = 0xFFFFFFFFu; }
/* Several faults at once: the first check in the model's order wins. */
static void m_op_dims(tsr_desc_t *d, uint64_t b) { d->opcode = 9, d->m = 0; }
static void m_dims_stride(tsr_desc_t *d, uint64_t b) { d->k = 0, d->lda = 0, d->ldc = 3; }
static void m_stride_range(tsr_desc_t *d, uint64_t b) { d->ldc = 1, d->a_addr = 0; }

static void test_refusals(void) {
  static const struct { mutate_fn f; uint32_t want; const char *what; } cases[] = {
      {m_opcode, TSR_HWERR_BAD_OPCODE, "opcode"},
      {m_flags, TSR_HWERR_BAD_OPCODE, "flags"},
      {m_nch, TSR_HWERR_BAD_STRIDE, "W_NCH 2"},
      {m_nop_flags, TSR_HWERR_BAD_OPCODE, "nop flags"},
      {m_m0, TSR_HWERR_BAD_DIMS, "m=0"},
      {m_n0, TSR_HWERR_BAD_DIMS, "n=0"},
      {m_kbig, TSR_HWERR_BAD_DIMS, "k>max"},
      {m_lda, TSR_HWERR_BAD_STRIDE, "lda<k"},
      {m_ldw, TSR_HWERR_BAD_STRIDE, "ldw<k"},
      {m_ldc_small, TSR_HWERR_BAD_STRIDE, "ldc<4n"},
      {m_ldc_odd, TSR_HWERR_BAD_STRIDE, "ldc%4"},
      {m_c_align, TSR_HWERR_BAD_STRIDE, "c%4"},
      {m_a_low, TSR_HWERR_ADDR_RANGE, "a below"},
      {m_w_high, TSR_HWERR_ADDR_RANGE, "w above"},
      {m_c_high, TSR_HWERR_ADDR_RANGE, "c above"},
      {m_a_wrap, TSR_HWERR_ADDR_RANGE, "a wraps"},
      {m_lda_huge, TSR_HWERR_ADDR_RANGE, "lda huge"},
      {m_op_dims, TSR_HWERR_BAD_OPCODE, "opcode before dims"},
      {m_dims_stride, TSR_HWERR_BAD_DIMS, "dims before stride"},
      {m_stride_range, TSR_HWERR_BAD_STRIDE, "stride before range"},
  };
  pair_t p;
  if (!pair_open(&p)) goto out;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* Two good GEMMs, the bad one at index 2, a good one after it. */
    uint64_t off = 4096;
    for (uint32_t j = 0; j < 4; j++) {
      tsr_desc_t d = layout_gemm(&p, &off, 3 + j, 5, 17 + j, 0, 0, 0);
      if (j == 2) cases[i].f(&d, p.base);
      put_desc(&p, 64 * j, &d);
    }
    tsr_hal_command_t cmd = whole(&p, 0, 4);
    tsr_hal_result_t r;
    pair_run(&p, &cmd, &r);
    if (r.hw_status != cases[i].want)
      fprintf(stderr, "refusal '%s': status %u, wanted %u\n", cases[i].what, r.hw_status,
              cases[i].want);
    CU_ASSERT_EQUAL(r.hw_status, cases[i].want);
    CU_ASSERT_EQUAL(r.err_index, 2);
    CU_ASSERT_EQUAL(r.desc_done, 2);
  }
out:
  pair_close(&p);
}

/* Window and ring refusals, and AXI_ERROR (a window larger than the
 * device memory: the memory itself answers with an error). */
static void test_ring_and_axi(void) {
  pair_t p;
  if (!pair_open(&p)) goto out;
  uint64_t off = 4096;
  tsr_desc_t d = layout_gemm(&p, &off, 4, 4, 4, 0, 0, 0);
  put_desc(&p, 0, &d);
  put_desc(&p, 64, &d);
  tsr_hal_result_t r;
  tsr_hal_command_t c = whole(&p, 0, 2);
  c.ring += 32; /* misaligned */
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.hw_status, TSR_HWERR_RING_RANGE);
  c = whole(&p, 0, 2);
  c.window_base += 64; /* ring below the window */
  c.window_size -= 64;
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.hw_status, TSR_HWERR_RING_RANGE);
  c = whole(&p, 0, BUF_BYTES / 64 + 1); /* ring longer than the window */
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.hw_status, TSR_HWERR_RING_RANGE);
  c = whole(&p, 0, 0xFFFFFFFFu);
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.hw_status, TSR_HWERR_RING_RANGE);
  c = whole(&p, 0, 0); /* nothing to do */
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.hw_status, 0);
  CU_ASSERT_EQUAL(r.desc_done, 0);

  /* The window reaches past the 16 MiB of device memory. */
  uint64_t mem_end = p.base + (16u << 20);
  c = whole(&p, 0, 2);
  c.window_size = 1ull << 40;
  tsr_desc_t far = d;
  far.w_addr = mem_end - 2; /* W straddles the end of memory */
  put_desc(&p, 64, &far);
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.hw_status, TSR_HWERR_AXI_ERROR);
  CU_ASSERT_EQUAL(r.err_index, 1);
  CU_ASSERT_EQUAL(r.desc_done, 1);
  far = d;
  far.c_addr = mem_end + 4096;
  put_desc(&p, 64, &far);
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.hw_status, TSR_HWERR_AXI_ERROR);
  /* The ring itself runs off the end of memory at descriptor 3. */
  put_desc(&p, 64, &d);
  c.ring = mem_end - 3 * 64;
  c.n_desc = 5;
  tsr_hal_result_t rc;
  (void)rc;
  pair_run(&p, &c, &r);
  CU_ASSERT_EQUAL(r.err_index, 3);
out:
  pair_close(&p);
}

/* Several launches in flight, waited out of order; a timeout on a long one;
 * a reset; the device keeps working. */
static void test_queue_timeout_reset(void) {
  tsr_hal_device_t *dev = NULL;
  TSR_ASSERT_OK(tsr_hal_open("opencl:mem=64M", &dev));
  if (!dev) return;
  tsr_hal_buffer_t b;
  TSR_ASSERT_OK(dev->vt->alloc(dev, 40u << 20, 4096, &b));
  /* A: 4 small launches over distinct C; L: one long GEMM (1024x1024x4096). */
  const uint32_t M = 1024, N = 1024, K = 4096;
  uint8_t *img = calloc(1, 4096 + 2ull * 1024 * 4096);
  for (size_t i = 4096; i < 4096 + 2ull * 1024 * 4096; i++) img[i] = (uint8_t)(i * 2654435761u >> 13);
  tsr_desc_t dl = {.opcode = TSR_OP_GEMM_I8_I32, .m = M, .n = N, .k = K, .lda = K, .ldw = K,
                   .ldc = 4 * N, .a_addr = b.addr + 4096, .w_addr = b.addr + 4096 + (uint64_t)M * K,
                   .c_addr = b.addr + 4096 + 2ull * M * K};
  tsr_desc_pack(img, &dl);
  for (int j = 1; j < 5; j++) {
    tsr_desc_t ds = {.opcode = TSR_OP_GEMM_I8_I32, .m = 8, .n = 8, .k = 64, .lda = K,
                     .ldw = K, .ldc = 32, .a_addr = dl.a_addr + 64ull * j, .w_addr = dl.w_addr,
                     .c_addr = b.addr + (36u << 20) + 256ull * j};
    tsr_desc_pack(img + 64 * j, &ds);
  }
  TSR_ASSERT_OK(dev->vt->write(dev, &b, 0, img, 4096 + 2ull * 1024 * 4096));
  uint64_t f[6];
  for (int j = 1; j < 5; j++) {
    tsr_hal_command_t c = {.window_base = b.addr, .window_size = b.size,
                           .ring = b.addr + 64 * j, .n_desc = 1};
    TSR_ASSERT_OK(dev->vt->submit(dev, &c, &f[j]));
  }
  tsr_hal_result_t r;
  for (int j = 4; j >= 1; j--) {
    TSR_ASSERT_OK(dev->vt->wait(dev, f[j], FOREVER, &r));
    CU_ASSERT_EQUAL(r.hw_status, 0);
    CU_ASSERT_EQUAL(r.macs, 8 * 8 * 64);
  }
  /* The long one: a short wait times out, a full wait gets the result. */
  tsr_hal_command_t cl = {.window_base = b.addr, .window_size = b.size, .ring = b.addr,
                          .n_desc = 1};
  TSR_ASSERT_OK(dev->vt->submit(dev, &cl, &f[0]));
  uint64_t t0 = tsr_hal_now_ns();
  TSR_ASSERT_ERR(dev->vt->wait(dev, f[0], 1000000, NULL), TSR_STATUS_DEADLINE_EXCEEDED,
                 "not done");
  uint64_t waited = tsr_hal_now_ns() - t0;
  CU_ASSERT(waited >= 1000000 && waited < 500000000);
  TSR_ASSERT_ERR(dev->vt->wait(dev, f[0], 0, NULL), TSR_STATUS_DEADLINE_EXCEEDED, "not done");
  TSR_ASSERT_OK(dev->vt->wait(dev, f[0], FOREVER, &r));
  CU_ASSERT_EQUAL(r.hw_status, 0);
  CU_ASSERT_EQUAL(r.macs, (uint64_t)M * N * K);
  /* Reset while the long one runs: it is reported aborted; the device and
   * its buffers work afterwards. */
  TSR_ASSERT_OK(dev->vt->submit(dev, &cl, &f[5]));
  TSR_ASSERT_OK(dev->vt->reset(dev));
  TSR_ASSERT_ERR(dev->vt->wait(dev, f[5], FOREVER, NULL), TSR_STATUS_DEVICE, "aborted");
  tsr_hal_command_t c1 = {.window_base = b.addr, .window_size = b.size, .ring = b.addr + 64,
                          .n_desc = 1};
  TSR_ASSERT_OK(dev->vt->submit(dev, &c1, &f[1]));
  TSR_ASSERT_OK(dev->vt->wait(dev, f[1], 10ull * 1000000000ull, &r));
  CU_ASSERT_EQUAL(r.hw_status, 0);
  CU_ASSERT_EQUAL(r.desc_done, 1);
  TSR_ASSERT_ERR(dev->vt->wait(dev, 99, FOREVER, NULL), TSR_STATUS_INVALID_ARGUMENT, "never");
  free(img);
  dev->vt->free(dev, &b);
  tsr_hal_close(dev);
}

static void test_caps_copies_options(void) {
  tsr_hal_device_t *dev = NULL;
  TSR_ASSERT_OK(tsr_hal_open("opencl:mem=1M,base=0x10000000,platform=Portable", &dev));
  if (dev) {
    tsr_hal_caps_t c;
    dev->vt->query_caps(dev, &c);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.name, "opencl"));
    CU_ASSERT_EQUAL(c.mem_size, 1u << 20);
    CU_ASSERT_EQUAL(c.max_dim, TSR_HW_MAX_DIM);
    CU_ASSERT(c.ops & (1u << TSR_OP_GEMM_I8_I32));
    tsr_hal_buffer_t b, x;
    TSR_ASSERT_OK(dev->vt->alloc(dev, 1000, 64, &b));
    CU_ASSERT_EQUAL(b.addr, 0x10000000);
    uint8_t buf[1000] = {1, 2, 3};
    TSR_ASSERT_OK(dev->vt->write(dev, &b, 0, buf, 1000));
    TSR_ASSERT_ERR(dev->vt->write(dev, &b, 1, buf, 1000), TSR_STATUS_OUT_OF_RANGE, "overruns");
    TSR_ASSERT_ERR(dev->vt->alloc(dev, 2u << 20, 64, &x), TSR_STATUS_RESOURCE_EXHAUSTED, "");
    tsr_hal_buffer_t stale = b;
    dev->vt->free(dev, &b);
    TSR_ASSERT_ERR(dev->vt->read(dev, &stale, 0, buf, 10), TSR_STATUS_INVALID_ARGUMENT, "live");
    tsr_hal_close(dev);
  }
  TSR_ASSERT_ERR(tsr_hal_open("opencl:frob=1", &dev), TSR_STATUS_INVALID_ARGUMENT, "frob");
  TSR_ASSERT_ERR(tsr_hal_open("opencl:base=0x123", &dev), TSR_STATUS_INVALID_ARGUMENT,
                 "aligned");
  TSR_ASSERT_ERR(tsr_hal_open("opencl:platform=NoSuchVendor", &dev), TSR_STATUS_NOT_FOUND,
                 "NoSuchVendor");
  TSR_ASSERT_ERR(tsr_hal_open("opencl:platform=7", &dev), TSR_STATUS_NOT_FOUND, "platform");
  TSR_ASSERT_ERR(tsr_hal_open("opencl:device=9", &dev), TSR_STATUS_NOT_FOUND, "no index 9");
  TSR_ASSERT_ERR(tsr_hal_open("opencl:xclbin=/nonexistent.xclbin", &dev),
                 TSR_STATUS_INVALID_ARGUMENT, "Xilinx");
  TSR_ASSERT_ERR(tsr_hal_open("opencl:source=/nonexistent.cl", &dev), TSR_STATUS_NOT_FOUND,
                 "/nonexistent.cl");
  TSR_ASSERT_ERR(tsr_hal_open("opencl:loader=/nonexistent/libOpenCL.so.1", &dev),
                 TSR_STATUS_UNAVAILABLE, "/nonexistent/libOpenCL.so.1");
  CU_ASSERT_PTR_NULL(dev);
  /* A kernel that does not compile: the build log is in the message. */
  char path[512];
  snprintf(path, sizeof path, "%s/broken.cl", tsr_test_tmpdir());
  FILE *f = fopen(path, "w");
  if (f) {
    fputs("__kernel void tsr_fetch(void) { this is not C; }\n", f);
    fclose(f);
    char spec[600];
    snprintf(spec, sizeof spec, "opencl:source=%s", path);
    TSR_ASSERT_ERR(tsr_hal_open(spec, &dev), TSR_STATUS_INTERNAL, "clBuildProgram");
  }
}

/* Runs this program again as `--probe SPEC` with `env` prepended; returns
 * its one output line ("CODE message"). */
static void probe(const char *env, const char *spec, char *out, size_t cap) {
  char self[1024];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  out[0] = '\0';
  if (n <= 0) return;
  self[n] = '\0';
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "env %s '%s' --probe '%s' 2>&1", env, self, spec);
  FILE *p = popen(cmd, "r");
  if (!p) return;
  if (!fgets(out, (int)cap, p)) out[0] = '\0';
  pclose(p);
}

static void test_unavailable_by_environment(void) {
  char empty[512], line[2048];
  snprintf(empty, sizeof empty, "%s/no-vendors", tsr_test_tmpdir());
  mkdir(empty, 0755);
  char env[1024];
  /* No vendor file: the loader finds no platform. */
  snprintf(env, sizeof env, "OCL_ICD_VENDORS=%s", empty);
  probe(env, "opencl", line, sizeof line);
  printf("\n  probe (no vendors): %s", line);
  CU_ASSERT(!strncmp(line, "UNAVAILABLE", 11));
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "no OpenCL platform"));
  /* A vendor library that does not exist. */
  snprintf(env, sizeof env, "OCL_ICD_VENDORS=%s OCL_ICD_FILENAMES=/nonexistent/libbogus.so", empty);
  probe(env, "opencl", line, sizeof line);
  printf("  probe (bogus ICD): %s", line);
  CU_ASSERT(!strncmp(line, "UNAVAILABLE", 11));
  /* PoCL with a cache directory it cannot create: no device, and we say why. */
  probe("POCL_CACHE_DIR=/etc/hostname/pocl-cache", "opencl", line, sizeof line);
  printf("  probe (bad POCL_CACHE_DIR): %s", line);
  CU_ASSERT(!strncmp(line, "UNAVAILABLE", 11));
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "POCL_CACHE_DIR"));
  /* No loader at all. */
  probe("", "opencl:loader=libOpenCL-missing.so.1", line, sizeof line);
  printf("  probe (no loader): %s", line);
  CU_ASSERT(!strncmp(line, "UNAVAILABLE", 11));
  /* The same environment through the generic registry: still no abort. */
  probe("OCL_ICD_VENDORS=/nonexistent-dir", "opencl:mem=1M", line, sizeof line);
  CU_ASSERT(!strncmp(line, "UNAVAILABLE", 11));
}

static int probe_main(const char *spec) {
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open(spec, &dev);
  printf("%s %s\n", tsr_status_code_name(tsr_status_code(s)), tsr_status_message(s));
  tsr_status_free(s);
  tsr_hal_close(dev);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--probe")) return probe_main(argv[2]);
  tsr_hal_device_t *dev = NULL;
  tsr_status_t s = tsr_hal_open("opencl:" MEM_OPTS, &dev);
  if (s) {
    int rc = tsr_test_skip_program("no OpenCL device opens here: %s", tsr_status_message(s));
    tsr_status_free(s);
    return rc;
  }
  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  printf("REPORT test_opencl: device %s\n", caps.name);
  tsr_hal_close(dev);

  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite su = CU_add_suite("opencl vs cpu model", NULL, NULL);
  CU_add_test(su, "random shapes and strides", test_random_shapes);
  CU_add_test(su, "odd shapes, long K, extreme values", test_odd_shapes);
  CU_add_test(su, "ring of many descriptors, overwrite, read-after-write", test_ring);
  CU_add_test(su, "descriptor overwriting its own ring entry", test_ring_self_overwrite);
  CU_add_test(su, "every descriptor refusal, check order", test_refusals);
  CU_add_test(su, "ring refusals and AXI errors", test_ring_and_axi);
  su = CU_add_suite("opencl device", NULL, NULL);
  CU_add_test(su, "queue, timeout, reset", test_queue_timeout_reset);
  CU_add_test(su, "caps, copies, options", test_caps_copies_options);
  CU_add_test(su, "UNAVAILABLE by environment", test_unavailable_by_environment);
  return tsr_test_run_all();
}
