/* train.c - the train loop: phases around one context (train.h). */
#include "worker/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/clock.h"
#include "ctrain/fileio.h"
#include "ctrain/log.h"
#include "ctrain/tfconfig.h"
#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/safetensors.h"
#include "worker/collective/coll.h"
#include "worker/collective/coll_nccl.h"
#include "worker/collective/ring.h"
#include "worker/data/data.h"
#include "worker/devinfo.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/model/replicas.h"
#include "worker/progress.h"
#include "worker/train_backup.h"
#include "worker/train_report.h"

/* Set by SIGTERM; each step all-reduces it with the gradients, so the
 * workers agree to stop after the same step. The handler may run on any
 * thread (the ring's heartbeat, the backup hasher) while the main thread
 * reads it: a lock-free atomic, as C11 allows in a signal handler. */
static atomic_int g_sigterm;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "g_sigterm must be lock-free for the signal handler");

static void on_sigterm(int sig) {
  (void)sig;
  atomic_store(&g_sigterm, 1);
}

/* Everything one training run holds; every pointer starts NULL and is
 * released by ctx_free. */
typedef struct {
  const wk_options *o;
  char *errbuf;
  size_t errlen;
  tfconfig tc;
  int rank, world, R, B, chief, backups; /* R: local replicas; B: per-replica batch */
  devinfo_choice dc;
  const char *token, *job;
  unsigned long attempt;
  model_t *m;        /* host copy of the weights (init, broadcast, backups, output) */
  optim_t *opt;      /* hyper-parameters; its state is the host copy for backups */
  replica_set *reps; /* the R replicas the steps run on */
  coll_t *c;
  data_set train, test;
  uint32_t *order; /* (max samples) the epoch order */
  float *xb;       /* (B, input_dim) one replica's batch */
  int32_t *yb;     /* (B) */
  FILE *metrics;
  ckpt_state restored;
  train_resume res;
  uint64_t *rows; /* (res.world * res.replicas, CKPT_RANK_WORDS) restored per-replica state */
  char chosen[4096], refuse[9216];
  train_saver sv;
  size_t steps;      /* per epoch, the same on every replica of every worker */
  long global_batch; /* B x R x workers */
  double lr;
  uint64_t gstep, data_seed;
  int start_epoch;
  size_t start_step;
  double val_loss, val_acc;
  struct sigaction old_term;
  int term_installed;
  progress_server *prog;  /* NULL: no progress port */
  progress_snapshot snap; /* what the train loop last published */
} train_ctx;

/* The state of one epoch in progress. */
typedef struct {
  int epoch;
  size_t s0; /* first step run in this epoch (resume) */
  double t0, compute, lsum;
  long correct;
  int stop, save_at_end;
} epoch_state;

