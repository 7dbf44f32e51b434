/* The int8 encoding (common/codec.h): int8 pushes (pst_int8_encode, pst_int8_decode) and
 * the int8 chunks of delta pulls (pst_int8_delta on the ps, pst_int8_add on both sides). Its
 * vector paths follow the instruction set that codec.c chooses (pst_codec_isa). */
#include "common/codec.h"

#include <errno.h>
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- int8 ----
 * A scalar reference, and AVX2 paths that apply the same operations in the same order to
 * each value, each rounded on its own (no FMA), so they give the same bits (codec_test
 * checks them against each other). GCC 12 vectorises none of these loops by itself. */

/* The int8 grid of a chunk whose largest magnitude is m: a value v is sent as
 * round(v x inv). 127 / m overflows for m under about 3.7e-37 (subnormal changes); inv is
 * then capped at FLT_MAX, so that a 0 still rounds to 0 (0 x infinity would be a NaN). */
static float int8_inv(float m) {
  float inv = m > 0 ? 127.0f / m : 0.0f;
  return inv <= FLT_MAX ? inv : FLT_MAX;
}

/* v[i] = a[i] + b[i] (sub 0; b may be NULL: a[i]) or a[i] - b[i] (sub 1), eight at a time. */
__attribute__((target("avx2"))) static inline __m256 v8(const float *a, const float *b, int sub,
                                                        size_t i) {
  __m256 va = _mm256_loadu_ps(a + i);
  if (!b) return va;
  __m256 vb = _mm256_loadu_ps(b + i);
  return sub ? _mm256_sub_ps(va, vb) : _mm256_add_ps(va, vb);
}

/* The largest |v| of the first n / 8 x 8 values, into *m, and whether one is not finite
 * (the largest is then not used). Exact in any order: a maximum rounds nothing. */
__attribute__((target("avx2"))) static size_t absmax_avx2(const float *a, const float *b, int sub,
                                                          size_t n, float *m, int *bad) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 big = _mm256_set1_ps(FLT_MAX);
  __m256 vmax = _mm256_setzero_ps(), ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_and_ps(v8(a, b, sub, i), absmask);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(x, big, _CMP_LE_OQ));
    vmax = _mm256_max_ps(x, vmax);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  for (int k = 0; k < 8; k++) *m = lanes[k] > *m ? lanes[k] : *m;
  *bad |= _mm256_movemask_ps(ok) != 0xff;
  return i;
}

/* 4 x 8 int32 -> 32 int8 in order (the packs work within 128-bit lanes). */
__attribute__((target("avx2"))) static inline void store_q32(int8_t *q, const __m256i qi[4]) {
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
                                 _mm256_packs_epi32(qi[2], qi[3]));
  _mm256_storeu_si256((__m256i *)(void *)q,
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* round(v x inv) to nearest even, clamped to -127..127. */
__attribute__((target("avx2"))) static inline __m256 grid8(__m256 v, __m256 inv) {
  __m256 r = _mm256_round_ps(_mm256_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
}

/* pst_int8_encode's second pass over its first n / 32 x 32 values, every value finite. */
__attribute__((target("avx2"))) static size_t encode_int8_avx2(const float *x, float *resid,
                                                               size_t n, float scale, float inv,
                                                               int8_t *q) {
  const __m256 vinv = _mm256_set1_ps(inv), vscale = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i qi[4];
    for (int k = 0; k < 4; k++) {
      __m256 v = v8(x, resid, 0, i + 8 * k);
      __m256 r = grid8(v, vinv);
      qi[k] = _mm256_cvtps_epi32(r);
      if (resid) _mm256_storeu_ps(resid + i + 8 * k, _mm256_sub_ps(v, _mm256_mul_ps(r, vscale)));
    }
    store_q32(q + i, qi);
  }
  return i;
}

size_t pst_int8_encode(const float *x, float *resid, size_t n, uint8_t *out) {
  float m = 0;
  int bad = 0, avx2 = pst_codec_isa() >= PST_ISA_AVX2;
  for (size_t i = avx2 ? absmax_avx2(x, resid, 0, n, &m, &bad) : 0; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    float a = fabsf(v);
    bad |= !(a <= FLT_MAX);
    m = a > m ? a : m;
  }
  float scale = bad ? NAN : m / 127.0f;
  float inv = bad ? 0.0f : int8_inv(m);
  memcpy(out, &scale, 4);
  int8_t *q = (int8_t *)(out + 4);
  /* A chunk with a value that is not finite goes the scalar way (its NaN scale is refused). */
  for (size_t i = avx2 && !bad ? encode_int8_avx2(x, resid, n, scale, inv, q) : 0; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    float r = nearbyintf(v * inv); /* the default rounding: to nearest, ties to even */
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
    if (!(fabsf(v) <= FLT_MAX)) r = 0;
    q[i] = (int8_t)r;
    float back = r * scale; /* its own statement: never fused with the subtraction */
    if (resid) resid[i] = !(fabsf(v) <= FLT_MAX) ? 0.0f : bad ? v : v - back;
  }
  return 4 + n;
}

int pst_int8_decode(const uint8_t *in, size_t bytes, float *out, size_t n) {
  if (n == 0 || bytes != n + 4) return -EINVAL;
  float scale;
  memcpy(&scale, in, 4);
  const int8_t *q = (const int8_t *)(in + 4);
  for (size_t i = 0; i < n; i++) out[i] = (float)q[i] * scale;
  return 0;
}

/* pst_int8_add's first n / 32 x 32 values with AVX2: the same multiply and add per value. */
__attribute__((target("avx2"))) static size_t add_avx2(const int8_t *q, float scale, float *acc,
                                                       size_t n) {
  const __m256 vscale = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(q + i));
    __m128i half[2] = {_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)};
    for (int k = 0; k < 4; k++) {
      __m128i part = k % 2 ? _mm_srli_si128(half[k / 2], 8) : half[k / 2];
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part)), vscale);
      _mm256_storeu_ps(acc + i + 8 * k, _mm256_add_ps(_mm256_loadu_ps(acc + i + 8 * k), v));
    }
  }
  return i;
}

