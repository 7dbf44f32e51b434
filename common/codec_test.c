/* The tensor encodings (common/codec.h): the scalar reference against an independent check
 * (nearest value, ties to even, and F16C's own scalar conversion), and every vectorised path
 * against the reference, bit for bit, on every rounding edge and on random values of every
 * magnitude, with error feedback and in-place decoding at lengths that leave tails. */
#include "common/codec.h"

#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);               \
      fprintf(stderr, "\n");                      \
      if (++failures > 20) exit(1);               \
    }                                             \
  } while (0)

static uint32_t bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
static float from_bits(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t enc1(pst_enc e, float x) {
  return e == PST_ENC_FP16 ? pst_fp16_from_float(x) : pst_bf16_from_float(x);
}
static float dec1(pst_enc e, uint16_t h) {
  return e == PST_ENC_FP16 ? pst_fp16_to_float(h) : pst_bf16_to_float(h);
}

/* The reference rounds a finite x in range to the nearest encodable value, ties to the even
 * encoding: checked against the encodings on either side. */
static void check_nearest(pst_enc e, float x) {
  uint16_t h = enc1(e, x);
  double d = dec1(e, h), xv = x;
  CHECK(!isnan(d), "%s(%a) gave NaN", pst_enc_name(e), x);
  if (isinf(d)) return; /* beyond the range: the clamp's business, checked elsewhere */
  uint16_t mag = h & 0x7fff, sign = h & 0x8000;
  double err = fabs(xv - d);
  if (mag > 0) {
    double lo = dec1(e, (uint16_t)(sign | (mag - 1)));
    CHECK(err <= fabs(xv - lo), "%s(%a): %a is not nearest (%a closer)", pst_enc_name(e), x, d, lo);
    if (err == fabs(xv - lo)) CHECK((h & 1) == 0, "%s(%a): tie not to even", pst_enc_name(e), x);
  }
  uint16_t up = (uint16_t)(sign | (mag + 1));
  double hi = dec1(e, up);
  if (!isinf(hi) && !isnan(hi)) {
    CHECK(err <= fabs(xv - hi), "%s(%a): %a is not nearest (%a closer)", pst_enc_name(e), x, d, hi);
    if (err == fabs(xv - hi)) CHECK((h & 1) == 0, "%s(%a): tie not to even", pst_enc_name(e), x);
  }
  /* The other sign's zero: -0 and +0 are both nearest to a tiny value; the sign is kept. */
  CHECK((h & 0x8000) == ((bits(x) >> 16) & 0x8000), "%s(%a): sign lost", pst_enc_name(e), x);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* Values around every edge: zeros, float subnormals, the half subnormal range and its rounding
 * boundaries, the normal range's limits, the clamp, infinities and NaNs. */
static size_t edges(float *v, size_t cap) {
  size_t n = 0;
  const float fixed[] = {0.0f, -0.0f, 1.0f, -1.0f, 0x1p-149f, -0x1p-149f, 0x1p-126f, 0x1.fffffep-127f,
                         0x1p-25f, 0x1.000002p-25f, 0x1.fffffep-26f, 0x1p-24f, 0x1.8p-24f,
                         0x1.8p-23f, 0x1.ffcp-15f, 0x1p-14f, 0x1.ffep-15f, 0x1.002p-14f,
                         65504.0f, -65504.0f, 65519.0f, 65519.996f, 65520.0f, -65520.0f,
                         1e5f, 1e6f, -1e6f, 3.0e38f, 0x1.fffffep127f, -0x1.fffffep127f,
                         0x1.fefffep127f, 0x1.ff0000p127f, 0x1.ff0002p127f, 1.00390625f,
                         1.005859375f, 1.0009765625f, 1.00146484375f, 0x1.004p0f, 0x1.0018p0f};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed && n < cap; i++) v[n++] = fixed[i];
  const uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                               0x7f800001u, 0x7fbfffffu, 0xff812345u, 0x7fffffffu};
  for (size_t i = 0; i < sizeof specials / sizeof *specials && n < cap; i++)
    v[n++] = from_bits(specials[i]);
  return n;
}

/* Fills v with values of every magnitude and sign, edges sprinkled in. */
static void fill(float *v, size_t n) {
  float e[64];
  size_t ne = edges(e, 64);
  for (size_t i = 0; i < n; i++) {
    uint32_t r = rnd();
    if (r % 17 == 0) v[i] = e[rnd() % ne];
    else if (r % 3 == 0) v[i] = from_bits(rnd() ^ (rnd() << 21)); /* any bits at all */
    else v[i] = ((float)(rnd() % 2000000) - 1e6f) * 0x1p-20f * (float)(1u << (rnd() % 20));
  }
}