/* The collective's message (naming the peer) into errbuf; returns result. */
static ctrain_err coll_failed(train_ctx *x, ctrain_err result) {
  snprintf(x->errbuf, x->errlen, "collective failed: %s", coll_errmsg(x->c));
  return result;
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

/* Phase 1: everything the user gave us, checked before any side effect. */
static ctrain_err check_inputs(train_ctx *x) {
  ctrain_err result = CTRAIN_OK;
  const wk_options *o = x->o;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  result = tfconfig_from_env(&x->tc, errbuf, errlen);
  if (result)
    goto out;
  if (x->tc.type == TFCONFIG_EVALUATOR)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task.type 'evaluator' does not join training; side-car "
                "evaluation is not supported by ctrain-worker train");
  if (!o->model)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--model: required");
  if (!o->data)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--data: required");
  devinfo di;
  devinfo_probe(&di);
  result = devinfo_choose(o->device, o->replicas, o->collective, &di, &x->dc, errbuf, errlen);
  if (result)
    goto out;
  LOG_DEBUG("%s", x->dc.why);
  x->rank = x->tc.rank;
  x->world = x->tc.world;
  x->R = x->dc.replicas;
  x->B = o->batch;
  x->chief = x->rank == 0;
  x->backups = o->backup_dir != NULL || o->backup_uri != NULL;
  result = model_load_file(o->model, &x->m, errbuf, errlen);
  if (result)
    goto out;
  result = optim_create(o->optimizer, x->m->n_params, (float)o->momentum, o->nesterov, &x->opt,
                        errbuf, errlen);
  if (result)
    goto out;
  result = data_load(o->data, o->format, o->shard, x->rank, x->world, &x->train, errbuf, errlen);
  if (result)
    goto out;
  result = check_fit(x->m, &x->train, "--data", o->data, o->model, errbuf, errlen);
  if (result)
    goto out;
  if (o->test_data) {
    result = data_load(o->test_data, o->format, WK_SHARD_DATA, x->rank, x->world, &x->test, errbuf,
                       errlen);
    if (result)
      goto out;
    result = check_fit(x->m, &x->test, "--test-data", o->test_data, o->model, errbuf, errlen);
    if (result)
      goto out;
  }
  x->token = getenv("CTRAIN_JOB_TOKEN");
  x->job = getenv("CTRAIN_JOB_NAME");
  const char *attempt_s = getenv("CTRAIN_ATTEMPT");
  if (attempt_s && *attempt_s) {
    char *end = NULL;
    errno = 0;
    x->attempt = strtoul(attempt_s, &end, 10);
    if (errno || *end || x->attempt > UINT32_MAX)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "CTRAIN_ATTEMPT: '%s' is not a non-negative integer", attempt_s);
  }
  if (x->world > 1 && (!x->token || !*x->token))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "CTRAIN_JOB_TOKEN: required with %d workers (peers authenticate with "
                "it)",
                x->world);
out:
  return result;
}

/* The progress port (--progress-port), when asked for. Monitoring never
 * fails training: without CTRAIN_JOB_TOKEN (nothing to authenticate with)
 * or when the port cannot be bound, a warning, and training goes on. */
static void start_progress(train_ctx *x) {
  char why[512] = "", read_token[PROGRESS_TOKEN_HEX + 1];
  int port = 0;
  x->snap.rank = x->rank;
  x->snap.epochs = x->o->epochs;
  x->snap.workers = x->world;
  if (x->o->progress_port <= 0)
    return;
  if (!x->token || !*x->token) {
    LOG_WARN("--progress-port %d: CTRAIN_JOB_TOKEN is not set, so requests cannot be "
             "authenticated: the progress port stays closed",
             x->o->progress_port);
    return;
  }
  progress_read_token(x->token, read_token);
  progress_config pc = {.port = x->o->progress_port, .read_token = read_token, .chief = x->chief};
  if (progress_start(&pc, &x->prog, &port, why, sizeof(why)))
    LOG_WARN("%s; training goes on without it", why);
  else
    LOG_INFO("progress port %d: %s (bearer read token)", port,
             x->chief ? "/progress and /metrics" : "/metrics");
  memset(read_token, 0, sizeof(read_token));
}

/* Phase 2: buffers, the replicas, and the chief's verdict on the backups
 * (decided before any peer is contacted; the others learn it after the
 * rendezvous). */
static ctrain_err prepare(train_ctx *x) {
  ctrain_err result = CTRAIN_OK;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  size_t maxn = x->train.n > x->test.n ? x->train.n : x->test.n;
  x->order = malloc((maxn ? maxn : 1) * sizeof(uint32_t));
  x->xb = malloc((size_t)x->B * (size_t)x->m->input_dim * sizeof(float));
  x->yb = malloc((size_t)x->B * sizeof(int32_t));
  if (!x->order || !x->xb || !x->yb)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for batch %d", x->B);
  /* One float past the reduced gradients carries the SIGTERM flag through
   * the step's all-reduce, so agreeing to stop costs no extra round trip. */
  result = replicas_create(x->m, x->opt, x->R, x->dc.gpu, x->B, 1, &x->reps, errbuf, errlen);
  if (result)
    goto out;
  train_config_hash(x->o, x->m, &x->train, x->world, x->R, x->sv.hash);
  x->res.verdict = TRAIN_FRESH;
  if (x->chief && x->backups)
    result = train_restore_decide(x->o, x->m, x->opt, x->sv.hash, x->world, x->R, &x->sv.store,
                                  &x->restored, &x->res, x->chosen, sizeof(x->chosen), x->refuse,
                                  sizeof(x->refuse), errbuf, errlen);
out:
  return result;
}

