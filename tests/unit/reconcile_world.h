/* reconcile_world.h - the machinery of the table-driven reconcile tests
 * (tests/unit/test_reconcile.c, test_ctl_failrules.c): the library
 * ctrain_test_reconcile, built once from reconcile_world.c.
 *
 * A small in-memory world stands in for the apiserver: it applies the
 * actions a pass returns (pods appear Pending, deletes set a
 * deletionTimestamp, the status is written back) and the steps move pods
 * through their phases the way the kubelet would.
 *
 * A case (rcase) is a table row: a job (the base job of world_init, with a
 * JSON merge patch), then steps: inputs (the observed pods, services,
 * expectations, progress, clock) and passes of recon_reconcile, each with
 * its expected outcome as JSON. Expectations are parsed and matched against
 * the pass's observation (obs_build: its actions by kind, status,
 * conditions by type, the world's pods), never compared as text; a mismatch
 * prints the case, the step's line, the path of the field and both sides.
 *
 * The expected JSON is a pattern (jm_match):
 *   object        every key listed must match (others are not checked); on an
 *                 array, a key is an index ("0", "-1": the last)
 *   array         the same length, element by element
 *   scalar        equal (numbers by value)
 *   null          absent (or null)
 *   operators     {"$absent":true} (false: present) {"$count":n} (of an array
 *                 or object) {"$contains":"s" or ["s",..]} (parts of a string)
 *                 {"$gt":n} {"$ge":n} {"$lt":n} {"$le":n}
 *                 {"$has":[p,..]}   each pattern matches some element
 *                 {"$none":[p,..]}  no element matches any pattern
 *                 {"$order":["a","b"]} first occurrences in this order
 *                 {"$json":p}       a string that parses to JSON matching p
 * In the tables' JSON ' stands for " (qparse), so patterns read as JSON. */
#ifndef CTRAIN_RECONCILE_WORLD_H
#define CTRAIN_RECONCILE_WORLD_H

#include "test.h"

#include <cjson/cJSON.h>

#include "controller/podbuild.h"
#include "controller/reconcile.h"
#include "ctrain/kube_time.h"

#define NOW      1700000000LL
#define XSTR_(x) #x
#define XSTR(x)  XSTR_(x)

/* ---- matching parsed JSON ------------------------------------------------ */

/* The number of mismatches of `act` against the pattern `exp`, each printed
 * when quiet is 0; 1: only whether there is one (the first ends the
 * search); 2: all counted, none printed. */
int jm_match(const cJSON *act, const cJSON *exp, const char *path, int quiet);

/* Parses the JSON of a table, where ' stands for " (a quote inside a JSON
 * string is \" there, \\\" in a C literal). Owned; NULL when not JSON. */
cJSON *rw_qparse(const char *text);

/* The mismatches of `act` against the pattern text `exp` (rw_qparse); a
 * pattern that is not JSON fails the test at once. */
int jm_check(const cJSON *act, const char *exp, const char *where);

