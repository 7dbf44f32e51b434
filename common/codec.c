/* Tensor encodings (common/codec.h): the one table of their names, fp16 and bf16 (the scalar
 * reference and its vectorised twins, AVX2 with F16C and AVX-512), and the choice of
 * instruction set that the vector paths of every encoding follow (pst_codec_isa). The other
 * encodings have files of their own: int8 in codec_int8.c, and the (index, value) pairs of
 * sparse delta pulls and top-k pushes in codec_sparse.c. Both call pst_codec_isa here, and
 * nothing here calls them. */
#include "common/codec.h"

#include <cpuid.h>
#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- names: the one table ---- */

static const char *const enc_names[PST_ENC_COUNT] = {"none", "fp16", "bf16", "topk", "int8",
                                                     "delta"};
static const unsigned enc_bytes[PST_ENC_COUNT] = {4, 2, 2, 8, 1, 1};

const char *pst_enc_name(pst_enc e) {
  return (unsigned)e < PST_ENC_COUNT ? enc_names[e] : "?";
}

unsigned pst_enc_bytes(pst_enc e) { return (unsigned)e < PST_ENC_COUNT ? enc_bytes[e] : 0; }

/* The names both directions take: none, fp16, bf16. */
static int parse_dense(const char *s, pst_enc *e) {
  for (unsigned i = 0; i < PST_ENC_TOPK; i++)
    if (s && strcmp(s, enc_names[i]) == 0) {
      *e = (pst_enc)i;
      return 0;
    }
  return -EINVAL;
}

int pst_enc_parse(const char *s, pst_enc *e) {
  if (s && strcmp(s, enc_names[PST_ENC_DELTA]) == 0) {
    *e = PST_ENC_DELTA;
    return 0;
  }
  return parse_dense(s, e);
}

const char *pst_enc_choices(void) { return "none|fp16|bf16|delta"; }
const char *pst_enc_push_choices(void) {
  return "none|fp16|bf16|int8|topk:FRACTION (0 < FRACTION <= 0.5)";
}

int pst_enc_parse_push(const char *s, pst_enc *e, double *fraction) {
  *fraction = 0;
  size_t len = strlen(enc_names[PST_ENC_TOPK]);
  if (s && strncmp(s, enc_names[PST_ENC_TOPK], len) == 0 && s[len] == ':') {
    char *end;
    double f = strtod(s + len + 1, &end);
    if (end == s + len + 1 || *end || !(f > 0 && f <= PST_TOPK_MAX_FRACTION)) return -EINVAL;
    *e = PST_ENC_TOPK;
    *fraction = f;
    return 0;
  }
  if (s && strcmp(s, enc_names[PST_ENC_INT8]) == 0) {
    *e = PST_ENC_INT8;
    return 0;
  }
  return parse_dense(s, e);
}

/* ---- fp16 and bf16: the scalar reference ---- */

static uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float float_of(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

uint16_t pst_fp16_from_float(float f) {
  uint32_t x = bits_of(f);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  /* A NaN stays a quiet NaN with the top of its payload, as F16C's conversion does. */
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  /* 65520 and above (infinity included) round to infinity. */
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) { /* a normal half: rebias the exponent by 127 - 15 */
    uint32_t r = ax - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  /* Below 2^-25 (float subnormals too) everything rounds to zero; 2^-25 itself ties to 0. */
  if (ax < 0x33000000u) return (uint16_t)sign;
  /* A subnormal half: k units of 2^-24, k = mantissa x 2^(e - 126), rounded to even (k may
   * reach 0x400, the smallest normal, whose encoding is the same number). */
  uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u, s = 126u - e;
  uint32_t k = mant >> s, rem = mant & ((1u << s) - 1u), half = 1u << (s - 1u);
  if (rem > half || (rem == half && (k & 1u))) k++;
  return (uint16_t)(sign | k);
}

float pst_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));
  if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));
  /* Zero or a subnormal half: m units of 2^-24, exact in float. */
  float v = (float)m * 0x1p-24f;
  return sign ? -v : v;
}

