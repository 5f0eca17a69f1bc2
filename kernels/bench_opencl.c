/*
 * bench_opencl.c - int8 matmul throughput: the opencl backend against the
 * CPU int8 kernel (tsr_qgemm) in the same run.
 *
 *   tsr_bench_opencl [M N K [RUNS [OPENCL-OPTIONS]]]   (default 512 512 512 7)
 *
 * Both compute C = A * W^T on the same operands and must agree bit for bit.
 * OpenCL time is one launch (one descriptor) from submit to the end of
 * wait(), operands already resident in device memory; CPU time is one
 * tsr_qgemm call on all threads with the best ISA this CPU has. Each is the
 * median of RUNS timed runs after one warm-up. GOPS = 2*M*N*K / time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/tsr_regmap.h"

#include "driver/hal.h"
#include "driver/hal_impl.h"
#include "compute/qgemm.h"
#include "base/threadpool.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_u64);
  return v[n / 2];
}

static int fail(tsr_status_t s, const char *what) {
  fprintf(stderr, "tsr_bench_opencl: %s: %s\n", what, tsr_status_message(s));
  tsr_status_free(s);
  return 1;
}

int main(int argc, char **argv) {
  uint32_t M = 512, N = 512, K = 512;
  int runs = 7;
  const char *opts = "";
  if (argc >= 4) {
    M = (uint32_t)strtoul(argv[1], NULL, 10);
    N = (uint32_t)strtoul(argv[2], NULL, 10);
    K = (uint32_t)strtoul(argv[3], NULL, 10);
  }
  if (argc >= 5) runs = atoi(argv[4]);
  if (argc >= 6) opts = argv[5];
  if (!M || !N || !K || M > TSR_HW_MAX_DIM || N > TSR_HW_MAX_DIM || K > TSR_HW_MAX_DIM ||
      runs < 1 || runs > 1000) {
    fprintf(stderr, "usage: tsr_bench_opencl [M N K [RUNS [OPENCL-OPTIONS]]]\n");
    return 2;
  }
  size_t a_bytes = (size_t)M * K, w_bytes = (size_t)N * K, c_bytes = (size_t)M * N * 4;
  int8_t *a = malloc(a_bytes), *w = malloc(w_bytes);
  int32_t *c_cpu = malloc(c_bytes), *c_ocl = malloc(c_bytes);
  uint64_t *t = malloc(sizeof *t * (size_t)runs);
  if (!a || !w || !c_cpu || !c_ocl || !t) return 1;
  uint64_t seed = 42;
  for (size_t i = 0; i < a_bytes; i++) a[i] = (int8_t)((seed = seed * 6364136223846793005ull + 1) >> 56);
  for (size_t i = 0; i < w_bytes; i++) w[i] = (int8_t)((seed = seed * 6364136223846793005ull + 1) >> 56);
  double ops = 2.0 * M * N * K;

  /* CPU int8 kernel. */
  tsr_threadpool_t *pool = NULL;
  tsr_status_t s = tsr_threadpool_create(0, &pool);
  if (s) return fail(s, "thread pool");
  tsr_qmatrix_t qw;
  s = tsr_qmatrix_from_i8(&qw, w, (int32_t)N, (int32_t)K);
  if (s) return fail(s, "weights");
  tsr_isa_t isa = tsr_isa_detect();
  tsr_qgemm(pool, isa, c_cpu, N, a, K, &qw, (int32_t)M);
  for (int r = 0; r < runs; r++) {
    uint64_t t0 = tsr_hal_now_ns();
    tsr_qgemm(pool, isa, c_cpu, N, a, K, &qw, (int32_t)M);
    t[r] = tsr_hal_now_ns() - t0;
  }
  uint64_t cpu_ns = median(t, runs);

  /* OpenCL: operands resident, one descriptor per launch. */
  char spec[512];
  snprintf(spec, sizeof spec, "opencl:mem=%zu%s%s", (a_bytes + w_bytes + c_bytes + 2 * 4096 + 4095) / 4096 * 4096 + 4096,
           opts[0] ? "," : "", opts);
  tsr_hal_device_t *dev = NULL;
  s = tsr_hal_open(spec, &dev);
  if (s) return fail(s, spec);
  tsr_hal_caps_t caps;
  dev->vt->query_caps(dev, &caps);
  uint64_t off_a = 4096, off_w = off_a + (a_bytes + 63) / 64 * 64;
  uint64_t off_c = off_w + (w_bytes + 63) / 64 * 64, total = off_c + c_bytes;
  tsr_hal_buffer_t buf;
  s = dev->vt->alloc(dev, total, 4096, &buf);
  if (s) return fail(s, "alloc");
  tsr_desc_t d = {.opcode = TSR_OP_GEMM_I8_I32, .m = M, .n = N, .k = K, .lda = K, .ldw = K,
                  .ldc = 4 * N, .a_addr = buf.addr + off_a, .w_addr = buf.addr + off_w,
                  .c_addr = buf.addr + off_c};
  uint8_t ring[TSR_HW_DESC_BYTES];
  tsr_desc_pack(ring, &d);
  if ((s = dev->vt->write(dev, &buf, 0, ring, sizeof ring)) ||
      (s = dev->vt->write(dev, &buf, off_a, a, a_bytes)) ||
      (s = dev->vt->write(dev, &buf, off_w, w, w_bytes)))
    return fail(s, "write");
  tsr_hal_command_t cmd = {.window_base = buf.addr, .window_size = total, .ring = buf.addr,
                           .n_desc = 1};
  tsr_hal_result_t res;
  for (int r = -1; r < runs; r++) {
    uint64_t fence = 0, t0 = tsr_hal_now_ns();
    if ((s = dev->vt->submit(dev, &cmd, &fence)) ||
        (s = dev->vt->wait(dev, fence, UINT64_MAX, &res)))
      return fail(s, "launch");
    if (r >= 0) t[r] = tsr_hal_now_ns() - t0;
    if (res.hw_status) {
      fprintf(stderr, "tsr_bench_opencl: the kernel refused: %s\n",
              tsr_hal_hwerr_name(res.hw_status));
      return 1;
    }
  }
  uint64_t ocl_ns = median(t, runs);
  if ((s = dev->vt->read(dev, &buf, off_c, c_ocl, c_bytes))) return fail(s, "read");
  int same = !memcmp(c_cpu, c_ocl, c_bytes);

  printf("shape       M=%u N=%u K=%u, median of %d runs\n", M, N, K, runs);
  printf("cpu         tsr_qgemm %s, %d threads: %.3f ms, %.2f GOPS\n", tsr_isa_name(isa),
         tsr_threadpool_size(pool), cpu_ns / 1e6, ops / (double)cpu_ns);
  printf("opencl      %s: %.3f ms, %.2f GOPS (submit to wait, operands resident)\n", caps.name,
         ocl_ns / 1e6, ops / (double)ocl_ns);
  printf("ratio       opencl / cpu = %.3f\n", (double)cpu_ns / (double)ocl_ns);
  printf("results     %s\n", same ? "identical" : "DIFFERENT");
  printf("REPORT bench_opencl %ux%ux%u: opencl %.2f GOPS, cpu %.2f GOPS\n", M, N, K,
         ops / (double)ocl_ns, ops / (double)cpu_ns);
  dev->vt->free(dev, &buf);
  tsr_hal_close(dev);
  tsr_qmatrix_free(&qw);
  tsr_threadpool_destroy(pool);
  free(a), free(w), free(c_cpu), free(c_ocl), free(t);
  return same ? 0 : 1;
}