/* Phase 3: the peers (TCP ring, or NCCL bootstrapped over it), then SIGTERM
 * means: finish the step, save, exit 75. */
static ctrain_err connect_peers(train_ctx *x) {
  ctrain_err result = CTRAIN_OK;
  coll_t *boot = NULL;
  if (x->world > 1) {
    ring_config rc = {.rank = x->rank,
                      .world = x->world,
                      .addrs = (const char *const *)x->tc.addrs,
                      .job = x->job && *x->job ? x->job : "ctrain",
                      .attempt = (uint32_t)x->attempt,
                      .token = x->token,
                      .rendezvous_timeout = x->o->rendezvous_timeout,
                      .peer_timeout = x->o->peer_timeout,
                      .bind_host = NULL};
    result = ring_create(&rc, &boot, x->errbuf, x->errlen);
  } else {
    result = coll_local_create(&boot);
  }
  if (result)
    return result;
  if (x->dc.nccl) {
    coll_nccl_config nc = {.bootstrap = boot, .device = 0, .peer_timeout = x->o->peer_timeout};
    result = coll_nccl_create(&nc, &x->c, x->errbuf, x->errlen); /* takes boot */
    if (result)
      return result;
  } else {
    x->c = boot;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, &x->old_term) == 0)
    x->term_installed = 1;
  return CTRAIN_OK;
}

/* Phase 4: the same starting point everywhere: the chief's weights, or the
 * state of the chief's backup; then every replica gets it. */
static ctrain_err sync_start(train_ctx *x) {
  ctrain_err rc;
  ctrain_err result = CTRAIN_OK;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  model_t *m = x->m;
  if ((rc = coll_broadcast(x->c, &x->res, sizeof(x->res), 0)))
    return coll_failed(x, rc);
  if (x->res.verdict == TRAIN_REFUSE) {
    if (x->chief)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s", x->refuse);
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "the chief refused its backup in --backup-dir (see the chief's "
                                 "log: a different training config or replica layout)");
  }
  int resumed = x->res.verdict == TRAIN_RESUME;
  if (resumed &&
      (x->res.world < 1 || x->res.replicas < 1 || x->res.world * x->res.replicas > CKPT_MAX_WORLD))
    CTRAIN_FAIL(CTRAIN_E_PEER, "the chief sent a backup header with layout %llu x %llu",
                (unsigned long long)x->res.world, (unsigned long long)x->res.replicas);
  model_init(m, x->o->seed);
  if (x->chief && resumed)
    memcpy(m->params, x->restored.params, m->n_params * sizeof(float));
  if ((rc = coll_broadcast(x->c, m->params, m->n_params * sizeof(float), 0)))
    return coll_failed(x, rc);
  x->data_seed = x->o->seed;
  if (resumed) {
    size_t state = (size_t)x->opt->n_slots * m->n_params * sizeof(float);
    if (x->chief && state)
      memcpy(x->opt->state, x->restored.optim_state, state);
    if (state && (rc = coll_broadcast(x->c, x->opt->state, state, 0)))
      return coll_failed(x, rc);
    size_t nrow = (size_t)(x->res.world * x->res.replicas) * CKPT_RANK_WORDS;
    x->rows = malloc(nrow * sizeof(uint64_t));
    if (!x->rows)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for the backup's per-replica state");
    if (x->chief)
      memcpy(x->rows, x->restored.per_rank, nrow * sizeof(uint64_t));
    if ((rc = coll_broadcast(x->c, x->rows, nrow * sizeof(uint64_t), 0)))
      return coll_failed(x, rc);
    x->gstep = x->res.global_step;
    x->start_epoch = x->res.epoch > (uint64_t)x->o->epochs ? x->o->epochs : (int)x->res.epoch;
    x->start_step = (size_t)x->res.step;
    x->opt->iterations = x->res.optim_iterations;
    x->data_seed = x->res.data_seed;
    x->snap.backup_step = (int64_t)x->gstep;
    if (x->chief)
      LOG_INFO("backup: resuming from %s at epoch %d, step %zu (global step %llu)", x->chosen,
               x->start_epoch + 1, x->start_step, (unsigned long long)x->gstep);
  }
  ckpt_state_free(&x->restored);
  result = replicas_push(x->reps, m, x->opt, errbuf, errlen);
  if (result)
    goto out;
  if (x->backups) {
    x->sv.c = x->c;
    x->sv.o = x->o;
    x->sv.m = m;
    x->sv.opt = x->opt;
    x->sv.rank = x->rank;
    x->sv.world = x->world;
    x->sv.replicas = x->R;
    x->sv.batch = x->B;
    x->sv.data_seed = x->data_seed;
    if (train_saver_init(&x->sv))
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for backup state");
  }
