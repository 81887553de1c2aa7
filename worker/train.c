/* train.c - the train loop. */
#include "ctrain/clock.h"
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
#include <time.h>
#include <unistd.h>

#include "worker/checkpoint/ckpt.h"
#include "worker/collective/coll.h"
#include "worker/data/data.h"
#include "worker/devinfo.h"
#include "ctrain/fileio.h"
#include "ctrain/log.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/collective/ring.h"
#include "worker/checkpoint/safetensors.h"
#include "ctrain/tfconfig.h"

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

enum { VERDICT_FRESH = 0, VERDICT_RESUME = 1, VERDICT_REFUSE = 2 };
#define HDR_WORDS   8
#define RANK_FLOATS (CKPT_RANK_WORDS * 4)

/* A u64 as four 16-bit pieces in floats (exact), so per-rank state travels
 * through the float all-gather bit for bit. */
static void u64_to_f(uint64_t v, float *f) {
  for (int i = 0; i < 4; i++)
    f[i] = (float)((v >> (16 * i)) & 0xffff);
}

static uint64_t f_to_u64(const float *f) {
  uint64_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 16) | ((uint64_t)f[i] & 0xffff);
  return v;
}

static uint64_t dbits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof(u));
  return u;
}

static double bitsd(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof(d));
  return d;
}

/* SHA-256 over everything that must match for a backup to be resumed
 * exactly: model config, optimizer and its hyper-parameters, learning rate
 * schedule, per-replica batch, seed, world size and the data's identity
 * (spec, format, policy, samples and shape as the chief sees them). Epochs,
 * timeouts and output paths may change between attempts. */
