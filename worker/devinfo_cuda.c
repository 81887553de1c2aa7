/* devinfo_cuda.c - CUDA device, runtime, cuBLAS and NCCL versions. */
#include "worker/devinfo.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

void devinfo_probe_cuda(devinfo *out) {
  cudaRuntimeGetVersion(&out->cuda_runtime_version);
  cudaDriverGetVersion(&out->cuda_driver_version);
  ncclGetVersion(&out->nccl_version);
  out->cublas_version = (int)cublasGetCudartVersion();

  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(out->why_none, sizeof(out->why_none), "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    cudaGetLastError(); /* clear the sticky error so later calls are not confused */
    return;
  }
  if (n == 0) {
    snprintf(out->why_none, sizeof(out->why_none), "no CUDA device visible");
    return;
  }
  if (n > DEVINFO_MAX_GPUS)
    n = DEVINFO_MAX_GPUS;
  for (int i = 0; i < n; i++) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess)
      snprintf(out->gpu_names[i], sizeof(out->gpu_names[i]), "%.80s (sm_%d%d)", prop.name,
               prop.major, prop.minor);
  }
  out->gpu_count = n;
}