/* Fails the test when `act` does not match the pattern text `exp`. */
#define EXPECT_JSON(act, exp)                                                                      \
  do {                                                                                             \
    char where_[256];                                                                              \
    snprintf(where_, sizeof(where_), "%s:%d: %s", __FILE__, __LINE__, #act);                       \
    if (jm_check((act), (exp), where_))                                                            \
      abort();                                                                                     \
  } while (0)

/* RFC 7386 merge patch (the text read by rw_qparse) onto target: objects
 * merge, null deletes, anything else replaces. */
void rw_merge_patch_text(cJSON *target, const char *patch);

/* ---- the world -------------------------------------------------------------- */

typedef struct {
  cJSON *job;
  cJSON *pods; /* array: what exists */
  cJSON *view; /* what the cache shows when not NULL (a lagging cache); else pods */
  int service;
  int token_attempt; /* the attempt whose token Secret was "created" */
  int64_t now;
  int burst;
  int progress_interval_s;
  int job_deleted;
  int token_fail;
  int token_calls;
  int passes; /* of the last settle */
  recon_expectations x;
  recon_result res;
  cJSON *progress; /* recon_input.progress */
  recon_straggler straggler;
  char *cluster;            /* data.cluster of the latest cluster ConfigMap created */
  int cluster_attempt;      /* its attempt */
  const char *create_error; /* recon_input.create_error */
} world;

/* A token that, like the controller's, depends on the job uid and attempt only. */
ctrain_err rw_fake_token(void *ctx, const char *uid, int attempt, char *hex, size_t n);

/* The job's spec; set_spec replaces (or adds) its field k with v (owned). */
cJSON *rw_spec_of(world *w);
void rw_set_spec(world *w, const char *k, cJSON *v);

/* Every replica type's pod template. */
#define TEMPLATE_JSON                                                                              \
  "{\"spec\":{\"containers\":[{\"name\":\"train\",\"image\":\"ctrain:dev\","                       \
  "\"ports\":[{\"containerPort\":2222}]}]}}"

/* Adds the replica type `type` with n replicas of TEMPLATE_JSON to rs. */
void rw_add_replicas(cJSON *rs, const char *type, int n);

/* A job as the apiserver returns it, with the CRD defaults applied:
 *   {"apiVersion":"ctrain.dev/v1alpha1","kind":"TrainingJob",
 *    "metadata":{"name":"tj","namespace":"default","uid":"job-uid","generation":1},
 *    "spec":{"replicaSpecs":{"Chief":{"replicas":1,"template":T},  (chief)
 *                            "Worker":{"replicas":workers,"template":T},
 *                            "Evaluator":{"replicas":1,"template":T}},  (evaluator)
 *            "port":2222,"restartPolicy":"OnFailure","backoffLimit":3,"suspend":false,
 *            "cleanPodPolicy":"Running","successPolicy":"ChiefOrWorker0"}} */
void world_init(world *w, int chief, int workers, int evaluator);
void world_free(world *w);

/* A pass of recon_reconcile over the world (its result in w->res). */
void rw_run(world *w);

/* The string at o.a (o.a.b when b is not NULL); NULL when not a string. */
const char *rw_str_at(const cJSON *o, const char *a, const char *b);

/* The pod `name` of the world; fails the test when there is none. */
cJSON *rw_pod_named(world *w, const char *name);

/* The pod's container exited with `code` at `finished` (seconds after NOW). */
void rw_terminate(world *w, const char *name, int code, const char *reason, int finished);

/* `name` exits 75 (it lost a peer) at NOW + finished, and the clock moves
 * past the window in which the end of the attempt waits for a cause
 * (RECON_PEER_LOSS_WINDOW_S) while others still run. */
void rw_lost_peer(world *w, const char *name, int finished);

/* The number of actions of kind k of the last pass. */
size_t rw_count(world *w, recon_action_kind k);

/* Runs passes, applying each and marking new pods Running, until a pass
 * creates nothing. Returns the number of passes that created pods. */
int rw_settle(world *w);

/* ---- what a pass did, as JSON -------------------------------------------- */

/* The last pass and the world after it, as one object:
 *   n, kinds (the actions' kinds in order), and per kind ("CreatePod", ...)
 *   its actions in order: {i, name, uid, attempt, type, reason, message,
 *   after, about: {kind, name} and follows (events: the action reported
 *   and whether it comes first), seconds, force, index, object};
 *   status (the new status), cond (its conditions by type), state
 *   (recon_state), statusChanged, requeueAfter, attempt (of the result),
 *   pending (expectations), podCount, pods (the world's, by name),
 *   passes (of the last settle), jobDeleted. Owned. */
cJSON *obs_build(world *w);

/* ---- cases: a job and steps ---------------------------------------------- */

typedef enum {
  OP_END = 0,
  OP_RUN,             /* a pass; json: what it must have done (obs_build) */
  OP_EXPECT,          /* json: the last pass and the world now */
  OP_SETTLE,          /* settle(); json: as OP_EXPECT */
  OP_APPLY,           /* the apiserver applies the last pass */
  OP_APPLY_EXCEPT,    /* s: the pod creates (comma-separated) that were not sent */
  OP_APPLY_NO_STATUS, /* apply, but the job cache keeps the old status */
  OP_REAP,            /* the kubelet finishes every deletion */
  OP_ALL_RUNNING,     /* every Pending pod runs */
  OP_TERMINATE,       /* s exits a at NOW + b, json: the reason */
  OP_LOST_PEER,       /* s exits 75 at NOW + a; the clock past the wait for a cause */
  OP_SET_PHASE,       /* s's phase is json */
  OP_PATCH_POD,       /* merge patch json onto pod s */
  OP_PATCH_PODS,      /* merge patch json onto every pod */
  OP_PATCH_JOB,       /* merge patch json onto the job */
  OP_REMOVE_POD,      /* pod s's object is gone */
  OP_ADD_POD,         /* the pod json exists */
  OP_DELETE_BY,       /* someone deletes s: deletionTimestamp now + a, forced when b */
  OP_NODE_LOST,       /* s's node json is marked not ready */
  OP_TERM_MESSAGE,    /* s's termination message is json (a string) */
  OP_NOW,             /* now = NOW + a */
  OP_ADVANCE,         /* now += a */
  OP_BURST,           /* recon_input.burst = a */
  OP_POLL_INTERVAL,   /* recon_input.progress_interval_s = a */
  OP_PROGRESS,        /* recon_input.progress = json ("lastPollTime":"now": now); NULL: none */
  OP_STRAGGLER,       /* recon_input.straggler: known a, rank b, ratio json */
  OP_CREATE_ERROR,    /* recon_input.create_error = s */
  OP_CREATION_FAILED, /* the executor reports the create of s failed */
  OP_DELETION_FAILED, /* the executor reports the delete of uid s failed */
  OP_FORGET,          /* a new controller process: no expectations */
  OP_TOKEN_ATTEMPT,   /* the executor knows the token Secret of attempt a */
  OP_VIEW_EMPTY,      /* the pod cache shows nothing */
  OP_VIEW_SNAPSHOT,   /* the pod cache shows the pods as they are now, from now on */
  OP_VIEW_ONLY,       /* the pod cache shows pod s only */
  OP_VIEW_LIVE,       /* the pod cache is current again */
} op_kind;

typedef struct {
  op_kind op;
  const char *s;
  long long a, b;
  const char *json;
  int line;
} step;

typedef struct {
  const char *name;
  int chief, workers, evaluator; /* world_init */
  const char *job;               /* a merge patch onto the base job, or NULL */
  const step *steps;             /* up to OP_END */
} rcase;

#define STEPS(...) ((const step[]){__VA_ARGS__, {OP_END, NULL, 0, 0, NULL, __LINE__}})
#define S_(op, s, a, b, json)                                                                      \
  { op, s, a, b, json, __LINE__ }
#define RUN(exp)                         S_(OP_RUN, NULL, 0, 0, exp)
#define RUN_()                           S_(OP_RUN, NULL, 0, 0, NULL)
#define EXPECT(exp)                      S_(OP_EXPECT, NULL, 0, 0, exp)
#define SETTLE(exp)                      S_(OP_SETTLE, NULL, 0, 0, exp)
#define SETTLE_()                        S_(OP_SETTLE, NULL, 0, 0, NULL)
#define APPLY()                          S_(OP_APPLY, NULL, 0, 0, NULL)
#define APPLY_EXCEPT(names)              S_(OP_APPLY_EXCEPT, names, 0, 0, NULL)
#define APPLY_NO_STATUS()                S_(OP_APPLY_NO_STATUS, NULL, 0, 0, NULL)
#define REAP()                           S_(OP_REAP, NULL, 0, 0, NULL)
#define ALL_RUNNING()                    S_(OP_ALL_RUNNING, NULL, 0, 0, NULL)
#define TERMINATE(pod, code, reason, at) S_(OP_TERMINATE, pod, code, at, reason)
#define LOST_PEER(pod, at)               S_(OP_LOST_PEER, pod, at, 0, NULL)
#define SET_PHASE(pod, phase)            S_(OP_SET_PHASE, pod, 0, 0, phase)
#define PATCH_POD(pod, patch)            S_(OP_PATCH_POD, pod, 0, 0, patch)
#define PATCH_PODS(patch)                S_(OP_PATCH_PODS, NULL, 0, 0, patch)
#define PATCH_JOB(patch)                 S_(OP_PATCH_JOB, NULL, 0, 0, patch)
#define REMOVE_POD(pod)                  S_(OP_REMOVE_POD, pod, 0, 0, NULL)
#define ADD_POD(pod)                     S_(OP_ADD_POD, NULL, 0, 0, pod)
#define DELETE_BY(pod, in, forced)       S_(OP_DELETE_BY, pod, in, forced, NULL)
#define NODE_LOST(pod, node)             S_(OP_NODE_LOST, pod, 0, 0, node)
#define TERM_MESSAGE(pod, m)             S_(OP_TERM_MESSAGE, pod, 0, 0, m)
#define AT(s)                            S_(OP_NOW, NULL, s, 0, NULL)
#define ADVANCE(s)                       S_(OP_ADVANCE, NULL, s, 0, NULL)
#define BURST(n)                         S_(OP_BURST, NULL, n, 0, NULL)
#define POLL_INTERVAL(s)                 S_(OP_POLL_INTERVAL, NULL, s, 0, NULL)
#define PROGRESS(json)                   S_(OP_PROGRESS, NULL, 0, 0, json)
#define STRAGGLER(known, rank, ratio)    S_(OP_STRAGGLER, NULL, known, rank, ratio)
#define CREATE_ERROR(msg)                S_(OP_CREATE_ERROR, msg, 0, 0, NULL)
#define CREATION_FAILED(pod)             S_(OP_CREATION_FAILED, pod, 0, 0, NULL)
#define DELETION_FAILED(uid)             S_(OP_DELETION_FAILED, uid, 0, 0, NULL)
#define FORGET()                         S_(OP_FORGET, NULL, 0, 0, NULL)
#define TOKEN_ATTEMPT(n)                 S_(OP_TOKEN_ATTEMPT, NULL, n, 0, NULL)
#define VIEW_EMPTY()                     S_(OP_VIEW_EMPTY, NULL, 0, 0, NULL)
#define VIEW_SNAPSHOT()                  S_(OP_VIEW_SNAPSHOT, NULL, 0, 0, NULL)
#define VIEW_ONLY(pod)                   S_(OP_VIEW_ONLY, pod, 0, 0, NULL)
#define VIEW_LIVE()                      S_(OP_VIEW_LIVE, NULL, 0, 0, NULL)

/* Runs a case; 0 when every expectation held. */
int rw_case_run(const rcase *c);

/* Runs every case of a table (those whose names start with RECON_CASE when
 * that is set), each to its first mismatch; fails the test naming the cases
 * that failed. */
void rw_cases_run(const rcase *cases, size_t n);

#define CASES_RUN(table) rw_cases_run((table), sizeof(table) / sizeof((table)[0]))

#endif
