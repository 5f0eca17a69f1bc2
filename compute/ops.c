/* ops.c - the light CPU ops of the llama forward pass (norms, RoPE, softmax,
 * SwiGLU). Written to follow llama2.c's arithmetic order so the fp32 path
 * reproduces its outputs. */
#include "compute/ops.h"

#include <math.h>
#include <stddef.h>

void tsr_rmsnorm(float *out, const float *x, const float *w, int32_t n, float eps) {
  float ss = 0.0f;
  for (int32_t i = 0; i < n; i++) ss += x[i] * x[i];
  ss /= (float)n;
  ss += eps;
  ss = 1.0f / sqrtf(ss);
  for (int32_t i = 0; i < n; i++) out[i] = w[i] * (ss * x[i]);
}

void tsr_softmax(float *x, int32_t n) {
  float max = x[0];
  for (int32_t i = 1; i < n; i++)
    if (x[i] > max) max = x[i];
  float sum = 0.0f;
  for (int32_t i = 0; i < n; i++) {
    x[i] = expf(x[i] - max);
    sum += x[i];
  }
  for (int32_t i = 0; i < n; i++) x[i] /= sum;
}

/* The angle of pair i at position pos: the same powf, cosf and sinf calls
 * wherever RoPE is applied. */
static void rope_pair(float *c, float *s, int32_t i, int32_t head_dim, int32_t pos,
                      float theta) {
  float freq = 1.0f / powf(theta, (float)i / (float)head_dim);
  float val = (float)pos * freq;
  *c = cosf(val);
  *s = sinf(val);
}

static void rope_rotate(float *vec, int32_t n_heads, int32_t head_dim, int32_t i, float fcr,
                        float fci) {
  for (int32_t h = 0; h < n_heads; h++) {
    float *v = vec + (size_t)h * head_dim + i;
    float v0 = v[0], v1 = v[1];
    v[0] = v0 * fcr - v1 * fci;
    v[1] = v0 * fci + v1 * fcr;
  }
}

void tsr_rope(float *vec, int32_t n_heads, int32_t head_dim, int32_t pos, float theta) {
  for (int32_t i = 0; i < head_dim; i += 2) {
    float fcr, fci;
    rope_pair(&fcr, &fci, i, head_dim, pos, theta);
    rope_rotate(vec, n_heads, head_dim, i, fcr, fci);
  }
}

void tsr_rope_angles(float *cs, int32_t head_dim, int32_t pos, float theta) {
  for (int32_t i = 0; i < head_dim; i += 2) rope_pair(&cs[i], &cs[i + 1], i, head_dim, pos, theta);
}

void tsr_rope_apply(float *vec, int32_t n_heads, int32_t head_dim, const float *cs) {
  for (int32_t i = 0; i < head_dim; i += 2) rope_rotate(vec, n_heads, head_dim, i, cs[i], cs[i + 1]);
}

void tsr_swiglu(float *gate, const float *up, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    float val = gate[i];
    val *= (1.0f / (1.0f + expf(-val)));
    gate[i] = val * up[i];
  }
}
