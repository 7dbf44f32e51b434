/* The dropout mask as a pure function of (seed, element index), shared by the CPU backend
 * (C) and the CUDA backend (device code), so that both drop exactly the same cells and the
 * backward pass recomputes the mask instead of storing it. Header-only. */
#ifndef PSTRAIN_KERNELS_DROPOUT_MASK_H
#define PSTRAIN_KERNELS_DROPOUT_MASK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define PST_HOST_DEVICE __host__ __device__
#else
#define PST_HOST_DEVICE
#endif

/* The rate as a threshold on 24-bit uniforms: a cell is kept when its draw is >= this.
 * 24 bits are what a float holds exactly, so the threshold is the same on both sides. */
static inline PST_HOST_DEVICE uint32_t pst_dropout_threshold(float rate) {
  double t = (double)rate * 16777216.0;
  return t <= 0.0 ? 0u : t >= 16777216.0 ? 16777216u : (uint32_t)t;
}

/* 1 when element i is kept: splitmix64's finaliser over seed + i (a counter-based hash, so
 * any element is drawn independently of the others and of the thread that computes it). */
static inline PST_HOST_DEVICE int pst_dropout_keep(uint64_t seed, size_t i, uint32_t threshold) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * ((uint64_t)i + 1u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (uint32_t)(z >> 40) >= threshold;
}

#endif