static void check_scalar(void) {
  /* Names: one table, parsed both ways. */
  for (unsigned i = 0; i < PST_ENC_TOPK; i++) {
    pst_enc e;
    CHECK(pst_enc_parse(pst_enc_name((pst_enc)i), &e) == 0 && e == (pst_enc)i, "name %u", i);
  }
  pst_enc e;
  CHECK(pst_enc_parse("fp8", &e) == -EINVAL, "fp8 parsed");
  CHECK(pst_enc_bytes(PST_ENC_NONE) == 4 && pst_enc_bytes(PST_ENC_FP16) == 2 &&
            pst_enc_bytes(PST_ENC_BF16) == 2, "bytes");

  /* Every half and bf16 decodes to a value that encodes back to itself (NaNs to a NaN). */
  for (uint32_t h = 0; h < 65536; h++) {
    for (int k = 1; k <= 2; k++) {
      pst_enc en = (pst_enc)k;
      float d = dec1(en, (uint16_t)h);
      if (isnan(d)) CHECK(isnan(dec1(en, enc1(en, d))), "%s NaN %#x", pst_enc_name(en), h);
      else CHECK(enc1(en, d) == h, "%s %#x -> %a -> %#x", pst_enc_name(en), h, d, enc1(en, d));
    }
    /* The half decoder against F16C's. */
    float ref = _cvtsh_ss((unsigned short)h);
    float mine = pst_fp16_to_float((uint16_t)h);
    CHECK(isnan(ref) ? isnan(mine) : bits(ref) == bits(mine), "fp16 decode %#x", h);
  }
  /* Encoding: the nearest value, ties to even, on edges and at random; the half encoder also
   * against F16C's scalar conversion, NaN payloads included. */
  float v[1 << 16];
  size_t ne = edges(v, 64);
  fill(v + ne, (sizeof v / sizeof *v) - ne);
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    for (int k = 1; k <= 2; k++)
      if (isfinite(v[i])) check_nearest((pst_enc)k, v[i]);
    uint16_t f16c = _cvtss_sh(v[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    CHECK(f16c == pst_fp16_from_float(v[i]), "fp16(%a) = %#x, F16C %#x", v[i],
          pst_fp16_from_float(v[i]), f16c);
  }
  /* Exact points: 2^-25 ties down to 0, a hair above rounds up to the smallest subnormal. */
  CHECK(pst_fp16_from_float(0x1p-25f) == 0 && pst_fp16_from_float(0x1.000002p-25f) == 1,
        "half subnormal boundary");
  CHECK(pst_fp16_from_float(0x1p-149f) == 0 && pst_fp16_from_float(-0x1p-149f) == 0x8000,
        "float subnormals to signed zero");
  CHECK(pst_bf16_from_float(0x1p-149f) == 0 && pst_bf16_from_float(0x1p-133f) == 0x0001,
        "bf16 keeps float subnormals (%#x)", pst_bf16_from_float(0x1p-133f));
  CHECK(pst_fp16_from_float(65519.0f) == 0x7bff && pst_fp16_from_float(65520.0f) == 0x7c00,
        "half overflow edge");
}

/* Encoding with error feedback through the public routine: the clamp, what is kept for the
 * next step, non-finite values left for the ps to reject. */
static void check_feedback(pst_isa isa) {
  pst_codec_use(isa);
  for (int k = 1; k <= 2; k++) {
    pst_enc e = (pst_enc)k;
    float x[19] = {1e6f, -1e6f, 1.0f, 0x1.0018p0f, 3e38f, INFINITY, -INFINITY, NAN, 1e-30f,
                   0x1.fffffep127f};
    float r[19] = {0}, d[19];
    uint16_t o[19];
    pst_enc_encode(e, x, r, o, 19);
    memcpy(d, o, sizeof o);
    pst_enc_decode_inplace(e, d, 19);
    float max = e == PST_ENC_FP16 ? PST_FP16_MAX : 0x1.fep127f;
    if (e == PST_ENC_FP16) {
      CHECK(d[0] == max && r[0] == 1e6f - max, "%s: 1e6 clamped to %a, kept %a", pst_enc_name(e),
            d[0], r[0]);
      CHECK(d[1] == -max && r[1] == -(1e6f - max), "%s: -1e6 clamped", pst_enc_name(e));
    } else {
      /* bf16 has float's range: only a value that would round up past it is clamped. */
      CHECK(isfinite(d[4]) && d[9] == max && r[9] == x[9] - max, "bf16: FLT_MAX -> %a", d[9]);
    }
    CHECK(isinf(d[5]) && d[5] > 0 && isinf(d[6]) && d[6] < 0 && isnan(d[7]),
          "%s: non-finite values not kept (%a %a %a)", pst_enc_name(e), d[5], d[6], d[7]);
    CHECK(r[5] == 0 && r[6] == 0 && r[7] == 0, "%s: residual of a non-finite value", pst_enc_name(e));
    for (int i = 0; i < 19; i++)
      if (isfinite(x[i]) && fabsf(x[i]) <= max)
        CHECK(d[i] + r[i] == x[i], "%s: %a = %a + %a", pst_enc_name(e), x[i], d[i], r[i]);
    /* Feedback over steps: what was sent in total is what was given less what is held back. */
    float g[37], res[37] = {0};
    double sent[37] = {0}, given[37] = {0};
    for (int step = 0; step < 50; step++) {
      for (int i = 0; i < 37; i++) g[i] = ((float)((i * 7919 + step * 104729) % 2001) - 1000.0f) * 1e-5f;
      uint16_t eo[37];
      float dd[37];
      pst_enc_encode(e, g, res, eo, 37);
      memcpy(dd, eo, sizeof eo);
      pst_enc_decode_inplace(e, dd, 37);
      for (int i = 0; i < 37; i++) {
        sent[i] += dd[i];
        given[i] += g[i];
      }
    }
    for (int i = 0; i < 37; i++)
      /* Only the float additions of gradient and residual round: far below the
       * 16-bit formats' steps (about 1e-5 here), which feedback must not lose. */
      CHECK(fabs(sent[i] + res[i] - given[i]) < 1e-7, "%s: feedback lost %g at %d",
            pst_enc_name(e), sent[i] + res[i] - given[i], i);
  }
}

/* Each vector path against the scalar one, bit for bit: encoded values, residuals and decoding
 * in place, at lengths that leave tails of every size. */
static void check_paths(void) {
  enum { N = 40000 };
  static float x[N], r0[N], rs[N], rv[N], ds[N], dv[N];
  static uint16_t os[N], ov[N];
  fill(x, N);
  for (size_t i = 0; i < N; i++) r0[i] = (float)((int)(rnd() % 201) - 100) * 1e-6f;
  int tested = 0;
  for (int isa = PST_ISA_AVX2; isa <= PST_ISA_AVX512; isa++) {
    if (pst_codec_use((pst_isa)isa) < 0) {
      printf("codec_test: the CPU has no %s; that path is not tested here\n",
             isa == PST_ISA_AVX2 ? "AVX2/F16C" : "AVX-512");
      continue;
    }
    tested++;
    for (int k = 1; k <= 2; k++) {
      pst_enc e = (pst_enc)k;
      const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, N};
      for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        for (int fb = 0; fb < 2; fb++) {
          memcpy(rs, r0, sizeof rs);
          memcpy(rv, r0, sizeof rv);
          pst_codec_use(PST_ISA_SCALAR);
          pst_enc_encode(e, x, fb ? rs : NULL, os, n);
          memcpy(ds, os, n * 2);
          pst_enc_decode_inplace(e, ds, n);
          pst_codec_use((pst_isa)isa);
          pst_enc_encode(e, x, fb ? rv : NULL, ov, n);
          memcpy(dv, ov, n * 2);
          pst_enc_decode_inplace(e, dv, n);
          CHECK(memcmp(os, ov, n * 2) == 0, "isa %d %s n %zu: encodings differ", isa,
                pst_enc_name(e), n);
          CHECK(memcmp(rs, rv, n * 4) == 0, "isa %d %s n %zu: residuals differ", isa,
                pst_enc_name(e), n);
          CHECK(memcmp(ds, dv, n * 4) == 0, "isa %d %s n %zu: decodings differ", isa,
                pst_enc_name(e), n);
          /* In place is the same as decoding value by value. */
          for (size_t i = 0; i < n; i++) {
            float want = dec1(e, os[i]);
            if (!(isnan(want) ? isnan(dv[i]) : bits(want) == bits(dv[i]))) {
              CHECK(0, "isa %d %s n %zu: value %zu decoded to %a, not %a", isa,
                    pst_enc_name(e), n, i, dv[i], want);
              break;
            }
          }
        }
      }
    }
  }
  CHECK(tested > 0 || pst_codec_use(PST_ISA_AVX2) < 0, "no vector path tested");
  pst_codec_use(PST_ISA_BEST);
}

