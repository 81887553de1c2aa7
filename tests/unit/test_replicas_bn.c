/* test_replicas_bn.c - local CPU replicas whose batch normalization
 * statistics are synchronized (replicas_sync_bn): each steps on a thread of
 * its own, they meet in every BatchNormalization layer, and the result is
 * one replica's at the whole batch; a failure in the meeting reaches every
 * replica instead of leaving one waiting. Labelled `threads` (TSan lane). */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_cpu_model.h"
#include "worker/model/replicas.h"

enum { B = 8, R = 2, H = B / R };

/* What `across` saw: the calls and the first call's row count. */
typedef struct {
  int calls;
  float first_rows;
  ctrain_err fail; /* returned from the second call on */
} across_log;

static ctrain_err across(void *ctx, float *v, size_t n, char *errbuf, size_t errlen) {
  across_log *a = ctx;
  if (a->calls++ == 0)
    a->first_rows = v[n - 1]; /* the first layer's forward: C sums, then the rows (pixels) */
  if (a->fail && a->calls > 1) {
    snprintf(errbuf, errlen, "peer 1 lost");
    return a->fail;
  }
  return CTRAIN_OK;
}

static replica_set *open_set(model_t *m, across_log *log) {
  replica_set *rs = NULL;
  char err[512] = "";
  if (replicas_create(m, NULL, R, 0, H, 0, &rs, err, sizeof(err)))
    TEST_FAIL_("replicas_create: %s", err);
  ASSERT_OK(replicas_sync_bn(rs, across, log, err, sizeof(err)));
  ASSERT_OK(replicas_push(rs, m, NULL, err, sizeof(err)));
  for (int r = 0; r < R; r++)
    rng_seed(&rs->drop[r], 7, (uint64_t)r);
  return rs;
}

TEST(replicas_meet_in_batchnorm) {
  cpu_model whole;
  float x[B * 25], *g;
  int32_t y[B];
  double lw = sync_reference(&whole, B, 23, x, y, &g);
  model_t *m = whole.m;
  model_t *want = build(SYNC_MODEL), *got = build(SYNC_MODEL);
  ASSERT_OK(dmodel_pull(whole.d, want, NULL)); /* the moving statistics after the step */

  across_log log = {0};
  replica_set *rs = open_set(m, &log);
  char err[512] = "";
  for (int step = 0; step < 3; step++) { /* the meetings are reused step after step */
    ASSERT_OK(replicas_push(rs, m, NULL, err, sizeof(err)));
    ASSERT_OK(replicas_step_all(rs, x, y, H, 1, 0.1f, 1, err, sizeof(err)));
    ASSERT_OK(replicas_wait(rs, err, sizeof(err)));
    ASSERT_OK(replicas_reduce(rs, err, sizeof(err)));
    ASSERT_NEAR(rs->loss[0] + rs->loss[1], lw, 1e-4);
    for (size_t k = 0; k < m->n_params; k++)
      ASSERT_NEAR(rs->sum[k], g[k], 1e-5 + 1e-4 * fabs(g[k]));
  }
  /* Two BatchNormalization layers, two meetings forward and one backward
   * each, three steps: across runs once a meeting, on the replicas' sum. */
  ASSERT_EQ(log.calls, 3 * 2 * 3);
  ASSERT_EQ(log.first_rows, (float)(B * 25)); /* every pixel of the whole batch */
  for (int r = 0; r < R; r++) {
    ASSERT_OK(dmodel_pull(rs->d[r], got, NULL));
    for (size_t k = 0; k < m->n_params; k++)
      ASSERT_NEAR(got->params[k], want->params[k], 1e-6);
  }
  replicas_free(rs);
  model_free(want);
  model_free(got);
  free(g);
  cpu_close(&whole);
}

TEST(failed_meeting_reaches_every_replica) {
  model_t *m = build(SYNC_MODEL);
  model_init(m, 2);
  float x[B * 25];
  int32_t y[B];
  random_batch(m, B, 23, x, y);
  across_log log = {.fail = CTRAIN_E_PEER};
  replica_set *rs = open_set(m, &log);
  char err[512] = "";
  ctrain_err rc = replicas_step_all(rs, x, y, H, 1, 0.1f, 1, err, sizeof(err));
  ASSERT_EQ(rc, CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(err, "peer 1 lost");
  ASSERT_STR_CONTAINS(err, "synchronizing the batch statistics of layer batch_normalization");
  ASSERT_EQ(log.calls, 2); /* the second meeting failed; no one went on to a third */
  replicas_free(rs);
  model_free(m);
}

TEST(one_replica_calls_across_directly) {
  model_t *m = build(SYNC_MODEL);
  model_init(m, 2);
  replica_set *rs = NULL;
  char err[512] = "";
  across_log log = {0};
  ASSERT_OK(replicas_create(m, NULL, 1, 0, B, 0, &rs, err, sizeof(err)));
  ASSERT_OK(replicas_sync_bn(rs, across, &log, err, sizeof(err)));
  ASSERT_NULL(rs->bn);
  float x[B * 25];
  int32_t y[B];
  random_batch(m, B, 23, x, y);
  ASSERT_OK(replicas_push(rs, m, NULL, err, sizeof(err)));
  ASSERT_OK(replicas_step_all(rs, x, y, B, 1, 0.1f, 1, err, sizeof(err)));
  ASSERT_EQ(log.calls, 6);
  replicas_free(rs);
  model_free(m);
}

TEST_MAIN(T(replicas_meet_in_batchnorm), T(failed_meeting_reaches_every_replica),
          T(one_replica_calls_across_directly))
