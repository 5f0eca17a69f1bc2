/*
 * gemm_offload.c - an application that is not a transformer: it multiplies
 * its own random int8 matrices on tessera's devices through the offload API
 * (tessera.h, "Offload") and checks every result against a plain triple
 * loop on the CPU.
 *
 *   gemm_offload [-M M] [-N N] [-K K] [--seed S] [--no-fallback] [DEVICE...]
 *
 * DEVICE is a device spec ("fmodel", "sim", "sim:latency=80", "opencl",
 * ...); without one, every available device among fmodel, sim and opencl.
 * Per device it prints the checksum of C, the device cycles and OK or
 * MISMATCH. Exit status: 0 when every result matched, 1 on a mismatch or
 * an error, 2 on bad usage, 77 when none of the requested devices is
 * available here.
 *
 * Build: cc gemm_offload.c $(pkg-config --cflags --libs tessera)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* C = A . W^T, the plain way. */
static void cpu_gemm(int32_t *c, const int8_t *a, const int8_t *w, size_t m, size_t n,
                     size_t k) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      int32_t s = 0;
      for (size_t l = 0; l < k; l++) s += (int32_t)a[i * k + l] * (int32_t)w[j * k + l];
      c[i * n + j] = s;
    }
}

/* FNV-1a over the bytes of C. */
static uint64_t checksum(const int32_t *c, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const uint8_t *p = (const uint8_t *)c;
  for (size_t i = 0; i < n * sizeof *c; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* Runs C = A . W^T on `spec`; 0 OK, 1 mismatch or error, 77 unavailable. */
static int run_on(tsr_context_t *ctx, const char *spec, const int8_t *a, const int8_t *w,
                  const int32_t *want, size_t m, size_t n, size_t k) {
  tsr_device_t *dev = NULL;
  tsr_buffer_t *ba = NULL, *bw = NULL, *bc = NULL;
  tsr_event_t *ev = NULL;
  int32_t *got = calloc(m * n, sizeof *got);
  if (!got) return 1;
  tsr_status_t s = tsr_device_open(ctx, spec, &dev);
  if (s && tsr_status_code(s) == TSR_STATUS_UNAVAILABLE) {
    printf("%-10s unavailable: %s\n", spec, tsr_status_message(s));
    tsr_status_free(s);
    free(got);
    return 77;
  }
  if (!s) s = tsr_buffer_create(dev, TSR_BUFFER_I8, m, k, "A", &ba);
  if (!s) s = tsr_buffer_create(dev, TSR_BUFFER_I8, n, k, "W", &bw);
  if (!s) s = tsr_buffer_create(dev, TSR_BUFFER_I32, m, n, "C", &bc);
  if (!s) s = tsr_buffer_write(ba, 0, a, m * k);
  if (!s) s = tsr_buffer_write(bw, 0, w, n * k);
  tsr_gemm_t g = {.m = m, .n = n, .k = k, .a = ba, .w = bw, .c = bc};
  if (!s) s = tsr_gemm_enqueue(dev, &g, &ev);
  if (!s) s = tsr_event_wait(ev, TSR_WAIT_FOREVER);
  if (!s) s = tsr_buffer_read(bc, 0, got, m * n * sizeof *got);
  int rc = 1;
  if (s) {
    printf("%-10s ERROR %s: %s\n", spec, tsr_status_code_name(tsr_status_code(s)),
           tsr_status_message(s));
    tsr_status_free(s);
  } else {
    tsr_event_info_t info;
    tsr_event_query(ev, &info);
    tsr_device_caps_t caps;
    tsr_device_get_caps(dev, &caps);
    tsr_device_stats_t st;
    tsr_device_get_stats(dev, &st);
    bool same = !memcmp(got, want, m * n * sizeof *got);
    printf("%-10s checksum %016" PRIx64 "  cycles %" PRIu64 " (%.1f us at %.0f MHz)  "
           "fallbacks %" PRIu64 "  %s\n",
           spec, checksum(got, m * n), info.cycles,
           caps.clock_hz > 0 ? (double)info.cycles / caps.clock_hz * 1e6 : 0.0,
           caps.clock_hz / 1e6, st.fallbacks, same ? "OK" : "MISMATCH");
    rc = same ? 0 : 1;
  }
  tsr_event_destroy(ev);
  tsr_buffer_destroy(ba);
  tsr_buffer_destroy(bw);
  tsr_buffer_destroy(bc);
  tsr_device_close(dev);
  free(got);
  return rc;
}

static int usage(FILE *f) {
  fprintf(f, "usage: gemm_offload [-M M] [-N N] [-K K] [--seed S] [--no-fallback] [DEVICE...]\n"
             "  C (MxN int32) = A (MxK int8) . W (NxK int8)^T on each DEVICE (default: every\n"
             "  available one of fmodel, sim, opencl), checked against a CPU triple loop.\n");
  return 2;
}

static bool parse_size(const char *v, size_t *out) {
  char *end = NULL;
  unsigned long long x = v ? strtoull(v, &end, 10) : 0;
  if (!v || !*v || *end || x == 0 || x > 65535) return false;
  *out = (size_t)x;
  return true;
}

int main(int argc, char **argv) {
  size_t m = 100, n = 64, k = 300;
  uint64_t seed = 1;
  bool fallback = true;
  const char *specs[32];
  int n_specs = 0;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(o, "-M") || !strcmp(o, "-N") || !strcmp(o, "-K")) {
      size_t *dst = o[1] == 'M' ? &m : o[1] == 'N' ? &n : &k;
      if (!parse_size(i + 1 < argc ? argv[++i] : NULL, dst)) {
        fprintf(stderr, "gemm_offload: %s needs a size in [1, 65535]\n", o);
        return usage(stderr);
      }
    } else if (!strcmp(o, "--seed") && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 0);
    } else if (!strcmp(o, "--no-fallback")) {
      fallback = false;
    } else if (o[0] == '-') {
      fprintf(stderr, "gemm_offload: unknown option '%s'\n", o);
      return usage(stderr);
    } else if (n_specs < 32) {
      specs[n_specs++] = o;
    }
  }
  if (n_specs == 0) { /* every available device among the three */
    tsr_device_info_t infos[16];
    size_t count = 0;
    tsr_status_t s = tsr_device_list(infos, 16, &count);
    if (s) {
      fprintf(stderr, "gemm_offload: %s\n", tsr_status_message(s));
      tsr_status_free(s);
      return 1;
    }
    static const char *const wanted[] = {"fmodel", "sim", "opencl"};
    for (size_t w = 0; w < 3; w++)
      for (size_t i = 0; i < count && i < 16; i++)
        if (!strcmp(infos[i].name, wanted[w])) {
          if (infos[i].available) specs[n_specs++] = wanted[w];
          else printf("%-10s unavailable: %s\n", wanted[w], infos[i].reason);
        }
    if (n_specs == 0) {
      printf("no device available\n");
      return 77;
    }
  }

  int8_t *a = malloc(m * k), *w = malloc(n * k);
  int32_t *want = malloc(m * n * sizeof *want);
  if (!a || !w || !want) {
    fprintf(stderr, "gemm_offload: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < m * k; i++) a[i] = (int8_t)(splitmix64(&seed) & 0xff);
  for (size_t i = 0; i < n * k; i++) w[i] = (int8_t)(splitmix64(&seed) & 0xff);
  cpu_gemm(want, a, w, m, n, k);
  printf("C = A . W^T, %zu x %zu x %zu; cpu checksum %016" PRIx64 "\n", m, n, k,
         checksum(want, m * n));

  tsr_context_options_t opts;
  tsr_context_options_init(&opts);
  opts.fallback = fallback;
  opts.device_timeout_ms = 120000; /* the RTL simulation is slow */
  tsr_context_t *ctx = NULL;
  tsr_status_t s = tsr_context_create(&opts, &ctx);
  if (s) {
    fprintf(stderr, "gemm_offload: %s\n", tsr_status_message(s));
    tsr_status_free(s);
    return 1;
  }
  int ran = 0, bad = 0;
  for (int i = 0; i < n_specs; i++) {
    int rc = run_on(ctx, specs[i], a, w, want, m, n, k);
    if (rc != 77) ran++;
    if (rc == 1) bad++;
  }
  tsr_context_destroy(ctx);
  free(a);
  free(w);
  free(want);
  if (bad) return 1;
  if (ran == 0) {
    printf("none of the requested devices is available\n");
    return 77;
  }
  return 0;
}
