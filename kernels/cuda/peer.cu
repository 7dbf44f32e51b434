/* The pipeline's hand-off between two CUDA backends (kernels/backend.h, copy_from): a
 * stage's cut tensors (activations forward, their gradients backward) copied from the
 * sending stage's memory into the receiving stage's own buffers, on the receiving
 * backend's stream. NOT RUN ON A GPU: no GPU was at hand when this was written; it is
 * written to the documented behaviour of each call below, and `pstrain gpu-check` runs
 * kernels/pipeline's stages_parity_test and a 2-stage job on it (issue 40).
 *
 * Three ways, by where the two backends' memory is:
 *  - the same GPU (two virtual devices cuda:N.0 and cuda:N.1, or two stages on cuda:N):
 *    one process has one context per device (the runtime's primary context), so both
 *    instances' pointers are valid in it: cudaMemcpyAsync device to device on the
 *    receiver's stream;
 *  - two GPUs where cudaDeviceCanAccessPeer says the receiver may read the sender's
 *    memory: peer access enabled once per pair (from the receiver's device to the
 *    sender's), then cudaMemcpyPeerAsync on the receiver's stream;
 *  - two GPUs without peer access (or where enabling it failed): through a pinned host
 *    buffer of the receiver's, device to host from the sender's device, then host to
 *    device on the receiver's stream, waited for before the buffer serves again.
 * A host-memory sender (a CPU stage) is a host to device copy; the pipeline does not mix
 * CPU and CUDA stages today (kernels/pipeline/pipe_setup.c refuses it), so that path only
 * completes the op's contract.
 *
 * The documented limits relied on (CUDA Runtime API reference, "Memory Management" and
 * "Peer Device Memory Access"):
 *  - cudaMemcpyAsync: any size_t count; asynchronous with respect to the host; ordered on
 *    its stream. Device to device between two allocations of one device needs no peer
 *    access. From pinned host memory it is truly asynchronous, so the host buffer must stay
 *    unchanged until the stream has passed the copy (we synchronize the stream before the
 *    staging buffer is reused).
 *  - cudaMemcpy (device to host): returns once the copy is complete for pinned and pageable
 *    destinations; it runs on the legacy default stream of the current device, which does
 *    not wait for our streams (made with cudaStreamNonBlocking), so the sender's later work
 *    is not waited for, and the sender has synchronized before handing off, so the source
 *    is complete.
 *  - cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream): any size_t count;
 *    asynchronous with respect to the host and to work in other streams and on other
 *    devices; errors cudaErrorInvalidValue, cudaErrorInvalidDevice; may return an error of
 *    an earlier asynchronous launch. It does not itself need peer access (the driver
 *    stages otherwise); we call it only where access is enabled, so the copy is direct.
 *  - cudaDeviceCanAccessPeer(&can, device, peerDevice): 1 when `device` may access
 *    `peerDevice`'s memory directly; error cudaErrorInvalidDevice for a bad index.
 *  - cudaDeviceEnablePeerAccess(peerDevice, flags): from the current device to peerDevice,
 *    one way only (unidirectional); flags must be 0; cudaErrorPeerAccessAlreadyEnabled
 *    when it is already on (not a failure: cleared with cudaGetLastError), and
 *    cudaErrorInvalidDevice, cudaErrorInvalidValue, cudaErrorPeerAccessUnsupported (or a
 *    too-many-peers error: a device has a system-wide limit of 8 peer connections)
 *    otherwise; any such failure makes us fall back to the staged copy.
 *  - cudaHostAlloc(&p, size, cudaHostAllocPortable): page-locked host memory that every
 *    context treats as pinned (the staging buffer is written from the sender's device and
 *    read by the receiver's); limited by what the OS lets be locked; freed by cudaFreeHost.
 *  - Which way is taken can be forced ($PSTRAIN_CUDA_COPY=peer or staged, read when the
 *    backend is made), so that one GPU checks all three: stages_parity_test runs its GPU
 *    cases once per way, which is gpu-check's case for each of the limits above.
 *  - cudaSetDevice: the current device is per host thread; every path sets it back to the
 *    receiver's device before it returns. */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

/* The peer state of the receiver c towards device d: 1 direct, -1 staged; decided once per
 * pair (devices past the table are decided each time: cheap, and rare). */
static int peer_state(pst_cuda *c, int d) {
  if (d >= 0 && d < PST_CUDA_MAX_PEERS && c->peer[d] != 0) return c->peer[d];
  int can = 0, state = -1;
  cudaError_t e = cudaDeviceCanAccessPeer(&can, c->device, d);
  if (e == cudaSuccess && can) {
    /* From c's device (current) to d's memory: the direction the receiver reads. */
    e = cudaDeviceEnablePeerAccess(d, 0);
    if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) state = 1;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: leave no error for the next check */
    pst_cuda_log(4, "%s: no peer access to cuda:%d (%s): copies go through pinned host memory",
                 c->name, d, cudaGetErrorString(e));
  } else if (state < 0) {
    pst_cuda_log(6, "%s: cuda:%d cannot be read directly: copies go through pinned host memory",
                 c->name, d);
  }
  if (d >= 0 && d < PST_CUDA_MAX_PEERS) c->peer[d] = (signed char)state;
  return state;
}

/* The staged copy: src on device `from_dev` to the pinned buffer, then to dst on c's
 * stream, waited for so that the buffer may serve the next copy. */
static int staged_copy(pst_cuda *c, void *dst, int from_dev, const void *src, size_t bytes) {
  if (c->stage_bytes < bytes) {
    /* The old buffer is idle: every staged copy waits for its stream before returning. */
    void *old = c->stage;
    c->stage = NULL;
    c->stage_bytes = 0;
    if (old) CUDA_CHECK(cudaFreeHost(old));
    CUDA_CHECK(cudaHostAlloc(&c->stage, bytes, cudaHostAllocPortable));
    c->stage_bytes = bytes;
  }
  CUDA_CHECK(cudaSetDevice(from_dev));
  cudaError_t e = cudaMemcpy(c->stage, src, bytes, cudaMemcpyDeviceToHost);
  (void)cudaSetDevice(c->device);
  CUDA_CHECK(e);
  CUDA_CHECK(cudaMemcpyAsync(dst, c->stage, bytes, cudaMemcpyHostToDevice, c->stream));
  CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return 0;
}

int pst_cuda_copy_from(pst_backend *b, void *dst, pst_backend *from, const void *src,
                       size_t bytes) {
  pst_cuda *c = pst_cuda_of(b);
  if (bytes == 0) return 0;
  PST_CUDA_REQUIRE(dst && src && from, "%s: copy_from with a NULL pointer", c->name);
  PST_CUDA_ENTER(c);
  if (from->host_memory) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return 0;
  }
  /* Another instance of this library's backend: the only device memory it can read. */
  PST_CUDA_REQUIRE(from->copy_from == pst_cuda_copy_from,
                   "%s: copy_from %s: not a CUDA backend's memory", c->name, from->name);
  int d = pst_cuda_of(from)->device;
  /* Forced ways ($PSTRAIN_CUDA_COPY, tests): both are valid for one device as well, the
   * peer copy needing no peer access (the driver picks the route). */
  if (c->copy_mode == 1) {
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, c->device, src, d, bytes, c->stream));
    return 0;
  }
  if (c->copy_mode == 2) return staged_copy(c, dst, d, src, bytes);
  if (d == c->device) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return 0;
  }
  if (peer_state(c, d) > 0) {
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, c->device, src, d, bytes, c->stream));
    return 0;
  }
  return staged_copy(c, dst, d, src, bytes);
}
