/* kernels_cuda.cu - the CUDA backend of kernels.h: cuBLAS for GEMMs, small
 * elementwise/row kernels for the rest, a compute stream and a copy stream.
 * The CNN ops are kernels_cuda_cnn.cu's; what both share is
 * worker/model/kernels_cuda_int.cuh.
 *
 * fp32 throughout; cuBLAS runs with CUBLAS_DEFAULT_MATH and TF32 is never
 * enabled, so results stay within fp32 rounding of the CPU reference (the
 * tolerances are in tests/unit/test_kernels.c). Every CUDA/cuBLAS failure is
 * CTRAIN_E_CUDA with the call named in k->err. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/kernels_cuda_int.cuh"

namespace kcuda {

ctrain_err fail_cuda(kern_t *k, const char *call, cudaError_t e) {
  snprintf(k->err, sizeof(k->err), "CUDA device %d: %s: %s (%s)", k->device, call,
           cudaGetErrorName(e), cudaGetErrorString(e));
  return CTRAIN_E_CUDA;
}

ctrain_err fail_blas(kern_t *k, const char *call, cublasStatus_t s) {
  snprintf(k->err, sizeof(k->err), "CUDA device %d: %s: %s (%s)", k->device, call,
           cublasGetStatusName(s), cublasGetStatusString(s));
  return CTRAIN_E_CUDA;
}

__global__ void bias_fill_kernel(float *y, const float *b, size_t total, int n) {
  GRID_STRIDE(i, total) {
    y[i] = b[i % (size_t)n];
  }
}

/* One thread per column: reads are coalesced across the warp (adjacent
 * columns), and the row order is the CPU's. */
__global__ void bias_grad_kernel(float *gb, const float *d, int rows, int n) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n)
    return;
  float s = 0;
  for (int r = 0; r < rows; r++)
    s += d[(size_t)r * (size_t)n + (size_t)c];
  gb[c] = s;
}

__global__ void act_fwd_kernel(int a, float *y, size_t n) {
  GRID_STRIDE(i, n) {
    float v = y[i];
    if (a == MODEL_RELU)
      v = v > 0 ? v : 0;
    else if (a == MODEL_TANH)
      v = tanhf(v);
    else if (a == MODEL_SIGMOID)
      v = 1.0f / (1.0f + expf(-v));
    y[i] = v;
  }
}

__global__ void act_bwd_kernel(int a, const float *y, float *dy, size_t n) {
  GRID_STRIDE(i, n) {
    float v = y[i];
    if (a == MODEL_RELU)
      dy[i] = v > 0 ? dy[i] : 0;
    else if (a == MODEL_TANH)
      dy[i] *= 1.0f - v * v;
    else if (a == MODEL_SIGMOID)
      dy[i] *= v * (1.0f - v);
  }
}

__global__ void mul_kernel(float *y, const float *x, const float *mask, size_t n) {
  GRID_STRIDE(i, n) {
    y[i] = x[i] * mask[i];
  }
}

/* One thread per row (C is the class count: small). stats must be zero. */
__global__ void softmax_ce_kernel(const float *logits, const int32_t *labels, int rows, int C,
                                  float *probs, double *stats) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows)
    return;
  double loss;
  int hit;
  if (!kern_softmax_ce_row(logits + (size_t)r * (size_t)C, C, labels[r],
                           probs + (size_t)r * (size_t)C, &loss, &hit))
    return;
  atomicAdd(&stats[0], loss);
  if (hit)
    atomicAdd(&stats[1], 1.0);
}

__global__ void ce_grad_kernel(const float *probs, const int32_t *labels, int C, float scale,
                               float *d, size_t total) {
  GRID_STRIDE(i, total) {
    size_t r = i / (size_t)C;
    int c = (int)(i % (size_t)C);
    float g = probs[i] * scale;
    if (labels[r] == c)
      g -= scale;
    d[i] = g;
  }
}

__global__ void sgd_kernel(float *w, const float *g, size_t n, float lr) {
  GRID_STRIDE(i, n) {
    w[i] -= lr * g[i];
  }
}

__global__ void sgd_momentum_kernel(float *w, const float *g, float *v, size_t n, float lr,
                                    float mom, int nesterov) {
  GRID_STRIDE(i, n) {
    float vi = mom * v[i] - lr * g[i];
    v[i] = vi;
    w[i] += nesterov ? mom * vi - lr * g[i] : vi;
  }
}

__global__ void adam_kernel(float *w, const float *g, float *m, float *v, size_t n, float alpha,
                            float b1, float b2, float eps) {
  GRID_STRIDE(i, n) {
    float gi = g[i];
    float mi = m[i] + (gi - m[i]) * (1.0f - b1);
    float vi = v[i] + (gi * gi - v[i]) * (1.0f - b2);
    m[i] = mi;
    v[i] = vi;
    w[i] -= alpha * mi / (sqrtf(vi) + eps);
  }
}

