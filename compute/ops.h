/*
 * ops.h - the row-wise fp32 ops of the llama forward pass (ops.c): norms,
 * softmax, RoPE, SwiGLU, in llama2.c's arithmetic order.
 *
 * Internal header (compute layer). Output first.
 */
#ifndef TSR_OPS_H
#define TSR_OPS_H

#include <stdint.h>

#include "compute/qgemm.h" /* tsr_isa_t */

void tsr_rmsnorm(float *out, const float *x, const float *w, int32_t n, float eps);
/* In place, n >= 1: e^(x - max) over their sum (the sum in index order). */
void tsr_softmax(float *x, int32_t n);
/* e^x in float, within 2 ulp, the same result on every machine (ops.c). */
float tsr_expf(float x);
/* x[i] = tsr_expf(x[i] - sub) for i < n with the kernel of `isa` (at most
 * what the CPU has): the same values whichever runs. */
void tsr_exp_rows_isa(tsr_isa_t isa, float *x, int32_t n, float sub);
/* Rotates pairs (2i, 2i+1) of each of `n_heads` heads of `head_dim` values,
 * for position `pos`. */
void tsr_rope(float *vec, int32_t n_heads, int32_t head_dim, int32_t pos, float theta);
/* The same in two steps, for vectors that share a position: cs[2i], cs[2i+1]
 * = the cosine and sine of pair i's angle at `pos` (head_dim values), then
 * the rotation of each head by them. */
void tsr_rope_angles(float *cs, int32_t head_dim, int32_t pos, float theta);
void tsr_rope_apply(float *vec, int32_t n_heads, int32_t head_dim, const float *cs);
/* gate = silu(gate) * up, n values. */
void tsr_swiglu(float *gate, const float *up, int32_t n);

#endif
