/* worker/train_backup.h - the train loop's side of BackupAndRestore (ckpt.h
 * holds the file format): the config hash, the chief's resume decision, the
 * resume state every rank receives, and the collective save.
 *
 * The replica layout (workers x local replicas) is in every backup. A resume
 * with the layout it was written with ends bitwise equal to an unbroken run.
 * A different layout resumes when it cannot change what is computed: the
 * same workers (so the same data shards), the same global batch (the config
 * hash covers it), and no Dropout (its masks are drawn per replica); it
 * continues at the same sample of the same order. Anything else is refused
 * (CTRAIN_E_CONFIG, exit 78) with the reason and the way out. */
#ifndef CTRAIN_TRAIN_BACKUP_H
#define CTRAIN_TRAIN_BACKUP_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "ctrain/rng.h"
#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/ckpt_store.h"
#include "worker/collective/coll.h"
#include "worker/data/data.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/options.h"

typedef enum { TRAIN_FRESH = 0, TRAIN_RESUME = 1, TRAIN_REFUSE = 2 } train_verdict;

/* What the chief decided from the backups, broadcast as is (every rank runs
 * the same binary) right after the rendezvous. */
typedef struct {
  uint32_t verdict;          /* train_verdict */
  uint32_t same_layout;      /* 1: the backup's workers x replicas are this run's */
  uint64_t global_step;      /* optimizer steps taken */
  uint64_t epoch;            /* epoch to resume in */
  uint64_t step;             /* steps of that epoch already taken */
  uint64_t optim_iterations; /* Adam's t */
  uint64_t data_seed;        /* the epoch order's seed */
  uint64_t world;            /* the layout the backup was written with */
  uint64_t replicas;
} train_resume;

/* SHA-256 over everything that must match for a backup to be resumed:
 * model config, optimizer and its hyper-parameters, learning rate schedule,
 * the global batch (per-replica batch x replicas x workers), seed and the
 * data's identity (spec, format, policy, samples and shape as the chief sees
 * them; streamed data: data_id, the stream's identity, 32 bytes, NULL
 * otherwise). Epochs, timeouts, output paths and the replica layout may change
 * between attempts (the layout is checked on its own, with its reason). */
void train_config_hash(const wk_options *o, const model_t *m, const data_set *train,
                       const uint8_t *data_id, int world, int replicas,
                       uint8_t out[CKPT_HASH_BYTES]);

/* The chief, before any peer is contacted: opens the store o names
 * (--backup-dir or --backup-uri) into *store (owned by the caller; the
 * saver's, freed by train_saver_free), loads the newest backup that verifies
 * into *restored (owned by the caller, ckpt_state_free) and decides.
 * TRAIN_REFUSE leaves the reason in refuse. An error (unusable directory,
 * store refused or unreachable, out of memory) is returned with errbuf. */
CTRAIN_NODISCARD ctrain_err train_restore_decide(
    const wk_options *o, const model_t *m, const optim_t *opt, const uint8_t hash[CKPT_HASH_BYTES],
    int world, int replicas, ckpt_store **store, ckpt_state *restored, train_resume *rs,
    char *chosen, size_t chosen_len, char *refuse, size_t refuse_len, char *errbuf, size_t errlen);

/* Everything a save needs that the train loop owns (borrowed pointers). */
typedef struct {
  coll_t *c;
  const wk_options *o;
  model_t *m;                       /* host copy of the weights, refreshed by the caller */
  optim_t *opt;                     /* host copy of the optimizer state, likewise */
  int rank, world, replicas, batch; /* batch: per replica */
  uint64_t data_seed;
  uint8_t hash[CKPT_HASH_BYTES];
  uint64_t *mine;      /* (replicas, CKPT_RANK_WORDS) this rank's rows */
  uint64_t *rows;      /* (world * replicas, CKPT_RANK_WORDS) gathered */
  ckpt_store *store;   /* the chief's (train_restore_decide), NULL elsewhere; owned */
  uint64_t last_gstep; /* global step of the last save, UINT64_MAX: none */
  char last_path[4096];
} train_saver;

/* Allocates the row buffers; CTRAIN_E_NOMEM. */
CTRAIN_NODISCARD ctrain_err train_saver_init(train_saver *sv);
/* Frees the buffers and the store. */
void train_saver_free(train_saver *sv);

/* The chief after success: deletes every backup of its store (a failure is
 * a warning: the model is written). */
void train_backup_remove_all(train_saver *sv);

/* Collective: every rank calls it at the same step, with its replicas'
 * dropout streams (`drop`, replicas entries; NULL at an epoch start, where
 * they are re-seeded) and its epoch sums. The chief writes the backup,
 * prunes older ones once the new one is durable, and tells everyone how it
 * went, so a failed save (disk full, the store unreachable) stops every
 * worker with exit 75 (78 when the store refuses access). */
CTRAIN_NODISCARD ctrain_err train_backup_save(train_saver *sv, uint64_t epoch, uint64_t step,
                                              uint64_t gstep, const rng_t *drop, double lsum,
                                              long correct, char *errbuf, size_t errlen);

#endif
