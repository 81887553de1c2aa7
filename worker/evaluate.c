/* evaluate.c - `ctrain-worker evaluate`; see worker/evaluate.h. */
#include "worker/evaluate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "worker/data/data.h"
#include "worker/cpubudget.h"
#include "worker/devinfo.h"
#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/train_data.h"

/* The model's config and weights files from --model (a directory or a
 * config file) and --weights. */
static ctrain_err eval_paths(const wk_options *o, char *cfg, size_t cfglen, char *weights,
                             size_t wlen, char *errbuf, size_t errlen) {
  struct stat st;
  if (stat(o->model, &st) != 0) {
    snprintf(errbuf, errlen, "--model %s: no such model directory or config file", o->model);
    return CTRAIN_E_CONFIG;
  }
  if (S_ISDIR(st.st_mode)) {
    snprintf(cfg, cfglen, "%s/model.json", o->model);
    snprintf(weights, wlen, "%s/model.safetensors", o->model);
  } else {
    snprintf(cfg, cfglen, "%s", o->model);
    weights[0] = '\0';
  }
  if (o->weights)
    snprintf(weights, wlen, "%s", o->weights);
  if (!weights[0]) {
    snprintf(errbuf, errlen, "--model %s is a config file: --weights is required", o->model);
    return CTRAIN_E_INVAL;
  }
  return CTRAIN_OK;
}

/* The model of cfg with the weights of `weights` into *m (the caller's to
 * free, on an error too). */
static ctrain_err eval_load_model(const char *cfg, const char *weights, model_t **m, char *errbuf,
                                  size_t errlen) {
  ctrain_err result = model_load_file(cfg, m, errbuf, errlen);
  if (result)
    goto out;
  result = safetensors_load_params(weights, *m, errbuf, errlen);
  if (result) {
    /* A missing or mismatched weights file is a bad configuration. */
    if (result != CTRAIN_E_NOMEM)
      result = CTRAIN_E_CONFIG;
    goto out;
  }
out:
  return result;
}

/* The test data (--test-data) into *ds (the caller's to free, on an error
 * too), checked against model m of cfg. */
static ctrain_err eval_load_data(const wk_options *o, const char *cfg, const model_t *m,
                                 data_set *ds, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  result =
      train_data_load(o, o->test_data, "--test-data", DATA_SHARD_OFF, 0, 1, ds, errbuf, errlen);
  if (result)
    goto out;
  if (ds->dim != m->input_dim) {
    snprintf(errbuf, errlen, "%s: samples have %d features, the model in %s takes %d", o->test_data,
             ds->dim, cfg, m->input_dim);
    result = CTRAIN_E_CONFIG;
    goto out;
  }
  if (ds->max_label >= m->n_classes) {
    snprintf(errbuf, errlen, "%s: label %d is outside the model's %d classes", o->test_data,
             ds->max_label, m->n_classes);
    result = CTRAIN_E_DATA;
    goto out;
  }
out:
  return result;
}

/* The backend *k and the model on it *d for batches of up to B (the
 * caller's to free, on an error too). */
static ctrain_err eval_backend(const wk_options *o, const model_t *m, int B, kern_t **k,
                               dmodel_t **d, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  /* The one model path, on GPU 0 when --device resolves to the GPU, else on
   * the CPU reference backend. */
  devinfo di;
  devinfo_choice dc;
  result = devinfo_probe(&di);
  if (result)
    CTRAIN_FAIL(result, "probing the GPUs: %s", ctrain_strerror(result));
  result = devinfo_choose(o->device, o->replicas, WK_COLL_AUTO, &di, &dc, errbuf, errlen);
  if (result)
    goto out;
  if (!dc.gpu)
    cpubudget_configure_blas(1);
  result = dc.gpu ? kern_cuda_create(0, k, errbuf, errlen) : kern_cpu_create(k);
  if (result)
    goto out;
  result = dmodel_create(*k, m, NULL, B, d, errbuf, errlen);
out:
  return result;
}

/* Model m's loss and accuracy over ds in batches of B (order, x and y hold
 * one), on d; *out on success. An error leaves its message in d. */
static ctrain_err eval_batches(dmodel_t *d, const model_t *m, data_set *ds, int B, uint32_t *order,
                               float *x, int32_t *y, eval_result *out) {
  ctrain_err result = dmodel_push(d, m, NULL);
  if (result)
    goto out;
  size_t n = data_epoch_order(ds, 0, 0, 0, order);
  double loss = 0;
  long correct = 0;
  for (size_t i = 0; i < n; i += (size_t)B) {
    int b = (int)(n - i < (size_t)B ? n - i : (size_t)B);
    double l = 0;
    long c = 0;
    data_gather(ds, order + i, b, x, y);
    result = dmodel_step(d, x, y, b, 0, NULL, 1, 0);
    if (!result)
      result = dmodel_stats(d, &l, &c);
    if (result)
      goto out;
    loss += l;
    correct += c;
  }
  out->samples = n;
  out->loss = n ? loss / (double)n : 0;
  out->accuracy = n ? (double)correct / (double)n : 0;
out:
  return result;
}

ctrain_err eval_run(const wk_options *o, eval_result *out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  model_t *m = NULL;
  kern_t *k = NULL;
  dmodel_t *d = NULL;
  data_set ds;
  memset(&ds, 0, sizeof(ds));
  memset(out, 0, sizeof(*out));
  uint32_t *order = NULL;
  float *x = NULL;
  int32_t *y = NULL;
  char cfg[4096], weights[4096];

  result = eval_paths(o, cfg, sizeof(cfg), weights, sizeof(weights), errbuf, errlen);
  if (result)
    return result;
  result = eval_load_model(cfg, weights, &m, errbuf, errlen);
  if (result)
    goto out;
  result = eval_load_data(o, cfg, m, &ds, errbuf, errlen);
  if (result)
    goto out;
  int B = o->batch > 0 ? o->batch : 256;
  order = malloc(ds.n * sizeof(*order));
  x = malloc((size_t)B * (size_t)ds.dim * sizeof(*x));
  y = malloc((size_t)B * sizeof(*y));
  if (!order || !x || !y) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = eval_backend(o, m, B, &k, &d, errbuf, errlen);
  if (result)
    goto out;
  result = eval_batches(d, m, &ds, B, order, x, y, out);
  if (result)
    snprintf(errbuf, errlen, "evaluate: %s", dmodel_errmsg(d));
out:
  dmodel_free(d);
  kern_free(k);
  free(order);
  free(x);
  free(y);
  data_free(&ds);
  model_free(m);
  return result;
}
