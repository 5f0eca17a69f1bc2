/*
 * cmd_gemm.c - `tessera gemm`: one int8 matmul on a device through the HAL,
 * or on the host (`--device cpu`: the host int8 kernel, no HAL).
 *
 * A (M x K) and then W (N x K) come from one splitmix64 stream seeded with
 * --seed, each element (int8_t)(x >> 56). C = A * W^T runs on the device as
 * one launch whose ring holds one descriptor per tile; problems larger than
 * a descriptor allows are tiled in M and N, and in K into separate partial
 * results that the host adds (the kernel does not accumulate into C).
 * The checksum is FNV-1a 64 over C's int32 values as little-endian bytes,
 * row-major. Time: cycles come from the device (RTL or model) and are
 * projected at the device's stated clock; host wall time is printed apart
 * and never as hardware speed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/tsr_regmap.h"

#include "cli.h"
#include "driver/hal.h"
#include "compute/qgemm.h"
#include "base/status.h"
#include "base/threadpool.h"

static const char *CMD = "gemm";

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera gemm --device SPEC -M M -N N -K K --seed S [--check]\n"
          "\n"
          "Runs C = A * W^T (int8 x int8 -> int32) on a device and prints its checksum.\n"
          "\n"
          "  --device SPEC   cpu (the host int8 kernel) or a device: fmodel | sim | opencl |\n"
          "                  xrt | usb, with options as fmodel:mem=64M or sim:latency=50\n"
          "  -M, -N, -K      shape: A is M x K, W is N x K, C is M x N (1..131071)\n"
          "  --seed S        splitmix64 seed for A then W (default 1)\n"
          "  --check         also compute C with a plain triple loop (no library kernel);\n"
          "                  exit 1 on any difference\n"
          "  --tile-m T, --tile-n T, --tile-k T\n"
          "                  largest tile per descriptor (default: the device's MAX_DIM\n"
          "                  rounded to its array)\n"
          "  --timeout SEC   give up waiting after SEC seconds of wall time (default none)\n");
}

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

typedef struct gemm_args {
  const char *device;
  int64_t m, n, k;
  uint64_t seed;
  bool check;
  int64_t tile_m, tile_n, tile_k;
  double timeout_s;
} gemm_args_t;

/* Largest tile <= limit that is a multiple of `unit` when possible. */
static uint32_t pick_tile(int64_t want, uint32_t max_dim, uint32_t unit) {
  uint64_t t = max_dim;
  if (unit > 1 && t >= unit) t -= t % unit;
  if (want > 0 && (uint64_t)want < t) t = (uint64_t)want;
  return (uint32_t)t;
}

