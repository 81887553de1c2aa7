/* worker/devinfo.h - which accelerators this process can use.
 *
 * `--device auto` and `--collective auto` resolve through this. A build
 * without the CUDA path, or a machine without a GPU or driver, reports zero
 * devices and says why; that is not an error. */
#ifndef CTRAIN_DEVINFO_H
#define CTRAIN_DEVINFO_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/options.h"

#define DEVINFO_MAX_GPUS 16

typedef struct {
  int built_with_cuda; /* 1 when compiled with CTRAIN_HAVE_CUDA */
  int gpu_count;       /* visible CUDA devices, 0..DEVINFO_MAX_GPUS */
  char gpu_names[DEVINFO_MAX_GPUS][96];
  int cuda_runtime_version; /* e.g. 13050; 0 if unknown */
  int cuda_driver_version;  /* 0 when no driver is loaded */
  int cublas_version;
  int nccl_version;   /* e.g. 23203 */
  char why_none[256]; /* when gpu_count == 0: why */
} devinfo;

/* Fills `out`. Never fails for lack of a GPU; returns CTRAIN_OK. */
CTRAIN_NODISCARD ctrain_err devinfo_probe(devinfo *out);

/* What --device/--collective resolve to on this machine. */
typedef struct {
  int gpu;       /* 1: train on GPUs 0..replicas-1 (CUDA kernels) */
  int replicas;  /* local replicas: GPUs, or logical CPU replicas */
  int nccl;      /* 1: NCCL collective, else the TCP ring (or local) */
  char why[256]; /* how auto resolved, for the log */
} devinfo_choice;

/* Resolves the flags against `d`. replicas: R of --device cpu:R|gpu:R, 0
 * when not given (cpu: 1, gpu: every visible GPU). auto picks every visible
 * GPU in a CUDA build, else cpu:1; collective auto picks nccl with gpu, else
 * ring. --device gpu without a usable GPU, gpu:R with fewer than R visible,
 * or --collective nccl without gpu, is CTRAIN_E_INVAL (exit 64) with the
 * reason (devinfo's why_none) in errbuf. */
CTRAIN_NODISCARD ctrain_err devinfo_choose(wk_device device, int replicas, wk_collective collective,
                                           const devinfo *d, devinfo_choice *out, char *errbuf,
                                           size_t errlen);

#ifdef CTRAIN_HAVE_CUDA
/* The CUDA half, in devinfo_cuda.c. */
void devinfo_probe_cuda(devinfo *out);
#endif

#endif
