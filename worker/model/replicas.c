/* replicas.c - a worker's local replicas; see replicas.h. */
#include "worker/model/replicas.h"

#include "ctrain/clock.h"
#include "ctrain/thread.h"

#include <pthread.h>
#include <sched.h>
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

/* The CPU replicas' threads, started once (replicas_create) and kept: a
 * step is three jobs on them (the steps, the gradients' sum, the update). A
 * job runs fn(rs, r, arg) for every replica r, 0 on the caller's thread; a
 * replica whose thread could not be started runs on the caller's too.
 *
 * Both sides spin (yielding the CPU each time round) for up to
 * POOL_SPIN_S before they sleep on the condition variable: the MLP's step
 * is 0.13 ms, and a thread started per job, or a futex wake-up per job
 * (three a step, to a CPU that sleeps meanwhile), made cpu:2 on two CPUs
 * slower than one replica on one (0.7-0.8x); the yield keeps a spinning
 * thread from holding a CPU that a replica with work needs. */
#define POOL_SPIN_S 200e-6

typedef void (*pool_fn)(replica_set *rs, int r, void *arg);

struct replicas_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  replica_set *rs;
  int started;       /* threads running: replicas 1 .. started */
  int stop;          /* under mu, and read atomically */
  unsigned long gen; /* jobs posted (atomic; written under mu) */
  int left;          /* threads still in the current job (atomic) */
  pool_fn fn;
  void *arg;
  pthread_t t[REPLICAS_THREADS_MAX];
  struct pool_member {
    struct replicas_pool *p;
    int r;
  } me[REPLICAS_THREADS_MAX];
};

/* Spins until *v (atomic) differs from `was` or POOL_SPIN_S has passed;
 * whether it did. */
static int spin_until_changed(const unsigned long *v, unsigned long was, const int *stop) {
  double until = ctrain_mono_s() + POOL_SPIN_S;
  for (;;) {
    if (__atomic_load_n(v, __ATOMIC_ACQUIRE) != was ||
        (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)))
      return 1;
    if (ctrain_mono_s() > until)
      return 0;
    sched_yield();
  }
}