/* Top-k: the pairs are the k largest magnitudes (ties to the lower indices), ascending, the
 * residual is what was not sent, decoding gives them back; the names; malformed pairs refused. */
static int cmp_desc(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static void check_topk(void) {
  pst_enc e;
  double f;
  CHECK(pst_enc_parse_push("topk:0.01", &e, &f) == 0 && e == PST_ENC_TOPK && f == 0.01, "topk:0.01");
  CHECK(pst_enc_parse_push("fp16", &e, &f) == 0 && e == PST_ENC_FP16 && f == 0, "fp16 as a push");
  const char *bad[] = {"topk", "topk:", "topk:0", "topk:0.6", "topk:x", "topk:0.1x", "topk:-1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK(pst_enc_parse_push(bad[i], &e, &f) == -EINVAL, "%s parsed", bad[i]);
  CHECK(pst_enc_parse("topk", &e) == -EINVAL, "topk as a pull");
  CHECK(pst_topk_k(0.01, 1000) == 10 && pst_topk_k(0.01, 10) == 1 && pst_topk_k(0.5, 7) == 3 &&
            pst_topk_k(0.5, 1) == 1 && pst_topk_k(0.001, 100000) == 100, "pst_topk_k");
  enum { N = 3001 };
  static float x[N], r[N], keep[N], d[N];
  static uint32_t scratch[N], keys[N];
  static uint8_t out[8 * N];
  for (int round = 0; round < 40; round++) {
    size_t n = round < 20 ? 1 + rnd() % 64 : 1 + rnd() % N;
    for (size_t i = 0; i < n; i++) {
      /* Few distinct magnitudes in some rounds: many ties at the threshold. */
      x[i] = round % 3 == 0 ? (float)((int)(rnd() % 5) - 2) : (float)((int)(rnd() % 20001) - 10000) * 1e-4f;
      r[i] = round % 2 ? (float)((int)(rnd() % 101) - 50) * 1e-5f : 0;
      keep[i] = r[i];
    }
    if (round == 7) x[n / 2] = NAN;
    size_t k = pst_topk_k(round % 4 == 1 ? 0.5 : 0.05, n);
    size_t bytes = pst_topk_encode(x, r, n, k, scratch, out);
    CHECK(bytes == 8 * k, "round %d: %zu bytes for k %zu", round, bytes, k);
    CHECK(pst_topk_decode(out, bytes, d, n) == 0, "round %d: own pairs refused", round);
    /* The threshold: the k-th largest magnitude of x + resid. */
    for (size_t i = 0; i < n; i++) {
      float v = x[i] + keep[i];
      uint32_t b;
      memcpy(&b, &v, 4);
      keys[i] = b & 0x7fffffffu;
    }
    qsort(keys, n, sizeof *keys, cmp_desc);
    uint32_t t = keys[k - 1];
    size_t sent = 0;
    uint32_t prev = 0;
    for (size_t p = 0; p < k; p++) {
      uint32_t idx;
      memcpy(&idx, out + 8 * p, 4);
      CHECK(p == 0 || idx > prev, "round %d: indices do not ascend", round);
      prev = idx;
    }
    for (size_t i = 0; i < n; i++) {
      float v = x[i] + keep[i];
      uint32_t b;
      memcpy(&b, &v, 4);
      uint32_t m = b & 0x7fffffffu;
      /* A zero decodes the same sent or not, and keeps no residual either way. */
      if (v == 0) {
        CHECK(d[i] == 0 && r[i] == 0, "round %d: zero at %zu", round, i);
        continue;
      }
      int is_sent = isnan(v) ? isnan(d[i]) : d[i] == v;
      if (m > t) CHECK(is_sent, "round %d: value %zu above the threshold not sent", round, i);
      if (m < t) CHECK(!is_sent && d[i] == 0, "round %d: value %zu below the threshold sent", round, i);
      if (is_sent) {
        sent++;
        CHECK(isnan(v) ? isnan(d[i]) : d[i] == v, "round %d: value %zu decoded to %a, not %a", round,
              i, d[i], v);
        CHECK(r[i] == 0, "round %d: a sent value kept a residual", round);
      } else {
        CHECK(r[i] == (isfinite(v) ? v : 0), "round %d: value %zu's residual %a, not %a", round,
              i, r[i], v);
      }
    }
    /* Ties go to the lower indices: a tie sent never follows a tie not sent. */
    int unsent_tie = 0;
    for (size_t i = 0; i < n; i++) {
      float v = x[i] + keep[i];
      uint32_t b;
      memcpy(&b, &v, 4);
      if ((b & 0x7fffffffu) != t || v == 0) continue;
      int is_sent = d[i] == v;
      CHECK(!(is_sent && unsent_tie), "round %d: a tie at index %zu sent after one skipped", round, i);
      if (!is_sent) unsent_tie = 1;
    }
    (void)sent;
  }
  /* Malformed pairs: a length that is no pair count, too many pairs, an index out of range,
   * indices not strictly ascending. */
  uint8_t p[32] = {0};
  float o[8];
  uint32_t idx[4] = {0, 3, 3, 9};
  for (int i = 0; i < 4; i++) memcpy(p + 8 * i, &idx[i], 4);
  CHECK(pst_topk_decode(p, 7, o, 8) == -EINVAL, "7 bytes");
  CHECK(pst_topk_decode(p, 0, o, 8) == -EINVAL, "no pairs");
  CHECK(pst_topk_decode(p, 16, o, 8) == 0, "2 good pairs");
  CHECK(pst_topk_decode(p, 24, o, 8) == -EINVAL, "a repeated index");
  CHECK(pst_topk_decode(p, 40, o, 8) == -EINVAL, "more pairs than n / 2");
  memcpy(p + 8, &idx[3], 4);
  CHECK(pst_topk_decode(p, 16, o, 8) == -EINVAL, "an index out of range");
  CHECK(pst_topk_decode(p, 8, o, 1) == 0, "one pair for one value");
}

/* int8: the scale is max|v| / 127, values round to nearest within -127..127, decoding gives
 * q x scale, feedback keeps the rest; a non-finite value makes the chunk's scale a NaN; bad
 * lengths refused. */
static void check_int8(void) {
  pst_enc e;
  double f;
  CHECK(pst_enc_parse_push("int8", &e, &f) == 0 && e == PST_ENC_INT8, "int8 as a push");
  CHECK(pst_enc_parse("int8", &e) == -EINVAL, "int8 as a pull");
  enum { N = 1001 };
  static float x[N], r[N], keep[N], d[N];
  static uint8_t out[N + 4];
  for (int round = 0; round < 20; round++) {
    size_t n = 1 + rnd() % N;
    for (size_t i = 0; i < n; i++) {
      x[i] = (float)((int)(rnd() % 20001) - 10000) * 1e-5f * (round % 5 == 0 ? 1e-30f : 1.0f);
      r[i] = round % 2 ? (float)((int)(rnd() % 101) - 50) * 1e-7f : 0;
      keep[i] = r[i];
    }
    CHECK(pst_int8_encode(x, r, n, out) == n + 4, "round %d: length", round);
    CHECK(pst_int8_decode(out, n + 4, d, n) == 0, "round %d: own bytes refused", round);
    /* The path in use (the best this CPU has) against the scalar one, with and without
     * feedback: the same bytes and residuals. */
    static float r2[N];
    static uint8_t out2[N + 4], out3[N + 4], out4[N + 4];
    pst_isa best = pst_codec_isa();
    memcpy(r2, keep, n * sizeof *r2);
    pst_int8_encode(x, NULL, n, out3);
    pst_codec_use(PST_ISA_SCALAR);
    pst_int8_encode(x, r2, n, out2);
    pst_int8_encode(x, NULL, n, out4);
    pst_codec_use(best);
    CHECK(memcmp(out, out2, n + 4) == 0 && memcmp(r, r2, n * sizeof *r) == 0,
          "round %d n %zu: path %d differs from the scalar one", round, n, (int)best);
    CHECK(memcmp(out3, out4, n + 4) == 0, "round %d n %zu: without feedback, path %d differs",
          round, n, (int)best);
    float scale, m = 0;
    memcpy(&scale, out, 4);
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i] + keep[i]));
    CHECK(scale == m / 127.0f, "round %d: scale %a, not %a", round, scale, m / 127.0f);
    for (size_t i = 0; i < n; i++) {
      float v = x[i] + keep[i];
      int8_t q = (int8_t)out[4 + i];
      /* On the grid -127..127: an int8_t is at most 127, so only -128 is off it. */
      CHECK(q >= -127, "round %d: byte %d", round, q);
      CHECK(d[i] == (float)q * scale, "round %d: decoded %a", round, d[i]);
      CHECK(r[i] == v - d[i], "round %d: residual", round);
      /* Nearest: no other byte decodes closer. */
      CHECK(fabsf(v - d[i]) <= scale * 0.5f * 1.0001f + 1e-45f, "round %d: %a -> %a not nearest",
            round, v, d[i]);
    }
  }
  float y[3] = {1.0f, INFINITY, -2.0f}, ry[3] = {0, 0, 0}, dy[3];
  uint8_t oy[7];
  pst_int8_encode(y, ry, 3, oy);
  pst_int8_decode(oy, 7, dy, 3);
  CHECK(isnan(dy[0]) && isnan(dy[2]), "a non-finite value: the chunk decodes to NaNs");
  CHECK(ry[0] == 1.0f && ry[1] == 0 && ry[2] == -2.0f, "a non-finite chunk's residuals");
  CHECK(pst_int8_decode(oy, 6, dy, 3) == -EINVAL && pst_int8_decode(oy, 8, dy, 3) == -EINVAL &&
            pst_int8_decode(oy, 4, dy, 0) == -EINVAL, "bad lengths");
}

