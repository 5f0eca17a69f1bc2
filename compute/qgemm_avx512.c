/*
 * qgemm_avx512.c - int8 GEMM/GEMV with AVX-512 VNNI (vpdpbusd).
 *
 * Compiled with -mavx512f/bw/vl/vnni; called only when CPUID and XCR0 say
 * so (qgemm.c). vpdpbusd multiplies unsigned by signed bytes, so A is
 * shifted to u8 (a ^ 0x80 == a + 128) and the kernel subtracts
 * 128 * sum_k W[n][k]:  sum (a+128)*w - 128*sum w == sum a*w, exactly in
 * int32 (every partial sum stays in range; see qgemm.h).
 */
#include <immintrin.h>
#include <string.h>

#include "compute/qgemm_kernels.h"

#define TSR_INLINE static inline __attribute__((always_inline))

/* Mask of the first `rem` (< 64) bytes. */
TSR_INLINE __mmask64 tail_mask(int rem) { return rem >= 64 ? ~0ull : ((1ull << rem) - 1); }

/* ------------------------------------------------------------------------ */
/* Row kernel: MA rows of A against NW rows of W, straight from memory.      */
/* ------------------------------------------------------------------------ */

/* W rows of one call are adjacent in memory (ldw == K for a qmatrix), and
 * each row is a short stream (K bytes) that the hardware prefetcher would
 * have to re-learn. So while a group of NW rows is consumed, the same
 * offsets of the next group (NW rows further) are prefetched: the whole
 * weight block streams with a lead of one group. */

TSR_INLINE void rows_tile(int MA, int NW, int need_sum, int32_t *c, size_t ldc,
                          const int8_t *a, size_t lda, const int8_t *w, size_t ldw,
                          const int32_t *row_sum, int32_t k) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc[4][4], sacc[4];
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < NW; ++j) acc[i][j] = _mm512_setzero_si512();
  for (int j = 0; j < NW; ++j) sacc[j] = _mm512_setzero_si512();

  int32_t kk = 0;
  for (; kk + 64 <= k; kk += 64) {
    __m512i wv[4];
    for (int j = 0; j < NW; ++j) {
      _mm_prefetch((const char *)(w + (size_t)(j + NW) * ldw + kk), _MM_HINT_T0);
      wv[j] = _mm512_loadu_si512((const void *)(w + (size_t)j * ldw + kk));
    }
    for (int i = 0; i < MA; ++i) {
      __m512i av = _mm512_xor_si512(_mm512_loadu_si512((const void *)(a + (size_t)i * lda + kk)), flip);
      for (int j = 0; j < NW; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], av, wv[j]);
    }
    if (need_sum)
      for (int j = 0; j < NW; ++j) sacc[j] = _mm512_dpbusd_epi32(sacc[j], ones, wv[j]);
  }
  if (kk < k) {
    /* Masked-off W bytes load as 0, so whatever A holds there adds 0. */
    __mmask64 mk = tail_mask(k - kk);
    __m512i wv[4];
    for (int j = 0; j < NW; ++j)
      wv[j] = _mm512_maskz_loadu_epi8(mk, (const void *)(w + (size_t)j * ldw + kk));
    for (int i = 0; i < MA; ++i) {
      __m512i av = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, (const void *)(a + (size_t)i * lda + kk)), flip);
      for (int j = 0; j < NW; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], av, wv[j]);
    }
    if (need_sum)
      for (int j = 0; j < NW; ++j) sacc[j] = _mm512_dpbusd_epi32(sacc[j], ones, wv[j]);
  }
  int32_t corr[4];
  for (int j = 0; j < NW; ++j)
    corr[j] = (int32_t)(128u * (uint32_t)(need_sum ? _mm512_reduce_add_epi32(sacc[j]) : row_sum[j]));
  for (int i = 0; i < MA; ++i)
    for (int j = 0; j < NW; ++j)
      c[(size_t)i * ldc + j] = (int32_t)((uint32_t)_mm512_reduce_add_epi32(acc[i][j]) - (uint32_t)corr[j]);
}

