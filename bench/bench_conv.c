/* bench_conv.c - the Conv2D layers of a model against the sgemm bound on
 * the GEMMs they issue, on the CPU backend, in one process.
 *
 *   bench_conv MODEL.json [--batch 32] [--seconds 3] [--cpu-time]
 *
 * Builds the model (--seed 1 weights) with the worker's dmodel on the CPU
 * backend at the batch, runs one training step on random images (to fill
 * every layer's activations), then repeats, interleaved, round after round:
 *   conv   each Conv2D layer's forward and backward exactly as a training
 *          step runs them (dmodel_cnn_fwd/bwd: im2col, bias, GEMM,
 *          activation; activation gradient, bias gradient, im2col, the dW
 *          GEMM, and for all but the first layer with parameters the dX GEMM
 *          and col2im), on the step's own activations;
 *   gemm   the same GEMMs alone (same shapes, transposes, buffers and
 *          OpenBLAS thread policy: the backend's gemm op), nothing else:
 *          the sgemm bound on the GEMM FLOPs the layers issue;
 *   step   one whole training step (dmodel_step + the Adam update).
 * Times are wall clock (the backend hands big GEMMs to OpenBLAS's threads,
 * whose time thread CPU clocks would not see), or with --cpu-time the
 * process's CPU time (every thread's: run it with OPENBLAS_NUM_THREADS=1 for
 * the one-core figure that a machine loaded by other work leaves nearly
 * intact); each figure is the median over the rounds. Prints one JSON object: per layer its GEMM
 * shapes, FLOPs per step, conv and gemm milliseconds, the efficiency gemm/conv (the share of the
 * sgemm bound the layer reaches) and GFLOP/s of each; the totals; and the step's milliseconds with
 * the conv layers' share of it. bench/train.py runs it for its CNN rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/cpubudget.h"
#include "worker/model/dmodel.h"
#include "worker/model/dmodel_internal.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

#define MAX_CONV   16
#define MAX_ROUNDS 4096

static clockid_t g_clock = CLOCK_MONOTONIC;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(g_clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
  int ta, tb, M, N, K;
  float beta;
  const float *A, *Bm;
  int lda, ldb;
  float *C;
  int ldc;
} gemm_call;

static int fail(const char *what, dmodel_t *d) {
  fprintf(stderr, "bench_conv: %s: %s\n", what, d ? dmodel_errmsg(d) : "");
  return 1;
}

int main(int argc, char **argv) {
  cpubudget_blas_kernels(argv); /* the worker's OpenBLAS kernels */
  const char *path = NULL;
  int B = 32;
  double seconds = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      B = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--cpu-time"))
      g_clock = CLOCK_PROCESS_CPUTIME_ID;
    else if (argv[i][0] != '-' && !path)
      path = argv[i];
    else {
      fprintf(stderr, "usage: bench_conv MODEL.json [--batch 32] [--seconds 3] [--cpu-time]\n");
      return 2;
    }
  }
  if (!path || B < 1) {
    fprintf(stderr, "usage: bench_conv MODEL.json [--batch 32] [--seconds 3] [--cpu-time]\n");
    return 2;
  }
  char err[512] = "";
  model_t *m = NULL;
  optim_t *opt = NULL;
  dmodel_t *d = NULL;
  kern_t *k = NULL;
  if (model_load_file(path, &m, err, sizeof(err)) ||
      optim_create("adam", m->n_params, 0, 0, &opt, err, sizeof(err))) {
    fprintf(stderr, "bench_conv: %s\n", err);
    return 1;
  }
  if (kern_cpu_create(&k) || dmodel_create(k, m, opt, B, &d, err, sizeof(err))) {
    fprintf(stderr, "bench_conv: %s\n", err[0] ? err : "no CPU backend");
    return 1;
  }
  model_init(m, 1);
  if (dmodel_push(d, m, opt))
    return fail("push", d);
  size_t nx = (size_t)B * (size_t)m->input_dim;
  float *x = malloc(nx * sizeof(float));
  int32_t *lab = malloc((size_t)B * sizeof(int32_t));
  rng_t g;
  rng_seed(&g, 3, 0);
  for (size_t i = 0; i < nx; i++)
    x[i] = rng_uniform(&g);
  for (int i = 0; i < B; i++)
    lab[i] = i % m->n_classes;
  rng_t drop;
  rng_seed(&drop, 5, 0);
  if (dmodel_step(d, x, lab, B, 1, &drop, 1.0f / (float)B, 1) || dmodel_update(d, opt, 1e-3f))
    return fail("step", d);

  /* The conv layers, their inputs, gradient buffers and GEMMs. */
  int conv[MAX_CONV], nc = 0, first = d->first_param;
  size_t maxout = 0, maxin = 0;
  for (int i = 0; i < m->n_layers && nc < MAX_CONV; i++)
    if (m->layers[i].kind == MODEL_CONV2D) {
      conv[nc++] = i;
      const model_layer *L = &m->layers[i];
      maxout = (size_t)L->out > maxout ? (size_t)L->out : maxout;
      maxin = (size_t)L->in > maxin ? (size_t)L->in : maxin;
    }
  if (!nc) {
    fprintf(stderr, "bench_conv: %s has no Conv2D layer\n", path);
    return 1;
  }
  float *gsrc = malloc((size_t)B * maxout * sizeof(float));
  float *gbuf = malloc((size_t)B * maxout * sizeof(float));
  float *dxbuf = malloc((size_t)B * maxin * sizeof(float));
  for (size_t i = 0; i < (size_t)B * maxout; i++)
    gsrc[i] = (rng_uniform(&g) - 0.5f) * 1e-3f;
  gemm_call calls[MAX_CONV][3];
  int ncalls[MAX_CONV];
  double flops[MAX_CONV];
  for (int c = 0; c < nc; c++) {
    const model_layer *L = &m->layers[conv[c]];
    size_t per = (size_t)L->h * L->w * L->kh * L->kw * L->ic;
    if (per * (size_t)B > d->col_floats) {
      fprintf(stderr, "bench_conv: layer %s is im2col'd in chunks of the batch: not modelled\n",
              L->name);
      return 1;
    }
    int K = L->kh * L->kw * L->ic, MN = B * L->h * L->w;
    float *w = d->params + L->w_off, *gw = d->grads + L->w_off;
    ncalls[c] = 0;
    calls[c][ncalls[c]++] = (gemm_call){
        0, 0, MN, L->c, K, L->use_bias ? 1.0f : 0.0f, d->col, w, K, L->c, d->y[conv[c]], L->c};
    calls[c][ncalls[c]++] = (gemm_call){1, 0, K, L->c, MN, 0.0f, d->col, gbuf, K, L->c, gw, L->c};
    if (conv[c] > first)
      calls[c][ncalls[c]++] = (gemm_call){0, 1, MN, K, L->c, 0.0f, gbuf, w, L->c, L->c, d->col, K};
    flops[c] = 0;
    for (int q = 0; q < ncalls[c]; q++)
      flops[c] += 2.0 * calls[c][q].M * calls[c][q].N * calls[c][q].K;
  }

  static double t_conv[MAX_CONV][MAX_ROUNDS], t_gemm[MAX_CONV][MAX_ROUNDS], t_step[MAX_ROUNDS];
  static double t_cs[MAX_ROUNDS], t_gs[MAX_ROUNDS];
  int rounds = 0;
  double t_end = now_s() + seconds;
  while (rounds < MAX_ROUNDS && (rounds < 5 || now_s() < t_end)) {
    double ts = now_s();
    if (dmodel_step(d, x, lab, B, 1, &drop, 1.0f / (float)B, 1) || dmodel_update(d, opt, 1e-3f))
      return fail("step", d);
    double stats_loss;
    long stats_correct;
    if (dmodel_stats(d, &stats_loss, &stats_correct))
      return fail("stats", d);
    t_step[rounds] = now_s() - ts;
    t_cs[rounds] = t_gs[rounds] = 0;
    for (int c = 0; c < nc; c++) {
      int i = conv[c];
      const model_layer *L = &m->layers[i];
      const float *in = i > 0 ? d->out[i - 1] : x;
      memcpy(gbuf, gsrc, (size_t)B * L->out * sizeof(float));
      double t0 = now_s();
      if (dmodel_cnn_fwd(d, i, in, d->y[i], B, 1))
        return fail("conv forward", d);
      if (dmodel_cnn_bwd(d, i, in, gbuf, i > first ? dxbuf : NULL, B))
        return fail("conv backward", d);
      double t1 = now_s();
      memcpy(gbuf, gsrc, (size_t)B * L->out * sizeof(float));
      double t2 = now_s();
      for (int q = 0; q < ncalls[c]; q++) {
        const gemm_call *s = &calls[c][q];
        if (k->ops->gemm(k, s->ta, s->tb, s->M, s->N, s->K, 1.0f, s->A, s->lda, s->Bm, s->ldb,
                         s->beta, s->C, s->ldc))
          return fail("gemm", d);
      }
      double t3 = now_s();
      t_conv[c][rounds] = t1 - t0;
      t_gemm[c][rounds] = t3 - t2;
      t_cs[rounds] += t1 - t0;
      t_gs[rounds] += t3 - t2;
    }
    rounds++;
  }

  double total_flops = 0;
  printf("{\"batch\": %d, \"rounds\": %d, \"clock\": \"%s\", \"layers\": [", B, rounds,
         g_clock == CLOCK_MONOTONIC ? "wall" : "process cpu");
  for (int c = 0; c < nc; c++) {
    const model_layer *L = &m->layers[conv[c]];
    double tc = median(t_conv[c], rounds), tg = median(t_gemm[c], rounds);
    total_flops += flops[c];
    printf("%s{\"name\": \"%s\", \"gemms\": [", c ? ", " : "", L->name);
    for (int q = 0; q < ncalls[c]; q++)
      printf("%s{\"what\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d}", q ? ", " : "",
             q == 0   ? "forward"
             : q == 1 ? "dW"
                      : "dX",
             calls[c][q].M, calls[c][q].N, calls[c][q].K);
    printf("], \"flops\": %.0f, \"conv_ms\": %.3f, \"gemm_ms\": %.3f, \"efficiency\": %.3f, "
           "\"conv_gflops\": %.2f, \"gemm_gflops\": %.2f}",
           flops[c], tc * 1e3, tg * 1e3, tg / tc, flops[c] / tc * 1e-9, flops[c] / tg * 1e-9);
  }
  double tc = median(t_cs, rounds), tg = median(t_gs, rounds), st = median(t_step, rounds);
  printf("], \"flops\": %.0f, \"conv_ms\": %.3f, \"gemm_ms\": %.3f, \"efficiency\": %.3f, "
         "\"conv_gflops\": %.2f, \"gemm_gflops\": %.2f, \"step_ms\": %.3f, "
         "\"step_samples_per_sec\": %.1f, \"conv_share_of_step\": %.3f}\n",
         total_flops, tc * 1e3, tg * 1e3, tg / tc, total_flops / tc * 1e-9, total_flops / tg * 1e-9,
         st * 1e3, B / st, tc / st);
  free(x);
  free(lab);
  free(gsrc);
  free(gbuf);
  free(dxbuf);
  dmodel_free(d);
  optim_free(opt);
  model_free(m);
  k->ops->destroy(k);
  return 0;
}