/* Delta pulls: the name is a pull's only, and pst_int8_add adds exactly what
 * pst_int8_decode gives (the ps and the worker each keep the sum, and must agree bit for bit);
 * a scale that is not finite, or a wrong length, changes nothing. Adding a change chunk by
 * chunk keeps the copy within half a step of int8 of the target, however many rounds. */
static void check_delta(void) {
  pst_enc e;
  double f;
  CHECK(pst_enc_parse("delta", &e) == 0 && e == PST_ENC_DELTA, "delta as a pull");
  CHECK(pst_enc_parse_push("delta", &e, &f) == -EINVAL, "delta as a push");
  CHECK(strstr(pst_enc_choices(), "delta") && !strstr(pst_enc_push_choices(), "delta"),
        "choices");
  enum { N = 1000 };
  static float target[N], held[N], copy[N], d[N], dec[N];
  static uint8_t out[N + 4];
  uint32_t rng = 7;
  for (int round = 0; round < 50; round++) {
    float worst = 0, step = 0;
    for (int i = 0; i < N; i++) {
      rng = rng * 1664525u + 1013904223u;
      target[i] += ((float)(rng >> 8) / 16777216.0f - 0.5f) * 1e-3f * (float)(1 + i % 7);
      d[i] = target[i] - held[i];
    }
    pst_int8_encode(d, NULL, N, out);
    CHECK(pst_int8_decode(out, N + 4, dec, N) == 0, "round %d: decode", round);
    memcpy(copy, held, sizeof copy);
    CHECK(pst_int8_add(out, N + 4, held, N) == 0, "round %d: add", round);
    memcpy(&step, out, 4);
    for (int i = 0; i < N; i++) {
      CHECK(held[i] == copy[i] + dec[i], "round %d: value %d is not copy + decoded", round, i);
      worst = fmaxf(worst, fabsf(target[i] - held[i]));
    }
    CHECK(worst <= step * 0.5f * 1.0001f + 1e-30f, "round %d: %g off, a step is %g", round,
          (double)worst, (double)step);
  }
  /* The ps's fused pass, on every path this CPU has and at lengths that leave tails, gives
   * the bytes and the copy of pst_int8_encode and pst_int8_add: with changes of every size,
   * subnormal ones (whose grid, 127 / max, overflows) and none at all among them. */
  static float held2[N], held3[N], start[N];
  static uint8_t out2[N + 4], out3[N + 4];
  const size_t lens[] = {1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 999, N};
  for (int isa = PST_ISA_SCALAR; isa <= PST_ISA_AVX512; isa++) {
    if (pst_codec_use((pst_isa)isa) < 0) continue;
    for (int round = 0; round < 24; round++) {
      size_t n = lens[round % (sizeof lens / sizeof *lens)];
      float mag = round % 3 == 0 ? 3.0f : round % 3 == 1 ? 1e-5f : 1e-38f;
      for (size_t i = 0; i < n; i++) {
        rng = rng * 1664525u + 1013904223u;
        target[i] = held[i] + (rng % 5 == 0 ? 0.0f : ((float)(rng >> 8) / 16777216.0f - 0.5f) * mag);
        d[i] = target[i] - held[i];
      }
      memcpy(held2, held, sizeof held2);
      memcpy(start, held, sizeof start);
      pst_int8_encode(d, NULL, n, out);
      CHECK(pst_int8_add(out, n + 4, held, n) == 0, "isa %d round %d: add", isa, round);
      CHECK(pst_int8_delta(target, held2, n, out2) == 0, "isa %d round %d: delta", isa, round);
      CHECK(memcmp(out, out2, n + 4) == 0, "isa %d n %zu: the fused pass's bytes differ", isa, n);
      CHECK(memcmp(held, held2, n * sizeof *held) == 0, "isa %d n %zu: the copies differ", isa, n);
      /* And the scalar path from the same start gives the same bytes and copy. */
      pst_codec_use(PST_ISA_SCALAR);
      memcpy(held3, start, n * sizeof *held3);
      CHECK(pst_int8_delta(target, held3, n, out3) == 0, "isa %d round %d: scalar", isa, round);
      CHECK(memcmp(out3, out2, n + 4) == 0 && memcmp(held3, held2, n * sizeof *held3) == 0,
            "isa %d n %zu: the path differs from the scalar one", isa, n);
      pst_codec_use((pst_isa)isa);
      for (size_t i = 0; i < n; i++)
        CHECK(isfinite(held[i]), "isa %d n %zu: value %zu not finite", isa, n, i);
    }
  }
  pst_codec_use(PST_ISA_BEST);
  target[5] = INFINITY;
  memcpy(held2, held, sizeof held2);
  CHECK(pst_int8_delta(target, held2, N, out2) == -EINVAL, "an infinite change");
  CHECK(memcmp(held, held2, sizeof held) == 0, "a refused change changed the copy");
  CHECK(pst_int8_delta(target, held2, 0, out2) == -EINVAL, "no values");
  target[5] = 0;
  memcpy(copy, held, sizeof copy);
  float bad = NAN;
  memcpy(out, &bad, 4);
  CHECK(pst_int8_add(out, N + 4, held, N) == -EINVAL, "a NaN scale");
  bad = INFINITY;
  memcpy(out, &bad, 4);
  CHECK(pst_int8_add(out, N + 4, held, N) == -EINVAL, "an infinite scale");
  CHECK(pst_int8_add(out, N + 3, held, N) == -EINVAL && pst_int8_add(out, 4, held, 0) == -EINVAL,
        "bad lengths");
  CHECK(memcmp(copy, held, sizeof copy) == 0, "a refused chunk changed the weights");
}