out:
  return result;
}

/* Phase 5: the same number of steps on every replica of every worker
 * whatever the shard sizes; the run's numbers; the metrics file. */
static ctrain_err plan(train_ctx *x) {
  ctrain_err rc;
  ctrain_err result = CTRAIN_OK;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  const wk_options *o = x->o;
  uint64_t mine = data_local_count(&x->train), *counts = NULL;
  counts = malloc((size_t)x->world * sizeof(uint64_t));
  if (!counts)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for %d workers", x->world);
  if ((rc = coll_allgather_bytes(x->c, &mine, sizeof(mine), counts))) {
    result = coll_failed(x, rc);
    goto out;
  }
  size_t per_step = (size_t)x->B * (size_t)x->R;
  int smallest = 0;
  x->steps = SIZE_MAX;
  for (int r = 0; r < x->world; r++)
    if (counts[r] / per_step < x->steps) {
      x->steps = counts[r] / per_step;
      smallest = r;
    }
  if (x->steps == 0)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "--data %s: worker rank %d's shard has %llu samples, fewer than one step of "
                "%d replica(s) x batch %d",
                o->data, smallest, (unsigned long long)counts[smallest], x->R, x->B);
  int in_sync = x->world * x->R;
  x->global_batch = (long)x->B * in_sync;
  x->lr = o->lr * (o->scale_lr ? in_sync : 1);
  x->snap.replicas_in_sync = in_sync;
  x->snap.steps_per_epoch = x->steps;
  if (x->chief) {
    LOG_INFO("replicas in sync: %d (workers %d x replicas %d, %s); global batch %ld = "
             "per-replica batch %d x %d; learning rate %g%s; %zu steps per epoch; %zu parameters; "
             "collective %s",
             in_sync, x->world, x->R, x->dc.gpu ? "GPU" : "CPU", x->global_batch, x->B, in_sync,
             x->lr, o->scale_lr ? " (scaled by replicas)" : "", x->steps, x->m->n_params,
             x->c->ops->name);
    if (o->metrics) {
      /* O_NOFOLLOW, regular files only: the path may be on shared storage. */
      int mfd = -1;
      char why[4200];
      result = ctrain_file_open_append(o->metrics, &mfd, why, sizeof(why));
      if (result)
        CTRAIN_FAIL(result, "--metrics %s", why);
      x->metrics = fdopen(mfd, "a");
      if (!x->metrics) {
        close(mfd);
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "--metrics %s: %s", o->metrics, strerror(errno));
      }
    }
  }
  if (x->res.verdict == TRAIN_RESUME && x->start_step >= x->steps) {
    x->start_epoch++;
    x->start_step = 0;
  }
out:
  free(counts);
  return result;
}