/* One group of up to 4 W rows against all of A, 4 A rows at a time; the
 * group (4 x K bytes) stays in L1 while A rows cycle. */
TSR_INLINE void rows_group(int NW, int need_sum, int32_t *c, size_t ldc, const int8_t *a,
                           size_t lda, const int8_t *w, size_t ldw, const int32_t *row_sum,
                           int32_t m, int32_t k) {
  int32_t i = 0;
  for (; i + 4 <= m; i += 4)
    rows_tile(4, NW, need_sum, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, row_sum, k);
  switch (m - i) {
    case 3: rows_tile(3, NW, need_sum, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, row_sum, k); break;
    case 2: rows_tile(2, NW, need_sum, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, row_sum, k); break;
    case 1: rows_tile(1, NW, need_sum, c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, w, ldw, row_sum, k); break;
    default: break;
  }
}

static void rows_group4(int32_t *c, size_t ldc, const int8_t *a, size_t lda, const int8_t *w,
                        size_t ldw, const int32_t *row_sum, int32_t m, int32_t k) {
  if (row_sum) rows_group(4, 0, c, ldc, a, lda, w, ldw, row_sum, m, k);
  else rows_group(4, 1, c, ldc, a, lda, w, ldw, NULL, m, k);
}

static void rows_group1(int32_t *c, size_t ldc, const int8_t *a, size_t lda, const int8_t *w,
                        size_t ldw, const int32_t *row_sum, int32_t m, int32_t k) {
  if (row_sum) rows_group(1, 0, c, ldc, a, lda, w, ldw, row_sum, m, k);
  else rows_group(1, 1, c, ldc, a, lda, w, ldw, NULL, m, k);
}

/* GEMV (M = 1): one W row at a time, so W is read as a single sequential
 * stream (rows are adjacent), with 4 accumulators to hide vpdpbusd latency
 * and a software prefetch 16 KiB ahead of the stream, the lead that
 * measured best for a plain read loop on this class of core. */
static void gemv_seq(int32_t *c, const int8_t *a, const int8_t *w, size_t ldw,
                     const int32_t *row_sum, int32_t n, int32_t k) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int32_t j = 0; j < n; ++j) {
    const int8_t *wr = w + (size_t)j * ldw;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, q = s0;
    int32_t kk = 0;
    for (; kk + 256 <= k; kk += 256) {
      for (int l = 0; l < 256; l += 64) _mm_prefetch((const char *)(wr + kk + 16384 + l), _MM_HINT_T0);
      __m512i w0 = _mm512_loadu_si512((const void *)(wr + kk));
      __m512i w1 = _mm512_loadu_si512((const void *)(wr + kk + 64));
      __m512i w2 = _mm512_loadu_si512((const void *)(wr + kk + 128));
      __m512i w3 = _mm512_loadu_si512((const void *)(wr + kk + 192));
      s0 = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(_mm512_loadu_si512((const void *)(a + kk)), flip), w0);
      s1 = _mm512_dpbusd_epi32(s1, _mm512_xor_si512(_mm512_loadu_si512((const void *)(a + kk + 64)), flip), w1);
      s2 = _mm512_dpbusd_epi32(s2, _mm512_xor_si512(_mm512_loadu_si512((const void *)(a + kk + 128)), flip), w2);
      s3 = _mm512_dpbusd_epi32(s3, _mm512_xor_si512(_mm512_loadu_si512((const void *)(a + kk + 192)), flip), w3);
      if (!row_sum) {
        q = _mm512_dpbusd_epi32(q, ones, w0);
        q = _mm512_dpbusd_epi32(q, ones, w1);
        q = _mm512_dpbusd_epi32(q, ones, w2);
        q = _mm512_dpbusd_epi32(q, ones, w3);
      }
    }
    for (; kk < k; kk += 64) {
      /* masked-off W bytes load as 0, so A's bytes there add nothing */
      __mmask64 mk = tail_mask(k - kk);
      __m512i wv = _mm512_maskz_loadu_epi8(mk, (const void *)(wr + kk));
      __m512i av = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, (const void *)(a + kk)), flip);
      s0 = _mm512_dpbusd_epi32(s0, av, wv);
      if (!row_sum) q = _mm512_dpbusd_epi32(q, ones, wv);
    }
    s0 = _mm512_add_epi32(_mm512_add_epi32(s0, s1), _mm512_add_epi32(s2, s3));
    uint32_t sum = (uint32_t)(row_sum ? row_sum[j] : _mm512_reduce_add_epi32(q));
    c[j] = (int32_t)((uint32_t)_mm512_reduce_add_epi32(s0) - 128u * sum);
  }
}