/* The scalar reference (quickselect) and the vector path (radix selection, blocks of eight)
 * choose the same pairs and leave the same residuals, bit for bit: sizes from 1 to an mlp
 * layer's, no residual and one, many ties, every value equal, zeros, infinities and NaNs,
 * and k from 1 to n / 2. */
static void check_topk_paths(void) {
  if (pst_codec_use(PST_ISA_AVX2) < 0) {
    printf("codec_test: no AVX2: top-k's vector path not tested\n");
    return;
  }
  enum { N = 200960 };
  float *x = malloc(N * sizeof *x), *r0 = malloc(N * sizeof *r0), *r1 = malloc(N * sizeof *r1);
  uint32_t *scratch = malloc(N * sizeof *scratch);
  uint8_t *o0 = malloc(8 * (size_t)N), *o1 = malloc(8 * (size_t)N);
  if (!x || !r0 || !r1 || !scratch || !o0 || !o1) {
    CHECK(0, "top-k paths: out of memory");
    return;
  }
  for (int round = 0; round < 60; round++) {
    size_t n = round < 40 ? 1 + rnd() % 300 : round < 56 ? 1 + rnd() % 40000 : N;
    int kind = round % 6;
    for (size_t i = 0; i < n; i++) {
      /* A sum of uniforms, roughly normal, at a scale that varies by round. */
      float g = (float)((int)(rnd() % 2001) + (int)(rnd() % 2001) - 2000) * 1e-3f;
      x[i] = kind == 0 ? g * 1e-3f
             : kind == 1 ? (float)((int)(rnd() % 3) - 1)     /* many ties */
             : kind == 2 ? 0.25f                             /* all equal */
             : kind == 3 ? (rnd() % 4 ? 0.0f : g)            /* mostly zero */
                         : g;
      r0[i] = r1[i] = kind == 4 ? 0.0f : (float)((int)(rnd() % 101) - 50) * 1e-5f;
    }
    if (kind == 5 && n > 3) x[rnd() % n] = NAN, x[rnd() % n] = INFINITY, x[rnd() % n] = -INFINITY;
    double fr[] = {0.001, 0.01, 0.1, 0.5};
    size_t k = round % 7 == 0 ? 1 : pst_topk_k(fr[round % 4], n);
    int feedback = round % 5 != 0;
    pst_codec_use(PST_ISA_SCALAR);
    size_t b0 = pst_topk_encode(x, feedback ? r0 : NULL, n, k, scratch, o0);
    pst_codec_use(PST_ISA_BEST);
    size_t b1 = pst_topk_encode(x, feedback ? r1 : NULL, n, k, scratch, o1);
    CHECK(b0 == b1 && b0 == 8 * k, "round %d (n %zu, k %zu): %zu and %zu bytes", round, n, k, b0, b1);
    CHECK(memcmp(o0, o1, b0 < b1 ? b0 : b1) == 0, "round %d (n %zu, k %zu): the pairs differ", round, n, k);
    CHECK(memcmp(r0, r1, n * sizeof *r0) == 0, "round %d (n %zu, k %zu): the residuals differ", round, n, k);
  }
  free(x), free(r0), free(r1), free(scratch), free(o0), free(o1);
}

