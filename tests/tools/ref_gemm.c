/*
 * ref_gemm.c - `ref_gemm M N K SEED`: the checksum `tessera gemm` must print,
 * computed independently of the library, for the end-to-end scripts.
 *
 * Written from the gemm CLI contract: A (M x K) and then W (N x K) come from
 * one splitmix64 stream seeded with SEED, each element (int8_t)(x >> 56);
 * C = A * W^T by the naive loop of the tests (tsr_test_ref_gemm_i8); the
 * checksum is FNV-1a 64 over C's int32 values as little-endian bytes,
 * row-major. Prints "checksum 0x%016x".
 */
#include <inttypes.h>
#include <stdlib.h>

#include "tsr_test.h"

static int parse(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 0);
  if (!*s || *end || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

int main(int argc, char **argv) {
  uint64_t m, n, k, seed;
  if (argc != 5 || !parse(argv[1], 1, 1u << 20, &m) || !parse(argv[2], 1, 1u << 20, &n) ||
      !parse(argv[3], 1, (1u << 17) - 1, &k) || !parse(argv[4], 0, UINT64_MAX, &seed)) {
    fprintf(stderr, "usage: ref_gemm M N K SEED (K < 2^17)\n");
    return 2;
  }
  int8_t *a = malloc(m * k), *w = malloc(n * k);
  int32_t *c = malloc(sizeof(int32_t) * m * n);
  if (!a || !w || !c) {
    fprintf(stderr, "ref_gemm: out of memory\n");
    return 1;
  }
  uint64_t st = seed;
  for (uint64_t i = 0; i < m * k; i++) a[i] = (int8_t)(tsr_test_splitmix64(&st) >> 56);
  for (uint64_t i = 0; i < n * k; i++) w[i] = (int8_t)(tsr_test_splitmix64(&st) >> 56);
  tsr_test_ref_gemm_i8(c, n, a, k, w, k, (int32_t)m, (int32_t)n, (int32_t)k);
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < m * n; i++) {
    uint32_t v = (uint32_t)c[i];
    for (int b = 0; b < 4; b++) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  printf("checksum 0x%016" PRIx64 "\n", h);
  free(a);
  free(w);
  free(c);
  return 0;
}
