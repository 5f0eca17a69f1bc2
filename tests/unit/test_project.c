/*
 * test_project.c - the offload cost model (host/src/project.h) against
 * figures worked out here from the boards' data-sheet numbers: the CPU
 * roofline, a decode GEMV on the U280 streaming at its 32 HBM channels'
 * 460 GB/s and on one DDR4 bank at 19.2 GB/s, the two copies of a launch,
 * and the overlap of queued launches with the host's light ops.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/board.h"
#include "host/src/plan.h"
#include "host/src/project.h"
#include "tsr_test.h"

static void board_device(const char *name, tsr_hal_caps_t *caps, tsr_km_timing_t *t) {
  tsr_board_t b;
  memset(caps, 0, sizeof *caps);
  TSR_ASSERT_OK(tsr_board_load(name, &b));
  tsr_board_apply_caps(&b, caps);
  caps->max_dim = 65535;
  tsr_km_timing_init(t);
  t->rows = caps->array_rows;
  t->cols = caps->array_cols;
  t->mem_bytes_per_cycle = caps->mem_bytes_per_cycle;
  t->clock_hz = caps->clock_hz;
  t->ports = caps->mem_ports;
}

static void test_cpu_roofline(void) {
  const tsr_cpu_profile_t p = {40e9, 300e9};
  CU_ASSERT_DOUBLE_EQUAL(tsr_proj_cpu_matmul_s(&p, 1, 4096, 4096), 4096.0 * 4096 / 40e9, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(tsr_proj_cpu_matmul_s(&p, 512, 4096, 4096),
                         512.0 * 4096 * 4096 / 300e9, 1e-12);
  setenv("TSR_CPU_PROFILE", "12.5,250", 1);
  tsr_cpu_profile_t e;
  bool set = false;
  TSR_ASSERT_OK(tsr_proj_cpu_profile_env(&e, &set));
  CU_ASSERT_TRUE(set);
  CU_ASSERT_DOUBLE_EQUAL(e.weight_bytes_per_s, 12.5e9, 1);
  CU_ASSERT_DOUBLE_EQUAL(e.int8_macs_per_s, 250e9, 1);
  setenv("TSR_CPU_PROFILE", "12.5", 1);
  TSR_ASSERT_ERR(tsr_proj_cpu_profile_env(&e, &set), TSR_STATUS_INVALID_ARGUMENT,
                 "TSR_CPU_PROFILE '12.5': expected GBPS,GMACS");
  setenv("TSR_CPU_PROFILE", "0,1", 1);
  TSR_ASSERT_ERR(tsr_proj_cpu_profile_env(&e, &set), TSR_STATUS_INVALID_ARGUMENT, "'0,1'");
  unsetenv("TSR_CPU_PROFILE");
  TSR_ASSERT_OK(tsr_proj_cpu_profile_env(&e, &set));
  CU_ASSERT_FALSE(set);
}

/* A decode GEMV (one row, 11008 x 4096 int8 weights) streams at the
 * board's summed channel bandwidth: within 15 % above bytes / bandwidth
 * (the loader issues a step's 33 segments and waits the memory latency
 * before the next, which at 32 channels is most of a step). */
static void test_gemv_bandwidth(void) {
  tsr_hal_caps_t c;
  tsr_km_timing_t t;
  const double bytes = 11008.0 * 4096;
  board_device("u280", &c, &t);
  double s = (double)tsr_proj_gemm_cycles(&t, 1, 11008, 4096) / t.clock_hz;
  double ideal = bytes / 460e9;
  printf("REPORT u280 GEMV 1x11008x4096: %.1f us modeled, %.1f us at 460 GB/s (%.1f%%)\n",
         s * 1e6, ideal * 1e6, 100 * ideal / s);
  CU_ASSERT_TRUE(s >= ideal * 0.999 && s <= ideal * 1.15);
  board_device("pcie-ddr4", &c, &t);
  s = (double)tsr_proj_gemm_cycles(&t, 1, 11008, 4096) / t.clock_hz;
  ideal = bytes / 19.2e9;
  CU_ASSERT_TRUE(s >= ideal * 0.999 && s <= ideal * 1.10);
  board_device("u250", &c, &t);
  s = (double)tsr_proj_gemm_cycles(&t, 1, 11008, 4096) / t.clock_hz;
  ideal = bytes / 77e9;
  CU_ASSERT_TRUE(s >= ideal * 0.999 && s <= ideal * 1.10);
}