int pst_int8_add(const uint8_t *in, size_t bytes, float *acc, size_t n) {
  if (n == 0 || bytes != n + 4) return -EINVAL;
  float scale;
  memcpy(&scale, in, 4);
  if (!isfinite(scale)) return -EINVAL;
  const int8_t *q = (const int8_t *)(in + 4);
  /* A multiply and an add, each rounded, never fused into one (an FMA would round once),
   * whatever the compiler's contraction default. */
  for (size_t i = pst_codec_isa() >= PST_ISA_AVX2 ? add_avx2(q, scale, acc, n) : 0; i < n; i++) {
    float v = (float)q[i] * scale;
    acc[i] += v;
  }
  return 0;
}

/* pst_int8_delta's values [from, n), scalar: the reference, and the vector path's tail. */
static void delta_scalar(const float *target, float *held, size_t from, size_t n, float scale,
                         float inv, int8_t *q) {
  for (size_t i = from; i < n; i++) {
    float r = nearbyintf((target[i] - held[i]) * inv);
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
    q[i] = (int8_t)r;
    float v = (float)q[i] * scale;
    held[i] += v;
  }
}

/* The same with AVX2 over the first n / 32 x 32 values. */
__attribute__((target("avx2"))) static size_t delta_avx2(const float *target, float *held,
                                                         size_t n, float scale, float inv,
                                                         int8_t *q) {
  const __m256 vinv = _mm256_set1_ps(inv), vscale = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i qi[4];
    for (int k = 0; k < 4; k++) {
      __m256 h = _mm256_loadu_ps(held + i + 8 * k);
      __m256 r = grid8(_mm256_sub_ps(_mm256_loadu_ps(target + i + 8 * k), h), vinv);
      qi[k] = _mm256_cvtps_epi32(r);
      _mm256_storeu_ps(held + i + 8 * k, _mm256_add_ps(h, _mm256_mul_ps(r, vscale)));
    }
    store_q32(q + i, qi);
  }
  return i;
}

int pst_int8_delta(const float *target, float *held, size_t n, uint8_t *out) {
  float m = 0;
  int bad = 0, avx2 = pst_codec_isa() >= PST_ISA_AVX2;
  for (size_t i = avx2 ? absmax_avx2(target, held, 1, n, &m, &bad) : 0; i < n; i++) {
    float a = fabsf(target[i] - held[i]);
    bad |= !(a <= FLT_MAX);
    m = a > m ? a : m;
  }
  if (n == 0 || bad) return -EINVAL;
  /* As pst_int8_encode and pst_int8_add do it, step for step, so the bits are theirs. */
  float scale = m / 127.0f, inv = int8_inv(m);
  memcpy(out, &scale, 4);
  int8_t *q = (int8_t *)(out + 4);
  size_t done = avx2 ? delta_avx2(target, held, n, scale, inv, q) : 0;
  delta_scalar(target, held, done, n, scale, inv, q);
  return 0;
}
