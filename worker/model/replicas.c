/* replicas.c - a worker's local replicas; see replicas.h. */
#include "worker/model/replicas.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the replicas' threads meet in each BatchNormalization layer: each
 * copies its statistics into its slot; the last to arrive sums the slots in
 * replica order, runs `across` on the sum and wakes the others, who copy it
 * back. A replica whose step fails marks the set broken, so that none waits
 * for it. */
#define REPLICAS_THREADS_MAX 64

struct replicas_bn {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, arrived, broken;
  int first;         /* the replica that broke the set first, -1: none */
  unsigned long gen; /* meetings completed */
  ctrain_err rc;     /* the last meeting's */
  char why[320];
  float *slots; /* (n, cap) */
  float *sum;   /* (cap) */
  size_t cap, len;
  dmodel_sum_fn across;
  void *ctx;
  struct bn_member {
    struct replicas_bn *bn;
    int r;
  } * members; /* (n) */
};

static void bn_free(struct replicas_bn *b) {
  if (!b)
    return;
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b->slots);
  free(b->sum);
  free(b->members);
  free(b);
}

/* Marks the set broken (under b->mu), naming r as the cause if first. */
static void bn_break(struct replicas_bn *b, int r) {
  if (!b->broken)
    b->first = r;
  b->broken = 1;
  pthread_cond_broadcast(&b->cv);
}

/* Room for statistics of len floats a replica (under b->mu, while no one
 * has arrived). */
static int bn_room(struct replicas_bn *b, size_t len) {
  if (len <= b->cap)
    return 1;
  float *slots = realloc(b->slots, (size_t)b->n * len * sizeof(float));
  if (slots)
    b->slots = slots;
  float *sum = slots ? realloc(b->sum, len * sizeof(float)) : NULL;
  if (sum)
    b->sum = sum;
  if (!slots || !sum)
    return 0;
  b->cap = len;
  return 1;
}

/* The last arrival: the sum over the slots in replica order, then across
 * the workers. */
static void bn_meet(struct replicas_bn *b) {
  size_t len = b->len;
  memcpy(b->sum, b->slots, len * sizeof(float));
  for (int r = 1; r < b->n; r++)
    for (size_t i = 0; i < len; i++)
      b->sum[i] += b->slots[(size_t)r * b->cap + i];
  b->why[0] = '\0';
  b->rc = b->across ? b->across(b->ctx, b->sum, len, b->why, sizeof(b->why)) : CTRAIN_OK;
  b->arrived = 0;
  b->gen++;
  pthread_cond_broadcast(&b->cv);
}

/* dmodel_sum_fn of replica m->r. */
static ctrain_err bn_local_sum(void *ctx, float *v, size_t n, char *errbuf, size_t errlen) {
  struct bn_member *m = ctx;
  struct replicas_bn *b = m->bn;
  ctrain_err rc = CTRAIN_OK;
  pthread_mutex_lock(&b->mu);
  if (b->broken) {
    snprintf(errbuf, errlen, "replica %d of this worker failed", b->first);
    pthread_mutex_unlock(&b->mu);
    return CTRAIN_E_CANCELLED;
  }
  if ((b->arrived == 0 && !bn_room(b, n)) || (b->arrived > 0 && n != b->len)) {
    snprintf(errbuf, errlen,
             b->arrived ? "%zu floats of statistics where the other replicas have %zu"
                        : "out of memory for %zu floats of statistics",
             n, b->len);
    bn_break(b, m->r);
    pthread_mutex_unlock(&b->mu);
    return b->arrived ? CTRAIN_E_INVAL : CTRAIN_E_NOMEM;
  }
  b->len = n;
  memcpy(b->slots + (size_t)m->r * b->cap, v, n * sizeof(float));
  unsigned long gen = b->gen;
  if (++b->arrived == b->n)
    bn_meet(b);
  while (b->gen == gen && !b->broken)
    pthread_cond_wait(&b->cv, &b->mu);
  if (b->gen == gen) { /* broken before the meeting */
    snprintf(errbuf, errlen, "replica %d of this worker failed", b->first);
    rc = CTRAIN_E_CANCELLED;
  } else if ((rc = b->rc)) {
    snprintf(errbuf, errlen, "%s", b->why);
  } else {
    memcpy(v, b->sum, n * sizeof(float));
  }
  pthread_mutex_unlock(&b->mu);
  return rc;
}

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
  bn_free(rs->bn);
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
  rs->input_dim = m->input_dim;
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
  /* Several CPU replicas step on threads of their own, so that cpu:R uses
   * R cores whatever the model (the meeting point is there for
   * BatchNormalization layers; replicas_sync_bn adds the sum across
   * workers). */
  if (!gpu && n > 1 && n <= REPLICAS_THREADS_MAX &&
      (result = replicas_sync_bn(rs, NULL, NULL, errbuf, errlen)))
    goto out;
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

