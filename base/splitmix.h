/*
 * splitmix.h - splitmix64, the one generator of the library's reproducible
 * random streams (generated weights, the gemm CLI's operands, fault
 * injection at random). The tests, the examples and the testbenches keep
 * their own copies on purpose: they stay independent of the library.
 */
#ifndef TSR_SPLITMIX_H
#define TSR_SPLITMIX_H

#include <stdint.h>

/* Advances *s and returns the next 64 random bits. */
static inline uint64_t tsr_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

#endif /* TSR_SPLITMIX_H */
