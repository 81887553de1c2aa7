/* train.c - the train loop. */
#include "ctrain/train.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ctrain/coll.h"
#include "ctrain/data.h"
#include "ctrain/log.h"
#include "ctrain/model.h"
#include "ctrain/optim.h"
#include "ctrain/ring.h"
#include "ctrain/safetensors.h"
#include "ctrain/tfconfig.h"

#define FAIL(code, ...)                                                                            \
  do {                                                                                             \
    snprintf(errbuf, errlen, __VA_ARGS__);                                                         \
    result = (code);                                                                               \
    goto out;                                                                                      \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Loss sum, correct and count over this worker's DATA shard of `ds`,
 * all-reduced: every worker gets the global numbers. */
static ctrain_err evaluate(coll_t *c, model_t *m, const data_set *ds, int B, uint32_t *order,
                           float *xb, int32_t *yb, double *loss, double *acc) {
  ctrain_err result;
  size_t n = data_epoch_order(ds, 0, 0, 0, order);
  double lsum = 0;
  long correct = 0;
  for (size_t s = 0; s < n; s += (size_t)B) {
    int b = (int)(n - s < (size_t)B ? n - s : (size_t)B);
    data_gather(ds, order + s, b, xb, yb);
    model_forward(m, xb, b, 0, NULL);
    lsum += model_loss(m, yb, b, &correct);
  }
  float v[3] = {(float)lsum, (float)correct, (float)n};
  result = coll_allreduce_sum(c, v, 3);
  if (result)
    return result;
  *loss = v[2] > 0 ? v[0] / v[2] : 0;
  *acc = v[2] > 0 ? v[1] / v[2] : 0;
  return CTRAIN_OK;
}

static ctrain_err check_fit(const model_t *m, const data_set *ds, const char *what,
                            const char *path, const char *model_path, char *errbuf, size_t errlen) {
  if (ds->dim != m->input_dim) {
    snprintf(errbuf, errlen,
             "%s %s: samples have %d features (%dx%d), model %s expects input_shape with %d", what,
             path, ds->dim, ds->shape[0], ds->rank > 1 ? ds->shape[1] : 1, model_path,
             m->input_dim);
    return CTRAIN_E_CONFIG;
  }
  if (ds->max_label >= m->n_classes) {
    snprintf(errbuf, errlen, "%s %s: label %d, but model %s has only %d classes", what, path,
             ds->max_label, model_path, m->n_classes);
    return CTRAIN_E_DATA;
  }
  return CTRAIN_OK;
}

ctrain_err train_run(const wk_options *o, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  tfconfig tc;
  model_t *m = NULL;
  optim_t *opt = NULL;
  coll_t *c = NULL;
  data_set train, test;
  uint32_t *order = NULL;
  float *xb = NULL, *counts = NULL;
  int32_t *yb = NULL;
  FILE *metrics = NULL;
  memset(&tc, 0, sizeof(tc));
  memset(&train, 0, sizeof(train));
  memset(&test, 0, sizeof(test));

  /* 1. Everything the user gave us is checked before any side effect. */
  result = tfconfig_from_env(&tc, errbuf, errlen);
  if (result)
    goto out;
  if (tc.type == TFCONFIG_EVALUATOR)
    FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.type 'evaluator' does not join training; side-car "
                          "evaluation is not supported by ctrain-worker train");
  if (!o->model)
    FAIL(CTRAIN_E_INVAL, "--model: required");
  if (!o->data)
    FAIL(CTRAIN_E_INVAL, "--data: required");
  if (o->device == WK_DEVICE_GPU)
    FAIL(CTRAIN_E_INVAL, "--device gpu: this build has no CUDA support");
  if (o->collective == WK_COLL_NCCL)
    FAIL(CTRAIN_E_INVAL, "--collective nccl: this build has no NCCL support");
  result = model_load_file(o->model, &m, errbuf, errlen);
  if (result)
    goto out;
  result = optim_create(o->optimizer, m->n_params, (float)o->momentum, o->nesterov, &opt, errbuf,
                        errlen);
  if (result)
    goto out;
  result = data_load(o->data, o->format, o->shard, tc.rank, tc.world, &train, errbuf, errlen);
  if (result)
    goto out;
  result = check_fit(m, &train, "--data", o->data, o->model, errbuf, errlen);
  if (result)
    goto out;
  if (o->test_data) {
    result =
        data_load(o->test_data, o->format, WK_SHARD_DATA, tc.rank, tc.world, &test, errbuf, errlen);
    if (result)
      goto out;
    result = check_fit(m, &test, "--test-data", o->test_data, o->model, errbuf, errlen);
    if (result)
      goto out;
  }
  const char *token = getenv("CTRAIN_JOB_TOKEN");
  const char *job = getenv("CTRAIN_JOB_NAME");
  const char *attempt_s = getenv("CTRAIN_ATTEMPT");
  unsigned long attempt = 0;
  if (attempt_s && *attempt_s) {
    char *end = NULL;
    errno = 0;
    attempt = strtoul(attempt_s, &end, 10);
    if (errno || *end || attempt > UINT32_MAX)
      FAIL(CTRAIN_E_CONFIG, "CTRAIN_ATTEMPT: '%s' is not a non-negative integer", attempt_s);
  }
  if (tc.world > 1 && (!token || !*token))
    FAIL(CTRAIN_E_CONFIG,
         "CTRAIN_JOB_TOKEN: required with %d workers (peers authenticate with "
         "it)",
         tc.world);
  size_t maxn = train.n > test.n ? train.n : test.n;
  order = malloc(maxn * sizeof(uint32_t));
  xb = malloc((size_t)o->batch * (size_t)m->input_dim * sizeof(float));
  yb = malloc((size_t)o->batch * sizeof(int32_t));
  counts = malloc((size_t)tc.world * 2 * sizeof(float));
  if (!order || !xb || !yb || !counts || model_reserve(m, o->batch))
    FAIL(CTRAIN_E_NOMEM, "out of memory for batch %d", o->batch);

  /* 2. Peers. */
  if (tc.world > 1) {
    ring_config rc = {.rank = tc.rank,
                      .world = tc.world,
                      .addrs = (const char *const *)tc.addrs,
                      .job = job && *job ? job : "ctrain",
                      .attempt = (uint32_t)attempt,
                      .token = token,
                      .rendezvous_timeout = o->rendezvous_timeout,
                      .peer_timeout = o->peer_timeout,
                      .bind_host = NULL};
    result = ring_create(&rc, &c, errbuf, errlen);
  } else {
    result = coll_local_create(&c);
  }
  if (result)
    goto out;
  int chief = tc.rank == 0, W = tc.world, B = o->batch;

  /* 3. Same starting point everywhere: the chief's weights. */
  model_init(m, o->seed);
  result = coll_broadcast(c, m->params, m->n_params * sizeof(float), 0);
  if (result)
    goto collective_failed;

  /* Same number of steps on every worker whatever the shard sizes. */
  float mine[2] = {(float)data_local_count(&train), 0};
  result = coll_allgather(c, mine, 2, counts);
  if (result)
    goto collective_failed;
  size_t steps = SIZE_MAX;
  int smallest = 0;
  for (int r = 0; r < W; r++) {
    size_t s = (size_t)counts[2 * r] / (size_t)B;
    if (s < steps) {
      steps = s;
      smallest = r;
    }
  }
  if (steps == 0)
    FAIL(CTRAIN_E_DATA,
         "--data %s: worker rank %d's shard has %.0f samples, fewer than one batch "
         "of %d",
         o->data, smallest, (double)counts[2 * smallest], B);
  long global_batch = (long)B * W;
  double lr = o->lr * (o->scale_lr ? W : 1);
  if (chief) {
    LOG_INFO("replicas in sync: %d (workers %d x devices 1); global batch %ld = per-replica "
             "batch %d x %d; learning rate %g%s; %zu steps per epoch; %zu parameters; "
             "collective %s",
             W, W, global_batch, B, W, lr, o->scale_lr ? " (scaled by replicas)" : "", steps,
             m->n_params, c->ops->name);
    if (o->metrics) {
      metrics = fopen(o->metrics, "a");
      if (!metrics)
        FAIL(CTRAIN_E_IO, "--metrics %s: %s", o->metrics, strerror(errno));
    }
  }

  /* 4. Epochs. */
  double val_loss = NAN, val_acc = NAN;
  uint64_t gstep = 0;
  for (int epoch = 0; epoch < o->epochs; epoch++) {
    double t0 = now_s(), compute = 0, lsum = 0;
    long correct = 0;
    rng_t drop;
    rng_seed(&drop, o->seed ^ ((uint64_t)tc.rank << 32), 0x44524f50ull + (uint64_t)epoch);
    if (chief)
      fprintf(stderr, "Epoch %d/%d\n", epoch + 1, o->epochs);
    data_epoch_order(&train, o->seed, epoch, 1, order);
    for (size_t s = 0; s < steps; s++, gstep++) {
      double tc0 = now_s();
      data_gather(&train, order + s * (size_t)B, B, xb, yb);
      model_forward(m, xb, B, 1, &drop);
      lsum += model_loss(m, yb, B, &correct);
      model_backward(m, xb, yb, B, 1.0f / (float)global_batch);
      compute += now_s() - tc0;
      result = coll_allreduce_sum(c, m->grads, m->n_params);
      if (result)
        goto collective_failed;
      double step_lr = lr;
      if (o->warmup_steps > 0 && gstep < (uint64_t)o->warmup_steps)
        step_lr = lr * (double)(gstep + 1) / o->warmup_steps;
      optim_step(opt, m->params, m->grads, (float)step_lr);
    }
    float ep[3] = {(float)lsum, (float)correct, (float)(steps * (size_t)B)};
    result = coll_allreduce_sum(c, ep, 3);
    if (result)
      goto collective_failed;
    double elapsed = now_s() - t0;
    /* The straggler: compute time per step of each worker against the median. */
    float ms = (float)(compute * 1000.0 / (double)steps), st[2] = {ms, 0};
    result = coll_allgather(c, st, 2, counts);
    if (result)
      goto collective_failed;
    if (o->test_data) {
      result = evaluate(c, m, &test, B, order, xb, yb, &val_loss, &val_acc);
      if (result)
        goto collective_failed;
    }
    if (chief) {
      float *sorted = malloc((size_t)W * sizeof(float));
      int slow = 0;
      for (int r = 0; r < W; r++)
        if (counts[2 * r] > counts[2 * slow])
          slow = r;
      if (sorted) {
        for (int r = 0; r < W; r++)
          sorted[r] = counts[2 * r];
        qsort(sorted, (size_t)W, sizeof(float), cmp_float);
        LOG_INFO("epoch %d: slowest worker rank %d computes %.2f ms/step, median %.2f ms/step",
                 epoch + 1, slow, counts[2 * slow], sorted[W / 2]);
        free(sorted);
      }
      double loss = ep[0] / ep[2], acc = ep[1] / ep[2], sps = ep[2] / elapsed;
      if (o->test_data)
        fprintf(stderr,
                "%zu/%zu - %.1fs - loss: %.4f - accuracy: %.4f - val_loss: %.4f - "
                "val_accuracy: %.4f - %.0f samples/s\n",
                steps, steps, elapsed, loss, acc, val_loss, val_acc, sps);
      else
        fprintf(stderr, "%zu/%zu - %.1fs - loss: %.4f - accuracy: %.4f - %.0f samples/s\n", steps,
                steps, elapsed, loss, acc, sps);
      if (metrics) {
        fprintf(metrics,
                "{\"epoch\":%d,\"steps\":%zu,\"loss\":%.6f,\"accuracy\":%.6f,"
                "\"samples_per_sec\":%.1f,\"seconds\":%.3f,\"replicas\":%d",
                epoch + 1, steps, loss, acc, sps, elapsed, W);
        if (o->test_data)
          fprintf(metrics, ",\"val_loss\":%.6f,\"val_accuracy\":%.6f", val_loss, val_acc);
        fputs("}\n", metrics);
        fflush(metrics);
      }
    }
  }
  if (chief && o->test_data)
    LOG_INFO("test accuracy: %.4f (loss %.4f) on %zu samples", val_acc, val_loss, test.n);

  /* 5. The final model. */
  if (o->output) {
    char dir[4096];
    if (chief)
      snprintf(dir, sizeof(dir), "%s", o->output);
    else
      snprintf(dir, sizeof(dir), "%s/.worker-%d", o->output, tc.rank);
    if (!chief && mkdir(o->output, 0755) && errno != EEXIST)
      FAIL(CTRAIN_E_IO, "--output %s: mkdir: %s", o->output, strerror(errno));
    result = st_save_model(dir, m, errbuf, errlen);
    if (result)
      goto out;
    if (chief)
      LOG_INFO("model written to %s/model.safetensors", dir);
  }
  result = coll_barrier(c);
  if (result)
    goto collective_failed;
  goto out;
collective_failed:
  snprintf(errbuf, errlen, "collective failed: %s", coll_errmsg(c));
out:
  if (metrics)
    fclose(metrics);
  coll_free(c);
  free(order);
  free(xb);
  free(yb);
  free(counts);
  data_free(&train);
  data_free(&test);
  optim_free(opt);
  model_free(m);
  tfconfig_free(&tc);
  return result;
}
