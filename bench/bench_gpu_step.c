/* bench_gpu_step.c - training-step throughput on the GPU against the CPU
 * reference in the same run, through the same dmodel code (kernels.h
 * backends), and (with --fmnist DIR) one epoch of Fashion-MNIST on each with
 * the test accuracy compared.
 *
 *   bench_gpu_step [--fmnist DIR] [--skip-steps] [--gpu-steps N] [--cpu-steps N]
 *                  [--cpu-wide 0|1]
 *
 * Models (Adam, lr 1e-3): the Fashion-MNIST MLP 784-128-10 at batch 128 and
 * a wide MLP 784-4096-4096-10 at batch 1024. Prints samples/s for each
 * backend and the ratio GPU/CPU. Without a GPU it prints "# SKIP no GPU:
 * <reason>" for the GPU half and exits 0. Exit 1 when the GPU epoch's test
 * accuracy is more than 1.5 points from the CPU's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/data/data.h"
#include "worker/devinfo.h"
#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *const FMNIST_MLP = "{\"input_shape\":[28,28],\"layers\":[{\"type\":\"Flatten\"},"
                                      "{\"type\":\"Dense\",\"units\":128,\"activation\":\"relu\"},{"
                                      "\"type\":\"Dense\",\"units\":10}]}";
static const char *const WIDE_MLP = "{\"input_shape\":[784],\"layers\":[{\"type\":\"Dense\","
                                    "\"units\":4096,\"activation\":\"relu\"},"
                                    "{\"type\":\"Dense\",\"units\":4096,\"activation\":\"relu\"},{"
                                    "\"type\":\"Dense\",\"units\":10}]}";

typedef struct {
  model_t *m;
  optim_t *opt;
  dmodel_t *d;
} runner;

static int runner_open(runner *r, kern_t *k, const char *json, int B) {
  char err[512] = "";
  memset(r, 0, sizeof(*r));
  if (model_from_json(json, &r->m, err, sizeof(err)) ||
      optim_create("adam", r->m->n_params, 0, 0, &r->opt, err, sizeof(err)) ||
      dmodel_create(k, r->m, r->opt, B, &r->d, err, sizeof(err))) {
    fprintf(stderr, "bench_gpu_step: %s\n", err);
    return -1;
  }
  model_init(r->m, 1);
  if (dmodel_push(r->d, r->m, r->opt)) {
    fprintf(stderr, "bench_gpu_step: push: %s\n", dmodel_errmsg(r->d));
    return -1;
  }
  return 0;
}

static void runner_close(runner *r) {
  dmodel_free(r->d);
  optim_free(r->opt);
  model_free(r->m);
}

/* samples/s of `steps` training steps (after `warm` untimed ones); -1 on error. */
static double step_rate(kern_t *k, const char *json, int B, int warm, int steps) {
  runner r;
  double rate = -1;
  int dim = 784;
  float *x = malloc((size_t)B * (size_t)dim * sizeof(float));
  int32_t *y = malloc((size_t)B * sizeof(int32_t));
  if (!x || !y || runner_open(&r, k, json, B))
    goto out;
  rng_t g;
  rng_seed(&g, 3, 0);
  for (size_t i = 0; i < (size_t)B * (size_t)dim; i++)
    x[i] = rng_uniform(&g);
  for (int i = 0; i < B; i++)
    y[i] = i % 10;
  double t0 = 0, loss;
  long correct;
  for (int s = 0; s < warm + steps; s++) {
    if (s == warm) {
      if (dmodel_stats(r.d, &loss, &correct))
        goto fail;
      t0 = now_s();
    }
    if (dmodel_step(r.d, x, y, B, 1, NULL, 1.0f / (float)B, 1) || dmodel_update(r.d, r.opt, 1e-3f))
      goto fail;
  }
  if (dmodel_stats(r.d, &loss, &correct)) /* waits for the last step */
    goto fail;
  rate = (double)steps * B / (now_s() - t0);
  goto done;
fail:
  fprintf(stderr, "bench_gpu_step: %s step: %s\n", k->ops->name, dmodel_errmsg(r.d));
done:
  runner_close(&r);
out:
  free(x);
  free(y);
  return rate;
}

/* One epoch of Fashion-MNIST (seed 1, batch 128, shuffled) then the test
 * accuracy; returns 0 and fills acc/sps, -1 on error. */
static int fmnist_epoch(kern_t *k, const data_set *tr, const data_set *te, double *acc, double *sps,
                        double *train_loss) {
  enum { B = 128 };
  runner r;
  int rc = -1;
  uint32_t *order = malloc((tr->n > te->n ? tr->n : te->n) * sizeof(uint32_t));
  float *x = malloc((size_t)B * 784 * sizeof(float));
  int32_t y[B];
  if (!order || !x || runner_open(&r, k, FMNIST_MLP, B))
    goto out;
  size_t steps = tr->n / B;
  data_epoch_order(tr, 1, 0, 1, order);
  double t0 = now_s(), lsum = 0, loss;
  long correct = 0, c;
  for (size_t s = 0; s < steps; s++) {
    data_gather(tr, order + s * B, B, x, y);
    if (dmodel_step(r.d, x, y, B, 1, NULL, 1.0f / B, 1) || dmodel_update(r.d, r.opt, 1e-3f) ||
        dmodel_stats(r.d, &loss, &c))
      goto fail;
    lsum += loss;
  }
  *sps = (double)(steps * B) / (now_s() - t0);
  *train_loss = lsum / (double)(steps * B);
  size_t n = data_epoch_order(te, 1, 0, 0, order);
  for (size_t s = 0; s < n; s += B) {
    int b = n - s < B ? (int)(n - s) : B;
    data_gather(te, order + s, b, x, y);
    if (dmodel_step(r.d, x, y, b, 0, NULL, 1, 0) || dmodel_stats(r.d, &loss, &c))
      goto fail;
    correct += c;
  }
  *acc = (double)correct / (double)n;
  rc = 0;
  goto done;
fail:
  fprintf(stderr, "bench_gpu_step: fmnist on %s: %s\n", k->ops->name, dmodel_errmsg(r.d));
done:
  runner_close(&r);
out:
  free(order);
  free(x);
  return rc;
}