void tsr_qgemm_rows_avx512(int32_t *c, size_t ldc, const int8_t *a, size_t lda,
                           const int8_t *w, size_t ldw, const int32_t *row_sum,
                           int32_t m, int32_t n, int32_t k) {
  if (m == 1) {
    gemv_seq(c, a, w, ldw, row_sum, n, k);
    return;
  }
  int32_t j = 0;
  for (; j + 4 <= n; j += 4)
    rows_group4(c + j, ldc, a, lda, w + (size_t)j * ldw, ldw, row_sum ? row_sum + j : NULL, m, k);
  for (; j < n; ++j)
    rows_group1(c + j, ldc, a, lda, w + (size_t)j * ldw, ldw, row_sum ? row_sum + j : NULL, m, k);
}

/* ------------------------------------------------------------------------ */
/* Packed GEMM                                                               */
/* ------------------------------------------------------------------------ */

enum { MR = TSR_QGEMM_MR, NR = TSR_QGEMM_NR, KC = TSR_QGEMM_KC, NC = TSR_QGEMM_NC };

static inline int32_t round4(int32_t k) { return (k + 3) & ~3; }

size_t tsr_qgemm_apack_size(int32_t m, int32_t k) {
  size_t mb = ((size_t)m + MR - 1) / MR;
  return mb * MR * (size_t)round4(k);
}

size_t tsr_qgemm_wpack_size(void) { return (size_t)NC * KC; }