static void *pool_main(void *v) {
  struct pool_member *me = v;
  struct replicas_pool *p = me->p;
  unsigned long seen = 0;
  for (;;) {
    if (!spin_until_changed(&p->gen, seen, &p->stop)) {
      ctrain_mutex_lock(&p->mu);
      while (__atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen && !p->stop)
        ctrain_cond_wait(&p->cv, &p->mu);
      ctrain_mutex_unlock(&p->mu);
    }
    if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
      break;
    seen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
    p->fn(p->rs, me->r, p->arg); /* fn and arg were written before gen */
    if (__atomic_sub_fetch(&p->left, 1, __ATOMIC_ACQ_REL) == 0) {
      ctrain_mutex_lock(&p->mu);
      ctrain_cond_broadcast(&p->cv);
      ctrain_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

static void pool_free(struct replicas_pool *p) {
  if (!p)
    return;
  ctrain_mutex_lock(&p->mu);
  __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
  ctrain_cond_broadcast(&p->cv);
  ctrain_mutex_unlock(&p->mu);
  for (int r = 1; r <= p->started; r++)
    pthread_join(p->t[r], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
}

/* A pool for rs's replicas 1 .. n-1; NULL when out of memory (every job then
 * runs on the caller's thread). Threads that fail to start leave their
 * replicas to the caller. */
static struct replicas_pool *pool_create(replica_set *rs) {
  struct replicas_pool *p = calloc(1, sizeof(*p));
  if (!p)
    return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->rs = rs;
  for (int r = 1; r < rs->n && r < REPLICAS_THREADS_MAX; r++) {
    p->me[r] = (struct pool_member){p, r};
    if (pthread_create(&p->t[r], NULL, pool_main, &p->me[r]))
      break;
    p->started = r;
  }
  return p;
}

/* fn(rs, r, arg) for every replica r, concurrently; returns when all are
 * done. One caller at a time. */
static void pool_run(replica_set *rs, pool_fn fn, void *arg) {
  struct replicas_pool *p = rs->pool;
  int started = p ? p->started : 0;
  if (started) {
    p->fn = fn;
    p->arg = arg;
    __atomic_store_n(&p->left, started, __ATOMIC_RELAXED);
    ctrain_mutex_lock(&p->mu);
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_RELEASE);
    ctrain_cond_broadcast(&p->cv);
    ctrain_mutex_unlock(&p->mu);
  }
  fn(rs, 0, arg);
  for (int r = started + 1; r < rs->n; r++)
    fn(rs, r, arg);
  if (!started)
    return;
  double until = ctrain_mono_s() + POOL_SPIN_S;
  while (__atomic_load_n(&p->left, __ATOMIC_ACQUIRE) && ctrain_mono_s() < until)
    sched_yield();
  ctrain_mutex_lock(&p->mu);
  while (__atomic_load_n(&p->left, __ATOMIC_ACQUIRE))
    ctrain_cond_wait(&p->cv, &p->mu);
  ctrain_mutex_unlock(&p->mu);
}

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
  ctrain_cond_broadcast(&b->cv);
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
  ctrain_cond_broadcast(&b->cv);
}

/* dmodel_sum_fn of replica m->r. */
static ctrain_err bn_local_sum(void *ctx, float *v, size_t n, char *errbuf, size_t errlen) {
  struct bn_member *m = ctx;
  struct replicas_bn *b = m->bn;
  ctrain_err rc = CTRAIN_OK;
  ctrain_mutex_lock(&b->mu);
  if (b->broken) {
    snprintf(errbuf, errlen, "replica %d of this worker failed", b->first);
    ctrain_mutex_unlock(&b->mu);
    return CTRAIN_E_CANCELLED;
  }
  if ((b->arrived == 0 && !bn_room(b, n)) || (b->arrived > 0 && n != b->len)) {
    snprintf(errbuf, errlen,
             b->arrived ? "%zu floats of statistics where the other replicas have %zu"
                        : "out of memory for %zu floats of statistics",
             n, b->len);
    bn_break(b, m->r);
    ctrain_mutex_unlock(&b->mu);
    return b->arrived ? CTRAIN_E_INVAL : CTRAIN_E_NOMEM;
  }
  b->len = n;
  memcpy(b->slots + (size_t)m->r * b->cap, v, n * sizeof(float));
  unsigned long gen = b->gen;
  if (++b->arrived == b->n)
    bn_meet(b);
  while (b->gen == gen && !b->broken)
    ctrain_cond_wait(&b->cv, &b->mu);
  if (b->gen == gen) { /* broken before the meeting */
    snprintf(errbuf, errlen, "replica %d of this worker failed", b->first);
    rc = CTRAIN_E_CANCELLED;
  } else if ((rc = b->rc)) {
    snprintf(errbuf, errlen, "%s", b->why);
  } else {
    memcpy(v, b->sum, n * sizeof(float));
  }
  ctrain_mutex_unlock(&b->mu);
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
  pool_free(rs->pool); /* first: its threads use the replicas (they are idle now) */
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
  if (!gpu && n > 1)
    rs->pool = pool_create(rs);
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

static void step_thread(step_arg *a) {
  replica_set *rs = a->rs;
  a->rc = dmodel_step(rs->d[a->r], a->x, a->y, a->B, a->training, &rs->drop[a->r], a->scale,
                      a->backward);
  if (a->rc) { /* nobody waits for this one any more */
    ctrain_mutex_lock(&rs->bn->mu);
    bn_break(rs->bn, a->r);
    ctrain_mutex_unlock(&rs->bn->mu);
  }
}

static void step_job(replica_set *rs, int r, void *arg) {
  (void)rs;
  step_thread(&((step_arg *)arg)[r]);
}

/* Replica r on a thread of the pool (0: the caller's); the error named is
 * that of the replica that failed first (the others then fail for it). */
static ctrain_err step_threads(replica_set *rs, step_arg *a, char *errbuf, size_t errlen) {
  rs->bn->broken = 0;
  rs->bn->first = -1;
  pool_run(rs, step_job, a);
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

/* Replica r's share of the CPU gradients' sum: a slice of them, each
 * element summed over the replicas in replica order (the bits of a sum in
 * turn). Replica 0's backward wrote its own into rs->sum. */
static void reduce_job(replica_set *rs, int r, void *arg) {
  (void)arg;
  size_t n = rs->n_params, per = ((n + (size_t)rs->n - 1) / (size_t)rs->n + 15) & ~(size_t)15;
  size_t lo = per * (size_t)r < n ? per * (size_t)r : n;
  size_t hi = lo + per < n ? lo + per : n;
  for (int k = 1; k < rs->n; k++) {
    const float *g = dmodel_host_grads(rs->d[k]);
    for (size_t i = lo; i < hi; i++)
      rs->sum[i] += g[i];
  }
}

ctrain_err replicas_reduce(replica_set *rs, char *errbuf, size_t errlen) {
  size_t n = rs->n_params;
  ctrain_err result = CTRAIN_OK;
  if (!rs->gpu) {
    if (rs->n > 1)
      pool_run(rs, reduce_job, NULL);
    return CTRAIN_OK;
  }
  result = dmodel_grads_to_host(rs->d[0], rs->sum);
  if (result)
    return fail(rs, 0, result, "gradients", errbuf, errlen);
  for (int r = 1; r < rs->n; r++) {
    if ((result = dmodel_grads_to_host(rs->d[r], rs->tmp)))
      return fail(rs, r, result, "gradients", errbuf, errlen);
    for (size_t i = 0; i < n; i++)
      rs->sum[i] += rs->tmp[i];
  }
  return CTRAIN_OK;
}

typedef struct {
  const optim_t *opt;
  uint64_t it;
  float lr;
  ctrain_err rc[REPLICAS_THREADS_MAX];
} apply_arg;

/* Replica r's update from the summed gradients, with its own copy of the
 * optimizer's counters (every replica takes the same iteration). */
static void apply_job(replica_set *rs, int r, void *arg) {
  apply_arg *a = arg;
  optim_t o = *a->opt;
  o.iterations = a->it;
  a->rc[r] = dmodel_update_with(rs->d[r], &o, a->lr, rs->sum);
}

ctrain_err replicas_apply(replica_set *rs, optim_t *opt, float lr, char *errbuf, size_t errlen) {
  uint64_t it = opt->iterations;
  if (!rs->gpu && rs->n > 1 && rs->n <= REPLICAS_THREADS_MAX) {
    apply_arg a = {.opt = opt, .it = it, .lr = lr};
    pool_run(rs, apply_job, &a);
    opt->iterations = it + 1;
    for (int r = 0; r < rs->n; r++)
      if (a.rc[r])
        return fail(rs, r, a.rc[r], "update", errbuf, errlen);
    return CTRAIN_OK;
  }
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