static ctrain_err alloc_on(kern_t *k, void **p, size_t bytes, bool host) {
  *p = NULL;
  ON_DEVICE();
  bytes = bytes ? bytes : 1;
  CK(host ? cudaMallocHost(p, bytes) : cudaMalloc(p, bytes));
  return CTRAIN_OK;
}

static void free_on(kern_t *k, void *p, bool host) {
  cudaSetDevice(k->device);
  if (p)
    host ? cudaFreeHost(p) : cudaFree(p);
}

ctrain_err cu_alloc(kern_t *k, void **p, size_t bytes) {
  return alloc_on(k, p, bytes, false);
}
void cu_free(kern_t *k, void *p) {
  free_on(k, p, false);
}
ctrain_err cu_alloc_host(kern_t *k, void **p, size_t bytes) {
  return alloc_on(k, p, bytes, true);
}
void cu_free_host(kern_t *k, void *p) {
  free_on(k, p, true);
}

ctrain_err cu_h2d(kern_t *k, void *dst, const void *src, size_t bytes) {
  ON_DEVICE();
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_d2h(kern_t *k, void *dst, const void *src, size_t bytes) {
  ON_DEVICE();
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl(k)->compute));
  CK(cudaStreamSynchronize(impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_memset0(kern_t *k, void *dst, size_t bytes) {
  ON_DEVICE();
  CK(cudaMemsetAsync(dst, 0, bytes, impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_stage_wait(kern_t *k, int slot) {
  ON_DEVICE();
  CK(cudaEventSynchronize(impl(k)->copied[slot]));
  return CTRAIN_OK;
}

ctrain_err cu_stage(kern_t *k, int slot, void *dst, const void *src, size_t bytes) {
  ON_DEVICE();
  cuda_impl *c = impl(k);
  CK(cudaStreamWaitEvent(c->copy, c->released[slot], 0));
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy));
  CK(cudaEventRecord(c->copied[slot], c->copy));
  CK(cudaStreamWaitEvent(c->compute, c->copied[slot], 0));
  return CTRAIN_OK;
}

ctrain_err cu_release(kern_t *k, int slot) {
  ON_DEVICE();
  CK(cudaEventRecord(impl(k)->released[slot], impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_sync(kern_t *k) {
  ON_DEVICE();
  CK(cudaStreamSynchronize(impl(k)->compute));
  return CTRAIN_OK;
}

/* Row-major C = A B is column-major C^T = B^T A^T: swap the operands. */
ctrain_err cu_gemm(kern_t *k, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  ON_DEVICE();
  cublasStatus_t s =
      cublasSgemm(impl(k)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                  M, K, &alpha, B, ldb, A, lda, &beta, C, ldc);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail_blas(k, "cublasSgemm", s);
  return CTRAIN_OK;
}

ctrain_err cu_bias_fill(kern_t *k, float *y, const float *b, int rows, int n) {
  ON_DEVICE();
  size_t total = (size_t)rows * (size_t)n;
  bias_fill_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(y, b, total, n);
  LAUNCHED("bias_fill_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_bias_grad(kern_t *k, float *gb, const float *d, int rows, int n) {
  ON_DEVICE();
  bias_grad_kernel<<<blocks_for((size_t)n), THREADS, 0, impl(k)->compute>>>(gb, d, rows, n);
  LAUNCHED("bias_grad_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_act_fwd(kern_t *k, model_act a, float *y, size_t n) {
  ON_DEVICE();
  if (a != MODEL_RELU && a != MODEL_TANH && a != MODEL_SIGMOID)
    return CTRAIN_OK;
  act_fwd_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>((int)a, y, n);
  LAUNCHED("act_fwd_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_act_bwd(kern_t *k, model_act a, const float *y, float *dy, size_t n) {
  ON_DEVICE();
  if (a != MODEL_RELU && a != MODEL_TANH && a != MODEL_SIGMOID)
    return CTRAIN_OK;
  act_bwd_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>((int)a, y, dy, n);
  LAUNCHED("act_bwd_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_mul(kern_t *k, float *y, const float *x, const float *mask, size_t n) {
  ON_DEVICE();
  mul_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(y, x, mask, n);
  LAUNCHED("mul_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_copy(kern_t *k, float *dst, const float *src, size_t n) {
  ON_DEVICE();
  if (dst == src || n == 0)
    return CTRAIN_OK;
  CK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_softmax_ce(kern_t *k, const float *logits, const int32_t *labels, int rows, int C,
                         float *probs, double *stats) {
  ON_DEVICE();
  CK(cudaMemsetAsync(stats, 0, 2 * sizeof(double), impl(k)->compute));
  softmax_ce_kernel<<<blocks_for((size_t)rows), THREADS, 0, impl(k)->compute>>>(
      logits, labels, rows, C, probs, stats);
  LAUNCHED("softmax_ce_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_ce_grad(kern_t *k, const float *probs, const int32_t *labels, int rows, int C,
                      float scale, float *d) {
  ON_DEVICE();
  size_t total = (size_t)rows * (size_t)C;
  ce_grad_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(probs, labels, C, scale, d,
                                                                      total);
  LAUNCHED("ce_grad_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_sgd(kern_t *k, float *w, const float *g, float *v, size_t n, float lr, float mom,
                  int nesterov) {
  ON_DEVICE();
  if (!v) {
    sgd_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(w, g, n, lr);
    LAUNCHED("sgd_kernel");
    return CTRAIN_OK;
  }
  sgd_momentum_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(w, g, v, n, lr, mom,
                                                                       nesterov);
  LAUNCHED("sgd_momentum_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_adam(kern_t *k, float *w, const float *g, float *m, float *v, size_t n, float alpha,
                   float b1, float b2, float eps) {
  ON_DEVICE();
  adam_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(w, g, m, v, n, alpha, b1, b2, eps);
  LAUNCHED("adam_kernel");
  return CTRAIN_OK;
}

void cu_destroy(kern_t *k) {
  cuda_impl *c = impl(k);
  if (c) {
    cudaSetDevice(k->device);
    if (c->compute)
      cudaStreamSynchronize(c->compute);
    if (c->copy)
      cudaStreamSynchronize(c->copy);
    for (int i = 0; i < KERN_SLOTS; i++) {
      if (c->copied[i])
        cudaEventDestroy(c->copied[i]);
      if (c->released[i])
        cudaEventDestroy(c->released[i]);
    }
    if (c->scratch)
      cudaFree(c->scratch);
    if (c->blas)
      cublasDestroy(c->blas);
    if (c->compute)
      cudaStreamDestroy(c->compute);
    if (c->copy)
      cudaStreamDestroy(c->copy);
    free(c);
  }
  free(k);
}

const kern_ops cuda_ops = {
    "cuda",
    1,
    cu_alloc,
    cu_free,
    cu_alloc_host,
    cu_free_host,
    cu_h2d,
    cu_d2h,
    cu_memset0,
    cu_stage_wait,
    cu_stage,
    cu_release,
    cu_sync,
    cu_gemm,
    cu_bias_fill,
    cu_bias_grad,
    cu_act_fwd,
    cu_act_bwd,
    cu_mul,
    cu_copy,
    cu_softmax_ce,
    cu_ce_grad,
    cu_sgd,
    cu_adam,
    cu_destroy,
    /* The CNN layers' ops. An op left NULL here would make
     * dmodel_create refuse the layers that need it, naming the backend. */
    cu_im2col,
    cu_col2im,
    cu_pool_fwd,
    cu_pool_bwd,
    cu_chan_sums,
    cu_bn_fwd,
    cu_bn_bwd_sums,
    cu_bn_bwd,
    /* No direct convolution: Conv2D runs as im2col + cuBLAS. */
    NULL,
    NULL,
    NULL,
    NULL,
    /* relu_bias_grad: the ReLU's and the bias' gradients run apart. */
    NULL,
    /* Batch normalization and pooling run apart (bn_pool_ok, _fwd, _bwd). */
    NULL,
    NULL,
    NULL,
};

} // namespace kcuda

using namespace kcuda;

extern "C" ctrain_err kern_cuda_create_impl(int device, kern_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = NULL;
  cuda_impl *c = NULL;
  cublasStatus_t bs;
  *out = NULL;
  k = static_cast<kern_t *>(calloc(1, sizeof(*k)));
  c = static_cast<cuda_impl *>(calloc(1, sizeof(*c)));
  if (!k || !c) {
    free(k);
    free(c);
    snprintf(errbuf, errlen, "CUDA backend: out of memory");
    return CTRAIN_E_NOMEM;
  }
  k->ops = &cuda_ops;
  k->device = device;
  k->impl = c;
#define STEP(call)                                                                                 \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      result = fail_cuda(k, #call, e_);                                                            \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)
  STEP(cudaSetDevice(device));
  STEP(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  STEP(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
  for (int i = 0; i < KERN_SLOTS; i++) {
    STEP(cudaEventCreateWithFlags(&c->copied[i], cudaEventDisableTiming));
    STEP(cudaEventCreateWithFlags(&c->released[i], cudaEventDisableTiming));
  }
#undef STEP
  bs = cublasCreate(&c->blas);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasSetStream(c->blas, c->compute);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH); /* fp32, no TF32 */
  if (bs != CUBLAS_STATUS_SUCCESS) {
    result = fail_blas(k, "cublasCreate/SetStream/SetMathMode", bs);
    goto out;
  }
  *out = k;
  k = NULL;
out:
  if (k) {
    snprintf(errbuf, errlen, "%s", k->err);
    cu_destroy(k);
  }
  return result;
}
