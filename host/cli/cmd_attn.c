/*
 * cmd_attn.c - `tessera attn`: int8 block-sparse attention of random data on
 * the host or a device, with a checksum of every int32 result.
 *
 * Data: one splitmix64 stream seeded with --seed gives Q (seq, heads, dim),
 * then K (seq, kv_heads, dim), then V (seq, kv_heads, dim), row-major, each
 * value (float)(int8_t)(x >> 56) / 128 (in [-1, 1)). K and V are appended to
 * the int8 cache (quantized per token and kv head) as one prefill of `seq`
 * tokens; the queries then run in chunks of --chunk rows (default: the
 * smallest multiple of the block >= 64), as a session's prefill does.
 *
 * Checksum: FNV-1a 64 over the int32 results as little-endian bytes, chunk
 * by chunk; within a chunk first the score partials then the PV partials,
 * each in pair order (head, query block, key block ascending), each pair's
 * block row-major (m x keys for scores, m x dim for PV). Equal on every
 * backend (contract 1).
 *
 * Cycles come from the device (RTL for sim, the functional model's timing
 * for fmodel) or, for cpu, from the kernel's cycle model for the same
 * descriptors; all are projected at the device's stated clock. The error is
 * that of the final float output against dense causal fp32 attention of
 * the unquantized data.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/kernel_model.h"

#include "host/src/attn.h"
#include "cli.h"

static const char *CMD = "attn";

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera attn --device cpu|fmodel|sim --heads H --seq T --dim D --pattern P\n"
          "                    [--seed S] [--block B] [--kv-heads G] [--chunk R]\n"
          "\n"
          "Runs int8 block-sparse causal attention of random data and prints the checksum\n"
          "of its int32 results, the density, device cycles and the error against dense\n"
          "fp32 attention.\n"
          "\n"
          "  --device SPEC   cpu (host reference), fmodel (functional model through the\n"
          "                  HAL), sim (Verilator RTL); options as sim:latency=50\n"
          "  --heads H       query heads (default 4); --kv-heads G (default H, divides H)\n"
          "  --seq T         tokens (default 256)\n"
          "  --dim D         head dimension (default 64)\n"
          "  --pattern P     dense | window:W[,sinks:S] | strided:S[,local:L] | topk:K,\n"
          "                  sizes in blocks, optionally ,block:B (default dense)\n"
          "  --block B       keys per block (overrides the pattern's)\n"
          "  --seed S        splitmix64 seed (default 1)\n"
          "  --chunk R       query rows per call (default: multiple of the block >= 64)\n"
          "  -t, --threads N host threads (default 1)\n");
}

/* Dense causal fp32 attention: out (T, H*D). */
static void dense_ref(const float *q, const float *k, const float *v, int32_t T, int32_t H,
                      int32_t G, int32_t D, float *out) {
  float *att = malloc(sizeof(float) * (size_t)T);
  if (!att) return;
  const float scale = sqrtf((float)D);
  for (int32_t t = 0; t < T; t++)
    for (int32_t h = 0; h < H; h++) {
      const float *qr = q + ((size_t)t * H + h) * D;
      const int32_t g = h / (H / G);
      float mx = -INFINITY, sum = 0;
      for (int32_t p = 0; p <= t; p++) {
        const float *kr = k + ((size_t)p * G + g) * D;
        float s = 0;
        for (int32_t i = 0; i < D; i++) s += qr[i] * kr[i];
        att[p] = s / scale;
        if (att[p] > mx) mx = att[p];
      }
      for (int32_t p = 0; p <= t; p++) sum += att[p] = expf(att[p] - mx);
      float *o = out + ((size_t)t * H + h) * D;
      memset(o, 0, sizeof(float) * (size_t)D);
      for (int32_t p = 0; p <= t; p++) {
        const float *vr = v + ((size_t)p * G + g) * D;
        for (int32_t i = 0; i < D; i++) o[i] += att[p] / sum * vr[i];
      }
    }
  free(att);
}