/* Loss sum, correct and count over this worker's DATA shard of the test
 * set on replica 0, all-reduced: every worker gets the global numbers. */
static ctrain_err evaluate(train_ctx *x) {
  ctrain_err rc;
  ctrain_err result;
  const data_set *ds = &x->test;
  size_t n = data_epoch_order(ds, 0, 0, 0, x->order);
  double lsum = 0;
  long correct = 0;
  for (size_t s = 0; s < n; s += (size_t)x->B) {
    int b = (int)(n - s < (size_t)x->B ? n - s : (size_t)x->B);
    data_gather(ds, x->order + s, b, x->xb, x->yb);
    result = replicas_step(x->reps, 0, x->xb, x->yb, b, 0, 1, 0, x->errbuf, x->errlen);
    if (!result)
      result = replicas_wait(x->reps, x->errbuf, x->errlen);
    if (result)
      return result;
    lsum += x->reps->loss[0];
    correct += x->reps->correct[0];
  }
  float v[3] = {(float)lsum, (float)correct, (float)n};
  if ((rc = coll_allreduce_sum(x->c, v, 3)))
    return coll_failed(x, rc);
  x->val_loss = v[2] > 0 ? v[0] / v[2] : 0;
  x->val_acc = v[2] > 0 ? v[1] / v[2] : 0;
  return CTRAIN_OK;
}

/* Each replica's dropout stream at the epoch's start, or (mid-epoch resume)
 * as saved, with this worker's partial sums. */
static void epoch_begin(train_ctx *x, epoch_state *e) {
  replica_set *reps = x->reps;
  for (int r = 0; r < x->R; r++)
    rng_seed(&reps->drop[r], x->o->seed ^ ((uint64_t)(x->rank * x->R + r) << 32),
             0x44524f50ull + (uint64_t)e->epoch);
  if (e->s0 == 0 || !x->rows)
    return;
  /* Mid-epoch. The rows are worker-major (backup world x replicas). */
  const uint64_t *row = x->rows + (size_t)x->rank * x->res.replicas * CKPT_RANK_WORDS;
  memcpy(&e->lsum, row + 4, sizeof(double));
  e->correct = (long)row[5];
  if (x->res.same_layout) /* else the model has no dropout: the streams are unused */
    for (int r = 0; r < x->R; r++)
      memcpy(reps->drop[r].s, row + (size_t)r * CKPT_RANK_WORDS, 4 * sizeof(uint64_t));
}

/* One global step: every replica its slice of the worker's step batch
 * (contiguous: replica r takes samples [r*B, (r+1)*B) of the worker's
 * B*R), the local reduce, the all-reduce across workers (with the SIGTERM
 * flag), the same update on every replica. */
static ctrain_err train_step(train_ctx *x, epoch_state *e, size_t s) {
  ctrain_err rc;
  ctrain_err result = CTRAIN_OK;
  replica_set *reps = x->reps;
  size_t n = x->m->n_params;
  double t0 = ctrain_mono_s();
  for (int r = 0; r < x->R; r++) {
    const uint32_t *slice = x->order + (s * (size_t)x->R + (size_t)r) * (size_t)x->B;
    data_gather(&x->train, slice, x->B, x->xb, x->yb);
    result = replicas_step(reps, r, x->xb, x->yb, x->B, 1, 1.0f / (float)x->global_batch, 1,
                           x->errbuf, x->errlen);
    if (result)
      return result;
  }
  result = replicas_wait(reps, x->errbuf, x->errlen);
  if (!result)
    result = replicas_reduce(reps, x->errbuf, x->errlen);
  if (result)
    return result;
  for (int r = 0; r < x->R; r++) {
    e->lsum += reps->loss[r];
    e->correct += reps->correct[r];
  }
  e->compute += ctrain_mono_s() - t0;
  /* Everyone learns of a SIGTERM anywhere at the same step. */
  reps->sum[n] = atomic_load(&g_sigterm) ? 1.0f : 0.0f;
  if ((rc = coll_allreduce_sum(x->c, reps->sum, n + 1)))
    return coll_failed(x, rc);
  e->stop = reps->sum[n] > 0;
  double step_lr = x->lr;
  if (x->o->warmup_steps > 0 && x->gstep < (uint64_t)x->o->warmup_steps)
    step_lr = x->lr * (double)(x->gstep + 1) / x->o->warmup_steps;
  result = replicas_apply(reps, x->opt, (float)step_lr, x->errbuf, x->errlen);
  x->gstep++;
  return result;
}

