/* train.c - the train loop: phases around one context (train.h). */
#include "worker/train.h"
#include "worker/train_internal.h"

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
#include "worker/train_data.h"
#include "worker/train_report.h"

/* Set by SIGTERM; each step all-reduces it with the gradients, so the
 * workers agree to stop after the same step. The handler may run on any
 * thread (the ring's heartbeat, the backup hasher) while the main thread
 * reads it: a lock-free atomic, as C11 allows in a signal handler. */
static atomic_int g_sigterm;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "g_sigterm must be lock-free for the signal handler");

void train_on_sigterm(int sig) {
  (void)sig;
  atomic_store(&g_sigterm, 1);
}

ctrain_err train_coll_failed(train_ctx *x, ctrain_err result) {
  snprintf(x->errbuf, x->errlen, "collective failed: %s", coll_errmsg(x->c));
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
    return train_coll_failed(x, rc);
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

double train_lr(const train_ctx *x, uint64_t g) {
  const wk_options *o = x->o;
  uint64_t warm = o->warmup_steps > 0 ? (uint64_t)o->warmup_steps : 0;
  if (g < warm)
    return x->lr * (double)(g + 1) / (double)warm;
  uint64_t total = (uint64_t)o->epochs * x->steps;
  if (o->lr_schedule != WK_LR_COSINE || total <= warm)
    return x->lr;
  double t = (double)(g - warm) / (double)(total - warm);
  return x->lr * 0.5 * (1.0 + cos(M_PI * (t < 1.0 ? t : 1.0)));
}

int train_part_due(const model_t *m, int i, size_t hi) {
  const model_layer *L = &m->layers[i];
  size_t lo = model_layer_first_param(L);
  /* The bottom part waits for the step's end, which runs it on the train
   * loop's thread (no hand-off for what nothing could overlap). */
  if (model_layer_params(L) == 0 || lo == 0 || hi - lo < TRAIN_BUCKET_FLOATS)
    return 0;
  /* A synchronized BatchNormalization next below all-reduces its sums in
   * its backward and waits for them, behind whatever is queued: the part
   * waits for it instead, and goes with it once its backward is done. */
  for (int j = i - 1; j >= 0; j--)
    if (model_layer_params(&m->layers[j]) > 0)
      return m->layers[j].kind != MODEL_BATCHNORM;
  return 1;
}

ctrain_err train_grads_ready(void *ctx, size_t lo, char *errbuf, size_t errlen) {
  train_ctx *x = ctx;
  const model_t *m = x->m;
  int i = m->n_layers - 1; /* the layer whose parameters start at lo */
  while (i > 0 &&
         !(model_layer_params(&m->layers[i]) > 0 && model_layer_first_param(&m->layers[i]) == lo))
    i--;
  if (!x->overlap_now || !train_part_due(m, i, x->ar_hi))
    return CTRAIN_OK;
  ctrain_err rc = coll_queue_part(x->q, x->reps->sum, m->n_params + 1, lo, x->ar_hi);
  if (rc) {
    snprintf(errbuf, errlen, "collective failed: %s", coll_errmsg(x->c));
    return rc;
  }
  x->ar_hi = lo;
  return CTRAIN_OK;
}

/* The rest of the overlapped all-reduce, after the backward pass (or its
 * failure): what is queued, then the bottom part here. The queue is always
 * drained, so nothing still reads the gradients when the step returns. */
static ctrain_err overlap_finish(train_ctx *x, ctrain_err result) {
  size_t n = x->m->n_params + 1;
  ctrain_err rc = coll_queue_drain(x->q);
  if (!rc && !result && x->ar_hi > 0)
    rc = coll_allreduce_part(x->c, x->reps->sum, n, 0, x->ar_hi);
  if (result)
    return result;
  return rc ? train_coll_failed(x, rc) : CTRAIN_OK;
}

/* --overlap auto: after TUNE_SKIP steps with the overlap (first-step
 * costs), TUNE_BLOCKS blocks of TUNE_BLOCK steps alternate with (1) and
 * without (0) it in the order tune_plan (ABBAAB: a drift in speed weighs on
 * both alike); each worker sums its steps' time (the step's start to the
 * end of its all-reduce) for each way, the sums are all-reduced, and every
 * worker keeps the way that took less on all of them, at the same step. The
 * same bits either way, so the choice changes only the speed. */
#define TUNE_SKIP   4
#define TUNE_BLOCK  8
#define TUNE_BLOCKS 6
static const int tune_plan[TUNE_BLOCKS] = {1, 0, 0, 1, 1, 0};

/* The way this step goes while tuning. */
static void tune_pick(train_ctx *x) {
  long k = x->tune_k - TUNE_SKIP;
  x->overlap_now = k < 0 ? 1 : tune_plan[k / TUNE_BLOCK];
}

/* A tuning step took `s` seconds; after the last, the choice. */
static ctrain_err tune_record(train_ctx *x, double s) {
  if (x->tune_k++ < TUNE_SKIP)
    return CTRAIN_OK;
  x->tune_s[x->overlap_now] += s;
  if (x->tune_k < TUNE_SKIP + TUNE_BLOCK * TUNE_BLOCKS)
    return CTRAIN_OK;
  float t[2] = {(float)x->tune_s[0], (float)x->tune_s[1]};
  ctrain_err rc = coll_allreduce_sum(x->c, t, 2); /* the queue is drained */
  if (rc)
    return train_coll_failed(x, rc);
  x->tune = 0;
  x->overlap_now = t[1] <= t[0];
  double per = 1000.0 / (TUNE_BLOCK * TUNE_BLOCKS / 2) / x->world;
  if (x->chief)
    LOG_INFO("gradients: %.2f ms a step with the all-reduce during the backward pass, %.2f "
             "after it (mean of %d steps each way on %d worker%s): %s from now on",
             t[1] * per, t[0] * per, TUNE_BLOCK * TUNE_BLOCKS / 2, x->world,
             x->world == 1 ? "" : "s", x->overlap_now ? "during" : "after");
  return CTRAIN_OK;
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
  size_t rb = (size_t)x->R * (size_t)x->B;
  if (x->stream)
    result = data_stream_next(x->stream, rb, x->xb, x->yb, x->errbuf, x->errlen);
  else
    data_gather(&x->train, x->order + s * rb, (int)rb, x->xb, x->yb);
  if (result)
    return result;
  if (x->q) { /* the SIGTERM flag travels in the first part queued */
    reps->sum[n] = atomic_load(&g_sigterm) ? 1.0f : 0.0f;
    x->ar_hi = n + 1;
    if (x->tune)
      tune_pick(x);
  }
  result = replicas_step_all(reps, x->xb, x->yb, x->B, 1, 1.0f / (float)x->global_batch, 1,
                             x->errbuf, x->errlen);
  if (!result)
    result = replicas_wait(reps, x->errbuf, x->errlen);
  if (!result)
    result = replicas_reduce(reps, x->errbuf, x->errlen);
  /* The compute time (the straggler check's) ends with the backward pass,
   * not with the wait for the slowest worker's last parts. */
  e->compute += ctrain_mono_s() - t0;
  if (x->q)
    result = overlap_finish(x, result);
  if (!result && x->tune)
    result = tune_record(x, ctrain_mono_s() - t0);
  if (result)
    return result;
  for (int r = 0; r < x->R; r++) {
    e->lsum += reps->loss[r];
    e->correct += reps->correct[r];
  }
  /* Everyone learns of a SIGTERM anywhere at the same step. */
  if (!x->q) {
    reps->sum[n] = atomic_load(&g_sigterm) ? 1.0f : 0.0f;
    if ((rc = coll_allreduce_sum(x->c, reps->sum, n + 1)))
      return train_coll_failed(x, rc);
  }
  e->stop = reps->sum[n] > 0;
  result = replicas_apply(reps, x->opt, (float)train_lr(x, x->gstep), x->errbuf, x->errlen);
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

/* Every --tensorboard-freq global steps: the chief's running means of the
 * epoch so far (as /progress shows them) at step = the global step. */
static void tensorboard_step(train_ctx *x) {
  static const char *const tags[] = {"batch_loss", "batch_accuracy", "batch_learning_rate",
                                     "batch_samples_per_sec"};
  char why[4400];
  if (!x->tb_steps || x->gstep % (uint64_t)x->o->tensorboard_freq)
    return;
  double lr = train_lr(x, x->gstep ? x->gstep - 1 : 0); /* the last step's */
  double v[] = {x->snap.loss, x->snap.accuracy, lr, x->snap.samples_per_sec};
  if (tb_scalars(x->tb_steps, (int64_t)x->gstep, tags, v, 4, why, sizeof(why)) == CTRAIN_OK)
    return;
  LOG_WARN("%s; no more TensorBoard step events in this run", why);
  tb_close(x->tb_steps);
  x->tb_steps = NULL;
}

/* The epoch's scalars, at step = the epoch (as the metrics line), in the
 * TensorBoard event file. A failed write is logged once and ends the
 * TensorBoard output, never the training. */
static void tensorboard_epoch(train_ctx *x, const train_report *r) {
  static const char *const tags[] = {"loss",     "accuracy",    "learning_rate", "samples_per_sec",
                                     "val_loss", "val_accuracy"};
  char why[4400];
  if (!x->tb)
    return;
  double lr = train_lr(x, x->gstep ? x->gstep - 1 : 0); /* the rate of the epoch's last step */
  double v[] = {r->loss,     r->accuracy,
                lr,          (double)(r->ran * (size_t)r->global_batch) / r->seconds,
                r->val_loss, r->val_accuracy};
  if (tb_scalars(x->tb, r->epoch, tags, v, r->has_val ? 6 : 4, why, sizeof(why)) == CTRAIN_OK)
    return;
  LOG_WARN("%s; no more TensorBoard events in this run", why);
  tb_close(x->tb);
  tb_close(x->tb_steps);
  x->tb = NULL;
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
    tensorboard_step(x);
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
    return train_coll_failed(x, rc);
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

/* The epoch's records: its order of the samples in memory, or the stream
 * started at the epoch's first step to run (a resume: after the records the
 * steps before it drew). */
static ctrain_err epoch_data(train_ctx *x, const epoch_state *e) {
  if (!x->stream) {
    data_epoch_order(&x->train, x->data_seed, e->epoch, 1, x->order);
    return CTRAIN_OK;
  }
  uint64_t skip = (uint64_t)e->s0 * (uint64_t)x->R * (uint64_t)x->B;
  return data_stream_begin(x->stream, e->epoch, skip, x->errbuf, x->errlen);
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
    result = epoch_data(x, &e);
    if (!result)
      result = run_steps(x, &e);
    if (x->stream)
      data_stream_end(x->stream);
    if (result)
      return result;
    if (e.stop && !e.save_at_end) { /* stopped mid-epoch (saved if backups) */
      *stopped = 1;
      return CTRAIN_OK;
    }
    size_t ran = x->steps - e.s0;
    float ep[3] = {(float)e.lsum, (float)e.correct, (float)(x->steps * (size_t)x->B * x->R)};
    if ((rc = coll_allreduce_sum(x->c, ep, 3)))
      return train_coll_failed(x, rc);
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
      tensorboard_epoch(x, &rep);
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
    result = train_coll_failed(x, rc);
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
  tb_close(x->tb);
  coll_queue_free(x->q); /* before the ring it uses */
  replicas_free(x->reps);
  coll_free(x->c);
  free(x->order);
  free(x->xb);
  free(x->yb);
  data_stream_free(x->stream);
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
  result = train_check_inputs(&x);
  if (!result)
    train_start_progress(&x);
  if (!result)
    result = train_prepare(&x);
  if (!result)
    result = train_connect_peers(&x);
  if (!result)
    result = train_sync_start(&x);
  if (!result)
    result = train_plan(&x);
  if (!result)
    result = run_epochs(&x, &stopped);
  train_data_report(o, x.stream);
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
