/* replicas.c - a worker's local replicas; see replicas.h. */
#include "worker/model/replicas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The failing replica's backend message into errbuf, naming the replica. */
static ctrain_err fail(replica_set *rs, int r, ctrain_err result, const char *what, char *errbuf,
                       size_t errlen) {
  snprintf(errbuf, errlen, "replica %d (%s %d): %s: %s", r, rs->gpu ? "GPU" : "cpu", r, what,
           kern_errmsg(rs->k[r]));
  return result;
}

void replicas_free(replica_set *rs) {
  if (!rs)
    return;
  for (int r = 0; r < rs->n; r++) {
    if (rs->d)
      dmodel_free(rs->d[r]);
    if (rs->k)
      kern_free(rs->k[r]);
  }
  free(rs->d);
  free(rs->k);
  free(rs->drop);
  free(rs->sum);
  free(rs->tmp);
  free(rs->loss);
  free(rs->correct);
  free(rs);
}

ctrain_err replicas_create(const model_t *m, const optim_t *opt, int n, int gpu, int cap,
                           size_t extra, replica_set **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  replica_set *rs = NULL;
  *out = NULL;
  if (n < 1)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "replicas: %d", n);
  rs = calloc(1, sizeof(*rs));
  if (!rs)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "replicas: out of memory");
  rs->n = n;
  rs->gpu = gpu;
  rs->n_params = m->n_params;
  rs->k = calloc((size_t)n, sizeof(*rs->k));
  rs->d = calloc((size_t)n, sizeof(*rs->d));
  rs->drop = calloc((size_t)n, sizeof(*rs->drop));
  rs->loss = calloc((size_t)n, sizeof(*rs->loss));
  rs->correct = calloc((size_t)n, sizeof(*rs->correct));
  rs->sum = calloc(m->n_params + extra, sizeof(float));
  rs->tmp = calloc(m->n_params, sizeof(float));
  if (!rs->k || !rs->d || !rs->drop || !rs->loss || !rs->correct || !rs->sum || !rs->tmp)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "replicas: out of memory for %zu gradients", m->n_params);
  for (int r = 0; r < n; r++) {
    char why[512] = "";
    result = gpu ? kern_cuda_create(r, &rs->k[r], why, sizeof(why)) : kern_cpu_create(&rs->k[r]);
    if (result)
      CTRAIN_FAIL(result, "replica %d: %s backend: %s", r, gpu ? "CUDA" : "CPU",
                  why[0] ? why : ctrain_strerror(result));
    result = dmodel_create(rs->k[r], m, opt, cap, &rs->d[r], why, sizeof(why));
    if (result)
      CTRAIN_FAIL(result, "replica %d: batch %d: %s", r, cap, why);
  }
  /* CPU replicas: replica 0's backward writes straight into `sum`. */
  if (!gpu && dmodel_use_grads(rs->d[0], rs->sum))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "replica 0: %s", kern_errmsg(rs->k[0]));
  *out = rs;
  rs = NULL;
out:
  replicas_free(rs);
  return result;
}

ctrain_err replicas_push(replica_set *rs, const model_t *m, const optim_t *opt, char *errbuf,
                         size_t errlen) {
  for (int r = 0; r < rs->n; r++) {
    ctrain_err result = dmodel_push(rs->d[r], m, opt);
    if (result)
      return fail(rs, r, result, "copying the weights in", errbuf, errlen);
  }
  return CTRAIN_OK;
}

ctrain_err replicas_pull(replica_set *rs, model_t *m, optim_t *opt, char *errbuf, size_t errlen) {
  ctrain_err result = dmodel_pull(rs->d[0], m, opt);
  if (result)
    return fail(rs, 0, result, "copying the weights out", errbuf, errlen);
  return CTRAIN_OK;
}

ctrain_err replicas_step(replica_set *rs, int r, const float *x, const int32_t *y, int B,
                         int training, float scale, int backward, char *errbuf, size_t errlen) {
  ctrain_err result = dmodel_step(rs->d[r], x, y, B, training, &rs->drop[r], scale, backward);
  if (result)
    return fail(rs, r, result, "step", errbuf, errlen);
  return CTRAIN_OK;
}

ctrain_err replicas_wait(replica_set *rs, char *errbuf, size_t errlen) {
  for (int r = 0; r < rs->n; r++) {
    ctrain_err result = dmodel_stats(rs->d[r], &rs->loss[r], &rs->correct[r]);
    if (result)
      return fail(rs, r, result, "loss", errbuf, errlen);
  }
  return CTRAIN_OK;
}

ctrain_err replicas_reduce(replica_set *rs, char *errbuf, size_t errlen) {
  size_t n = rs->n_params;
  ctrain_err result = CTRAIN_OK;
  if (rs->gpu) {
    result = dmodel_grads_to_host(rs->d[0], rs->sum);
    if (result)
      return fail(rs, 0, result, "gradients", errbuf, errlen);
  } /* else replica 0 wrote them there */
  for (int r = 1; r < rs->n; r++) {
    const float *g = rs->gpu ? rs->tmp : dmodel_host_grads(rs->d[r]);
    if (rs->gpu && (result = dmodel_grads_to_host(rs->d[r], rs->tmp)))
      return fail(rs, r, result, "gradients", errbuf, errlen);
    for (size_t i = 0; i < n; i++)
      rs->sum[i] += g[i];
  }
  return CTRAIN_OK;
}

ctrain_err replicas_apply(replica_set *rs, optim_t *opt, float lr, char *errbuf, size_t errlen) {
  uint64_t it = opt->iterations;
  for (int r = 0; r < rs->n; r++) {
    ctrain_err result = CTRAIN_OK;
    opt->iterations = it; /* the same update on every replica: one iteration */
    if (!rs->gpu) {       /* host memory: the update reads the reduced gradients in place */
      result = dmodel_update_with(rs->d[r], opt, lr, rs->sum);
    } else {
      result = dmodel_grads_from_host(rs->d[r], rs->sum);
      if (result)
        return fail(rs, r, result, "gradients in", errbuf, errlen);
      result = dmodel_update(rs->d[r], opt, lr);
    }
    if (result)
      return fail(rs, r, result, "update", errbuf, errlen);
  }
  return CTRAIN_OK;
}