/* Momentum correction over several steps against its definition: the velocity is m x u + x,
 * the pairs are top-k's of velocity + residual, and the velocity is zero where a value went
 * and unchanged elsewhere. */
static void check_topk_momentum(void) {
  enum { N = 5000 };
  static float x[N], u[N], r[N], ru[N], rr[N], d[N];
  static uint32_t scratch[N];
  static uint8_t out[8 * N], want[8 * N];
  const float m = 0.9f;
  for (int step = 0; step < 6; step++) {
    for (size_t i = 0; i < N; i++) x[i] = (float)((int)(rnd() % 20001) - 10000) * 1e-4f;
    for (size_t i = 0; i < N; i++) ru[i] = m * ru[i] + x[i];
    size_t k = pst_topk_k(0.01, N);
    size_t wb = pst_topk_encode(ru, rr, N, k, scratch, want);
    size_t b = pst_topk_encode_momentum(x, u, r, N, k, m, scratch, out);
    CHECK(b == wb && memcmp(out, want, b) == 0, "momentum step %d: not top-k of the velocity", step);
    CHECK(memcmp(r, rr, sizeof r) == 0, "momentum step %d: residuals", step);
    CHECK(pst_topk_decode(out, b, d, N) == 0, "momentum step %d: pairs refused", step);
    for (size_t i = 0; i < N; i++) {
      int sent = d[i] != 0;
      CHECK(sent ? u[i] == 0 : u[i] == ru[i], "momentum step %d: velocity at %zu", step, i);
      if (sent) ru[i] = 0;
    }
  }
}

