/* bench/baselines/sgemm_bound.c - the sgemm-bound training rate of an MLP on
 * one core: the GEMMs of one training step (forward, weight gradients,
 * input gradients but the first layer's, exactly as worker/model/dmodel.c
 * issues them, row-major) timed with OpenBLAS on one thread, the same
 * library the worker links. Prints one JSON object: per-shape GFLOP/s, the
 * flops per sample, and the rate (samples per CPU-second: timed in thread
 * CPU time) a step made of nothing but these GEMMs would reach.
 *
 *   sgemm_bound BATCH IN H1 [H2 ...] OUT   (e.g. 32 784 128 10)
 *
 * bench/train.py builds and runs it: cc -O2 sgemm_bound.c $(pkg-config
 * --cflags --libs openblas). Not part of the build or the tests. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_LAYERS 16

typedef struct {
  int ta, tb, M, N, K;
  float beta;
  const char *what;
  int layer;
} shape;

/* CPU time of this thread: what the GEMMs cost on the core, the same on a
 * loaded machine (where wall time counts the other processes' slices). */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *filled(size_t n) {
  float *p = malloc(n * sizeof(float));
  if (!p) {
    fprintf(stderr, "sgemm_bound: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++)
    p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  return p;
}

/* CPU seconds per call of one shape: repeated for about 0.3 s, the best of
 * 3 such rounds (the first warms the caches). */
static double time_shape(const shape *s) {
  int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  float *A = filled((size_t)s->M * (size_t)s->K), *B = filled((size_t)s->K * (size_t)s->N);
  float *C = filled((size_t)s->M * (size_t)s->N);
  double best = 1e30;
  for (int round = 0; round < 3; round++) {
    long reps = 0;
    double t0 = now_s(), t;
    do {
      for (int i = 0; i < 20; i++)
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f, A, lda, B, ldb,
                    s->beta, C, s->N);
      reps += 20;
      t = now_s() - t0;
    } while (t < 0.3);
    if (t / (double)reps < best)
      best = t / (double)reps;
  }
  free(A);
  free(B);
  free(C);
  return best;
}

int main(int argc, char **argv) {
  int dims[MAX_LAYERS + 1], nd = argc - 2;
  if (argc < 4 || nd > MAX_LAYERS + 1) {
    fprintf(stderr, "usage: sgemm_bound BATCH IN H1 [H2 ...] OUT\n");
    return 2;
  }
  int Bt = (int)strtol(argv[1], NULL, 10);
  for (int i = 0; i < nd; i++)
    dims[i] = (int)strtol(argv[i + 2], NULL, 10);
  openblas_set_num_threads(1);
  shape sh[3 * MAX_LAYERS];
  int ns = 0;
  for (int l = 0; l + 1 < nd; l++) {
    int in = dims[l], out = dims[l + 1];
    sh[ns++] = (shape){0, 0, Bt, out, in, 1.0f, "forward", l + 1};
    sh[ns++] = (shape){1, 0, in, out, Bt, 0.0f, "weight grad", l + 1};
    if (l > 0)
      sh[ns++] = (shape){0, 1, Bt, in, out, 0.0f, "input grad", l + 1};
  }
  double total_s = 0, total_flops = 0;
  printf("{\"threads\": 1, \"core\": \"%s\", \"batch\": %d, \"shapes\": [", openblas_get_corename(),
         Bt);
  for (int i = 0; i < ns; i++) {
    double t = time_shape(&sh[i]);
    double flops = 2.0 * sh[i].M * sh[i].N * sh[i].K;
    total_s += t;
    total_flops += flops;
    printf("%s{\"layer\": %d, \"what\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"us\": %.3f, "
           "\"gflops\": %.2f}",
           i ? ", " : "", sh[i].layer, sh[i].what, sh[i].M, sh[i].N, sh[i].K, t * 1e6,
           flops / t * 1e-9);
  }
  printf("], \"flops_per_sample\": %.0f, \"step_gemm_us\": %.3f, \"gflops\": %.2f, "
         "\"bound_samples_per_sec\": %.1f}\n",
         total_flops / Bt, total_s * 1e6, total_flops / total_s * 1e-9, Bt / total_s);
  return 0;
}