ctrain_err replicas_sync_bn(replica_set *rs, dmodel_sum_fn across, void *ctx, char *errbuf,
                            size_t errlen) {
  if (rs->n == 1) {
    dmodel_set_bn_sync(rs->d[0], across, ctx);
    return CTRAIN_OK;
  }
  if (rs->gpu) {
    snprintf(errbuf, errlen,
             "BatchNormalization with %d GPU replicas in one worker: its statistics are "
             "synchronized across the CPU replicas of a worker and across workers, not yet across "
             "GPUs of one worker; use one GPU per worker and more workers",
             rs->n);
    return CTRAIN_E_UNSUPPORTED;
  }
  if (rs->n > REPLICAS_THREADS_MAX) {
    snprintf(errbuf, errlen,
             "BatchNormalization with %d replicas in one worker: at most %d are synchronized",
             rs->n, REPLICAS_THREADS_MAX);
    return CTRAIN_E_UNSUPPORTED;
  }
  struct replicas_bn *b = calloc(1, sizeof(*b));
  if (!b || !(b->members = calloc((size_t)rs->n, sizeof(*b->members)))) {
    free(b);
    snprintf(errbuf, errlen, "replicas: out of memory");
    return CTRAIN_E_NOMEM;
  }
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  b->n = rs->n;
  b->across = across;
  b->ctx = ctx;
  for (int r = 0; r < rs->n; r++) {
    b->members[r] = (struct bn_member){b, r};
    dmodel_set_bn_sync(rs->d[r], bn_local_sum, &b->members[r]);
  }
  bn_free(rs->bn);
  rs->bn = b;
  kern_cpu_blas_one_thread();
  return CTRAIN_OK;
}

typedef struct {
  replica_set *rs;
  int r, B, training, backward;
  const float *x;
  const int32_t *y;
  float scale;
  ctrain_err rc;
} step_arg;

static void *step_thread(void *p) {
  step_arg *a = p;
  replica_set *rs = a->rs;
  a->rc = dmodel_step(rs->d[a->r], a->x, a->y, a->B, a->training, &rs->drop[a->r], a->scale,
                      a->backward);
  if (a->rc) { /* nobody waits for this one any more */
    pthread_mutex_lock(&rs->bn->mu);
    bn_break(rs->bn, a->r);
    pthread_mutex_unlock(&rs->bn->mu);
  }
  return NULL;
}

/* Replica r on a thread of its own (0: the caller's); the error named is
 * that of the replica that failed first (the others then fail for it). */
static ctrain_err step_threads(replica_set *rs, step_arg *a, char *errbuf, size_t errlen) {
  pthread_t t[REPLICAS_THREADS_MAX];
  int started = 1;
  rs->bn->broken = 0;
  rs->bn->first = -1;
  for (; started < rs->n; started++)
    if (pthread_create(&t[started], NULL, step_thread, &a[started])) {
      snprintf(rs->k[started]->err, sizeof(rs->k[started]->err), "pthread_create failed");
      a[started].rc = CTRAIN_E_NOMEM;
      pthread_mutex_lock(&rs->bn->mu);
      bn_break(rs->bn, started);
      pthread_mutex_unlock(&rs->bn->mu);
      break;
    }
  step_thread(&a[0]);
  for (int r = 1; r < started; r++)
    pthread_join(t[r], NULL);
  int first = rs->bn->first;
  if (first >= 0 && a[first].rc)
    return fail(rs, first, a[first].rc, "step", errbuf, errlen);
  for (int r = 0; r < rs->n; r++)
    if (a[r].rc)
      return fail(rs, r, a[r].rc, "step", errbuf, errlen);
  return CTRAIN_OK;
}

ctrain_err replicas_step_all(replica_set *rs, const float *x, const int32_t *y, int B, int training,
                             float scale, int backward, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (!rs->bn || rs->n == 1) {
    for (int r = 0; r < rs->n && !result; r++)
      result = replicas_step(rs, r, x + (size_t)r * (size_t)B * rs->input_dim, y + (size_t)r * B, B,
                             training, scale, backward, errbuf, errlen);
    return result;
  }
  step_arg a[REPLICAS_THREADS_MAX];
  for (int r = 0; r < rs->n; r++)
    a[r] = (step_arg){.rs = rs,
                      .r = r,
                      .B = B,
                      .training = training,
                      .backward = backward,
                      .x = x + (size_t)r * (size_t)B * rs->input_dim,
                      .y = y + (size_t)r * B,
                      .scale = scale};
  return step_threads(rs, a, errbuf, errlen);
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