uint16_t pst_bf16_from_float(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float pst_bf16_to_float(uint16_t h) { return float_of((uint32_t)h << 16); }

/* The largest finite bf16, as a float. */
#define BF16_MAX_BITS 0x7f7f0000u

/* A finite value beyond the format's range, clamped to its largest finite value (sign kept);
 * anything else as it is. */
static float clamp_finite(float v, float max) {
  if (isfinite(v) && fabsf(v) > max) return copysignf(max, v);
  return v;
}

static void encode_scalar(pst_enc e, const float *x, float *resid, void *out, size_t from,
                          size_t n) {
  uint16_t *o = out;
  float max = e == PST_ENC_FP16 ? PST_FP16_MAX : float_of(BF16_MAX_BITS);
  for (size_t i = from; i < n; i++) {
    float v = resid ? x[i] + resid[i] : x[i];
    float c = clamp_finite(v, max);
    uint16_t h = e == PST_ENC_FP16 ? pst_fp16_from_float(c) : pst_bf16_from_float(c);
    o[i] = h;
    if (resid) {
      float d = e == PST_ENC_FP16 ? pst_fp16_to_float(h) : pst_bf16_to_float(h);
      resid[i] = isfinite(v) ? v - d : 0.0f;
    }
  }
}

/* Decodes values [from, to) of buf in place, the last first. */
static void decode_scalar_back(pst_enc e, float *buf, size_t from, size_t to) {
  const uint16_t *in = (const uint16_t *)(void *)buf;
  for (size_t i = to; i-- > from;) {
    uint16_t h = in[i];
    buf[i] = e == PST_ENC_FP16 ? pst_fp16_to_float(h) : pst_bf16_to_float(h);
  }
}

/* ---- AVX2 with F16C (always there under -march=x86-64-v3) ---- */

/* The target attribute lets this compile without the build's -march too (the fuzzers'
 * clang build); the dispatch below calls it only on a CPU that has the instructions. */
__attribute__((target("avx2,f16c"))) static void encode_avx2(pst_enc e, const float *x, float *resid, void *out, size_t n) {
  uint8_t *o = out;
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
  const __m256 max = e == PST_ENC_FP16 ? _mm256_set1_ps(PST_FP16_MAX)
                                       : _mm256_castsi256_ps(_mm256_set1_epi32((int)BF16_MAX_BITS));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (resid) v = _mm256_add_ps(v, _mm256_loadu_ps(resid + i));
    __m256 a = _mm256_and_ps(v, absmask);
    __m256 finite = _mm256_cmp_ps(a, inf, _CMP_LT_OQ); /* false for NaN */
    __m256 big = _mm256_and_ps(_mm256_cmp_ps(a, max, _CMP_GT_OQ), finite);
    __m256 c = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_andnot_ps(absmask, v), max), big);
    __m128i h;
    __m256 d;
    if (e == PST_ENC_FP16) {
      h = _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      d = _mm256_cvtph_ps(h);
    } else {
      __m256i b = _mm256_castps_si256(c);
      __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
      __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
      __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
      __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(c, c, _CMP_UNORD_Q));
      r = _mm256_blendv_epi8(r, qnan, nan);
      __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
      h = _mm256_castsi256_si128(p);
      d = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    _mm_storeu_si128((__m128i *)(void *)(o + 2 * i), h);
    if (resid) _mm256_storeu_ps(resid + i, _mm256_and_ps(_mm256_sub_ps(v, d), finite));
  }
  encode_scalar(e, x, resid, out, i, n);
}

__attribute__((target("avx2,f16c"))) static void decode_avx2_back(pst_enc e, float *buf, size_t n) {
  size_t blocks = n / 8;
  decode_scalar_back(e, buf, blocks * 8, n);
  const uint8_t *in = (const uint8_t *)buf;
  for (size_t b = blocks; b-- > 0;) {
    /* The block's 16 encoded bytes are loaded before its 32 decoded bytes are stored over
     * them and over encoded values of later blocks, already decoded. */
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(in + 16 * b));
    __m256 d = e == PST_ENC_FP16
                   ? _mm256_cvtph_ps(h)
                   : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    _mm256_storeu_ps(buf + 8 * b, d);
  }
}

