/* Runs CUDA kernels on the CPU, for the machines without a GPU (test use only; C++20).
 *
 * The device code of the plain kernels (reduce.cuh, norm_kernels.cuh, pool_kernels.cuh) is
 * ordinary C++ once CUDA's keywords are gone; this header takes them away and provides the
 * built-in variables. pst_emulate(grid, block, barriers, call) runs `call` (which calls the
 * kernel function directly) once per thread of the grid, one block at a time: with
 * `barriers`, each thread index on a std::thread of its own that runs it for every block
 * in turn, __syncthreads() a std::barrier and __shared__ arrays shared by the block's
 * threads (a function-local static); without, the threads one after the other. Warp-level
 * intrinsics are not emulated; the kernels run here use none.
 *
 * What this shows: the indexing, the grids and the barriers of the kernels give the CPU
 * backend's results. What it cannot show: anything of the real device (its memory model
 * beyond the barriers, its math library's last bits, launch limits, speed). */
#ifndef PSTRAIN_KERNELS_CUDA_EMULATE_H
#define PSTRAIN_KERNELS_CUDA_EMULATE_H

#ifdef __CUDACC__
#error "emulate.h is for host compilers: nvcc has the real thing"
#endif

#include <algorithm>
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<> *pst_emulate_barrier;

inline void __syncthreads() { pst_emulate_barrier->arrive_and_wait(); }

using std::max;
using std::min;

template <typename F>
void pst_emulate(dim3 grid, dim3 block, bool barriers, F call) {
  gridDim = grid;
  blockDim = block;
  const unsigned threads = block.x * block.y * block.z;
  /* Thread t of every block, one block after the other. */
  auto run = [&](unsigned t, bool sync_blocks) {
    for (unsigned bz = 0; bz < grid.z; bz++)
      for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
          blockIdx = dim3(bx, by, bz);
          threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
          call();
          /* The block is over for every thread before the next one uses __shared__. */
          if (sync_blocks) __syncthreads();
        }
  };
  if (!barriers) {
    for (unsigned t = 0; t < threads; t++) run(t, false);
    return;
  }
  std::barrier<> bar((std::ptrdiff_t)threads);
  pst_emulate_barrier = &bar;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; t++) pool.emplace_back(run, t, true);
  for (auto &th : pool) th.join();
  pst_emulate_barrier = nullptr;
}

#endif