/* Runs the matmul on `dev`; fills c (M x N) and *res, *wall. */
static tsr_status_t run_on_device(tsr_hal_device_t *dev, const tsr_hal_caps_t *caps,
                                  const gemm_args_t *g, const int8_t *a, const int8_t *w,
                                  int32_t *c, tsr_hal_result_t *res, uint32_t *n_desc_out,
                                  double *wall) {
  const uint64_t M = (uint64_t)g->m, N = (uint64_t)g->n, K = (uint64_t)g->k;
  uint32_t tm = pick_tile(g->tile_m, caps->max_dim, caps->array_rows);
  uint32_t tn = pick_tile(g->tile_n, caps->max_dim, caps->array_cols);
  uint32_t tk = pick_tile(g->tile_k, caps->max_dim, 64);
  uint64_t nm = (M + tm - 1) / tm, nn = (N + tn - 1) / tn, nk = (K + tk - 1) / tk;
  uint64_t n_desc = nm * nn * nk;
  if (n_desc > UINT32_MAX / 2)
    return TSR_ERR(OUT_OF_RANGE, "%" PRIu64 " descriptors do not fit one ring", n_desc);

  /* One device buffer: [ring][A][W][C partials], which is also the window. */
  uint64_t off_ring = 0;
  uint64_t off_a = round_up(off_ring + n_desc * TSR_HW_DESC_BYTES, 64);
  uint64_t off_w = round_up(off_a + M * K, 64);
  uint64_t off_c = round_up(off_w + N * K, 64);
  uint64_t c_bytes = M * N * 4;
  uint64_t total = off_c + nk * c_bytes;
  if (total > caps->mem_size)
    return TSR_ERR(RESOURCE_EXHAUSTED,
                   "the problem needs %" PRIu64 " bytes of device memory, the device has %" PRIu64,
                   total, caps->mem_size);
  tsr_hal_buffer_t buf;
  TSR_RETURN_IF_ERROR(dev->vt->alloc(dev, total, 4096, &buf), "allocating %" PRIu64 " bytes",
                      total);
  tsr_status_t s = TSR_OK;
  uint8_t *ring = calloc(n_desc, TSR_HW_DESC_BYTES);
  int32_t *part = nk > 1 ? malloc(c_bytes) : NULL;
  if (!ring || (nk > 1 && !part)) {
    s = TSR_ERR(RESOURCE_EXHAUSTED, "out of host memory for the ring");
    goto done;
  }
  uint64_t i = 0;
  for (uint64_t kc = 0; kc < nk; kc++)
    for (uint64_t mi = 0; mi < nm; mi++)
      for (uint64_t ni = 0; ni < nn; ni++, i++) {
        uint64_t m0 = mi * tm, n0 = ni * tn, k0 = kc * tk;
        tsr_desc_t d = {
            .opcode = TSR_OP_GEMM_I8_I32,
            .m = (uint32_t)(M - m0 < tm ? M - m0 : tm),
            .n = (uint32_t)(N - n0 < tn ? N - n0 : tn),
            .k = (uint32_t)(K - k0 < tk ? K - k0 : tk),
            .lda = (uint32_t)K,
            .ldw = (uint32_t)K,
            .ldc = (uint32_t)(4 * N),
            .a_addr = buf.addr + off_a + m0 * K + k0,
            .w_addr = buf.addr + off_w + n0 * K + k0,
            .c_addr = buf.addr + off_c + kc * c_bytes + (m0 * N + n0) * 4,
        };
        tsr_desc_pack(ring + i * TSR_HW_DESC_BYTES, &d);
      }
  *n_desc_out = (uint32_t)n_desc;
  s = dev->vt->write(dev, &buf, off_ring, ring, n_desc * TSR_HW_DESC_BYTES);
  if (!s) s = dev->vt->write(dev, &buf, off_a, a, M * K);
  if (!s) s = dev->vt->write(dev, &buf, off_w, w, N * K);
  if (s) goto done;

  tsr_hal_command_t cmd = {.window_base = buf.addr, .window_size = total,
                           .ring = buf.addr + off_ring, .n_desc = (uint32_t)n_desc};
  uint64_t fence = 0;
  uint64_t timeout_ns = g->timeout_s > 0 ? (uint64_t)(g->timeout_s * 1e9) : UINT64_MAX;
  double t0 = cli_now_s();
  s = dev->vt->submit(dev, &cmd, &fence);
  if (!s) s = dev->vt->wait(dev, fence, timeout_ns, res);
  *wall = cli_now_s() - t0;
  if (s) goto done;
  if (res->hw_status != TSR_HWERR_OK) {
    s = TSR_ERR(DEVICE, "the kernel refused descriptor %u: %s (STATUS %u, %u done)",
                res->err_index, tsr_hal_hwerr_name(res->hw_status), res->hw_status,
                res->desc_done);
    goto done;
  }
  s = dev->vt->read(dev, &buf, off_c, c, c_bytes);
  for (uint64_t kc = 1; !s && kc < nk; kc++) {
    s = dev->vt->read(dev, &buf, off_c + kc * c_bytes, part, c_bytes);
    /* int32 sums are exact for K < 2^17; add as unsigned to stay defined. */
    for (uint64_t j = 0; !s && j < M * N; j++)
      c[j] = (int32_t)((uint32_t)c[j] + (uint32_t)part[j]);
  }
done:
  free(ring);
  free(part);
  dev->vt->free(dev, &buf);
  return s;
}

/* `--device cpu`: the host's int8 kernel (the ISA chosen from CPUID, every
 * online CPU); fills c and *wall. */
static tsr_status_t run_on_host(const gemm_args_t *g, const int8_t *a, const int8_t *w,
                                int32_t *c, double *wall, tsr_isa_t *isa) {
  tsr_threadpool_t *pool = NULL;
  TSR_RETURN_IF(tsr_threadpool_create(0, &pool));
  *isa = tsr_isa_detect();
  double t0 = cli_now_s();
  tsr_qgemm_strided(pool, *isa, c, (size_t)g->n, a, (size_t)g->k, w, (size_t)g->k,
                    (int32_t)g->m, (int32_t)g->n, (int32_t)g->k);
  *wall = cli_now_s() - t0;
  tsr_threadpool_destroy(pool);
  return TSR_OK;
}

