/* train_backup.c - the train loop's backups; see train_backup.h. */
#include "worker/train_backup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/clock.h"
#include "ctrain/log.h"
#include "worker/checkpoint/ckpt_store_s3.h"

void train_config_hash(const wk_options *o, const model_t *m, const data_set *train,
                       const uint8_t *data_id, int world, int replicas,
                       uint8_t out[CKPT_HASH_BYTES]) {
  uint8_t mh[CKPT_HASH_BYTES];
  char mhex[2 * CKPT_HASH_BYTES + 1], text[8192];
  const char *cfg = m->config_json ? m->config_json : "";
  ckpt_config_hash(cfg, strlen(cfg), mh);
  ckpt_hex(mh, mhex);
  long long global_batch = (long long)o->batch * replicas * world;
  /* A schedule other than the constant one depends on the run's length: in
   * the hash with it (a constant rate's text is the one backups had before
   * --lr-schedule, so they still resume). */
  char sched[64] = "", stream[96] = "";
  if (o->lr_schedule == WK_LR_COSINE)
    snprintf(sched, sizeof(sched), "lr_schedule=cosine\nepochs=%d\n", o->epochs);
  /* Streamed data: the shards' identity (names, sizes, ETags, counts, the
   * shuffle buffer), which fixes the records' order; absent for in-memory
   * data, so its backups keep their hash. */
  if (data_id) {
    char hex[2 * CKPT_HASH_BYTES + 1];
    ckpt_hex(data_id, hex);
    snprintf(stream, sizeof(stream), "stream=%s\n", hex);
  }
  int n =
      snprintf(text, sizeof(text),
               "ctrain-backup-config/2\nmodel=%s\nparams=%zu\noptimizer=%s\nmomentum=%.17g\n"
               "nesterov=%d\nlr=%.17g\nscale_lr=%d\nwarmup=%d\nglobal_batch=%lld\nseed=%llu\n"
               "data=%s\nformat=%d\nshard=%d\nsamples=%zu\ndim=%d\n%s%s",
               mhex, m->n_params, o->optimizer, o->momentum, o->nesterov, o->lr, o->scale_lr,
               o->warmup_steps, global_batch, (unsigned long long)o->seed, o->data ? o->data : "",
               (int)train->format, (int)o->shard, train->n, train->dim, sched, stream);
  size_t len = n < 0 ? 0 : ((size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
  ckpt_config_hash(text, len, out);
}

/* Why a backup of another layout cannot be resumed exactly; "" when it can. */
static void layout_check(const ckpt_state *st, const model_t *m, int world, int replicas,
                         const ckpt_store *store, const char *chosen, char *why, size_t len) {
  why[0] = '\0';
  if (st->world == (uint64_t)world && st->replicas == (uint64_t)replicas)
    return;
  if (st->world != (uint64_t)world)
    snprintf(why, len,
             "%s %s: backup %s was written by %llu worker(s) x %llu replica(s), this "
             "run has %d x %d: a different number of workers shards the data differently, so "
             "the run cannot continue exactly; run %llu workers, or use another %s",
             store->flag, store->base, chosen, (unsigned long long)st->world,
             (unsigned long long)st->replicas, world, replicas, (unsigned long long)st->world,
             store->flag);
  else if (model_has_dropout(m))
    snprintf(why, len,
             "%s %s: backup %s was written with %llu replica(s) per worker, this run "
             "has %d: the model's Dropout draws its masks per replica, so the run cannot "
             "continue exactly; use --device cpu:%llu (or gpu:%llu), or another %s",
             store->flag, store->base, chosen, (unsigned long long)st->replicas, replicas,
             (unsigned long long)st->replicas, (unsigned long long)st->replicas, store->flag);
}

/* The store o names: --backup-uri (object storage) or --backup-dir. */
static ctrain_err open_store(const wk_options *o, ckpt_store **out, char *errbuf, size_t errlen) {
  if (o->backup_uri) {
    s3_options so;
    memset(&so, 0, sizeof(so));
    so.uri = o->backup_uri;
    so.endpoint = o->s3_endpoint;
    so.max_send_bytes_per_s = o->s3_max_send;
    return ckpt_store_open_s3(&so, out, errbuf, errlen);
  }
  return ckpt_store_open_dir(o->backup_dir, out, errbuf, errlen);
}

ctrain_err train_restore_decide(const wk_options *o, const model_t *m, const optim_t *opt,
                                const uint8_t hash[CKPT_HASH_BYTES], int world, int replicas,
                                ckpt_store **store, ckpt_state *restored, train_resume *rs,
                                char *chosen, size_t chosen_len, char *refuse, size_t refuse_len,
                                char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char why[1024];
  memset(rs, 0, sizeof(*rs));
  rs->verdict = TRAIN_FRESH;
  result = open_store(o, store, errbuf, errlen);
  if (result)
    goto out;
  const ckpt_store *st = *store;
  result = ckpt_store_restore_latest(*store, restored, chosen, chosen_len, why, sizeof(why));
  if (result == CTRAIN_E_NOTFOUND) {
    LOG_INFO("backup: no backup in %s; starting fresh", st->base);
    result = CTRAIN_OK;
    goto out;
  }
  if (result == CTRAIN_E_UNSUPPORTED) {
    /* A newer build's backup: kept as it is, and this run stops (78). */
    rs->verdict = TRAIN_REFUSE;
    snprintf(refuse, refuse_len,
             "%s %s: %s; run the image that wrote it, or move the backup away to start fresh",
             st->flag, st->base, why);
    result = CTRAIN_OK;
    goto out;
  }
  if (result)
    CTRAIN_FAIL(result, "%s", why);
  char have[2 * CKPT_HASH_BYTES + 1], want[2 * CKPT_HASH_BYTES + 1];
  ckpt_hex(restored->config_hash, have);
  ckpt_hex(hash, want);
  rs->verdict = TRAIN_RESUME;
  if (memcmp(restored->config_hash, hash, CKPT_HASH_BYTES)) {
    if (!o->backup_ignore_config) {
      rs->verdict = TRAIN_REFUSE;
      snprintf(refuse, refuse_len,
               "%s %s: backup %s was written for a different training config "
               "(backup config hash %s, this run %s); use another %s, delete it, "
               "or pass --backup-ignore-config",
               st->flag, st->base, chosen, have, want, st->flag);
      goto out;
    }
    LOG_WARN("backup: %s has config hash %s, this run %s; resuming anyway "
             "(--backup-ignore-config)",
             chosen, have, want);
  }
  if (restored->n_params != m->n_params || restored->optim_slots != (uint32_t)opt->n_slots ||
      restored->optim_kind != (uint32_t)opt->kind) {
    rs->verdict = TRAIN_REFUSE;
    snprintf(refuse, refuse_len,
             "%s %s: backup %s holds %llu parameters and optimizer %u with %u "
             "slots; this model has %zu parameters and optimizer %d with %d slots",
             st->flag, st->base, chosen, (unsigned long long)restored->n_params,
             restored->optim_kind, restored->optim_slots, m->n_params, (int)opt->kind,
             opt->n_slots);
    goto out;
  }
  layout_check(restored, m, world, replicas, st, chosen, refuse, refuse_len);
  if (refuse[0]) {
    rs->verdict = TRAIN_REFUSE;
    goto out;
  }
  rs->same_layout = restored->world == (uint64_t)world && restored->replicas == (uint64_t)replicas;
  if (!rs->same_layout)
    LOG_WARN("backup: %s was written by %llu worker(s) x %llu replica(s), this run has %d x %d; "
             "same global batch and data order, no Dropout: resuming at the same sample",
             chosen, (unsigned long long)restored->world, (unsigned long long)restored->replicas,
             world, replicas);
  rs->global_step = restored->global_step;
  rs->epoch = restored->epoch;
  rs->step = restored->step;
  rs->optim_iterations = restored->optim_iterations;
  rs->data_seed = restored->data_seed;
  rs->world = restored->world;
  rs->replicas = restored->replicas;
out:
  return result;
}

ctrain_err train_saver_init(train_saver *sv) {
  sv->last_gstep = UINT64_MAX;
  sv->mine = calloc((size_t)sv->replicas * CKPT_RANK_WORDS, sizeof(uint64_t));
  sv->rows = calloc((size_t)sv->world * (size_t)sv->replicas * CKPT_RANK_WORDS, sizeof(uint64_t));
  return sv->mine && sv->rows ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

void train_saver_free(train_saver *sv) {
  ckpt_store_free(sv->store);
  sv->store = NULL;
  free(sv->mine);
  free(sv->rows);
  sv->mine = sv->rows = NULL;
}

/* The chief's half: the file, then pruning. */
static ctrain_err write_backup(train_saver *sv, uint64_t epoch, uint64_t step, uint64_t gstep,
                               char *errbuf, size_t errlen) {
  double t0 = ctrain_mono_s();
  ckpt_state st;
  memset(&st, 0, sizeof(st));
  memcpy(st.config_hash, sv->hash, CKPT_HASH_BYTES);
  st.global_step = gstep;
  st.epoch = epoch;
  st.step = step;
  st.data_seed = sv->data_seed;
  st.data_position = step * (uint64_t)sv->batch * (uint64_t)sv->replicas;
  st.world = (uint64_t)sv->world;
  st.replicas = (uint64_t)sv->replicas;
  st.optim_kind = (uint32_t)sv->opt->kind;
  st.optim_slots = (uint32_t)sv->opt->n_slots;
  st.optim_iterations = sv->opt->iterations;
  st.n_params = sv->m->n_params;
  st.per_rank = sv->rows;
  st.params = sv->m->params;
  st.optim_state = sv->opt->state;
  if (!sv->store) {
    snprintf(errbuf, errlen, "backup: no store open on the chief");
    return CTRAIN_E_IO;
  }
  ctrain_err result =
      ckpt_store_save(sv->store, &st, sv->last_path, sizeof(sv->last_path), errbuf, errlen);
  if (result)
    return result;
  char perr[1024];
  if (ckpt_store_prune(sv->store, sv->o->keep, perr, sizeof(perr)))
    LOG_WARN("backup: pruning old backups: %s", perr);
  LOG_INFO("backup: wrote %s (epoch %llu, step %llu, global step %llu) in %.3f s", sv->last_path,
           (unsigned long long)epoch + 1, (unsigned long long)step, (unsigned long long)gstep,
           ctrain_mono_s() - t0);
  return CTRAIN_OK;
}

ctrain_err train_backup_save(train_saver *sv, uint64_t epoch, uint64_t step, uint64_t gstep,
                             const rng_t *drop, double lsum, long correct, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t row_bytes = (size_t)sv->replicas * CKPT_RANK_WORDS * sizeof(uint64_t);
  memset(sv->mine, 0, row_bytes);
  for (int r = 0; drop && r < sv->replicas; r++)
    memcpy(sv->mine + (size_t)r * CKPT_RANK_WORDS, drop[r].s, 4 * sizeof(uint64_t));
  memcpy(sv->mine + 4, &lsum, sizeof(double));
  sv->mine[5] = (uint64_t)correct;
  result = coll_allgather_bytes(sv->c, sv->mine, row_bytes, sv->rows);
  if (result)
    goto collective;
  int32_t status = CTRAIN_OK;
  if (sv->rank == 0)
    status = (int32_t)write_backup(sv, epoch, step, gstep, errbuf, errlen);
  result = coll_broadcast(sv->c, &status, sizeof(status), 0);
  if (result)
    goto collective;
  if (status) {
    if (sv->rank != 0) {
      snprintf(errbuf, errlen,
               "the chief could not write a backup at global step %llu (see its log); the "
               "previous backup is intact",
               (unsigned long long)gstep);
    } else {
      char why[1024];
      snprintf(why, sizeof(why), "%s", errbuf);
      snprintf(errbuf, errlen, "backup: %s; the previous backup is intact", why);
    }
    /* Disk full and a refusal of the store (exit 78: credentials revoked,
     * bucket gone) keep their kind; anything else is retryable (75). */
    return status == CTRAIN_E_NOSPACE || status == CTRAIN_E_CONFIG ? (ctrain_err)status
                                                                   : CTRAIN_E_IO;
  }
  sv->last_gstep = gstep;
  return CTRAIN_OK;
collective:
  snprintf(errbuf, errlen, "collective failed: %s", coll_errmsg(sv->c));
  return result;
}

void train_backup_remove_all(train_saver *sv) {
  char rerr[1024];
  if (!sv->store)
    return;
  if (ckpt_store_remove_all(sv->store, rerr, sizeof(rerr)))
    LOG_WARN("backup: removing backups after success: %s", rerr);
  else
    LOG_INFO("backup: removed the backups in %s (training finished)", sv->store->base);
}