/* Top-k by tensor against its definition: each sparse run is pst_topk_encode (with
 * momentum: _momentum) of that run alone, its indices moved to the chunk's; dense values go
 * whole each step and keep their velocity, state values go whole without one; the pairs
 * decode (they ascend, within the chunk's cap). A chunk whose runs would send more pairs
 * than it may carry is one run. */
static void check_topk_tensors(void) {
  enum { N = 3000 };
  static const size_t run_len[] = {1200, 40, 1700, 20, 40};
  static const uint8_t run_kind[] = {PST_TOPK_SPARSE, PST_TOPK_DENSE, PST_TOPK_SPARSE,
                                     PST_TOPK_STATE, PST_TOPK_DENSE};
  static float x[N], u[N], r[N], ru[N], rr[N], d[N];
  static uint32_t scratch[N];
  static uint8_t kind[N], out[8 * N], want[8 * N];
  const float m = 0.9f;
  for (size_t a = 0, j = 0; j < 5; a += run_len[j++]) memset(kind + a, run_kind[j], run_len[j]);
  for (int mom = 0; mom < 2; mom++) {
    memset(u, 0, sizeof u), memset(r, 0, sizeof r), memset(ru, 0, sizeof ru), memset(rr, 0, sizeof rr);
    for (int step = 0; step < 5; step++) {
      for (size_t i = 0; i < N; i++) x[i] = (float)((int)(rnd() % 20001) - 10000) * 1e-4f;
      size_t wb = 0;
      for (size_t a = 0, j = 0; j < 5; a += run_len[j++]) {
        size_t len = run_len[j];
        if (run_kind[j] == PST_TOPK_SPARSE) {
          size_t k = pst_topk_k(0.01, len);
          size_t got = mom ? pst_topk_encode_momentum(x + a, ru + a, rr + a, len, k, m, scratch, want + wb)
                           : pst_topk_encode(x + a, rr + a, len, k, scratch, want + wb);
          for (size_t p = wb; p < wb + got; p += 8) {
            uint32_t idx;
            memcpy(&idx, want + p, 4);
            idx += (uint32_t)a;
            memcpy(want + p, &idx, 4);
          }
          wb += got;
          continue;
        }
        for (size_t i = a; i < a + len; i++) {
          float g = x[i];
          if (mom && run_kind[j] == PST_TOPK_DENSE) g = ru[i] = m * ru[i] + x[i];
          float v = g + rr[i];
          rr[i] = 0;
          uint32_t idx = (uint32_t)i;
          memcpy(want + wb, &idx, 4);
          memcpy(want + wb + 4, &v, 4);
          wb += 8;
        }
      }
      size_t b = pst_topk_encode_tensors(x, mom ? u : NULL, r, kind, N, 0.01, m, scratch, out);
      CHECK(b == wb && memcmp(out, want, b) == 0, "tensors (momentum %d) step %d: %zu bytes, not "
            "the runs' %zu", mom, step, b, wb);
      CHECK(memcmp(r, rr, sizeof r) == 0, "tensors (momentum %d) step %d: residuals", mom, step);
      CHECK(!mom || memcmp(u, ru, sizeof u) == 0, "tensors step %d: velocities", step);
      CHECK(pst_topk_decode(out, b, d, N) == 0, "tensors (momentum %d) step %d: pairs refused", mom,
            step);
    }
  }
  /* Ten values, all dense: ten pairs, more than the 5 a chunk of 10 carries. */
  memset(kind, PST_TOPK_DENSE, 10);
  memset(r, 0, sizeof r), memset(rr, 0, sizeof rr);
  size_t wb = pst_topk_encode(x, rr, 10, pst_topk_k(0.2, 10), scratch, want);
  size_t b = pst_topk_encode_tensors(x, NULL, r, kind, 10, 0.2, 0, scratch, out);
  CHECK(b == wb && b == 16 && memcmp(out, want, b) == 0 && memcmp(r, rr, 10 * sizeof *r) == 0,
        "tensors that do not fit: %zu bytes, not one run's %zu", b, wb);
}

