/*
 * dtype.h - fp16 and bf16 conversions and the Q8_0 block layout (GGML's),
 * used by the model loaders, the GGUF writer, the weight quantization and
 * the half-precision matmuls.
 *
 * Internal header (compute layer).
 */
#ifndef TSR_DTYPE_H
#define TSR_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TSR_Q8_0_BLOCK 32
#define TSR_Q8_0_BYTES 34 /* fp16 d + 32 int8 */

/* IEEE binary16 <-> binary32, round to nearest even; NaN/Inf kept. */
static inline float tsr_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalize */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t tsr_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00); /* overflow: inf */
  if (e <= 0) {                                   /* subnormal or zero */
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff;
  /* A carry out of the mantissa correctly bumps the exponent. */
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

/* bfloat16 (the upper half of a binary32) <-> binary32. Widening is exact.
 * Narrowing rounds to nearest even, keeps Inf, makes NaN quiet, and
 * flushes binary32 subnormals to a signed zero: what the AVX-512 BF16
 * instruction VCVTNEPS2BF16 does, so the portable and vector paths agree
 * bit for bit. */
static inline float tsr_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t tsr_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
    return (uint16_t)((x >> 16) | 0x40); /* NaN: quiet, sign kept */
  if (!(x & 0x7f800000u)) return (uint16_t)((x >> 16) & 0x8000); /* zero, subnormal */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* Quantizes one block of 32 floats to Q8_0 (34 bytes at `out`): d =
 * max|x|/127 stored as fp16, q = round(x/d) with the fp32 d. */
void tsr_q8_0_quantize_block(const float *x, uint8_t *out);

#endif