int tsr_cmd_attn(int argc, char **argv) {
  const char *device = NULL, *pattern = "dense";
  int64_t heads = 4, kv_heads = 0, seq = 256, dim = 64, block = 0, chunk = 0, threads = 1;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    int64_t *dst = NULL, lo = 1, hi = 65535;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--device")) {
      if (!(device = cli_value(CMD, argc, argv, &i))) return 2;
      continue;
    } else if (!strcmp(a, "--pattern")) {
      if (!(pattern = cli_value(CMD, argc, argv, &i))) return 2;
      continue;
    } else if (!strcmp(a, "--seed")) {
      if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_u64(CMD, a, v, &seed)) return 2;
      continue;
    } else if (!strcmp(a, "--heads")) dst = &heads, hi = 1024;
    else if (!strcmp(a, "--kv-heads")) dst = &kv_heads, hi = 1024;
    else if (!strcmp(a, "--seq")) dst = &seq, hi = 131071;
    else if (!strcmp(a, "--dim")) dst = &dim, hi = 4096;
    else if (!strcmp(a, "--block")) dst = &block;
    else if (!strcmp(a, "--chunk")) dst = &chunk, hi = 131071;
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) dst = &threads, hi = 1024;
    else {
      fprintf(stderr, "tessera %s: unknown option '%s' (see --help)\n", CMD, a);
      return 2;
    }
    if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_i64(CMD, a, v, lo, hi, dst)) return 2;
  }
  if (!device) {
    fprintf(stderr, "tessera %s: --device is required (see --help)\n", CMD);
    return 2;
  }
  if (!kv_heads) kv_heads = heads;
  if (heads % kv_heads) {
    fprintf(stderr, "tessera %s: --kv-heads %" PRId64 " does not divide --heads %" PRId64 "\n",
            CMD, kv_heads, heads);
    return 2;
  }
  tsr_attn_pattern_t pat;
  tsr_status_t s = tsr_attn_pattern_parse(pattern, &pat);
  if (s) return cli_fail(CMD, tsr_status_annotate(s, "--pattern"));
  if (pat.kind == TSR_ATTN_REFERENCE) {
    fprintf(stderr, "tessera %s: --pattern: 'ref' is the fp32 path; pick an int8 pattern\n",
            CMD);
    return 2;
  }
  if (block) pat.block = (int32_t)block;
  if (!chunk) chunk = ((64 + pat.block - 1) / pat.block) * pat.block;
  if (chunk > seq) chunk = seq;

  const int32_t T = (int32_t)seq, H = (int32_t)heads, G = (int32_t)kv_heads, D = (int32_t)dim;
  const tsr_attn_dims_t dims = {H, G, D, T, pat.block};
  const size_t nq = (size_t)T * H * D, nkv = (size_t)T * G * D;
  float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nkv),
        *v = malloc(sizeof(float) * nkv), *out = malloc(sizeof(float) * nq),
        *ref = malloc(sizeof(float) * nq);
  tsr_threadpool_t *pool = NULL;
  tsr_hal_device_t *dev = NULL;
  tsr_attn_cache_t cache;
  tsr_attn_work_t w;
  tsr_attn_hal_t hal;
  memset(&cache, 0, sizeof cache);
  memset(&w, 0, sizeof w);
  memset(&hal, 0, sizeof hal);
  int rc = 1;
  if (!q || !k || !v || !out || !ref) {
    s = TSR_ERR(RESOURCE_EXHAUSTED, "out of host memory for %zu values", nq);
    goto done;
  }
  uint64_t st = seed;
  for (size_t i = 0; i < nq; i++) q[i] = (float)(int8_t)(cli_splitmix64(&st) >> 56) / 128.0f;
  for (size_t i = 0; i < nkv; i++) k[i] = (float)(int8_t)(cli_splitmix64(&st) >> 56) / 128.0f;
  for (size_t i = 0; i < nkv; i++) v[i] = (float)(int8_t)(cli_splitmix64(&st) >> 56) / 128.0f;

  s = tsr_threadpool_create((int)threads, &pool);
  if (!s) s = tsr_attn_cache_init(&cache, &dims);
  if (!s) s = tsr_attn_work_init(&w, &dims, &pat, (int32_t)chunk, tsr_threadpool_size(pool));
  if (s) goto done;
  tsr_attn_cache_append(&cache, &w.d, k, v, 0, T);

  const bool host = !strcmp(device, "cpu");
  tsr_hal_caps_t caps;
  memset(&caps, 0, sizeof caps);
  tsr_km_timing_t timing;
  tsr_km_timing_init(&timing);
  if (!host) {
    s = tsr_hal_open(device, &dev);
    if (s) goto done;
    dev->vt->query_caps(dev, &caps);
    tsr_km_timing_from_caps(&caps, &timing);
    /* a simulated launch takes host wall time in proportion to its cycles:
     * the watchdog allows minutes */
    s = tsr_attn_hal_init(&hal, dev, &w, 600000);
    if (!s) s = tsr_attn_hal_append(&hal, &cache, &w.d, 0, T);
    if (s) goto done;
  }
  tsr_attn_backend_t be = tsr_attn_hal_backend(&hal);
  uint64_t h = CLI_FNV1A_BASIS, pairs = 0, dense = 0, kv_read = 0, model = 0;
  uint64_t launches = 0;
  double t0 = cli_now_s();
  tsr_isa_t isa = tsr_isa_detect();
  for (int32_t r0 = 0; r0 < T; r0 += (int32_t)chunk) {
    int32_t rows = T - r0 < chunk ? T - r0 : (int32_t)chunk;
    s = tsr_attn_forward(&w, &cache, q + (size_t)r0 * H * D, r0, rows,
                         out + (size_t)r0 * H * D, host ? NULL : &be, pool, isa);
    if (s) goto done;
    h = cli_fnv1a_i32(h, w.s, w.s_len);
    h = cli_fnv1a_i32(h, w.o, w.o_len);
    pairs += (uint64_t)w.n_pairs;
    dense += w.dense_pairs;
    kv_read += tsr_attn_kv_read(&w, 0) * 2;
    model += tsr_attn_model_cycles(&w, &timing);
    launches += w.n_pairs ? 2 : 0;
  }
  double wall = cli_now_s() - t0;
  dense_ref(q, k, v, T, H, G, D, ref);
  double max_err = 0, sum_err = 0;
  for (size_t i = 0; i < nq; i++) {
    double e = fabs((double)out[i] - (double)ref[i]);
    if (e > max_err) max_err = e;
    sum_err += e;
  }
  char pname[96];
  tsr_attn_pattern_format(&pat, pname, sizeof pname);
  const uint64_t cycles = host ? model : hal.total.cycles;
  const double clock = host ? timing.clock_hz : caps.clock_hz;
  printf("checksum 0x%016" PRIx64 "\n", h);
  printf("device      %s\n", host ? "cpu (host reference, tsr_qgemm_strided)" : caps.name);
  printf("shape       heads %d (kv %d), seq %d, dim %d, chunks of %" PRId64 " rows\n", H, G, T,
         D, chunk);
  printf("pattern     %s\n", pname);
  printf("density     %.2f%% (%" PRIu64 " of %" PRIu64 " causal block pairs computed, %" PRIu64
         " skipped)\n", dense ? 100.0 * (double)pairs / (double)dense : 0.0, pairs, dense,
         dense - pairs);
  printf("descriptors %" PRIu64 " in %" PRIu64 " launches\n", 2 * pairs, launches);
  printf("cycles      %" PRIu64 " (%s); model %" PRIu64 "\n", cycles,
         host ? "kernel cycle model for these descriptors"
         : !strncmp(device, "sim", 3) ? "from the RTL" : "from the functional model",
         model);
  printf("projected   %.6f ms at %.0f MHz (device time from cycles)\n",
         clock > 0 ? 1e3 * (double)cycles / clock : 0.0, clock / 1e6);
  printf("kv read     %" PRIu64 " bytes of int8 K and V, %.1f per token\n", kv_read,
         (double)kv_read / (double)T);
  if (!host)
    printf("device io   %" PRIu64 " bytes read, %" PRIu64 " written by the kernel\n",
           hal.total.bytes_rd, hal.total.bytes_wr);
  printf("error       max abs %.6g, mean abs %.6g vs dense fp32 attention\n", max_err,
         sum_err / (double)nq);
  printf("wall        %.6f s (host time%s, not hardware speed)\n", wall,
         !strncmp(device, "sim", 3) ? ", includes the simulation" : "");
  rc = 0;
done:
  if (s) rc = cli_fail(CMD, s);
  tsr_attn_hal_free(&hal);
  tsr_hal_close(dev);
  tsr_attn_work_free(&w);
  tsr_attn_cache_free(&cache);
  tsr_threadpool_destroy(pool);
  free(q);
  free(k);
  free(v);
  free(out);
  free(ref);
  return rc;
}