int main(int argc, char **argv) {
  const char *fmnist = NULL;
  int gpu_steps = 50, cpu_steps = 5, cpu_wide = 1, skip_steps = 0, status = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--fmnist") && i + 1 < argc)
      fmnist = argv[++i];
    else if (!strcmp(argv[i], "--gpu-steps") && i + 1 < argc)
      gpu_steps = (int)strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--cpu-wide") && i + 1 < argc)
      cpu_wide = (int)strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--skip-steps"))
      skip_steps = 1;
    else if (!strcmp(argv[i], "--cpu-steps") && i + 1 < argc)
      cpu_steps = (int)strtol(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: bench_gpu_step [--fmnist DIR] [--skip-steps] [--gpu-steps N] "
                      "[--cpu-steps N] [--cpu-wide 0|1]\n");
      return 2;
    }
  }
  if (gpu_steps < 1)
    gpu_steps = 1;
  if (cpu_steps < 1)
    cpu_steps = 1;
  devinfo di;
  ctrain_err probed = devinfo_probe(&di);
  if (probed) {
    fprintf(stderr, "bench_gpu_step: probing the GPUs: %s\n", ctrain_strerror(probed));
    return 1;
  }
  kern_t *cpu = NULL, *gpu = NULL;
  char err[512] = "";
  if (kern_cpu_create(&cpu))
    return 1;
  if (di.gpu_count == 0)
    printf("# SKIP no GPU: %s (CPU figures only)\n", di.why_none);
  else if (kern_cuda_create(0, &gpu, err, sizeof(err))) {
    fprintf(stderr, "bench_gpu_step: %s\n", err);
    return 1;
  } else
    printf("# GPU 0: %s; CUDA runtime %d, driver %d, cuBLAS %d\n", di.gpu_names[0],
           di.cuda_runtime_version, di.cuda_driver_version, di.cublas_version);

  static const struct {
    const char *name, *json;
    int batch;
  } cases[] = {{"fmnist-mlp 784-128-10", FMNIST_MLP, 128},
               {"wide-mlp 784-4096-4096-10", WIDE_MLP, 1024}};
  printf("%-28s %6s %14s %14s %9s\n", "model (adam)", "batch", "cpu samples/s", "gpu samples/s",
         "gpu/cpu");
  for (size_t i = 0; !skip_steps && i < sizeof(cases) / sizeof(cases[0]); i++) {
    /* --cpu-wide 0: no CPU baseline for the wide MLP (a slow CPU BLAS). */
    double c =
        i == 1 && !cpu_wide ? NAN : step_rate(cpu, cases[i].json, cases[i].batch, 1, cpu_steps);
    double g = gpu ? step_rate(gpu, cases[i].json, cases[i].batch, 5, gpu_steps) : NAN;
    if (c < 0 || (gpu && g < 0))
      status = 1;
    printf("%-28s %6d %14.0f %14.0f %9.2f\n", cases[i].name, cases[i].batch, c, g,
           gpu ? g / c : NAN);
    fflush(stdout);
  }

  if (fmnist) {
    data_set tr, te;
    char tp[4096], ep[4096];
    memset(&tr, 0, sizeof(tr));
    memset(&te, 0, sizeof(te));
    snprintf(tp, sizeof(tp), "%s/train", fmnist);
    snprintf(ep, sizeof(ep), "%s/t10k", fmnist);
    if (data_load(tp, &(data_format){.format = DATA_FMT_IDX}, DATA_SHARD_OFF, 0, 1, &tr, err,
                  sizeof(err)) ||
        data_load(ep, &(data_format){.format = DATA_FMT_IDX}, DATA_SHARD_OFF, 0, 1, &te, err,
                  sizeof(err))) {
      fprintf(stderr, "bench_gpu_step: %s\n", err);
      return 1;
    }
    double acc_c, sps_c, l_c, acc_g = NAN, sps_g = NAN, l_g = NAN;
    if (fmnist_epoch(cpu, &tr, &te, &acc_c, &sps_c, &l_c))
      status = 1;
    else
      printf("fmnist 1 epoch cpu: loss %.4f test accuracy %.4f, %.0f samples/s\n", l_c, acc_c,
             sps_c);
    if (gpu) {
      if (fmnist_epoch(gpu, &tr, &te, &acc_g, &sps_g, &l_g))
        status = 1;
      else {
        int ok = fabs(acc_g - acc_c) <= 0.015;
        printf("fmnist 1 epoch gpu: loss %.4f test accuracy %.4f, %.0f samples/s (%.2fx cpu); "
               "accuracy gpu-cpu %+.4f: %s\n",
               l_g, acc_g, sps_g, sps_g / sps_c, acc_g - acc_c, ok ? "PASS (<= 0.015)" : "FAIL");
        if (!ok)
          status = 1;
      }
    }
    data_free(&tr);
    data_free(&te);
  }
  kern_free(gpu);
  kern_free(cpu);
  return status;
}
