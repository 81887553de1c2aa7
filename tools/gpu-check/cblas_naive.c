/* cblas_naive.c - a plain cblas_sgemm (row-major only) for tools/gpu-check.sh
 * on a machine without OpenBLAS: the CPU reference stays correct, only slow.
 * Not part of any normal build. */
#include <stddef.h>

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                 int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc);

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                 int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
  (void)order;
  for (int i = 0; i < M; i++) {
    float *c = C + (size_t)i * (size_t)ldc;
    for (int j = 0; j < N; j++)
      c[j] = beta == 0 ? 0 : beta * c[j];
    for (int k = 0; k < K; k++) {
      float a = alpha * (ta == CblasTrans ? A[(size_t)k * (size_t)lda + (size_t)i]
                                          : A[(size_t)i * (size_t)lda + (size_t)k]);
      if (tb == CblasTrans)
        for (int j = 0; j < N; j++)
          c[j] += a * B[(size_t)j * (size_t)ldb + (size_t)k];
      else
        for (int j = 0; j < N; j++)
          c[j] += a * B[(size_t)k * (size_t)ldb + (size_t)j];
    }
  }
}