/* A backup at (epoch, step) of the epoch order; the host copies of the
 * weights and optimizer state come from replica 0 first. */
static ctrain_err save(train_ctx *x, uint64_t epoch, uint64_t step, const rng_t *drop, double lsum,
                       long correct) {
  ctrain_err result = replicas_pull(x->reps, x->m, x->opt, x->errbuf, x->errlen);
  if (result)
    return result;
  result =
      train_backup_save(&x->sv, epoch, step, x->gstep, drop, lsum, correct, x->errbuf, x->errlen);
  if (!result) {
    x->snap.backup_step = (int64_t)x->gstep;
    progress_publish(x->prog, &x->snap);
  }
  return result;
}

/* The snapshot after `done` steps of the epoch: running means over this
 * worker's replicas (lsum and correct count from the epoch's first step, a
 * resumed part included), throughput since this attempt entered the epoch. */
static void publish_step(train_ctx *x, const epoch_state *e, size_t done) {
  double seen = (double)done * x->B * x->R, ran = (double)(done - e->s0);
  double elapsed = ctrain_mono_s() - e->t0;
  x->snap.state = PROGRESS_TRAINING;
  x->snap.epoch = e->epoch + 1;
  x->snap.step = done;
  x->snap.global_step = x->gstep;
  x->snap.loss = e->lsum / seen;
  x->snap.accuracy = (double)e->correct / seen;
  x->snap.samples_per_sec = elapsed > 0 ? ran * (double)x->global_batch / elapsed : NAN;
  x->snap.step_ms = ran > 0 ? e->compute * 1000.0 / ran : NAN;
  progress_publish(x->prog, &x->snap);
}

/* The epoch's steps. Returns with e->stop set when SIGTERM was agreed
 * mid-epoch (after the save), or at the epoch's end. */
static ctrain_err run_steps(train_ctx *x, epoch_state *e) {
  ctrain_err result = CTRAIN_OK;
  const wk_options *o = x->o;
  for (size_t s = e->s0; s < x->steps; s++) {
    result = train_step(x, e, s);
    if (result)
      return result;
    publish_step(x, e, s + 1);
    int due = x->backups && o->save_freq > 0 && x->gstep % (uint64_t)o->save_freq == 0;
    if (s + 1 == x->steps) {
      /* The epoch's last step: save after its evaluation, as the next
       * epoch's start. */
      e->save_at_end = due || e->stop;
      return CTRAIN_OK;
    }
    if (due || (e->stop && x->backups)) {
      result = save(x, (uint64_t)e->epoch, s + 1, x->reps->drop, e->lsum, e->correct);
      if (result)
        return result;
    }
    if (e->stop)
      return CTRAIN_OK;
  }
  return CTRAIN_OK;
}

/* The straggler: compute time per step of each worker against the median. */
static ctrain_err log_straggler(train_ctx *x, int epoch, double ms) {
  ctrain_err rc;
  double *all = malloc((size_t)x->world * sizeof(double));
  if (!all)
    return CTRAIN_E_NOMEM;
  if ((rc = coll_allgather_bytes(x->c, &ms, sizeof(ms), all))) {
    free(all);
    return coll_failed(x, rc);
  }
  if (x->chief)
    train_report_straggler(all, x->world, epoch);
  x->snap.slowest_rank = train_report_slowest(all, x->world, &x->snap.median_ms);
  x->snap.slowest_ratio =
      x->snap.median_ms > 0 ? all[x->snap.slowest_rank] / x->snap.median_ms : NAN;
  x->snap.n_worker_ms = x->world < PROGRESS_MAX_WORKERS ? x->world : PROGRESS_MAX_WORKERS;
  memcpy(x->snap.worker_ms, all, (size_t)x->snap.n_worker_ms * sizeof(double));
  free(all);
  return CTRAIN_OK;
}