static void test_group(void) {
  tsr_hal_caps_t c;
  tsr_km_timing_t t;
  board_device("u280", &c, &t);
  /* the profile's own figures: 3 us a doorbell, 1 us to host memory */
  CU_ASSERT_DOUBLE_EQUAL(c.doorbell_latency_s, 3e-6, 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(c.host_mem_latency_s, 1e-6, 1e-15);
  CU_ASSERT_TRUE(c.flags & TSR_HAL_CAP_HOST_MEM);
  const int32_t ns[2] = {5632, 5632};
  const double cyc = (double)(tsr_proj_gemm_cycles(&t, 1, 5632, 2048) * 2) / t.clock_hz;
  double dev = 0, xfer = 0;
  /* launched, staging in device memory: activations 2048 bytes up, 2 x 5632
   * int32 down: two copies of 25 us at 12 GB/s (the ring of 4 descriptors
   * stays resident in device memory) */
  c.flags &= ~(uint32_t)TSR_HAL_CAP_HOST_MEM;
  tsr_proj_group(&c, &t, 1, 2048, ns, NULL, 2, &dev, &xfer);
  double bytes = 2048.0 + 4.0 * 2 * 5632;
  CU_ASSERT_DOUBLE_EQUAL(xfer, 2 * 25e-6 + bytes / 12e9, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(dev, 70e-6 + cyc, 1e-12);
  /* queue mode, host memory: a doorbell instead of the launch; three copies
   * of 1 us, the descriptors (N in two chunks per member: 4) among them */
  c.flags |= TSR_HAL_CAP_QUEUE | TSR_HAL_CAP_HOST_MEM;
  tsr_proj_group(&c, &t, 1, 2048, ns, NULL, 2, &dev, &xfer);
  bytes += 4 * 64.0;
  CU_ASSERT_DOUBLE_EQUAL(xfer, 3 * 1e-6 + bytes / 12e9, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(dev, 3e-6 + cyc, 1e-12);
}

/* On a device with several read ports K is cut in pieces of 4096: each
 * piece a descriptor of its own, priced as such, with its own partial sums
 * coming back. The pieces stream at the channels' bandwidth where the whole
 * K does not (its A row reloaded through port 0 for every n block). */
static void test_k_pieces(void) {
  tsr_hal_caps_t c;
  tsr_km_timing_t t;
  board_device("u280", &c, &t);
  CU_ASSERT_EQUAL(tsr_tile_k_pieces(&c, 4096), 1);
  CU_ASSERT_EQUAL(tsr_tile_k_pieces(&c, 4097), 2);
  CU_ASSERT_EQUAL(tsr_tile_k_pieces(&c, 11008), 3);
  const uint64_t whole = tsr_proj_gemm_cycles(&t, 1, 4096, 11008);
  const uint64_t pieces = tsr_proj_gemm_cycles(&t, 1, 4096, 4096) * 2 +
                          tsr_proj_gemm_cycles(&t, 1, 4096, 11008 - 8192);
  CU_ASSERT_EQUAL(tsr_proj_pieces_cycles(&c, &t, 1, 4096, 11008, true), pieces);
  const double ideal = 4096.0 * 11008 / 460e9, s = (double)pieces / t.clock_hz;
  printf("REPORT u280 GEMV 1x4096x11008: whole K %.1f us, in 3 pieces %.1f us, %.1f us at "
         "460 GB/s\n", (double)whole / t.clock_hz * 1e6, s * 1e6, ideal * 1e6);
  CU_ASSERT_TRUE(s <= ideal * 1.10 && pieces < whole);
  /* the group's copies carry three blocks of partial sums */
  const int32_t ns[1] = {4096};
  double dev = 0, xfer = 0;
  tsr_proj_group(&c, &t, 1, 11008, ns, NULL, 1, &dev, &xfer);
  CU_ASSERT_DOUBLE_EQUAL(xfer, 2 * 1e-6 + (11008.0 + 3 * 4096 * 4.0) / 12e9, 1e-12);
  /* one port: K whole */
  board_device("pcie-ddr4", &c, &t);
  CU_ASSERT_EQUAL(tsr_tile_k_pieces(&c, 11008), 1);
}

/* Block-sparse weights are priced by the kernel model's walk over a bitmap
 * of that density: all tiles stored costs what the dense GEMM costs (the
 * bitmap reads aside), fewer tiles cost less, in proportion for a GEMV
 * that streams W; a group with a block-sparse member is cheaper. */
static void test_bsr_price(void) {
  tsr_hal_caps_t c;
  tsr_km_timing_t t;
  board_device("pcie-ddr4", &c, &t);
  const double dense = (double)tsr_proj_gemm_cycles(&t, 1, 4096, 4096);
  const double full = (double)tsr_proj_bsr_cycles(&t, 1, 4096, 4096, 1.0);
  const double half = (double)tsr_proj_bsr_cycles(&t, 1, 4096, 4096, 0.5);
  const double tenth = (double)tsr_proj_bsr_cycles(&t, 1, 4096, 4096, 0.1);
  CU_ASSERT_TRUE(full >= dense * 0.99 && full <= dense * 1.02);
  CU_ASSERT_TRUE(half >= dense * 0.49 && half <= dense * 0.52);
  CU_ASSERT_TRUE(tenth >= dense * 0.09 && tenth <= dense * 0.12);
  const int32_t ns[2] = {4096, 4096};
  const double dens[2] = {-1, 0.25};
  double d0 = 0, x0 = 0, d1 = 0, x1 = 0;
  tsr_proj_group(&c, &t, 1, 4096, ns, NULL, 2, &d0, &x0);
  tsr_proj_group(&c, &t, 1, 4096, ns, dens, 2, &d1, &x1);
  const double saved = (dense - (double)tsr_proj_bsr_cycles(&t, 1, 4096, 4096, 0.25)) / t.clock_hz;
  CU_ASSERT_DOUBLE_EQUAL(d0 - d1, saved, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(x0, x1, 1e-15);
}

/* One layer of a toy shape: the host time is the roofline of its seven
 * matmuls and the classifier plus the light ops; with every group on the
 * device, queued launches hide min(latency, light ops before them). */
static void test_model_overlap(void) {
  tsr_hal_caps_t c;
  tsr_km_timing_t t;
  board_device("u280", &c, &t);
  const tsr_proj_shape_t s = {"toy", 4096, 11008, 1, 32, 32, 32000};
  const tsr_cpu_profile_t slow = {1e9, 10e9}; /* every group pays on the U280 */
  tsr_proj_result_t r;
  const double light = 4 * 30e-6; /* 30 us before each of the 4 groups */
  tsr_proj_model(&s, &c, &t, &slow, 1, light, &r);
  const double w = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008 + 32000.0 * 4096;
  CU_ASSERT_DOUBLE_EQUAL(r.cpu_s, w / 1e9 + light, 1e-9);
  CU_ASSERT_EQUAL(r.dev_groups, 4);
  CU_ASSERT_TRUE(r.classifier_on);
  CU_ASSERT_EQUAL(r.launches, 5);
  /* serial pays the whole 70 us per launch; queued, 30 us of each of the
   * 4 layer launches hide behind the light ops (none before the classifier) */
  CU_ASSERT_DOUBLE_EQUAL(r.serial_s - r.board_s, 4 * 30e-6, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(r.all_s, r.board_s, 1e-12);
  /* a CPU far faster than the link: nothing pays, the board is the CPU */
  const tsr_cpu_profile_t fast = {1e15, 1e16};
  tsr_proj_model(&s, &c, &t, &fast, 1, light, &r);
  CU_ASSERT_EQUAL(r.launches, 0);
  CU_ASSERT_DOUBLE_EQUAL(r.board_s, r.cpu_s, 1e-12);
  CU_ASSERT_TRUE(r.all_s > r.cpu_s);
}

/* Weights striped over 4 channels: 5 rows of 2 bytes, 2 rows per channel
 * (cstride 4): rows 0..3 open channels 0..3, row 4 follows row 0. */
static void test_stripe(void) {
  const int8_t src[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const int8_t want[16] = {1, 2, 9, 10, 3, 4, 0, 0, 5, 6, 0, 0, 7, 8, 0, 0};
  int8_t dst[16];
  CU_ASSERT_EQUAL(tsr_tile_w_bytes(5, 2, 4), 16);
  tsr_tile_w_stripe(dst, src, 5, 2, 4);
  CU_ASSERT_EQUAL(memcmp(dst, want, sizeof want), 0);
  tsr_desc_t d;
  memset(&d, 0, sizeof d);
  tsr_tile_w_desc(&d, 0x1000, 8192, 4096, 64, 32);
  CU_ASSERT_EQUAL(d.w_nch, 32);
  CU_ASSERT_EQUAL(d.w_cstride, 256 * 64);
  CU_ASSERT_EQUAL(d.w_addr, 0x1000 + 128 * 64);
  tsr_tile_w_desc(&d, 0x1000, 100, 0, 64, 1);
  CU_ASSERT_EQUAL(d.w_nch, 0);
  CU_ASSERT_EQUAL(d.w_addr, 0x1000);
  tsr_hal_caps_t c;
  memset(&c, 0, sizeof c);
  c.mem_ports = 32;
  CU_ASSERT_EQUAL(tsr_tile_w_channels(&c), 32);
  c.mem_ports = 3; /* not a power of two: one channel */
  CU_ASSERT_EQUAL(tsr_tile_w_channels(&c), 1);
  c.mem_ports = 0;
  CU_ASSERT_EQUAL(tsr_tile_w_channels(&c), 1);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("project", NULL, NULL);
  CU_add_test(s, "CPU roofline and TSR_CPU_PROFILE", test_cpu_roofline);
  CU_add_test(s, "GEMV at the boards' channel bandwidth", test_gemv_bandwidth);
  CU_add_test(s, "a group's launch, cycles and copies", test_group);
  CU_add_test(s, "K in pieces on several read ports", test_k_pieces);
  CU_add_test(s, "block-sparse weights priced by the model's walk", test_bsr_price);
  CU_add_test(s, "a layer: placement and queued launches", test_model_overlap);
  CU_add_test(s, "weights striped over read ports", test_stripe);
  return tsr_test_run_all();
}
