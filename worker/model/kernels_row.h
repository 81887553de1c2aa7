/* worker/model/kernels_row.h - per-row math both kernel backends run, once:
 * the CPU kernels call it in a loop, the CUDA kernel once per thread (one
 * row each), so the reference and the GPU cannot drift apart. */
#ifndef CTRAIN_WORKER_KERNELS_ROW_H
#define CTRAIN_WORKER_KERNELS_ROW_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KERN_HD __host__ __device__
#else
#define KERN_HD
#endif

/* Softmax of one row of C logits z into p (numerically stable: shifted by
 * the row max). For a label y in [0, C): returns 1 and sets *loss to the
 * cross-entropy and *hit to whether the arg-max is y; for a label out of
 * range (padding) returns 0 and leaves them alone. */
static inline KERN_HD int kern_softmax_ce_row(const float *z, int C, int32_t y, float *p,
                                              double *loss, int *hit) {
  int arg = 0;
  float mx = z[0];
  for (int c = 1; c < C; c++)
    if (z[c] > mx) {
      mx = z[c];
      arg = c;
    }
  double sum = 0;
  for (int c = 0; c < C; c++) {
    p[c] = expf(z[c] - mx);
    sum += p[c];
  }
  for (int c = 0; c < C; c++)
    p[c] = (float)(p[c] / sum);
  if (y < 0 || y >= C)
    return 0;
  *loss = (double)mx + log(sum) - (double)z[y];
  *hit = arg == y;
  return 1;
}

#endif