/* ---- AVX-512 (chosen at run time) ---- */

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
encode_avx512(pst_enc e, const float *x, float *resid, void *out, size_t n) {
  uint8_t *o = out;
  const __m512 max = e == PST_ENC_FP16 ? _mm512_set1_ps(PST_FP16_MAX)
                                       : _mm512_castsi512_ps(_mm512_set1_epi32((int)BF16_MAX_BITS));
  const __m512 inf = _mm512_castsi512_ps(_mm512_set1_epi32(0x7f800000));
  const __m512i signbit = _mm512_set1_epi32((int)0x80000000u);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    if (resid) v = _mm512_add_ps(v, _mm512_loadu_ps(resid + i));
    __m512 a = _mm512_abs_ps(v);
    __mmask16 finite = _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ);
    __mmask16 big = _mm512_mask_cmp_ps_mask(finite, a, max, _CMP_GT_OQ);
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), signbit);
    __m512 c = _mm512_mask_mov_ps(v, big, _mm512_castsi512_ps(_mm512_or_si512(
                                              sign, _mm512_castps_si512(max))));
    __m256i h;
    __m512 d;
    if (e == PST_ENC_FP16) {
      h = _mm512_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      d = _mm512_cvtph_ps(h);
    } else {
      __m512i b = _mm512_castps_si512(c);
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
      __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
      __mmask16 nan = _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
      r = _mm512_mask_mov_epi32(r, nan, qnan);
      h = _mm512_cvtepi32_epi16(r);
      d = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    _mm256_storeu_si256((__m256i *)(void *)(o + 2 * i), h);
    if (resid) _mm512_storeu_ps(resid + i, _mm512_maskz_sub_ps(finite, v, d));
  }
  encode_scalar(e, x, resid, out, i, n);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
decode_avx512_back(pst_enc e, float *buf, size_t n) {
  size_t blocks = n / 16;
  decode_scalar_back(e, buf, blocks * 16, n);
  const uint8_t *in = (const uint8_t *)buf;
  for (size_t b = blocks; b-- > 0;) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(in + 32 * b));
    __m512 d = e == PST_ENC_FP16
                   ? _mm512_cvtph_ps(h)
                   : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm512_storeu_ps(buf + 16 * b, d);
  }
}

/* ---- dispatch ---- */

/* -1 until the first call picks the best; a plain int store of the same value from two
 * threads is harmless, and atomics keep the sanitizers quiet about it. */
static _Atomic int g_isa = -1;

static pst_isa best_isa(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return PST_ISA_AVX512;
  /* F16C from CPUID itself: clang's __builtin_cpu_supports does not know the name. */
  unsigned a, b, c, d;
  int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  if (__builtin_cpu_supports("avx2") && f16c) return PST_ISA_AVX2;
  return PST_ISA_SCALAR;
}

pst_isa pst_codec_isa(void) {
  int isa = atomic_load_explicit(&g_isa, memory_order_relaxed);
  if (isa < 0) {
    isa = (int)best_isa();
    atomic_store_explicit(&g_isa, isa, memory_order_relaxed);
  }
  return (pst_isa)isa;
}

int pst_codec_use(pst_isa isa) {
  pst_isa best = best_isa();
  if (isa == PST_ISA_BEST) isa = best;
  if (isa > best) return -ENOTSUP;
  atomic_store_explicit(&g_isa, (int)isa, memory_order_relaxed);
  return 0;
}

void pst_enc_encode(pst_enc e, const float *x, float *resid, void *out, size_t n) {
  if (e != PST_ENC_FP16 && e != PST_ENC_BF16) return; /* top-k: pst_topk_encode */
  switch (pst_codec_isa()) {
    case PST_ISA_AVX512: encode_avx512(e, x, resid, out, n); break;
    case PST_ISA_AVX2: encode_avx2(e, x, resid, out, n); break;
    default: encode_scalar(e, x, resid, out, 0, n); break;
  }
}

void pst_enc_decode_inplace(pst_enc e, float *buf, size_t n) {
  if (e != PST_ENC_FP16 && e != PST_ENC_BF16) return;
  switch (pst_codec_isa()) {
    case PST_ISA_AVX512: decode_avx512_back(e, buf, n); break;
    case PST_ISA_AVX2: decode_avx2_back(e, buf, n); break;
    default: decode_scalar_back(e, buf, 0, n); break;
  }
}