/* Phase 6: the epochs. *stopped: SIGTERM ended the run early. */
static ctrain_err run_epochs(train_ctx *x, int *stopped) {
  ctrain_err rc;
  ctrain_err result = CTRAIN_OK;
  const wk_options *o = x->o;
  x->val_loss = x->val_acc = NAN;
  for (int epoch = x->start_epoch; epoch < o->epochs; epoch++) {
    epoch_state e;
    memset(&e, 0, sizeof(e));
    e.epoch = epoch;
    e.t0 = ctrain_mono_s();
    e.s0 = epoch == x->start_epoch ? x->start_step : 0;
    epoch_begin(x, &e);
    if (x->chief)
      fprintf(stderr, "Epoch %d/%d\n", epoch + 1, o->epochs);
    data_epoch_order(&x->train, x->data_seed, epoch, 1, x->order);
    result = run_steps(x, &e);
    if (result)
      return result;
    if (e.stop && !e.save_at_end) { /* stopped mid-epoch (saved if backups) */
      *stopped = 1;
      return CTRAIN_OK;
    }
    size_t ran = x->steps - e.s0;
    float ep[3] = {(float)e.lsum, (float)e.correct, (float)(x->steps * (size_t)x->B * x->R)};
    if ((rc = coll_allreduce_sum(x->c, ep, 3)))
      return coll_failed(x, rc);
    double elapsed = ctrain_mono_s() - e.t0;
    result = log_straggler(x, epoch + 1, e.compute * 1000.0 / (double)(ran ? ran : 1));
    if (result)
      return result;
    if (o->test_data) {
      result = evaluate(x);
      if (result)
        return result;
    }
    x->snap.epoch = epoch + 1;
    x->snap.step = x->steps;
    x->snap.global_step = x->gstep;
    x->snap.loss = ep[0] / ep[2];
    x->snap.accuracy = ep[1] / ep[2];
    x->snap.samples_per_sec = (double)(ran * (size_t)x->global_batch) / elapsed;
    x->snap.step_ms = e.compute * 1000.0 / (double)(ran ? ran : 1);
    if (o->test_data) {
      x->snap.val_loss = x->val_loss;
      x->snap.val_accuracy = x->val_acc;
    }
    progress_publish(x->prog, &x->snap);
    if (x->chief) {
      train_report rep = {.epoch = epoch + 1,
                          .steps = x->steps,
                          .ran = ran,
                          .seconds = elapsed,
                          .loss = ep[0] / ep[2],
                          .accuracy = ep[1] / ep[2],
                          .has_val = o->test_data != NULL,
                          .val_loss = x->val_loss,
                          .val_accuracy = x->val_acc,
                          .workers = x->world,
                          .replicas = x->R,
                          .global_batch = x->global_batch};
      train_report_epoch(&rep, x->metrics);
    }
    if (epoch + 1 < o->epochs && x->backups && (o->save_freq == 0 || e.save_at_end)) {
      result = save(x, (uint64_t)epoch + 1, 0, NULL, 0, 0);
      if (result)
        return result;
    }
    if (e.stop && epoch + 1 < o->epochs) {
      *stopped = 1;
      return CTRAIN_OK;
    }
  }
  if (x->chief && o->test_data && !isnan(x->val_acc))
    LOG_INFO("test accuracy: %.4f (loss %.4f) on %zu samples", x->val_acc, x->val_loss, x->test.n);
  return CTRAIN_OK;
}

/* Phase 7: the final model (the chief's in --output, the others' beside it,
 * as Keras's multi-worker saving does), then the backups have served. */
