/* kernels_cuda_int.cuh - what the files of the CUDA backend share (private
 * to them): the backend's state, the launch geometry and the error checks.
 *
 *   kernels_cuda.cu      memory and copies, cuBLAS GEMM, the dense layers'
 *                        and the optimizers' kernels, the ops table, create
 *   kernels_cuda_cnn.cu  the CNN ops: im2col/col2im, pooling, channel sums,
 *                        batch normalization (and their scratch) */
#ifndef CTRAIN_KERNELS_CUDA_INT_CUH
#define CTRAIN_KERNELS_CUDA_INT_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "worker/model/kernels.h"
#include "worker/model/kernels_row.h"
}

namespace kcuda {

struct cuda_impl {
  cudaStream_t compute;
  cudaStream_t copy;
  cublasHandle_t blas;
  cudaEvent_t copied[KERN_SLOTS];   /* the copy into slot's dst is done */
  cudaEvent_t released[KERN_SLOTS]; /* compute is done reading slot's dst */
  void *scratch;                    /* the channel sums' partials (scratch_for) */
  size_t scratch_bytes;
};

const int THREADS = 256;

inline cuda_impl *impl(kern_t *k) {
  return static_cast<cuda_impl *>(k->impl);
}

/* CTRAIN_E_CUDA, with the call that failed and CUDA's or cuBLAS's words for
 * it in k->err (kernels_cuda.cu). */
CTRAIN_NODISCARD ctrain_err fail_cuda(kern_t *k, const char *call, cudaError_t e);
CTRAIN_NODISCARD ctrain_err fail_blas(kern_t *k, const char *call, cublasStatus_t s);

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return fail_cuda(k, #call, e_);                                                              \
  } while (0)

/* Every op first makes its device current: one thread drives the replicas
 * of several GPUs (replicas.h), and streams, handles and memory belong to
 * the device they were made on. Cheap when it already is. */
#define ON_DEVICE() CK(cudaSetDevice(k->device))

/* After a launch: a bad configuration shows here, faults at the next sync. */
#define LAUNCHED(name)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = cudaGetLastError();                                                           \
    if (e_ != cudaSuccess)                                                                         \
      return fail_cuda(k, name "<<<>>>", e_);                                                      \
  } while (0)

inline unsigned blocks_for(size_t n) {
  size_t b = (n + THREADS - 1) / THREADS;
  if (b > 65535u * 8u)
    b = 65535u * 8u; /* grid-stride loops cover the rest */
  return (unsigned)(b ? b : 1);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)gridDim.x * blockDim.x)

/* The CNN ops (kernels_cuda_cnn.cu), the ops table's entries. */
KERN_CNN_OPS_DECLARE(cu);

} // namespace kcuda

#endif