static inline uint32_t load_u32(const void *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Four bytes of a row at k (zero-padded past `k_end`), as one dword. */
static inline uint32_t quad_padded(const int8_t *row, int32_t k, int32_t k_end, uint32_t pad) {
  if (k + 4 <= k_end) return load_u32(row + k);
  uint8_t b[4];
  for (int j = 0; j < 4; ++j) b[j] = k + j < k_end ? (uint8_t)row[k + j] : (uint8_t)pad;
  return load_u32(b);
}

void tsr_qgemm_pack_a_avx512(uint8_t *apack, const int8_t *a, size_t lda, int32_t m,
                             int32_t k, int32_t mb0, int32_t mb1) {
  const int32_t kq_n = round4(k) / 4;
  for (int32_t mb = mb0; mb < mb1; ++mb) {
    uint32_t *dst = (uint32_t *)(apack + (size_t)mb * MR * round4(k));
    for (int r = 0; r < MR; ++r) {
      int32_t row = mb * MR + r;
      if (row >= m) {
        for (int32_t kq = 0; kq < kq_n; ++kq) dst[(size_t)kq * MR + r] = 0x80808080u;
        continue;
      }
      const int8_t *src = a + (size_t)row * lda;
      for (int32_t kq = 0; kq < kq_n; ++kq)
        dst[(size_t)kq * MR + r] = quad_padded(src, kq * 4, k, 0) ^ 0x80808080u;
    }
  }
}

/* Packs W rows [0, nc) x k in [k0, k0 + kc) into NR-wide panels:
 * wbuf[p*NR*kcq*4 + (kq*NR + col)*4 + j]. 16 rows at a time are loaded as
 * 64-byte vectors (16 k-quads each) and transposed as a 16 x 16 dword
 * matrix, so the packing runs at vector speed instead of dword by dword. */
static void pack_w(int8_t *wbuf, const int8_t *w, size_t ldw, int32_t nc, int32_t k0,
                   int32_t kc) {
  const int32_t kcq = round4(kc) / 4;
  const int32_t np = (nc + NR - 1) / NR;
  for (int32_t p = 0; p < np; ++p) {
    int8_t *panel = wbuf + (size_t)p * NR * kcq * 4;
    for (int half = 0; half < NR / 16; ++half) {
      int32_t col0 = p * NR + half * 16;
      int rows = nc - col0;
      if (rows > 16) rows = 16;
      if (rows < 0) rows = 0;
      for (int32_t kq0 = 0; kq0 < kcq; kq0 += 16) {
        int32_t kbytes = kc - kq0 * 4; /* bytes of this row chunk in range */
        if (kbytes > 64) kbytes = 64;
        __mmask64 mk = tail_mask(kbytes);
        __m512i r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = i < rows ? _mm512_maskz_loadu_epi8(mk, (const void *)(w + (size_t)(col0 + i) * ldw + k0 + kq0 * 4))
                          : _mm512_setzero_si512();
        /* 16x16 dword transpose: r[i] lane q -> out[q] lane i. */
        __m512i t[16];
        for (int i = 0; i < 16; i += 2) {
          t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
          t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
        }
        for (int i = 0; i < 16; i += 4) {
          r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
          r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
          r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
          r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
        }
        /* r[4g + s] now holds, in each 128-bit lane L, the dwords of rows
         * 4g..4g+3 at k-quad kq0 + 4L + s. Regroup 128-bit lanes so one
         * vector holds rows 0..15 of a single k-quad. */
        for (int s = 0; s < 4; ++s) {
          __m512i u0 = _mm512_shuffle_i32x4(r[s], r[4 + s], 0x88);      /* g0L0 g0L2 g1L0 g1L2 */
          __m512i u1 = _mm512_shuffle_i32x4(r[s], r[4 + s], 0xDD);      /* g0L1 g0L3 g1L1 g1L3 */
          __m512i u2 = _mm512_shuffle_i32x4(r[8 + s], r[12 + s], 0x88); /* g2L0 g2L2 g3L0 g3L2 */
          __m512i u3 = _mm512_shuffle_i32x4(r[8 + s], r[12 + s], 0xDD); /* g2L1 g2L3 g3L1 g3L3 */
          __m512i out[4] = {
              _mm512_shuffle_i32x4(u0, u2, 0x88), /* L0 of g0..g3 */
              _mm512_shuffle_i32x4(u1, u3, 0x88), /* L1 */
              _mm512_shuffle_i32x4(u0, u2, 0xDD), /* L2 */
              _mm512_shuffle_i32x4(u1, u3, 0xDD), /* L3 */
          };
          for (int L = 0; L < 4; ++L) {
            int32_t kq = kq0 + 4 * L + s;
            if (kq < kcq)
              _mm512_store_si512((void *)(panel + ((size_t)kq * NR + half * 16) * 4), out[L]);
          }
        }
      }
    }
  }
}

/* The register tile: MR rows x NR channels, 2*MR zmm accumulators.
 * first: start from bias (= -128 * row_sum, same for every row) instead of
 * the partial sums already in C. The accumulators are named variables
 * expanded from an X-macro, not an array: with an array GCC shuffles them
 * through spare registers on every iteration. */
#if TSR_QGEMM_MR == 8
#define TSR_UK_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#elif TSR_QGEMM_MR == 12
#define TSR_UK_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#endif

TSR_INLINE void ukernel(const uint8_t *ap, const int8_t *wp, int32_t kcq, int32_t *c,
                        size_t ldc, int mr, int nr, int first, const int32_t *bias) {
  const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
#define TSR_UK_DECL(r) __m512i c##r##a, c##r##b;
  TSR_UK_ROWS(TSR_UK_DECL)
  if (first) {
    __m512i b0 = _mm512_loadu_si512((const void *)bias);
    __m512i b1 = _mm512_loadu_si512((const void *)(bias + 16));
#define TSR_UK_BIAS(r) c##r##a = b0; c##r##b = b1;
    TSR_UK_ROWS(TSR_UK_BIAS)
  } else {
    /* rows past mr read row 0 again: harmless, never stored */
#define TSR_UK_LOADC(r)                                                                   \
  c##r##a = _mm512_maskz_loadu_epi32(m0, c + (size_t)(r < mr ? r : 0) * ldc);             \
  c##r##b = _mm512_maskz_loadu_epi32(m1, c + (size_t)(r < mr ? r : 0) * ldc + 16);
    TSR_UK_ROWS(TSR_UK_LOADC)
  }
  const uint8_t *a_end = ap + (size_t)kcq * MR * 4;
  for (; ap < a_end; ap += MR * 4, wp += NR * 4) {
    __m512i w0 = _mm512_load_si512((const void *)wp);
    __m512i w1 = _mm512_load_si512((const void *)(wp + 64));
#define TSR_UK_FMA(r)                                                                     \
  {                                                                                       \
    __m512i av = _mm512_set1_epi32((int)load_u32(ap + r * 4));                            \
    c##r##a = _mm512_dpbusd_epi32(c##r##a, av, w0);                                       \
    c##r##b = _mm512_dpbusd_epi32(c##r##b, av, w1);                                       \
  }
    TSR_UK_ROWS(TSR_UK_FMA)
  }
#define TSR_UK_STORE(r)                                                                   \
  if (r < mr) {                                                                           \
    _mm512_mask_storeu_epi32(c + (size_t)r * ldc, m0, c##r##a);                           \
    _mm512_mask_storeu_epi32(c + (size_t)r * ldc + 16, m1, c##r##b);                      \
  }
  TSR_UK_ROWS(TSR_UK_STORE)
}

/* sum_k w[k] for one row, vectorized (dpbusd with u8 ones). */
static int32_t row_sum_i8(const int8_t *w, int32_t k) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i s = _mm512_setzero_si512();
  int32_t kk = 0;
  for (; kk + 64 <= k; kk += 64)
    s = _mm512_dpbusd_epi32(s, ones, _mm512_loadu_si512((const void *)(w + kk)));
  if (kk < k) s = _mm512_dpbusd_epi32(s, ones, _mm512_maskz_loadu_epi8(tail_mask(k - kk), (const void *)(w + kk)));
  return _mm512_reduce_add_epi32(s);
}

void tsr_qgemm_block_avx512(int32_t *c, size_t ldc, const uint8_t *apack, int32_t m,
                            const int8_t *w, size_t ldw, const int32_t *row_sum,
                            int32_t nc, int32_t k, int8_t *wbuf) {
  _Alignas(64) int32_t bias[NC];
  for (int32_t j = 0; j < NC; ++j) {
    int32_t s = j < nc ? (row_sum ? row_sum[j] : row_sum_i8(w + (size_t)j * ldw, k)) : 0;
    bias[j] = (int32_t)(0u - 128u * (uint32_t)s);
  }
  const int32_t kp = round4(k);
  const int32_t np = (nc + NR - 1) / NR;
  const int32_t nmb = (m + MR - 1) / MR;
  for (int32_t k0 = 0; k0 < k; k0 += KC) {
    int32_t kc = k - k0 < KC ? k - k0 : KC;
    int32_t kcq = round4(kc) / 4;
    pack_w(wbuf, w, ldw, nc, k0, kc);
    for (int32_t mb = 0; mb < nmb; ++mb) {
      const uint8_t *ap = apack + (size_t)mb * MR * kp + (size_t)k0 * MR;
      int mr = m - mb * MR < MR ? m - mb * MR : MR;
      int32_t *cm = c + (size_t)mb * MR * ldc;
      for (int32_t p = 0; p < np; ++p) {
        int nr = nc - p * NR < NR ? nc - p * NR : NR;
        ukernel(ap, wbuf + (size_t)p * NR * kcq * 4, kcq, cm + p * NR, ldc, mr, nr,
                k0 == 0, bias + p * NR);
      }
    }
  }
}