static void config_hash(const wk_options *o, const model_t *m, const data_set *train, int world,
                        uint8_t out[CKPT_HASH_BYTES]) {
  uint8_t mh[CKPT_HASH_BYTES];
  char mhex[2 * CKPT_HASH_BYTES + 1], text[8192];
  const char *cfg = m->config_json ? m->config_json : "";
  ckpt_config_hash(cfg, strlen(cfg), mh);
  ckpt_hex(mh, mhex);
  int n =
      snprintf(text, sizeof(text),
               "ctrain-backup-config/1\nmodel=%s\nparams=%zu\noptimizer=%s\nmomentum=%.17g\n"
               "nesterov=%d\nlr=%.17g\nscale_lr=%d\nwarmup=%d\nbatch=%d\nseed=%llu\n"
               "world=%d\ndata=%s\nformat=%d\nshard=%d\nsamples=%zu\ndim=%d\n",
               mhex, m->n_params, o->optimizer, o->momentum, o->nesterov, o->lr, o->scale_lr,
               o->warmup_steps, o->batch, (unsigned long long)o->seed, world,
               o->data ? o->data : "", (int)o->format, (int)train->policy, train->n, train->dim);
  size_t len = n < 0 ? 0 : ((size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
  ckpt_config_hash(text, len, out);
}

/* Everything a save needs that the train loop owns. */
typedef struct {
  coll_t *c;
  const wk_options *o;
  model_t *m;
  optim_t *opt;
  int rank, world, batch;
  uint64_t data_seed;
  uint8_t hash[CKPT_HASH_BYTES];
  float *gath;         /* (world, RANK_FLOATS) */
  uint64_t *rows;      /* (world, CKPT_RANK_WORDS) */
  uint64_t last_gstep; /* global step of the last save, UINT64_MAX: none */
  char last_path[4096];
} saver;

/* Collective: every rank calls it at the same step. The chief gathers each
 * rank's dropout RNG and partial epoch sums, writes the backup, prunes the
 * older ones once the new one is durable, and tells everyone how it went,
 * so a failed save (disk full) stops every worker with exit 75. `drop` NULL:
 * the position is an epoch start (the RNG is re-seeded there). */
static ctrain_err backup_save(saver *sv, uint64_t epoch, uint64_t step, uint64_t gstep,
                              const rng_t *drop, double lsum, long correct, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  float mine[RANK_FLOATS];
  memset(mine, 0, sizeof(mine));
  if (drop)
    for (int i = 0; i < 4; i++)
      u64_to_f(drop->s[i], mine + 4 * i);
  u64_to_f(dbits(lsum), mine + 16);
  u64_to_f((uint64_t)correct, mine + 20);
  result = coll_allgather(sv->c, mine, RANK_FLOATS, sv->gath);
  if (result)
    goto collective;
  int32_t status = CTRAIN_OK;
  if (sv->rank == 0) {
    double t0 = ctrain_mono_s();
    for (size_t i = 0; i < (size_t)sv->world * CKPT_RANK_WORDS; i++)
      sv->rows[i] = f_to_u64(sv->gath + 4 * i);
    ckpt_state st;
    memset(&st, 0, sizeof(st));
    memcpy(st.config_hash, sv->hash, CKPT_HASH_BYTES);
    st.global_step = gstep;
    st.epoch = epoch;
    st.step = step;
    st.data_seed = sv->data_seed;
    st.data_position = step * (uint64_t)sv->batch;
    st.world = (uint64_t)sv->world;
    st.optim_kind = (uint32_t)sv->opt->kind;
    st.optim_slots = (uint32_t)sv->opt->n_slots;
    st.optim_iterations = sv->opt->iterations;
    st.n_params = sv->m->n_params;
    st.per_rank = sv->rows;
    st.params = sv->m->params;
    st.optim_state = sv->opt->state;
    status = (int32_t)ckpt_save(sv->o->backup_dir, &st, sv->last_path, sizeof(sv->last_path),
                                errbuf, errlen);
    if (status == CTRAIN_OK) {
      char perr[512];
      if (ckpt_prune(sv->o->backup_dir, sv->o->keep, perr, sizeof(perr)))
        LOG_WARN("backup: pruning old backups: %s", perr);
      LOG_INFO("backup: wrote %s (epoch %llu, step %llu, global step %llu) in %.3f s",
               sv->last_path, (unsigned long long)epoch + 1, (unsigned long long)step,
               (unsigned long long)gstep, ctrain_mono_s() - t0);
    }
  }
  result = coll_broadcast(sv->c, &status, sizeof(status), 0);
  if (result)
    goto collective;
  if (status) {
    if (sv->rank != 0)
      snprintf(errbuf, errlen,
               "the chief could not write a backup at global step %llu (see its log); the "
               "previous backup is intact",
               (unsigned long long)gstep);
    else {
      char why[1024];
      snprintf(why, sizeof(why), "%s", errbuf);
      snprintf(errbuf, errlen, "backup: %s; the previous backup is intact", why);
    }
    result = status == CTRAIN_E_NOSPACE ? CTRAIN_E_NOSPACE : CTRAIN_E_IO;
    goto out;
  }
  sv->last_gstep = gstep;
  goto out;
collective:
  snprintf(errbuf, errlen, "collective failed: %s", coll_errmsg(sv->c));
out:
  return result;
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
  ckpt_state restored;
  saver sv;
  uint64_t hdr[HDR_WORDS];
  uint64_t *rows = NULL; /* (backup world, CKPT_RANK_WORDS) restored per-rank state */
  struct sigaction old_term;
  int term_installed = 0;
  memset(&restored, 0, sizeof(restored));
  memset(&sv, 0, sizeof(sv));
  memset(hdr, 0, sizeof(hdr));
  memset(&tc, 0, sizeof(tc));
  memset(&train, 0, sizeof(train));
  memset(&test, 0, sizeof(test));

  /* 1. Everything the user gave us is checked before any side effect. */
  result = tfconfig_from_env(&tc, errbuf, errlen);
  if (result)
    goto out;
  if (tc.type == TFCONFIG_EVALUATOR)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task.type 'evaluator' does not join training; side-car "
                "evaluation is not supported by ctrain-worker train");
  if (!o->model)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--model: required");
  if (!o->data)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--data: required");
  {
    /* --device/--collective: auto resolves to cpu + ring until the loop's
     * GPU step is wired (gpu_train 0); gpu or nccl that cannot run is exit 64. */
    devinfo di;
    devinfo_choice dc;
    devinfo_probe(&di);
    result = devinfo_choose(o->device, o->collective, &di, 0, &dc, errbuf, errlen);
    if (result)
      goto out;
    LOG_DEBUG("%s", dc.why);
  }
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
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "CTRAIN_ATTEMPT: '%s' is not a non-negative integer", attempt_s);
  }
  if (tc.world > 1 && (!token || !*token))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "CTRAIN_JOB_TOKEN: required with %d workers (peers authenticate with "
                "it)",
                tc.world);
  size_t maxn = train.n > test.n ? train.n : test.n;
  order = malloc(maxn * sizeof(uint32_t));
  xb = malloc((size_t)o->batch * (size_t)m->input_dim * sizeof(float));
  yb = malloc((size_t)o->batch * sizeof(int32_t));
  counts = malloc((size_t)tc.world * 2 * sizeof(float));
  if (!order || !xb || !yb || !counts || model_reserve(m, o->batch))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for batch %d", o->batch);
  /* One float past the gradients (still the model's one allocation, freed by
   * model_free) carries the SIGTERM flag through the step's gradient
   * all-reduce, so agreeing to stop costs no extra round trip. */
  float *grads = realloc(m->grads, (m->n_params + 1) * sizeof(float));
  if (!grads)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for %zu gradients", m->n_params);
  m->grads = grads;
  m->grads[m->n_params] = 0;

  /* The chief decides from the backups before any peer is contacted; the
   * verdict (and the state) reach the others after the rendezvous. */
  int chief = tc.rank == 0, backups = o->backup_dir != NULL;
  char chosen[4096] = "", refuse[9216] = "";
  config_hash(o, m, &train, tc.world, sv.hash);
  if (chief && backups) {
    char why[1024];
    result = ckpt_prepare_dir(o->backup_dir, errbuf, errlen);
    if (result)
      goto out;
    result =
        ckpt_restore_latest(o->backup_dir, &restored, chosen, sizeof(chosen), why, sizeof(why));
    if (result == CTRAIN_E_NOTFOUND) {
      LOG_INFO("backup: no backup in %s; starting fresh", o->backup_dir);
      result = CTRAIN_OK;
    } else if (result) {
      CTRAIN_FAIL(result, "%s", why);
    } else {
      char have[2 * CKPT_HASH_BYTES + 1], want[2 * CKPT_HASH_BYTES + 1];
      ckpt_hex(restored.config_hash, have);
      ckpt_hex(sv.hash, want);
      hdr[0] = VERDICT_RESUME;
      if (memcmp(restored.config_hash, sv.hash, CKPT_HASH_BYTES)) {
        if (!o->backup_ignore_config) {
          hdr[0] = VERDICT_REFUSE;
          snprintf(refuse, sizeof(refuse),
                   "--backup-dir %s: backup %s was written for a different training config "
                   "(backup config hash %s, this run %s); use another --backup-dir, delete it, "
                   "or pass --backup-ignore-config",
                   o->backup_dir, chosen, have, want);
        } else {
          LOG_WARN("backup: %s has config hash %s, this run %s; resuming anyway "
                   "(--backup-ignore-config)",
                   chosen, have, want);
        }
      }
      if (hdr[0] == VERDICT_RESUME &&
          (restored.n_params != m->n_params || restored.optim_slots != (uint32_t)opt->n_slots ||
           restored.optim_kind != (uint32_t)opt->kind)) {
        hdr[0] = VERDICT_REFUSE;
        snprintf(refuse, sizeof(refuse),
                 "--backup-dir %s: backup %s holds %llu parameters and optimizer %u with %u "
                 "slots; this model has %zu parameters and optimizer %d with %d slots",
                 o->backup_dir, chosen, (unsigned long long)restored.n_params, restored.optim_kind,
                 restored.optim_slots, m->n_params, (int)opt->kind, opt->n_slots);
      }
      if (hdr[0] == VERDICT_RESUME) {
        hdr[1] = restored.global_step;
        hdr[2] = restored.epoch;
        hdr[3] = restored.data_position / (uint64_t)o->batch;
        hdr[4] = restored.optim_iterations;
        hdr[5] = restored.data_seed;
        hdr[6] = restored.world;
      }
    }
  }

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
  int W = tc.world, B = o->batch;
  /* From here SIGTERM means: finish the step, save, exit 75. */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, &old_term) == 0)
    term_installed = 1;

  /* 3. Same starting point everywhere: the chief's weights, or the state of
   * the chief's backup. */
  result = coll_broadcast(c, hdr, sizeof(hdr), 0);
  if (result)
    goto collective_failed;
  if (hdr[0] == VERDICT_REFUSE) {
    if (chief)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s", refuse);
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "the chief refused its backup in --backup-dir (written for a different training "
                "config; see the chief's log)");
  }
  int resumed = hdr[0] == VERDICT_RESUME;
  if (resumed && (hdr[6] < 1 || hdr[6] > CKPT_MAX_WORLD))
    CTRAIN_FAIL(CTRAIN_E_PEER, "the chief sent a backup header with world %llu",
                (unsigned long long)hdr[6]);
  model_init(m, o->seed);
  if (chief && resumed)
    memcpy(m->params, restored.params, m->n_params * sizeof(float));
  result = coll_broadcast(c, m->params, m->n_params * sizeof(float), 0);
  if (result)
    goto collective_failed;
  uint64_t gstep = 0, data_seed = o->seed;
  int start_epoch = 0;
  size_t start_step = 0;
  if (resumed) {
    if (opt->n_slots) {
      if (chief)
        memcpy(opt->state, restored.optim_state,
               (size_t)opt->n_slots * m->n_params * sizeof(float));
      result = coll_broadcast(c, opt->state, (size_t)opt->n_slots * m->n_params * sizeof(float), 0);
      if (result)
        goto collective_failed;
    }
    size_t nrow = (size_t)hdr[6] * CKPT_RANK_WORDS;
    rows = malloc(nrow * sizeof(uint64_t));
    if (!rows)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for the backup's per-rank state");
    if (chief)
      memcpy(rows, restored.per_rank, nrow * sizeof(uint64_t));
    result = coll_broadcast(c, rows, nrow * sizeof(uint64_t), 0);
    if (result)
      goto collective_failed;
    gstep = hdr[1];
    start_epoch = hdr[2] > (uint64_t)o->epochs ? o->epochs : (int)hdr[2];
    start_step = (size_t)hdr[3];
    opt->iterations = hdr[4];
    data_seed = hdr[5];
    if (chief)
      LOG_INFO("backup: resuming from %s at epoch %d, step %zu (global step %llu)", chosen,
               start_epoch + 1, start_step, (unsigned long long)gstep);
  }
  ckpt_state_free(&restored);
  if (backups) {
    sv.c = c;
    sv.o = o;
    sv.m = m;
    sv.opt = opt;
    sv.rank = tc.rank;
    sv.world = W;
    sv.batch = B;
    sv.data_seed = data_seed;
    sv.last_gstep = UINT64_MAX;
    sv.gath = malloc((size_t)W * RANK_FLOATS * sizeof(float));
    sv.rows = malloc((size_t)W * CKPT_RANK_WORDS * sizeof(uint64_t));
    if (!sv.gath || !sv.rows)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for backup state");
  }

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
    CTRAIN_FAIL(CTRAIN_E_DATA,
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
      /* O_NOFOLLOW, regular files only: the path may be on shared storage. */
      int mfd = -1;
      char why[4200];
      result = ctrain_file_open_append(o->metrics, &mfd, why, sizeof(why));
      if (result)
        CTRAIN_FAIL(result, "--metrics %s", why);
      metrics = fdopen(mfd, "a");
      if (!metrics) {
        close(mfd);
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "--metrics %s: %s", o->metrics, strerror(errno));
      }
    }
  }

  /* 4. Epochs. */
  double val_loss = NAN, val_acc = NAN;
  if (resumed && start_step >= steps) {
    start_epoch++;
    start_step = 0;
  }
  for (int epoch = start_epoch; epoch < o->epochs; epoch++) {
    double t0 = ctrain_mono_s(), compute = 0, lsum = 0;
    long correct = 0;
    size_t s0 = epoch == start_epoch ? start_step : 0;
    int stop = 0, save_at_end = 0;
    rng_t drop;
    rng_seed(&drop, o->seed ^ ((uint64_t)tc.rank << 32), 0x44524f50ull + (uint64_t)epoch);
    if (s0 > 0 && (uint64_t)tc.rank < hdr[6]) {
      /* Mid-epoch: this rank's dropout stream and partial sums, as saved. */
      const uint64_t *row = rows + (size_t)tc.rank * CKPT_RANK_WORDS;
      for (int i = 0; i < 4; i++)
        drop.s[i] = row[i];
      lsum = bitsd(row[4]);
      correct = (long)row[5];
    }
    if (chief)
      fprintf(stderr, "Epoch %d/%d\n", epoch + 1, o->epochs);
    data_epoch_order(&train, data_seed, epoch, 1, order);
    for (size_t s = s0; s < steps; s++) {
      double tc0 = ctrain_mono_s();
      data_gather(&train, order + s * (size_t)B, B, xb, yb);
      model_forward(m, xb, B, 1, &drop);
      lsum += model_loss(m, yb, B, &correct);
      model_backward(m, xb, yb, B, 1.0f / (float)global_batch);
      compute += ctrain_mono_s() - tc0;
      /* Everyone learns of a SIGTERM anywhere at the same step. */
      m->grads[m->n_params] = atomic_load(&g_sigterm) ? 1.0f : 0.0f;
      result = coll_allreduce_sum(c, m->grads, m->n_params + 1);
      if (result)
        goto collective_failed;
      stop = m->grads[m->n_params] > 0;
      double step_lr = lr;
      if (o->warmup_steps > 0 && gstep < (uint64_t)o->warmup_steps)
        step_lr = lr * (double)(gstep + 1) / o->warmup_steps;
      optim_step(opt, m->params, m->grads, (float)step_lr);
      gstep++;
      int due = backups && o->save_freq > 0 && gstep % (uint64_t)o->save_freq == 0;
      if (s + 1 == steps) {
        /* The epoch's last step: save after its evaluation, as the next
         * epoch's start. */
        save_at_end = due || stop;
        break;
      }
      if (due || (stop && backups)) {
        result =
            backup_save(&sv, (uint64_t)epoch, s + 1, gstep, &drop, lsum, correct, errbuf, errlen);
        if (result)
          goto out;
      }
      if (stop)
        goto stopped;
    }
    size_t ran = steps - s0;
    float ep[3] = {(float)lsum, (float)correct, (float)(steps * (size_t)B)};
    result = coll_allreduce_sum(c, ep, 3);
    if (result)
      goto collective_failed;
    double elapsed = ctrain_mono_s() - t0;
    /* The straggler: compute time per step of each worker against the median. */
    float ms = (float)(compute * 1000.0 / (double)(ran ? ran : 1)), st[2] = {ms, 0};
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
      double loss = ep[0] / ep[2], acc = ep[1] / ep[2];
      double sps = (double)(ran * (size_t)global_batch) / elapsed;
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
    if (epoch + 1 < o->epochs && backups && (o->save_freq == 0 || save_at_end)) {
      result = backup_save(&sv, (uint64_t)epoch + 1, 0, gstep, NULL, 0, 0, errbuf, errlen);
      if (result)
        goto out;
    }
    if (stop && epoch + 1 < o->epochs)
      goto stopped;
  }
  if (chief && o->test_data && !isnan(val_acc))
    LOG_INFO("test accuracy: %.4f (loss %.4f) on %zu samples", val_acc, val_loss, test.n);

  /* 5. The final model. */
  if (o->output) {
    char dir[4096];
    if (chief)
      snprintf(dir, sizeof(dir), "%s", o->output);
    else
      snprintf(dir, sizeof(dir), "%s/.worker-%d", o->output, tc.rank);
    if (!chief && mkdir(o->output, 0755) && errno != EEXIST)
      CTRAIN_FAIL(CTRAIN_E_IO, "--output %s: mkdir: %s", o->output, strerror(errno));
    result = safetensors_save_model(dir, m, errbuf, errlen);
    if (result)
      goto out;
    if (chief)
      LOG_INFO("model written to %s/model.safetensors", dir);
  }
  result = coll_barrier(c);
  if (result)
    goto collective_failed;
  /* Every worker's model is written: the backups have served. */
  if (chief && backups && !o->keep_backup) {
    char rerr[512];
    if (ckpt_remove_all(o->backup_dir, rerr, sizeof(rerr)))
      LOG_WARN("backup: removing backups after success: %s", rerr);
    else
      LOG_INFO("backup: removed the backups in %s (training finished)", o->backup_dir);
  }
  goto out;
stopped:
  if (backups)
    CTRAIN_FAIL(CTRAIN_E_CANCELLED,
                "stopped by SIGTERM after global step %llu; backup %s holds it (restart to resume)",
                (unsigned long long)gstep, chief ? sv.last_path : "written by the chief");
  CTRAIN_FAIL(CTRAIN_E_CANCELLED,
              "stopped by SIGTERM after global step %llu (no --backup-dir: progress is not saved)",
              (unsigned long long)gstep);
collective_failed:
  snprintf(errbuf, errlen, "collective failed: %s", coll_errmsg(c));
out:
  if (term_installed)
    sigaction(SIGTERM, &old_term, NULL);
  ckpt_state_free(&restored);
  free(rows);
  free(sv.gath);
  free(sv.rows);
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