static ctrain_err finish(train_ctx *x) {
  ctrain_err rc;
  ctrain_err result = CTRAIN_OK;
  const wk_options *o = x->o;
  char *errbuf = x->errbuf;
  size_t errlen = x->errlen;
  result = replicas_pull(x->reps, x->m, x->opt, errbuf, errlen);
  if (result)
    goto out;
  if (o->output) {
    char dir[4096];
    if (x->chief)
      snprintf(dir, sizeof(dir), "%s", o->output);
    else
      snprintf(dir, sizeof(dir), "%s/.worker-%d", o->output, x->rank);
    if (!x->chief && mkdir(o->output, 0755) && errno != EEXIST)
      CTRAIN_FAIL(CTRAIN_E_IO, "--output %s: mkdir: %s", o->output, strerror(errno));
    result = safetensors_save_model(dir, x->m, errbuf, errlen);
    if (result)
      goto out;
    if (x->chief)
      LOG_INFO("model written to %s/model.safetensors", dir);
  }
  if ((rc = coll_barrier(x->c))) {
    result = coll_failed(x, rc);
    goto out;
  }
  /* Every worker's model is written: the backups have served. */
  if (x->chief && x->backups && !o->keep_backup)
    train_backup_remove_all(&x->sv);
out:
  return result;
}

/* The last snapshot (Succeeded or Failed) and, from the chief, the
 * termination message: the final metrics and the model's directory, or on
 * failure what is known and the error. Writing it is best effort. */
static void report_end(train_ctx *x, ctrain_err result) {
  char why[512];
  x->snap.state = result ? PROGRESS_FAILED : PROGRESS_SUCCEEDED;
  progress_publish(x->prog, &x->snap);
  if (!x->chief || !x->o->termination_log)
    return;
  const char *error = result ? (x->errbuf[0] ? x->errbuf : ctrain_strerror(result)) : NULL;
  if (train_report_termination(x->o->termination_log, &x->snap, result ? NULL : x->o->output, error,
                               why, sizeof(why)))
    LOG_WARN("%s", why);
}

static void ctx_free(train_ctx *x) {
  progress_stop(x->prog);
  if (x->term_installed)
    sigaction(SIGTERM, &x->old_term, NULL);
  ckpt_state_free(&x->restored);
  free(x->rows);
  train_saver_free(&x->sv);
  if (x->metrics)
    fclose(x->metrics);
  replicas_free(x->reps);
  coll_free(x->c);
  free(x->order);
  free(x->xb);
  free(x->yb);
  data_free(&x->train);
  data_free(&x->test);
  optim_free(x->opt);
  model_free(x->m);
  tfconfig_free(&x->tc);
}

ctrain_err train_run(const wk_options *o, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  train_ctx x;
  int stopped = 0;
  memset(&x, 0, sizeof(x));
  x.o = o;
  x.errbuf = errbuf;
  x.errlen = errlen;
  progress_snapshot_init(&x.snap); /* nothing known yet, for a failure's report */
  result = check_inputs(&x);
  if (!result)
    start_progress(&x);
  if (!result)
    result = prepare(&x);
  if (!result)
    result = connect_peers(&x);
  if (!result)
    result = sync_start(&x);
  if (!result)
    result = plan(&x);
  if (!result)
    result = run_epochs(&x, &stopped);
  if (result)
    goto out;
  if (stopped) {
    if (x.backups)
      CTRAIN_FAIL(CTRAIN_E_CANCELLED,
                  "stopped by SIGTERM after global step %llu; backup %s holds it (restart to "
                  "resume)",
                  (unsigned long long)x.gstep, x.chief ? x.sv.last_path : "written by the chief");
    CTRAIN_FAIL(CTRAIN_E_CANCELLED,
                "stopped by SIGTERM after global step %llu (no --backup-dir: progress is not "
                "saved)",
                (unsigned long long)x.gstep);
  }
  result = finish(&x);
out:
  report_end(&x, result);
  ctx_free(&x);
  return result;
}