/* The contract as a plain loop, independent of every library kernel (the
 * functional model and the host path both compute with tsr_qgemm): the
 * reference of --check. */
static void naive_gemm(int32_t *c, const int8_t *a, const int8_t *w, size_t M, size_t N,
                       size_t K) {
  for (size_t i = 0; i < M; i++)
    for (size_t j = 0; j < N; j++) {
      int64_t s = 0;
      for (size_t t = 0; t < K; t++) s += (int32_t)a[i * K + t] * (int32_t)w[j * K + t];
      c[i * N + j] = (int32_t)s;
    }
}

int tsr_cmd_gemm(int argc, char **argv) {
  gemm_args_t g = {.device = NULL, .m = 0, .n = 0, .k = 0, .seed = 1};
  const int64_t max_dim = (1 << 17) - 1; /* int32 sums stay exact (qgemm.h) */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--check")) {
      g.check = true;
    } else if (!strcmp(a, "--device")) {
      if (!(g.device = cli_value(CMD, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "-M") || !strcmp(a, "-N") || !strcmp(a, "-K")) {
      int64_t *dst = a[1] == 'M' ? &g.m : a[1] == 'N' ? &g.n : &g.k;
      if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, 1, max_dim, dst))
        return 2;
    } else if (!strcmp(a, "--seed")) {
      if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_u64(CMD, a, v, &g.seed)) return 2;
    } else if (!strcmp(a, "--tile-m") || !strcmp(a, "--tile-n") || !strcmp(a, "--tile-k")) {
      int64_t *dst = a[7] == 'm' ? &g.tile_m : a[7] == 'n' ? &g.tile_n : &g.tile_k;
      if (!(v = cli_value(CMD, argc, argv, &i)) ||
          !cli_parse_i64(CMD, a, v, 1, TSR_HW_MAX_DIM, dst))
        return 2;
    } else if (!strcmp(a, "--timeout")) {
      if (!(v = cli_value(CMD, argc, argv, &i)) ||
          !cli_parse_f64(CMD, a, v, 0, 1e7, &g.timeout_s))
        return 2;
    } else {
      fprintf(stderr, "tessera %s: unknown option '%s'\n", CMD, a);
      usage(stderr);
      return 2;
    }
  }
  if (!g.device || !g.m || !g.n || !g.k) {
    fprintf(stderr, "tessera %s: --device, -M, -N and -K are required\n", CMD);
    usage(stderr);
    return 2;
  }

  const size_t M = (size_t)g.m, N = (size_t)g.n, K = (size_t)g.k;
  int8_t *a = malloc(M * K), *w = malloc(N * K);
  int32_t *c = malloc(M * N * sizeof *c);
  if (!a || !w || !c) {
    free(a), free(w), free(c);
    return cli_fail(CMD, TSR_ERR(RESOURCE_EXHAUSTED, "out of host memory for %zux%zux%zu",
                                 M, N, K));
  }
  uint64_t st = g.seed;
  for (size_t i = 0; i < M * K; i++) a[i] = (int8_t)(cli_splitmix64(&st) >> 56);
  for (size_t i = 0; i < N * K; i++) w[i] = (int8_t)(cli_splitmix64(&st) >> 56);

  int rc = 0;
  tsr_hal_device_t *dev = NULL;
  tsr_hal_caps_t caps;
  memset(&caps, 0, sizeof caps);
  tsr_hal_result_t res = {0};
  uint32_t n_desc = 0;
  double wall = 0;
  const bool host = !strcmp(g.device, "cpu");
  tsr_status_t s = TSR_OK;
  if (host) {
    tsr_isa_t isa = TSR_ISA_PORTABLE;
    s = run_on_host(&g, a, w, c, &wall, &isa);
    if (!s) {
      printf("checksum 0x%016" PRIx64 "\n", cli_fnv1a_i32(CLI_FNV1A_BASIS, c, M * N));
      printf("device      cpu (the host int8 kernel, %s)\n", tsr_isa_name(isa));
      printf("shape       M=%zu N=%zu K=%zu\n", M, N, K);
      printf("wall        %.6f s host time of the kernel\n", wall);
    }
  } else if (!strncmp(g.device, "cpu:", 4)) {
    s = TSR_ERR(INVALID_ARGUMENT, "--device '%s': cpu is the host and takes no options "
                "(the kernel's functional model is 'fmodel%s')", g.device, g.device + 3);
  } else {
    s = tsr_hal_open(g.device, &dev);
    if (!s) {
      dev->vt->query_caps(dev, &caps);
      s = run_on_device(dev, &caps, &g, a, w, c, &res, &n_desc, &wall);
    }
  }
  if (s) {
    rc = cli_fail(CMD, s);
    goto out;
  }
  if (host) goto check;

  bool is_sim = !strncmp(g.device, "sim", 3) && (g.device[3] == '\0' || g.device[3] == ':');
  bool is_fm =
      !strncmp(g.device, "fmodel", 6) && (g.device[6] == '\0' || g.device[6] == ':');
  double array = (double)caps.array_rows * caps.array_cols;
  double util = res.cycles ? (double)res.macs / ((double)res.cycles * array) : 0;
  double proj = caps.clock_hz > 0 ? (double)res.cycles / caps.clock_hz : 0;
  double rd_per_cycle = res.cycles ? (double)res.bytes_rd / (double)res.cycles : 0;
  /* A test harness that computes nothing (xrt:shim=noop) ran the host flow
   * only: what came back is not a result, so it gets no checksum. */
  if (caps.flags & TSR_HAL_CAP_NO_COMPUTE)
    printf("checksum none: %s computes nothing (the host flow ran, no result came back)\n",
           caps.name);
  else
    printf("checksum 0x%016" PRIx64 "\n", cli_fnv1a_i32(CLI_FNV1A_BASIS, c, M * N));
  printf("device      %s\n", caps.name);
  printf("shape       M=%zu N=%zu K=%zu, %u descriptor(s) in one launch\n", M, N, K, n_desc);
  printf("cycles      %" PRIu64 " (%s), %" PRIu64 " stalled on memory\n", res.cycles,
         is_sim ? "from the RTL" : is_fm ? "modeled by the functional model"
                                          : "as reported by the device",
         res.stall_cycles);
  printf("macs        %" PRIu64 "\n", res.macs);
  printf("utilization %.2f%% of the %ux%u MAC array (MACs / (cycles x %u))\n", 100 * util,
         caps.array_rows, caps.array_cols, caps.array_rows * caps.array_cols);
  printf("memory      %" PRIu64 " bytes read, %" PRIu64 " written; %.2f B/cycle read "
         "(%.1f%% of the modeled %.0f B/cycle)\n",
         res.bytes_rd, res.bytes_wr, rd_per_cycle,
         caps.mem_bytes_per_cycle > 0 ? 100 * rd_per_cycle / caps.mem_bytes_per_cycle : 0,
         caps.mem_bytes_per_cycle);
  printf("projected   %.6f ms at %.0f MHz (device time from cycles)\n", 1e3 * proj,
         caps.clock_hz / 1e6);
  printf("wall        %.6f s %s (host time, not hardware speed)\n", wall,
         is_sim ? "simulation wall time" : is_fm ? "functional-model wall time"
                                                  : "wall time of submit + wait");
  if (is_sim && wall > 0)
    printf("sim speed   %.0f cycles/s\n", (double)res.cycles / wall);

check:
  if (g.check && (caps.flags & TSR_HAL_CAP_NO_COMPUTE)) {
    printf("check       skipped: the device computes nothing\n");
  } else if (g.check) {
    int32_t *ref = malloc(M * N * sizeof *ref);
    if (!ref) {
      rc = cli_fail(CMD, TSR_ERR(RESOURCE_EXHAUSTED, "out of host memory for the check"));
      goto out;
    }
    naive_gemm(ref, a, w, M, N, K);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < M * N; i++)
      if (ref[i] != c[i] && bad++ == 0) first = i;
    if (bad) {
      printf("check       FAILED: %zu of %zu values differ; first at C[%zu][%zu]: device %d, "
             "reference %d\n", bad, M * N, first / N, first % N, c[first], ref[first]);
      rc = 1;
    } else {
      printf("check       OK: identical to a plain triple loop (checksum 0x%016" PRIx64
             ")\n", cli_fnv1a_i32(CLI_FNV1A_BASIS, ref, M * N));
    }
    free(ref);
  }
out:
  tsr_hal_close(dev);
  free(a);
  free(w);
  free(c);
  return rc;
}