/* Sparse deltas: the pairs make the copy equal to the target bit for bit, with as many pairs
 * as values changed (none for none; -0 against 0 counts), too many changes or too short a
 * chunk are refused with nothing written, and pairs a lying ps could send are refused with
 * the weights untouched. */
static void check_sparse(void) {
  enum { N = 4000 };
  static float target[N], held[N], w[N], keep[N];
  static uint8_t out[N + 8];
  for (int round = 0; round < 30; round++) {
    size_t n = round < 3 ? (size_t)round + 5 : 8 + rnd() % (N - 8);
    for (size_t i = 0; i < n; i++) target[i] = held[i] = w[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
    size_t change = round % 5 == 0 ? 0 : rnd() % (n / PST_SPARSE_SHARE + 1);
    if (round == 4) change = n / PST_SPARSE_SHARE + 1; /* one too many */
    for (size_t c = 0; c < change; c++) {
      size_t i = rnd() % n;
      target[i] = held[i] == 0.0f ? -0.0f : held[i] * 1.5f + 1e-3f;
    }
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&target[i], &held[i], 4) != 0;
    memcpy(keep, held, n * sizeof *held);
    int pairs = pst_sparse_delta(target, held, n, out);
    if (n < PST_SPARSE_SHARE || differ > n / PST_SPARSE_SHARE) {
      CHECK(pairs == -E2BIG, "round %d (n %zu, %zu changed): %d, not -E2BIG", round, n, differ, pairs);
      CHECK(memcmp(keep, held, n * sizeof *held) == 0, "round %d: a refused delta changed the copy", round);
      continue;
    }
    CHECK(pairs == (int)differ, "round %d: %d pairs for %zu changes", round, pairs, differ);
    CHECK(memcmp(held, target, n * sizeof *held) == 0, "round %d: the copy is not the target", round);
    CHECK(pst_sparse_apply(out, 8 * (size_t)pairs, w, n) == 0, "round %d: own pairs refused", round);
    CHECK(memcmp(w, target, n * sizeof *w) == 0, "round %d: the weights are not the target", round);
  }
  /* Lies: a length that is no number of pairs, more pairs than an eighth, an index out of
   * range or not ascending, a value that is not finite; and pairs for a chunk under 8. */
  float ws[16] = {0}, before[16];
  memcpy(before, ws, sizeof ws);
  uint8_t p[24];
  uint32_t idx[3] = {1, 5, 9};
  float val[3] = {1.0f, 2.0f, 3.0f};
  for (int i = 0; i < 3; i++) memcpy(p + 8 * i, &idx[i], 4), memcpy(p + 8 * i + 4, &val[i], 4);
  CHECK(pst_sparse_apply(p, 16, ws, 16) == 0 && ws[1] == 1.0f && ws[5] == 2.0f, "two good pairs");
  memcpy(ws, before, sizeof ws);
  CHECK(pst_sparse_apply(p, 12, ws, 16) == -EINVAL, "12 bytes");
  CHECK(pst_sparse_apply(p, 24, ws, 16) == -EINVAL, "3 pairs for 16 values");
  CHECK(pst_sparse_apply(p, 8, ws, 7) == -EINVAL, "a pair for 7 values");
  CHECK(pst_sparse_apply(p, 0, ws, 7) == 0, "no pairs");
  uint32_t big = 16, same = 1;
  float nan = NAN;
  memcpy(p + 8, &big, 4);
  CHECK(pst_sparse_apply(p, 16, ws, 16) == -EINVAL, "an index out of range");
  memcpy(p + 8, &same, 4);
  CHECK(pst_sparse_apply(p, 16, ws, 16) == -EINVAL, "a repeated index");
  memcpy(p + 8, &idx[1], 4);
  memcpy(p + 12, &nan, 4);
  CHECK(pst_sparse_apply(p, 16, ws, 16) == -EINVAL, "a NaN");
  CHECK(memcmp(ws, before, sizeof ws) == 0, "refused pairs changed the weights");
}

int main(void) {
  check_delta();
  check_int8();
  check_topk();
  check_topk_paths();
  check_topk_momentum();
  check_topk_tensors();
  check_sparse();
  check_scalar();
  for (int isa = PST_ISA_SCALAR; isa <= PST_ISA_AVX512; isa++)
    if (pst_codec_use((pst_isa)isa) == 0) check_feedback((pst_isa)isa);
  check_paths();
  printf("codec_test: best path %d; %s\n", (int)pst_codec_isa(), failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
