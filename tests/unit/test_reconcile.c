/* test_reconcile.c - the pure TrainingJob reconcile, rule by rule, as tables.
 *
 * Each case is a row: a job (world_init's, with a merge patch), then steps
 * that set what the pass observes (pods, expectations, progress, clock),
 * run passes and match what each did (its actions by kind, the status, its
 * conditions by type, the world's pods) against parsed JSON patterns; see
 * reconcile_world.h. `RECON_CASE=prefix ./test_reconcile <table>` runs the
 * cases whose names start with prefix. What does not fit a table (direct
 * calls, error returns, allocation failures, sizes) is a function below the
 * tables, its JSON checked parsed the same way (EXPECT_JSON, EXPECT_PASS). */
#include "reconcile_world.h"

#include "backup_uris.h"

#include "controller/jobspec.h"
#include "ctrain/contract.h"
#include "ctrain/tfconfig.h"
#include "test_alloc.h"

/* `job`'s spec as the builders take it (jobspec_read); valid until the
 * next call. */
static const job_spec *parsed_spec(const cJSON *job) {
  static job_spec js;
  jobspec_read(job, &js);
  return &js;
}

/* The pass created exactly these pods, in any order. */
#define CREATES2(a, b) "{'$count':2,'$has':[{'name':'" a "'},{'name':'" b "'}]}"

/* The pass failed the job for an invalid spec, naming `field`, and did
 * nothing else. */
#define INVALID(field)                                                                             \
  "{'n':1,'kinds':['UpdateStatus'],'cond':{'Failed':{'status':'True','reason':'InvalidSpec',"      \
  "'message':{'$contains':'" field "'}},'Created':null}}"

/* A progress poll (recon_input.progress). */
#define POLL(epoch, acc, rank, ratio, time)                                                        \
  "{'epoch':" #epoch ",'epochs':2,'step':19,'stepsPerEpoch':1875,'samplesPerSec':16500.5,"         \
  "'loss':0.4,'accuracy':" #acc ",'replicasInSync':4,'slowestWorker':{'rank':" #rank               \
  ",'ratio':" #ratio "},'lastPollTime':'" time "'}"

#define RUNNING_TRUE "{'cond':{'Running':{'status':'True'}}}"

/* ---- creating a job's objects; expectations ------------------------------- */

static const rcase create_cases[] = {
    {"first_reconcile_creates_service_secret_all_pods", 1, 3, 0, NULL,
     /* The status goes first, then Service, Secret and the attempt's
      * NetworkPolicy, and every pod, in type and index order (the
      * executor's slow start sends them 1, 2, 1), each with its own event
      * after it. Only the attempt's own pods may reach the job's pods. The
      * creates of the pass count as active already (as in the Job
      * controller). */
     STEPS(RUN(
         "{'kinds':{'0':'UpdateStatus','1':'CreateService','2':'CreateSecret',"
         "'3':'CreateNetworkPolicy'},"
         "'CreateService':[{'object':{'spec':{'clusterIP':'None'}}}],"
         "'CreateNetworkPolicy':[{'attempt':1,'object':{'metadata':{'name':'tj'},'spec':{"
         "'podSelector':{'matchLabels':{'$count':1,'ctrain.dev/job-name':'tj'}},"
         "'ingress':{'$has':[{'from':[{'podSelector':{'matchLabels':{'$count':2,"
         "'ctrain.dev/job-name':'tj','ctrain.dev/attempt':'1'}}}]}]},"
         "'policyTypes':['Ingress']}}}],"
         "'CreateSecret':[{'attempt':1,'object':{'metadata':{'name':'tj-token-1',"
         "'resourceVersion':null},'stringData':{'token':'tok-job-uid-1'}}}],"
         "'CreatePod':[{'name':'tj-chief-0','attempt':1},{'name':'tj-worker-0','attempt':1},"
         "{'name':'tj-worker-1','attempt':1},{'name':'tj-worker-2','attempt':1}],"
         "'Event':{'$count':4,'$has':["
         "{'reason':'SuccessfulCreatePod','type':'Normal','follows':true,"
         "'message':{'$contains':'tj-chief-0'},'about':{'kind':'CreatePod','name':'tj-chief-0'},"
         "'object':{'kind':'TrainingJob','uid':'job-uid'}},"
         "{'reason':'SuccessfulCreatePod','follows':true,'message':{'$contains':'tj-worker-0'},"
         "'about':{'kind':'CreatePod','name':'tj-worker-0'}},"
         "{'reason':'SuccessfulCreatePod','follows':true,'message':{'$contains':'tj-worker-1'},"
         "'about':{'kind':'CreatePod','name':'tj-worker-1'}},"
         "{'reason':'SuccessfulCreatePod','follows':true,'message':{'$contains':'tj-worker-2'},"
         "'about':{'kind':'CreatePod','name':'tj-worker-2'}}]},"
         "'cond':{'Created':{'status':'True'},'Running':null},"
         "'status':{'startTime':'2023-11-14T22:13:20Z','attempt':1,'restarts':0,"
         "'observedGeneration':1,'replicaStatuses':{'Worker':{'active':3},"
         "'Chief':{'active':1}}},"
         "'statusChanged':true,'pending':4}"))},
    {"pods_appearing_need_no_status_write", 1, 3, 1, NULL,
     STEPS(RUN("{'statusChanged':true}"),
           /* The executor: worker-2 failed, the evaluator was not sent. */
           APPLY_EXCEPT("tj-worker-2,tj-evaluator-0"),
           /* The cache shows a part of the pods that were created: still
            * expected, still counted, nothing to write (a lagging cache
            * costs no request). */
           VIEW_ONLY("tj-worker-0"),
           RUN("{'statusChanged':false,'UpdateStatus':[],'CreatePod':[],"
               "'status':{'replicaStatuses':{'Worker':{'active':3}}}}"),
           VIEW_LIVE(),
           /* The failures are reported: the creates come back with their
            * own expectations and count again. */
           CREATION_FAILED("tj-worker-2"), CREATION_FAILED("tj-evaluator-0"),
           RUN("{'CreatePod':{'$count':2},'statusChanged':false,'status':{'replicaStatuses':{"
               "'Worker':{'active':3},'Evaluator':{'active':1}}}}"),
           /* Given up again, and this time the burst lets only worker-2
            * through: the evaluator's count drops to what exists, and that
            * is written. */
           CREATION_FAILED("tj-worker-2"), CREATION_FAILED("tj-evaluator-0"), BURST(1),
           RUN("{'CreatePod':[{'name':'tj-worker-2'}],'statusChanged':true,'status':{"
               "'replicaStatuses':{'Worker':{'active':3},'Evaluator':{'active':0}}}}"))},
    {"all_missing_pods_in_one_pass", 1, 14, 1, NULL, /* 16 pods */
     STEPS(SETTLE("{'passes':1,'podCount':16,'cond':{'Running':{'status':'True'}},"
                  "'status':{'replicaStatuses':{'Worker':{'active':14}}},'pending':0}"))},
    {"burst_caps_creates", 0, 20, 0, NULL,
     STEPS(BURST(3), RUN("{'CreatePod':{'$count':3}}"), APPLY_EXCEPT("tj-worker-1"),
           /* The cache has not shown them yet: 3 in flight is the burst. */
           VIEW_EMPTY(), RUN("{'CreatePod':[]}"),
           /* worker-1 failed: its slot in the burst is free again, and it goes first. */
           CREATION_FAILED("tj-worker-1"), RUN("{'CreatePod':[{'name':'tj-worker-1'}]}"),
           VIEW_LIVE(), APPLY(),
           /* Observed pods leave the burst: 3 per pass, ceil(17 / 3) more passes. */
           SETTLE("{'podCount':20,'passes':6}"))},
    {"expectations_prevent_duplicates_when_cache_lags", 1, 3, 0, NULL,
     STEPS(
         BURST(2), RUN("{'CreatePod':" CREATES2("tj-chief-0", "tj-worker-0") "}"),
         /* The create happened but the cache shows no pod yet: nothing
          * again, and a requeue at the expectations' expiry keeps a lost
          * watch event from stalling the job. */
         VIEW_SNAPSHOT(), APPLY(), ADVANCE(10),
         RUN("{'CreatePod':[],'requeueAfter':{'$gt':0,'$le':" XSTR(RECON_EXPECTATIONS_TTL_S) "}}"),
         ADVANCE(10),
         RUN("{'CreatePod':[],'requeueAfter':{'$gt':0,'$le':" XSTR(RECON_EXPECTATIONS_TTL_S) "}}"),
         ADVANCE(10),
         RUN("{'CreatePod':[],'requeueAfter':{'$gt':0,'$le':" XSTR(RECON_EXPECTATIONS_TTL_S) "}}"),
         /* Once the pods are seen the other two go out, never chief-0 or
          * worker-0 again. */
         VIEW_LIVE(), RUN("{'CreatePod':" CREATES2("tj-worker-1", "tj-worker-2") ",'pending':2}"))},
    {"expectations_lag_then_observed", 1, 3, 0, NULL,
     STEPS(RUN("{'CreatePod':{'$count':4}}"),
           /* The executor's slow start: chief-0 (batch 1) and worker-0
            * succeeded, worker-1 failed in batch 2, so worker-2 was never
            * sent. */
           APPLY_EXCEPT("tj-worker-1,tj-worker-2"), CREATION_FAILED("tj-worker-1"),
           CREATION_FAILED("tj-worker-2"), EXPECT("{'pending':2}"),
           /* A cache that shows none of the pods yet: only the two given up
            * are returned, the two still expected are not. */
           VIEW_EMPTY(),
           RUN("{'CreatePod':" CREATES2("tj-worker-1", "tj-worker-2") ",'pending':4}"),
           APPLY(), /* the retries land */
           /* Same lagging cache again: all four expected, nothing new. */
           RUN("{'CreatePod':[],'pending':4}"),
           /* The cache catches up: every expectation observed, nothing created. */
           VIEW_LIVE(), RUN("{'CreatePod':[],'pending':0,'podCount':4}"))},
    {"expectations_expire", 0, 2, 0, NULL,
     STEPS(RUN("{'CreatePod':{'$has':[{'name':'tj-worker-0'}]}}"),
           ADVANCE(RECON_EXPECTATIONS_TTL_S - 1), RUN("{'CreatePod':[]}"), ADVANCE(1),
           RUN("{'CreatePod':{'$has':[{'name':'tj-worker-0'}]}}"))},
    {"creation_failed_is_retried", 0, 2, 0, NULL,
     STEPS(RUN("{'CreatePod':{'$count':2}}"),
           /* worker-0 (batch 1) failed: worker-1 was not sent. */
           CREATION_FAILED("tj-worker-0"), EXPECT("{'pending':1}"), CREATION_FAILED("tj-worker-1"),
           EXPECT("{'pending':0}"),
           RUN("{'CreatePod':" CREATES2("tj-worker-0", "tj-worker-1") ",'pending':2}"))},
    {"steady_state_no_actions", 1, 2, 1, NULL,
     STEPS(SETTLE(RUNNING_TRUE), RUN_(), APPLY(),
           /* Nothing changed: no status write, no create, no event. */
           RUN("{'n':0,'statusChanged':false,'status':{'$absent':false}}"),
           /* Time passes: still nothing (no timestamps churn). */
           ADVANCE(3600), RUN("{'n':0}"))},
    {"conditions_transition_times", 0, 2, 0, NULL,
     STEPS(RUN_(), APPLY(),
           EXPECT("{'cond':{'Created':{'lastTransitionTime':'2023-11-14T22:13:20Z'},"
                  "'Running':null}}"),
           ADVANCE(100), ALL_RUNNING(),
           /* Created kept its time; Running is new and last (the State column). */
           RUN("{'cond':{'Created':{'lastTransitionTime':'2023-11-14T22:13:20Z'},"
               "'Running':{'lastTransitionTime':'2023-11-14T22:15:00Z'}},"
               "'status':{'conditions':{'-1':{'type':'Running'}}}}"))},
    {"deleted_pod_is_recreated_same_attempt", 0, 3, 0, NULL,
     /* Someone deleted worker-1 and it is gone. */
     STEPS(SETTLE_(), REMOVE_POD("tj-worker-1"),
           RUN("{'CreatePod':[{'name':'tj-worker-1','attempt':1}]}"))},
    {"stray_pods_deleted", 0, 2, 0, NULL,
     STEPS(SETTLE_(),
           /* Scaled down to 1 worker: worker-1 is now extra. */
           PATCH_JOB("{'spec':{'replicaSpecs':{'Worker':{'replicas':1}}}}"),
           RUN("{'DeletePod':[{'name':'tj-worker-1'}]}"),
           /* A second pass before the cache shows the deletion: no second delete. */
           RUN("{'DeletePod':[]}"),
           /* A failed delete is retried. */
           DELETION_FAILED("uid-tj-worker-1-a1"), RUN("{'DeletePod':[{'name':'tj-worker-1'}]}"))},
    {"foreign_pods_ignored", 0, 1, 0, NULL,
     STEPS(ADD_POD("{'metadata':{'name':'tj-worker-0','uid':'other',"
                   "'labels':{'ctrain.dev/job-name':'tj'},"
                   "'ownerReferences':[{'uid':'someone-else','controller':true}]},"
                   "'status':{'phase':'Running'}}"),
           RUN("{'DeletePod':[]}"))},
    {"secret_created_once_per_attempt", 0, 1, 0, NULL,
     STEPS(RUN_(), APPLY(), RUN("{'CreateSecret':[],'CreateService':[]}"))},
    /* A restarted controller knows no token Secret: it creates the
     * attempt's Secret again (answered AlreadyExists) with the very same
     * token, so pods already running and pods still to come agree. */
    {"restart_recreates_the_same_token", 0, 2, 0, NULL,
     STEPS(
         RUN("{'CreateSecret':[{'attempt':1,'object':{'stringData':{'token':'tok-job-uid-1'}}}]}"),
         APPLY(), FORGET(), TOKEN_ATTEMPT(0),
         RUN("{'CreateSecret':[{'attempt':1,'object':{'metadata':{'name':'tj-token-1'},"
             "'stringData':{'token':'tok-job-uid-1'}}}],'CreatePod':[]}"))},
    {"controller_restart_creates_no_duplicates", 1, 3, 1, NULL,
     STEPS(RUN("{'CreatePod':{'$count':5}}"),
           /* The controller dies during slow start: 3 of 5 pods exist, all Pending. */
           APPLY_EXCEPT("tj-worker-2,tj-evaluator-0"), EXPECT("{'podCount':3}"),
           /* A new controller process: no expectations, the cache is full. */
           FORGET(),
           RUN("{'CreatePod':" CREATES2("tj-worker-2", "tj-evaluator-0") ",'DeletePod':[]}"),
           APPLY(), RUN("{'CreatePod':[],'podCount':5}"))},
    {"delete_expectation_satisfied_by_deletion_timestamp", 0, 2, 0, NULL,
     STEPS(SETTLE_(), LOST_PEER("tj-worker-1", 1), RUN("{'DeletePod':{'$count':2},'pending':2}"),
           APPLY(), /* deletionTimestamp set, pods still listed */
           RUN("{'pending':0,'DeletePod':[]}"))},
    /* The cluster of TF_CONFIG is stored once per attempt, in an immutable
     * ConfigMap created before the attempt's pods; a new attempt's replaces
     * the previous one's, so a job keeps one. */
    {"cluster_configmap_per_attempt", 1, 3, 0, NULL,
     STEPS(RUN("{'kinds':{'$order':['CreateConfigMap','CreatePod']},'DeleteConfigMap':[],"
               "'CreateConfigMap':[{'attempt':1,'object':{'immutable':true,'metadata':{"
               "'name':'tj-cluster-1','ownerReferences':{'0':{'uid':'job-uid'}},"
               "'labels':{'ctrain.dev/attempt':'1'}},'data':{'cluster':{'$json':{'$count':2,"
               "'chief':['tj-chief-0.tj.default.svc:2222'],"
               "'worker':['tj-worker-0.tj.default.svc:2222','tj-worker-1.tj.default.svc:2222',"
               "'tj-worker-2.tj.default.svc:2222']}}}}}]}"),
           APPLY(), SETTLE_(),
           /* Not again in the same attempt. */
           RUN("{'CreateConfigMap':[]}"), ADVANCE(60), LOST_PEER("tj-worker-2", 59),
           RUN("{'status':{'attempt':2},"
               "'CreateConfigMap':[{'attempt':2,'object':{'metadata':{'name':'tj-cluster-2'}}}],"
               "'DeleteConfigMap':[{'name':'tj-cluster-1','attempt':1}]}"))},
};

TEST(create_cases) {
  CASES_RUN(create_cases);
}

/* ---- restarts, failures, success ----------------------------------------- */

static const rcase lifecycle_cases[] = {
    {"state_is_last_true_condition", 0, 1, 0, NULL,
     STEPS(RUN("{'state':'Created'}"), APPLY(), ALL_RUNNING(), SETTLE("{'state':'Running'}"),
           LOST_PEER("tj-worker-0", 1), RUN("{'state':'Restarting'}"), APPLY(), REAP(),
           SETTLE("{'state':'Running'}"), TERMINATE("tj-worker-0", 0, "Completed", 2),
           RUN("{'state':'Succeeded'}"))},
    {"worker_exit_75_gang_restart", 1, 3, 0, NULL,
     STEPS(SETTLE("{'podCount':4}"), ADVANCE(60), LOST_PEER("tj-worker-2", 59),
           /* Attempt 2 decided, recorded first; every collective pod of
            * attempt 1 goes, with its uid as precondition; a new token for
            * the new attempt, in a new Secret (never an update); names are
            * still taken: nothing created yet. */
           RUN("{'kinds':{'0':'UpdateStatus'},'status':{'attempt':2,'restarts':1},'attempt':2,"
               "'cond':{'Restarting':{'status':'True','message':{'$contains':['tj-worker-2',"
               "'exit code 75']}},'Running':{'status':'False'}},"
               "'Event':{'$has':[{'reason':'Restarting','type':'Warning',"
               "'message':{'$contains':['tj-worker-2','75']}}]},"
               "'DeletePod':{'$count':4,'$has':[{'name':'tj-chief-0','uid':'uid-tj-chief-0-a1'}]},"
               "'CreateSecret':[{'attempt':2,'object':{'metadata':{'name':'tj-token-2'},"
               "'stringData':{'token':'tok-job-uid-2'}}}],'CreatePod':[]}"),
           APPLY(),
           /* Pods terminating (they exit 75 on SIGTERM): no second restart, no creates. */
           TERMINATE("tj-worker-0", 75, "Error", 61),
           RUN("{'CreatePod':[],'DeletePod':[],'status':{'restarts':1}}"), APPLY(),
           /* Gone: attempt 2 is created (slow start again). */
           REAP(),
           RUN("{'CreatePod':{'$has':[{'name':'tj-chief-0','attempt':2,'object':{'metadata':{"
               "'labels':{'ctrain.dev/attempt':'2'}}}}],'$none':[{'attempt':1}]}}"),
           APPLY(), ALL_RUNNING(),
           SETTLE("{'podCount':4,'cond':{'Running':{'status':'True'},"
                  "'Restarting':{'status':'False'}},'status':{'restarts':1}}"))},
    {"exit_78_fails_without_restart", 1, 2, 0, NULL,
     STEPS(SETTLE_(), ADVANCE(30), TERMINATE("tj-worker-1", 78, "Error", 29),
           /* cleanPodPolicy Running: the running ones go, the failed one stays. */
           RUN("{'cond':{'Failed':{'status':'True','reason':'NotRetryable',"
               "'message':{'$contains':['tj-worker-1','exit code 78']}},"
               "'Running':{'status':'False'}},"
               "'status':{'restarts':0,'attempt':1,'completionTime':{'$contains':'2023-11-14T'}},"
               "'Event':{'$has':[{'reason':'Failed','type':'Warning'}]},"
               "'DeletePod':{'$count':2,'$none':[{'name':'tj-worker-1'}]},'CreatePod':[],"
               "'CreateSecret':[]}"),
           APPLY(), REAP(),
           /* Finished: nothing is ever created again, and nothing else happens. */
           RUN("{'CreatePod':[]}"), APPLY(), RUN("{'n':0}"))},
    {"exitcode_policy_exit_1_fails", 1, 2, 0, "{'spec':{'restartPolicy':'ExitCode'}}",
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 1, "Error", 3),
           RUN("{'cond':{'Failed':{'status':'True','reason':'NotRetryable'}},"
               "'Event':{'$none':[{'reason':'Restarting'}]},'status':{'attempt':1}}"))},
    {"backoff_limit_exhausted", 0, 2, 0, "{'spec':{'backoffLimit':2}}",
     STEPS(SETTLE_(), LOST_PEER("tj-worker-0", 1), RUN("{'status':{'attempt':2,'restarts':1}}"),
           APPLY(), REAP(), SETTLE("{'podCount':2}"), LOST_PEER("tj-worker-0", 2),
           RUN("{'status':{'attempt':3,'restarts':2}}"), APPLY(), REAP(), SETTLE("{'podCount':2}"),
           LOST_PEER("tj-worker-0", 3),
           RUN("{'cond':{'Failed':{'status':'True','reason':'BackoffLimitExceeded',"
               "'message':{'$contains':['exit code 75','tj-worker-0','backoffLimit 2']}},"
               "'Restarting':{'status':'False'}},'status':{'restarts':2,'attempt':3}}"))},
    {"backoff_limit_zero_never_restarts", 0, 1, 0, "{'spec':{'backoffLimit':0}}",
     STEPS(SETTLE_(), LOST_PEER("tj-worker-0", 1),
           RUN("{'cond':{'Failed':{'reason':'BackoffLimitExceeded'}}}"))},
    /* Two failures: the cause is named (the earlier one; at the same
     * second, not the one that exited 75 for a lost peer, and the killed
     * one rather than one that exited 1 when its peer died, as TensorFlow
     * does); a permanent one wins. */
    {"cause_of_the_failure_named/earlier", 0, 3, 0, "{'spec':{'backoffLimit':0}}",
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "OOMKilled", 10),
           TERMINATE("tj-worker-2", 75, "Error", 20),
           RUN("{'cond':{'Failed':{'message':{'$contains':"
               "'tj-worker-0 failed with exit code 137 (OOMKilled)'}}},'status':{'attempt':1}}"))},
    {"cause_of_the_failure_named/not_the_75", 0, 3, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 75, "Error", 10),
           TERMINATE("tj-worker-1", 137, "Error", 10),
           RUN("{'cond':{'Restarting':{'message':{'$contains':"
               "'tj-worker-1 failed with exit code 137'}}}}"))},
    {"cause_of_the_failure_named/killed_over_exit_1", 0, 3, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 1, "Error", 10),
           TERMINATE("tj-worker-2", 137, "Error", 10),
           RUN("{'cond':{'Restarting':{'message':{'$contains':"
               "'tj-worker-2 failed with exit code 137'}}}}"))},
    {"cause_of_the_failure_named/permanent_wins", 0, 3, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 65, "Error", 10),
           TERMINATE("tj-worker-2", 75, "Error", 20),
           RUN("{'cond':{'Failed':{'message':{'$contains':"
               "'tj-worker-0 failed with exit code 65'}}},'status':{'attempt':1}}"))},
    {"evicted_pod_is_retryable", 0, 2, 0, "{'spec':{'restartPolicy':'ExitCode'}}",
     STEPS(
         SETTLE_(), SET_PHASE("tj-worker-1", "Failed"),
         PATCH_POD("tj-worker-1", "{'status':{'reason':'Evicted'}}"),
         /* the kubelet ended it for its node: a disruption, not a restart
          * (docs/disruptions.md) */
         RUN("{'status':{'attempt':2,'restarts':0,'disruptions':1},"
             "'cond':{'Restarting':{'reason':'Disruption','message':{'$contains':'Evicted'}}}}"))},
    {"sidecar_keeps_pod_running_but_worker_failed", 0, 2, 0, "{'spec':{'restartPolicy':'Never'}}",
     STEPS(SETTLE_(), TERMINATE("tj-worker-1", 78, "Error", 1),
           SET_PHASE("tj-worker-1", "Running"), /* a sidecar still runs */
           RUN("{'cond':{'Failed':{'status':'True','message':{'$contains':'exit code 78'}}}}"))},
    {"chief_success_and_clean_pod_policy/Running", 1, 3, 0, "{'spec':{'cleanPodPolicy':'Running'}}",
     STEPS(SETTLE_(), ADVANCE(500), TERMINATE("tj-chief-0", 0, "Completed", 499),
           RUN("{'cond':{'Succeeded':{'status':'True','message':{'$contains':'tj-chief-0'}},"
               "'Running':{'status':'False'}},'status':{'completionTime':'2023-11-14T22:21:40Z',"
               "'replicaStatuses':{'Chief':{'succeeded':1}}},"
               "'Event':{'$has':[{'reason':'Succeeded'}]},"
               "'DeletePod':{'$count':3,'$none':[{'name':'tj-chief-0'}]},'CreatePod':[]}"))},
    {"chief_success_and_clean_pod_policy/All", 1, 3, 0, "{'spec':{'cleanPodPolicy':'All'}}",
     STEPS(SETTLE_(), ADVANCE(500), TERMINATE("tj-chief-0", 0, "Completed", 499),
           RUN("{'cond':{'Succeeded':{'status':'True','message':{'$contains':'tj-chief-0'}},"
               "'Running':{'status':'False'}},'status':{'completionTime':'2023-11-14T22:21:40Z',"
               "'replicaStatuses':{'Chief':{'succeeded':1}}},"
               "'Event':{'$has':[{'reason':'Succeeded'}]},"
               "'DeletePod':{'$count':4},'CreatePod':[]}"))},
    {"chief_success_and_clean_pod_policy/None", 1, 3, 0, "{'spec':{'cleanPodPolicy':'None'}}",
     STEPS(SETTLE_(), ADVANCE(500), TERMINATE("tj-chief-0", 0, "Completed", 499),
           RUN("{'cond':{'Succeeded':{'status':'True','message':{'$contains':'tj-chief-0'}},"
               "'Running':{'status':'False'}},'status':{'completionTime':'2023-11-14T22:21:40Z',"
               "'replicaStatuses':{'Chief':{'succeeded':1}}},"
               "'Event':{'$has':[{'reason':'Succeeded'}]},'DeletePod':[],'CreatePod':[]}"))},
    {"worker0_success_without_chief", 0, 3, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-1", 0, "Completed", 1),
           /* worker 1 is not the chief; a Succeeded pod is never recreated */
           RUN("{'cond':{'Succeeded':null},'CreatePod':[],'DeletePod':[],"
               "'status':{'replicaStatuses':{'Worker':{'succeeded':1,'active':2}}}}"),
           TERMINATE("tj-worker-0", 0, "Completed", 2),
           RUN("{'cond':{'Succeeded':{'status':'True'}}}"))},
    {"all_workers_success_policy", 1, 2, 0, "{'spec':{'successPolicy':'AllWorkers'}}",
     STEPS(
         SETTLE_(), TERMINATE("tj-chief-0", 0, "Completed", 1),
         TERMINATE("tj-worker-0", 0, "Completed", 1), RUN("{'cond':{'Succeeded':null}}"),
         TERMINATE("tj-worker-1", 0, "Completed", 2),
         RUN("{'cond':{'Succeeded':{'status':'True','message':{'$contains':'all 2 workers'}}}}"))},
    {"success_wins_over_later_failures", 1, 2, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-chief-0", 0, "Completed", 1),
           LOST_PEER("tj-worker-1", 2), /* lost its peer when the chief left */
           RUN("{'cond':{'Succeeded':{'status':'True'},'Failed':null},'status':{'restarts':0}}"))},
    {"deadline_requeue_then_fail", 0, 2, 0, "{'spec':{'activeDeadlineSeconds':100}}",
     STEPS(RUN("{'requeueAfter':100,'Requeue':[{'seconds':100}],'kinds':{'-1':'Requeue'}}"),
           APPLY(), ALL_RUNNING(), ADVANCE(40), RUN("{'requeueAfter':60}"), APPLY(), ALL_RUNNING(),
           ADVANCE(60),
           RUN("{'cond':{'Failed':{'status':'True','reason':'DeadlineExceeded',"
               "'message':{'$contains':'activeDeadlineSeconds'}}},"
               "'DeletePod':{'$count':2},'CreatePod':[],'requeueAfter':-1}"))},
    {"ttl_requeue_then_delete_job", 0, 1, 0, "{'spec':{'ttlSecondsAfterFinished':60}}",
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 0, "Completed", 0),
           RUN("{'cond':{'Succeeded':{'status':'True'}},'requeueAfter':60,'DeleteJob':[]}"),
           APPLY(), ADVANCE(59), RUN("{'requeueAfter':1,'DeleteJob':[]}"), ADVANCE(1),
           RUN("{'n':1,'DeleteJob':[{'name':'tj','uid':'job-uid'}]}"))},
    {"ttl_zero_deletes_failed_job_next_pass", 0, 1, 0,
     "{'spec':{'ttlSecondsAfterFinished':0,'restartPolicy':'Never'}}",
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 1, "Error", 0),
           RUN("{'cond':{'Failed':{'status':'True'}},'DeleteJob':{'$has':[{'name':'tj'}]}}"))},
    {"suspend_and_resume", 1, 2, 1, "{'spec':{'activeDeadlineSeconds':1000}}",
     STEPS(SETTLE("{'podCount':4}"),
           TERMINATE("tj-evaluator-0", 0, "Completed", 1), /* a Succeeded pod is kept */
           ADVANCE(100), PATCH_JOB("{'spec':{'suspend':true}}"),
           /* no deadline while suspended */
           RUN("{'DeletePod':{'$count':3,'$none':[{'name':'tj-evaluator-0'}]},'CreatePod':[],"
               "'cond':{'Suspended':{'status':'True'},'Running':{'status':'False'}},"
               "'Event':{'$has':[{'reason':'Suspended'}]},'requeueAfter':-1}"),
           APPLY(),
           /* Terminating pods exit 75 on SIGTERM: no restart while suspended. */
           LOST_PEER("tj-worker-0", 101),
           RUN("{'status':{'restarts':0},'Event':{'$none':[{'reason':'Suspended'}]}}"), APPLY(),
           REAP(), RUN_(), APPLY(), RUN("{'n':0}"), /* suspended and quiet */
           /* Resume: Suspended False, startTime reset (now: NOW + 176 + 5000),
            * the deadline restarted; every deleted pod comes back with the
            * same attempt; the Succeeded evaluator is not recreated. */
           ADVANCE(5000), PATCH_JOB("{'spec':{'suspend':false}}"),
           RUN("{'cond':{'Suspended':{'status':'False'},'Failed':null},"
               "'Event':{'$has':[{'reason':'Resumed'}]},'requeueAfter':1000,"
               "'status':{'startTime':'2023-11-14T23:39:36Z'},"
               "'CreatePod':{'$count':3,'$none':[{'name':'tj-evaluator-0'}],"
               "'$has':[{'name':'tj-chief-0','attempt':1}]}}"),
           APPLY(), ALL_RUNNING(), SETTLE("{'podCount':4,'cond':{'Running':{'status':'True'}}}"))},
    {"suspended_from_start_creates_nothing", 0, 2, 0, "{'spec':{'suspend':true}}",
     STEPS(RUN("{'CreatePod':[],'CreateService':[],'cond':{'Suspended':{'status':'True'}}}"))},
    {"lagging_job_cache_keeps_new_attempt", 0, 2, 0, NULL,
     STEPS(SETTLE_(), LOST_PEER("tj-worker-0", 1), RUN("{'status':{'attempt':2}}"),
           /* Everything applied but the status write (the job cache lags),
            * then the old pods vanish: never attempt 1 again. */
           APPLY_NO_STATUS(), REAP(),
           RUN("{'CreatePod':{'$has':[{'name':'tj-worker-0','attempt':2}],"
               "'$none':[{'attempt':1}]},'status':{'restarts':1}}"))},
    /* A fresh controller (no expectations) and a status without attempt:
     * the pods' labels tell the attempt. */
    {"pod_labels_give_attempt_when_status_lost", 0, 2, 0, NULL,
     STEPS(SETTLE_(), PATCH_PODS("{'metadata':{'labels':{'ctrain.dev/attempt':'3'}}}"),
           PATCH_JOB("{'status':{'attempt':null}}"), FORGET(),
           RUN("{'status':{'attempt':3},'DeletePod':[],'CreatePod':[]}"))},
    {"evaluator_outside_the_gang", 1, 1, 1, NULL,
     STEPS(SETTLE_(),
           /* An evaluator failure alone does not restart the gang. */
           TERMINATE("tj-evaluator-0", 1, "Error", 1),
           RUN("{'status':{'attempt':1,'replicaStatuses':{'Evaluator':{'failed':1}}},"
               "'cond':{'Failed':null},'CreatePod':[]}"),
           APPLY(),
           /* A gang restart gives the failed evaluator a fresh start. */
           LOST_PEER("tj-worker-0", 2),
           RUN("{'status':{'attempt':2},'DeletePod':{'$has':[{'name':'tj-evaluator-0'}]}}"),
           APPLY(), REAP(),
           SETTLE("{'podCount':3,'pods':{'tj-evaluator-0':{'metadata':{'labels':{"
                  "'ctrain.dev/attempt':'2'}}}}}"))},
    {"running_evaluator_survives_gang_restart", 1, 1, 1, NULL,
     STEPS(SETTLE_(), LOST_PEER("tj-worker-0", 2),
           RUN("{'DeletePod':{'$count':2,'$none':[{'name':'tj-evaluator-0'}]}}"))},
    /* A pod create the apiserver refused for good (the executor's report)
     * fails the job with the apiserver's message; the pods it accepted go. */
    {"refused_create_fails_the_job", 0, 2, 0, NULL,
     STEPS(RUN_(), APPLY_EXCEPT("tj-worker-0,tj-worker-1"),
           CREATE_ERROR("the apiserver refuses pod tj-worker-0 (HTTP 422 Invalid): Pod "
                        "\"tj-worker-0\" is invalid: spec.containers[0].ports[0].containerPort: "
                        "Invalid value: -5: must be between 1 and 65535, inclusive"),
           ADVANCE(5),
           RUN("{'cond':{'Failed':{'status':'True','reason':'FailedCreatePod',"
               "'message':{'$contains':'spec.containers[0].ports[0].containerPort'}}},"
               "'CreatePod':[],'Event':{'$has':[{'reason':'Failed',"
               "'message':{'$contains':'containerPort'}}]}}"),
           APPLY(), CREATE_ERROR(NULL),
           /* terminal: stays Failed, creates nothing */
           RUN("{'cond':{'Failed':{'status':'True'}},'CreatePod':[]}"))},
};

TEST(lifecycle_cases) {
  CASES_RUN(lifecycle_cases);
}

/* The restart table: policy x exit code -> restart or fail (a failure
 * names the code and the policy). */
TEST(restart_table) {
  static const struct {
    const char *policy;
    int code;
    int restart;
  } rows[] = {
      {"OnFailure", 75, 1}, {"OnFailure", 1, 1},  {"OnFailure", 137, 1}, {"OnFailure", 64, 0},
      {"OnFailure", 65, 0}, {"OnFailure", 78, 0}, {"ExitCode", 75, 1},   {"ExitCode", 143, 1},
      {"ExitCode", 1, 0},   {"ExitCode", 70, 0},  {"ExitCode", 78, 0},   {"Never", 75, 0},
      {"Never", 1, 0},      {"Never", 137, 0},
  };
  int failed = 0;
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char name[64], job[128], expect[256];
    snprintf(name, sizeof(name), "restart_table/%s/%d", rows[i].policy, rows[i].code);
    snprintf(job, sizeof(job), "{'spec':{'restartPolicy':'%s'}}", rows[i].policy);
    if (rows[i].restart)
      snprintf(expect, sizeof(expect), "{'status':{'attempt':2},'cond':{'Failed':null}}");
    else
      snprintf(expect, sizeof(expect),
               "{'status':{'attempt':1},'cond':{'Failed':{'status':'True',"
               "'message':{'$contains':['exit code %d','%s']}}}}",
               rows[i].code, rows[i].policy);
    const step steps[] = {
        SETTLE_(),
        TERMINATE("tj-worker-1", rows[i].code, "Error", 5),
        AT(5 + RECON_PEER_LOSS_WINDOW_S), /* past the wait for the cause of a lone 75 */
        RUN(expect),
        {OP_END, NULL, 0, 0, NULL, __LINE__}};
    const rcase c = {name, 0, 2, 0, job, steps};
    if (rw_case_run(&c)) {
      fprintf(stderr, "FAILED case %s\n", name);
      failed++;
    }
  }
  ASSERT_EQ(failed, 0);
}

/* ---- what the status tells: invalid specs, stuck pods, progress ---------- */

static const rcase status_cases[] = {
    {"invalid_spec_fails_with_no_other_action/template_without_containers", 1, 2, 0,
     "{'spec':{'replicaSpecs':{'Worker':{'template':{'spec':{'containers':[]}}}}}}",
     STEPS(RUN(INVALID("spec.replicaSpecs.Worker.template.spec.containers")),
           /* Invalid stays failed and creates nothing on later passes. */
           APPLY(), RUN("{'CreatePod':[],'CreateService':[]}"))},
    /* The collective port declared by two containers of one pod. */
    {"invalid_spec_fails_with_no_other_action/port_declared_twice", 0, 2, 0,
     "{'spec':{'replicaSpecs':{'Worker':{'template':{'spec':{'containers':["
     "{'name':'train','image':'ctrain:dev','ports':[{'containerPort':2222}]},"
     "{'name':'side','ports':[{'containerPort':2222}]}]}}}}}}",
     STEPS(RUN(
         INVALID("spec.replicaSpecs.Worker.template.spec.containers[1].ports[0].containerPort")))},
    /* A name too long for tj-evaluator-0 as a hostname (63). */
    {"invalid_spec_fails_with_no_other_action/name_too_long", 0, 1, 1,
     "{'metadata':{'name':'a234567890123456789012345678901234567890123456789012'}}",
     STEPS(RUN(INVALID("metadata.name")))},
    /* Not a DNS-1035 label (the Service name). */
    {"invalid_spec_fails_with_no_other_action/name_not_dns1035", 0, 1, 0,
     "{'metadata':{'name':'1job'}}", STEPS(RUN(INVALID("metadata.name")))},
    /* The checkpoint mount collides with the template's. */
    {"invalid_spec_fails_with_no_other_action/checkpoint_mount_collides", 0, 1, 0,
     "{'spec':{'checkpoint':{'mountPath':'/data','volume':{'emptyDir':{}}},"
     "'replicaSpecs':{'Worker':{'template':{'spec':{'containers':[{'name':'train',"
     "'image':'ctrain:dev','ports':[{'containerPort':2222}],"
     "'volumeMounts':[{'name':'d','mountPath':'/data'}]}]}}}}}}",
     STEPS(RUN(INVALID("volumeMounts[0].mountPath")))},
    /* A deadline shorter than two polls could never be met: InvalidSpec. */
    {"progress_deadline_shorter_than_two_polls_invalid", 0, 1, 0,
     "{'spec':{'progressDeadlineSeconds':30}}",
     STEPS(POLL_INTERVAL(20), RUN("{'state':'Failed','cond':{'Failed':{'message':{'$contains':"
                                  "'spec.progressDeadlineSeconds'}}},'CreatePod':[]}"))},
    /* Integers as written: a deadline near 2^63 (startTime + it would
     * overflow) or a fractional backoffLimit is an invalid spec naming the
     * field. */
    {"out_of_range_spec_numbers_invalid/activeDeadlineSeconds", 0, 1, 0,
     "{'spec':{'activeDeadlineSeconds':9.2e18}}",
     STEPS(RUN("{'state':'Failed','cond':{'Failed':{'message':{'$contains':"
               "'activeDeadlineSeconds'}}},'CreatePod':[]}"))},
    {"out_of_range_spec_numbers_invalid/backoffLimit", 0, 1, 0, "{'spec':{'backoffLimit':1.5}}",
     STEPS(RUN("{'state':'Failed','cond':{'Failed':{'message':{'$contains':'backoffLimit'}}},"
               "'CreatePod':[]}"))},
    {"out_of_range_spec_numbers_invalid/maxDisruptions", 0, 1, 0, "{'spec':{'maxDisruptions':-1}}",
     STEPS(RUN("{'state':'Failed','cond':{'Failed':{'message':{'$contains':'maxDisruptions'}}},"
               "'CreatePod':[]}"))},
    {"missing_image_named_in_status_and_event_once", 0, 2, 0, NULL,
     STEPS(RUN_(), APPLY(), /* pods created, Pending */
           PATCH_POD("tj-worker-1",
                     "{'status':{'containerStatuses':[{'name':'worker','image':'ctrain:nope',"
                     "'state':{'waiting':{'reason':'ErrImageNeverPull',"
                     "'message':'Container image \\\"ctrain:nope\\\" is not present'}}}]}}"),
           RUN("{'cond':{'Created':{'reason':'ErrImageNeverPull','message':{'$contains':["
               "'pod tj-worker-1 cannot start: container worker (image ctrain:nope)',"
               "'is not present']}}},"
               "'Event':{'$has':[{'reason':'ErrImageNeverPull','type':'Warning'}]},"
               "'CreatePod':[]}"),
           APPLY(),
           /* The same state again: no second event. */
           RUN("{'Event':{'$none':[{'reason':'ErrImageNeverPull'}]}}"), APPLY(),
           /* Once the pods run, the reason is the job's own again. */
           ALL_RUNNING(),
           SETTLE("{'cond':{'Created':{'reason':'TrainingJobCreated'},"
                  "'Running':{'status':'True'}}}"))},
    {"unschedulable_pod_named", 0, 2, 0, NULL,
     STEPS(RUN_(), APPLY(),
           PATCH_POD("tj-worker-0",
                     "{'status':{'conditions':[{'type':'PodScheduled','status':'False',"
                     "'reason':'Unschedulable',"
                     "'message':'0/1 nodes are available: 1 Insufficient cpu.'}]}}"),
           RUN("{'cond':{'Created':{'reason':'Unschedulable','message':{'$contains':"
               "'pod tj-worker-0 cannot be scheduled: 0/1 nodes are available'}}},"
               "'Event':{'$has':[{'reason':'Unschedulable'}]}}"))},
    /* A root image (stock TensorFlow) under our runAsNonRoot default: the
     * kubelet's CreateContainerConfigError, in the job's words with the fix
     * (runAsUser in the worker's template, not runAsNonRoot: false), once as
     * a Warning event. The job keeps waiting (an hour on, nothing failed),
     * as for every pod that cannot start. Edited as the message says and the
     * pod deleted, the gang restarts (a disruption, not a failure) with pods
     * that run as 65532 and keep runAsNonRoot and fsGroup. */
    {"image_runs_as_root_named_with_its_fix", 0, 2, 0,
     "{'spec':{'checkpoint':{'mountPath':'/ckpt','volume':{'persistentVolumeClaim':{"
     "'claimName':'shared'}}}}}",
     STEPS(RUN_(), APPLY(),
           PATCH_POD("tj-worker-0", "{'status':{'containerStatuses':[{'name':'train',"
                                    "'image':'tf:2.21','state':{'waiting':{"
                                    "'reason':'CreateContainerConfigError','message':"
                                    "'container has runAsNonRoot and image will run as root "
                                    "(pod: tj-worker-0_default(u0), container: train)'}}}]}}"),
           RUN("{'cond':{'Created':{'status':'True','reason':'ImageRunsAsRoot','message':"
               "'pod tj-worker-0 cannot start: container train (image tf:2.21): "
               "ImageRunsAsRoot: the image runs as root, which the pod\\u0027s runAsNonRoot "
               "(ctrain\\u0027s Pod Security default) forbids; set spec.replicaSpecs.Worker."
               "template.spec.securityContext.runAsUser: 65532 and runAsGroup: 65532 (the uid "
               "of ctrain\\u0027s own workers, so both can write a shared checkpoint volume; "
               "runAsNonRoot: false is not enough there: its root has every capability "
               "dropped), then delete the pod: the gang restarts with the new template'},"
               "'Failed':null},"
               "'Event':[{'type':'Warning','reason':'ImageRunsAsRoot','message':{'$contains':"
               "['pod tj-worker-0 cannot start','runAsUser: 65532']}}],'DeletePod':[]}"),
           APPLY(),
           /* The same state later: no second event, still waiting. */
           ADVANCE(3600),
           RUN("{'Event':[],'state':'Created','cond':{'Created':{'reason':'ImageRunsAsRoot'},"
               "'Failed':null},'DeletePod':[],'CreatePod':[]}"),
           APPLY(),
           PATCH_JOB("{'spec':{'replicaSpecs':{'Worker':{'template':{'spec':{"
                     "'securityContext':{'runAsUser':65532,'runAsGroup':65532}}}}}}}"),
           DELETE_BY("tj-worker-0", 30, 0),
           RUN("{'state':'Restarting','status':{'attempt':2,'restarts':0,'disruptions':1},"
               "'DeletePod':[{'name':'tj-worker-1'}],'CreatePod':[]}"),
           APPLY(), REAP(), RUN("{'CreatePod':{'$count':2,'$has':[{'attempt':2}]}}"), APPLY(),
           EXPECT("{'pods':{'tj-worker-0':{'metadata':{'labels':{'ctrain.dev/attempt':'2'}},"
                  "'spec':{'securityContext':{'runAsUser':65532,'runAsGroup':65532,"
                  "'runAsNonRoot':true,'fsGroup':65532}}}}}"),
           /* They start: the reason is the job's own again. */
           ALL_RUNNING(), SETTLE("{'cond':{'Running':{'status':'True'}}}"))},
    /* An image whose USER is a name: the kubelet cannot check runAsNonRoot;
     * the same fix, in the chief's template. */
    {"image_runs_as_root_named_with_its_fix/user_name", 1, 1, 0, NULL,
     STEPS(RUN_(), APPLY(),
           PATCH_POD("tj-chief-0", "{'status':{'containerStatuses':[{'name':'train',"
                                   "'image':'app:1','state':{'waiting':{"
                                   "'reason':'CreateContainerConfigError','message':"
                                   "'container has runAsNonRoot and image has non-numeric user "
                                   "(app), cannot verify user is non-root (pod: "
                                   "tj-chief-0_default(u0), container: train)'}}}]}}"),
           RUN("{'cond':{'Created':{'reason':'ImageUserNotNumeric','message':{'$contains':["
               "'pod tj-chief-0 cannot start: container train (image app:1): "
               "ImageUserNotNumeric: the image\\u0027s user is a name, not a uid',"
               "'spec.replicaSpecs.Chief.template.spec.securityContext.runAsUser: 65532']}}},"
               "'Event':[{'type':'Warning','reason':'ImageUserNotNumeric'}]}"))},
    /* A TFJob's runAsNonRoot is its own template's, not our default: the
     * message does not say ours (tfjob.c maps the field to
     * spec.tfReplicaSpecs). */
    {"image_runs_as_root_named_with_its_fix/tfjob", 0, 1, 0,
     "{'apiVersion':'kubeflow.org/v1','kind':'TFJob'}",
     STEPS(RUN_(), APPLY(),
           PATCH_POD("tj-worker-0", "{'status':{'containerStatuses':[{'name':'train',"
                                    "'image':'tf:2.21','state':{'waiting':{"
                                    "'reason':'CreateContainerConfigError','message':"
                                    "'container has runAsNonRoot and image will run as root "
                                    "(pod: tj-worker-0_default(u0), container: train)'}}}]}}"),
           RUN("{'cond':{'Created':{'reason':'ImageRunsAsRoot','message':{'$contains':"
               "'ImageRunsAsRoot: the image runs as root, which the pod\\u0027s runAsNonRoot "
               "forbids; set spec.replicaSpecs.Worker.template.spec.securityContext.runAsUser: "
               "65532'}}}}"))},
    /* Other config errors keep the kubelet's reason and words. */
    {"image_runs_as_root_named_with_its_fix/other_config_error", 0, 1, 0, NULL,
     STEPS(RUN_(), APPLY(),
           PATCH_POD("tj-worker-0", "{'status':{'containerStatuses':[{'name':'train',"
                                    "'image':'tf:2.21','state':{'waiting':{"
                                    "'reason':'CreateContainerConfigError','message':"
                                    "'secret s3-creds not found'}}}]}}"),
           RUN("{'cond':{'Created':{'reason':'CreateContainerConfigError','message':"
               "'pod tj-worker-0 cannot start: container train (image tf:2.21): "
               "CreateContainerConfigError: secret s3-creds not found'}},"
               "'Event':[{'reason':'CreateContainerConfigError'}]}"))},
    {"progress_written_while_running_only_when_changed", 1, 3, 0, NULL,
     STEPS(PROGRESS(POLL(1, 0.5, 2, 1.1, "2023-11-14T22:13:20Z")), SETTLE_(), RUN_(), APPLY(),
           /* rank 2, with a chief: worker-1 */
           EXPECT("{'cond':{'Running':{'status':'True'}},'status':{'progress':{'epoch':1,"
                  "'slowestWorker':{'pod':'tj-worker-1','rank':{'$absent':true}}}}}"),
           /* Only lastPollTime moved: nothing to write. */
           PROGRESS(POLL(1, 0.5, 2, 1.1, "2023-11-14T22:13:30Z")),
           RUN("{'statusChanged':false,'status':{'progress':{"
               "'lastPollTime':'2023-11-14T22:13:20Z'}}}"),
           PROGRESS(POLL(2, 0.7, 0, 1.0, "2023-11-14T22:13:40Z")),
           RUN("{'statusChanged':true,'kinds':{'0':'UpdateStatus'}}"), APPLY(),
           EXPECT("{'status':{'progress':{'epoch':2,'slowestWorker':{'pod':'tj-chief-0'}}}}"),
           /* A pass without a poll keeps what is there. */
           PROGRESS(NULL), RUN("{'statusChanged':false,'status':{'progress':{'epoch':2}}}"))},
    {"progress_not_written_before_running", 0, 2, 0, NULL,
     STEPS(PROGRESS(POLL(1, 0.5, 0, 1.0, "2023-11-14T22:13:20Z")),
           RUN("{'status':{'progress':{'$absent':true}}}"))},
    {"straggler_condition_and_events", 1, 3, 0, NULL,
     STEPS(SETTLE_(), PATCH_POD("tj-worker-2", "{'spec':{'nodeName':'node-b'}}"),
           PROGRESS(POLL(1, 0.5, 3, 2.1, "2023-11-14T22:13:20Z")),
           /* Known, none straggling: nothing. */
           STRAGGLER(1, -1, NULL), RUN_(), APPLY(),
           EXPECT("{'cond':{'Straggler':null},'Event':{'$none':[{'reason':'Straggler'}]}}"),
           STRAGGLER(1, 3, "2.1"),
           /* the phase stays last */
           RUN("{'Event':{'$has':[{'reason':'Straggler','type':'Warning','message':"
               "'worker tj-worker-2 on node node-b computes 2.1x the median step time'}]},"
               "'cond':{'Straggler':{'status':'True'}},'state':'Running'}"),
           APPLY(),
           /* the same verdict: no second event */
           RUN("{'Event':{'$none':[{'reason':'Straggler'}]},'statusChanged':false}"),
           /* Not known (no poll this time): the condition stays. */
           STRAGGLER(0, 0, NULL), RUN("{'cond':{'Straggler':{'status':'True'}}}"),
           STRAGGLER(1, -1, NULL),
           RUN("{'cond':{'Straggler':{'status':'False'}},'state':'Running',"
               "'Event':{'$has':[{'reason':'StragglerRecovered','type':'Normal'}]}}"))},
    /* The Accuracy and Val-Accuracy columns (progress.accuracy,
     * valAccuracy) show the final numbers; the last poll said 2 of 2, the
     * result's epochs. The pods go: the result stays. */
    {"result_from_the_chief_termination_message", 1, 2, 0, NULL,
     STEPS(PROGRESS(POLL(2, 0.85, 0, 1.0, "2023-11-14T22:13:20Z")), SETTLE_(), RUN_(), APPLY(),
           ADVANCE(100), TERMINATE("tj-chief-0", 0, "Completed", 99),
           TERM_MESSAGE("tj-chief-0",
                        "{\"state\":\"Succeeded\",\"loss\":0.35,\"accuracy\":0.877,\"val_loss\":"
                        "0.41,\"val_accuracy\":0.86,\"samples_per_sec\":16000.25,\"epochs\":2,"
                        "\"steps\":3750,\"model\":\"/ckpt/model\",\"replicas_in_sync\":3}"),
           RUN("{'status':{'result':{'state':'Succeeded','accuracy':0.877,'valAccuracy':0.86,"
               "'valLoss':0.41,'samplesPerSec':16000.25,'epochs':2,'steps':3750,"
               "'replicasInSync':3,'model':'/ckpt/model'},"
               "'progress':{'accuracy':0.877,'valAccuracy':0.86,'epoch':2,"
               "'samplesPerSec':16000.3}},"
               "'Event':{'$has':[{'reason':'Succeeded','message':{'$contains':"
               "'accuracy 0.877 (val 0.86), model /ckpt/model'}}]}}"),
           APPLY(), VIEW_EMPTY(), RUN("{'status':{'result':{'model':'/ckpt/model'}}}"))},
    {"result_of_a_failure_and_foreign_messages/failure", 0, 2, 0,
     "{'spec':{'restartPolicy':'Never'}}",
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 65, "Error", 10),
           TERM_MESSAGE("tj-worker-0", "{\"state\":\"Failed\",\"error\":\"bad data: /data/x.gz\","
                                       "\"loss\":null,\"accuracy\":null,\"model\":null}"),
           RUN("{'status':{'result':{'state':'Failed','error':'bad data: /data/x.gz',"
               "'accuracy':{'$absent':true},'model':{'$absent':true}}}}"))},
    /* Not JSON (a plain-text message): no result. */
    {"result_of_a_failure_and_foreign_messages/plain_text", 0, 1, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 0, "Completed", 10),
           TERM_MESSAGE("tj-worker-0", "done"),
           RUN("{'status':{'result':{'$absent':true}},'cond':{'Succeeded':{'status':'True'}}}"))},
    /* Never polled: the columns still get the final numbers. */
    {"result_of_a_failure_and_foreign_messages/never_polled", 0, 1, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 0, "Completed", 10),
           TERM_MESSAGE("tj-worker-0", "{\"state\":\"Succeeded\",\"accuracy\":0.9,\"epochs\":4}"),
           RUN("{'status':{'progress':{'epoch':4,'accuracy':0.9}}}"))},
    /* The columns show the final numbers rounded as the poller rounds them
     * (4 decimals, samples/s 1: ACCURACY 0.8894, not 0.889408);
     * status.result keeps them exact (re-scoring, the Succeeded event). */
    {"result_of_a_failure_and_foreign_messages/columns_rounded", 0, 1, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 0, "Completed", 10),
           TERM_MESSAGE("tj-worker-0",
                        "{\"state\":\"Succeeded\",\"accuracy\":0.889408,\"val_accuracy\":"
                        "0.86127,\"samples_per_sec\":16000.25,\"loss\":0.312345678,"
                        "\"epochs\":4}"),
           RUN("{'status':{'result':{'accuracy':0.889408,'valAccuracy':0.86127,"
               "'samplesPerSec':16000.25,'loss':0.312345678,'epochs':4},"
               "'progress':{'epoch':4,'accuracy':0.8894,'valAccuracy':0.8613,"
               "'samplesPerSec':16000.3,'loss':{'$absent':true}}}}"))},
    /* spec.progressDeadlineSeconds: the step stops moving -> NoProgress
     * restart after the deadline, counted against backoffLimit. */
    {"no_progress_restarts_the_gang", 1, 1, 0, "{'spec':{'progressDeadlineSeconds':60}}",
     STEPS(POLL_INTERVAL(10), SETTLE_(), ADVANCE(10), PROGRESS(POLL(1, 0.5, 0, 1.0, "now")), RUN_(),
           APPLY(),
           EXPECT("{'status':{'progress':{'lastProgressTime':'2023-11-14T22:13:30Z'}},"
                  "'requeueAfter':60}"),
           /* Polls keep coming with the same step. */
           ADVANCE(59), PROGRESS(POLL(1, 0.5, 0, 1.0, "now")), RUN("{'status':{'attempt':1}}"),
           ADVANCE(1),
           RUN("{'status':{'attempt':2,'restarts':1},'cond':{'Restarting':{'reason':'NoProgress',"
               "'message':{'$contains':'step 19'}}}}"))},
};

TEST(status_cases) {
  CASES_RUN(status_cases);
}

/* ---- disruptions, one attempt at a time, finalizers ---------------------- */

#define EVICTED                                                                                    \
  "{'status':{'conditions':[{'type':'DisruptionTarget','status':'True',"                           \
  "'reason':'EvictionByEvictionAPI'}]}}"

static const rcase disruption_cases[] = {
    {"pod_deleted_by_someone_else_ends_the_attempt", 0, 2, 0, NULL,
     /* kubectl delete pod / a drain's eviction: deletionTimestamp set, the
      * container still running out its grace period. A disruption, not a
      * failure: counted apart from backoffLimit; nothing is recreated
      * under attempt 1. */
     STEPS(SETTLE_(),
           PATCH_POD("tj-worker-1", "{'metadata':{'deletionTimestamp':'2026-01-01T00:00:00Z'}}"),
           RUN("{'status':{'attempt':2,'restarts':0,'disruptions':1},"
               "'cond':{'Restarting':{'reason':'Disruption','message':{'$contains':["
               "'pod tj-worker-1 on node','was deleted before it finished']}}},"
               "'CreatePod':[]}"))},
    /* kubectl delete --force --grace-period=0 of worker-1: the finalizer
     * keeps it listed; the attempt ends as a disruption (backoffLimit 0
     * still restarts), the finalizer goes after the status, and no pod of
     * attempt 2 starts while one of attempt 1 remains. */
    {"force_deleted_pod_is_a_disruption_never_recreated", 1, 2, 0, "{'spec':{'backoffLimit':0}}",
     STEPS(SETTLE("{'pods':{'tj-worker-1':{'metadata':{'finalizers':{'0':'" PODBUILD_FINALIZER
                  "'}}}}}"),
           DELETE_BY("tj-worker-1", 0, 1),
           RUN("{'kinds':{'0':'UpdateStatus'},'status':{'attempt':2,'restarts':0,"
               "'disruptions':1},'state':'Restarting',"
               "'RemoveFinalizer':{'$has':[{'name':'tj-worker-1','index':0,"
               "'uid':'uid-tj-worker-1-a1'}]},"
               "'CreatePod':[],'DeletePod':{'$count':2}}"), /* chief-0 and worker-0 */
           APPLY(),
           /* worker-1's object went; chief-0 and worker-0 terminate: still nothing. */
           REMOVE_POD("tj-worker-1"),
           RUN("{'CreatePod':[],'RemoveFinalizer':{'$count':2}}"), /* the two we deleted */
           APPLY(), REAP(),
           RUN("{'CreatePod':{'$count':3,'$has':[{'name':'tj-worker-1','attempt':2}]}}"))},
    /* Pods of an ended attempt that stay Terminating (their node is gone)
     * are force-deleted RECON_FORCE_DELETE_AFTER_S past their
     * deletionTimestamp (now + 30). */
    {"stuck_terminating_pods_force_deleted_after_a_bound", 0, 2, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-1", 137, "Error", 1), RUN("{'status':{'attempt':2}}"),
           APPLY(), /* worker-0 deleting, deletionTimestamp now + 30 */
           REMOVE_POD("tj-worker-1"),
           /* requeue: (now + 30) + RECON_FORCE_DELETE_AFTER_S (30) - now */
           RUN("{'CreatePod':[],'requeueAfter':60}"), APPLY(), AT(30 + RECON_FORCE_DELETE_AFTER_S),
           RUN("{'DeletePod':{'$has':[{'name':'tj-worker-0','force':true}]},'CreatePod':[]}"))},
    /* A node that stops reporting: its pods are marked not ready; the
     * attempt ends as a disruption naming the node, and they are deleted at
     * once with grace 0 (no kubelet will confirm). */
    {"node_loss_is_a_disruption_naming_the_node", 0, 2, 0, "{'spec':{'backoffLimit':0}}",
     STEPS(SETTLE_(), NODE_LOST("tj-worker-1", "node-2"),
           RUN("{'status':{'attempt':2,'disruptions':1},"
               "'Event':{'$has':[{'reason':'Restarting','message':{'$contains':["
               "'node node-2','not counted against backoffLimit']}}]},"
               "'DeletePod':{'$has':[{'name':'tj-worker-1','force':true},"
               "{'name':'tj-worker-0','force':false}]}}"))},
    /* Ready False from the kubelet itself (a readiness probe or gate: it
     * gives a reason) is not a lost node. */
    {"kubelet_not_ready_is_not_node_loss", 0, 2, 0, NULL,
     STEPS(SETTLE_(), NODE_LOST("tj-worker-1", "node-1"),
           PATCH_POD("tj-worker-1", "{'status':{'conditions':[{'type':'Ready','status':'False',"
                                    "'reason':'ReadinessGatesNotReady'}]}}"),
           RUN("{'status':{'attempt':1},'DeletePod':[]}"))},
    /* The survivors exit 75 (lost a peer) before the node controller marks
     * the lost one: the end waits up to RECON_PEER_LOSS_WINDOW_S for the
     * cause, which makes it a disruption; without one it is a failure after
     * the wait. */
    {"lost_peer_waits_for_its_cause/cause_found", 0, 3, 0, "{'spec':{'backoffLimit':0}}",
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 75, "Error", 10),
           TERMINATE("tj-worker-2", 75, "Error", 11), AT(20),
           RUN("{'status':{'attempt':1},'DeletePod':[],"
               "'requeueAfter':65}"), /* 10 + RECON_PEER_LOSS_WINDOW_S (75) - 20 */
           NODE_LOST("tj-worker-1", "node-2"), AT(50),
           RUN("{'status':{'attempt':2,'disruptions':1},"
               "'Event':{'$has':[{'reason':'Restarting','message':{'$contains':'node-2'}}]}}"))},
    {"lost_peer_waits_for_its_cause/none_fails", 0, 2, 0, "{'spec':{'backoffLimit':0}}",
     STEPS(SETTLE_(),
           TERMINATE("tj-worker-0", 75, "Error", 10), /* worker-1 hangs, Running and Ready */
           /* still waiting a second before the window ends */
           AT(10 + RECON_PEER_LOSS_WINDOW_S - 1),
           RUN("{'status':{'attempt':1},'cond':{'Failed':null},'requeueAfter':1}"),
           AT(10 + RECON_PEER_LOSS_WINDOW_S),
           RUN("{'state':'Failed','cond':{'Failed':{'reason':'BackoffLimitExceeded'}}}"))},
    /* Evictions count as disruptions up to maxDisruptions, then fail the job. */
    {"disruptions_bounded_by_max_disruptions", 0, 1, 0,
     "{'spec':{'backoffLimit':0,'maxDisruptions':2}}",
     STEPS(SETTLE_(), PATCH_POD("tj-worker-0", EVICTED), DELETE_BY("tj-worker-0", 30, 0),
           RUN("{'status':{'disruptions':1},'Event':{'$has':[{'reason':'Restarting',"
               "'message':{'$contains':'EvictionByEvictionAPI'}}]}}"),
           APPLY(), REAP(), SETTLE_(), PATCH_POD("tj-worker-0", EVICTED),
           DELETE_BY("tj-worker-0", 30, 0),
           RUN("{'status':{'disruptions':2},'Event':{'$has':[{'reason':'Restarting',"
               "'message':{'$contains':'EvictionByEvictionAPI'}}]}}"),
           APPLY(), REAP(), SETTLE_(), PATCH_POD("tj-worker-0", EVICTED),
           DELETE_BY("tj-worker-0", 30, 0),
           RUN("{'state':'Failed','cond':{'Failed':{'reason':'DisruptionLimitExceeded'}},"
               "'status':{'restarts':0}}"))},
    /* A job being deleted: nothing is created or restarted; the pods the
     * garbage collector deletes lose the finalizer. */
    {"deleting_job_only_releases_finalizers", 0, 2, 0, NULL,
     STEPS(SETTLE_(), PATCH_JOB("{'metadata':{'deletionTimestamp':'2023-11-14T22:13:20Z'}}"),
           DELETE_BY("tj-worker-0", 30, 0), DELETE_BY("tj-worker-1", 30, 0),
           RUN("{'RemoveFinalizer':{'$count':2},'CreatePod':[],'DeletePod':[],"
               "'status':{'attempt':1}}"))},
};

TEST(disruption_cases) {
  CASES_RUN(disruption_cases);
}

/* ---- what does not fit a table -------------------------------------------- */

TEST(state_of_no_status) {
  ASSERT_STR_EQ(recon_state(NULL), "Pending");
}

/* The last pass (obs_build) matches `exp`, or the test fails. */
static void expect_pass(world *w, const char *exp, int line) {
  cJSON *o = obs_build(w);
  char where[64];
  snprintf(where, sizeof(where), "%s:%d", __FILE__, line);
  int bad = jm_check(o, exp, where);
  cJSON_Delete(o);
  if (bad)
    abort();
}
#define EXPECT_PASS(w, exp) expect_pass((w), (exp), __LINE__)

TEST(validate_direct) {
  world w;
  world_init(&w, 1, 4096, 1);
  char msg[512] = "";
  ASSERT_OK(recon_validate(w.job, msg, sizeof(msg)));
  /* 51 characters still fit "-worker-4095" and "-evaluator-0" in 63. */
  rw_merge_patch_text(
      w.job, "{'metadata':{'name':'a23456789012345678901234567890123456789012345678901'}}");
  ASSERT_OK(recon_validate(w.job, msg, sizeof(msg)));
  rw_merge_patch_text(w.job, "{'spec':{'replicaSpecs':{'Worker':null}}}");
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "spec.replicaSpecs.Worker");
  world_free(&w);
}

/* spec.checkpoint.uri (object storage): valid with credentialsSecret; what
 * the schema would reject is reported naming the field if it gets here. */
TEST(validate_backup_uri) {
  static const struct {
    const char *checkpoint;
    const char *const named[2]; /* NULL: valid */
  } rows[] = {
      {"{'uri':'s3://bkt/p','endpoint':'http://minio:9000','credentialsSecret':'creds'}", {NULL}},
      {"{'uri':'s3://bkt/p'}", {"spec.checkpoint.credentialsSecret", NULL}},
      {"{'uri':'http://b/p','credentialsSecret':'creds'}", {"spec.checkpoint.uri", NULL}},
      {"{'uri':'gs://bkt','credentialsSecret':'c','volume':{'emptyDir':{}},'mountPath':'/x'}",
       {"spec.checkpoint.uri", "volume"}},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    world w;
    world_init(&w, 1, 2, 0);
    rw_set_spec(&w, "checkpoint", rw_qparse(rows[i].checkpoint));
    char msg[512] = "";
    ctrain_err r = recon_validate(w.job, msg, sizeof(msg));
    if (!rows[i].named[0]) {
      if (r != CTRAIN_OK)
        TEST_FAIL_("checkpoint %s: %s", rows[i].checkpoint, msg);
      rw_run(&w);
      EXPECT_PASS(&w, "{'CreatePod':{'$count':3}}");
    } else {
      if (r != CTRAIN_E_CONFIG)
        TEST_FAIL_("checkpoint %s: %d, want CTRAIN_E_CONFIG", rows[i].checkpoint, (int)r);
      for (size_t k = 0; k < 2 && rows[i].named[k]; k++)
        ASSERT_STR_CONTAINS(msg, rows[i].named[k]);
    }
    world_free(&w);
  }
}

/* The controller admits exactly the backup URIs of tests/data/backup_uris.tsv
 * that the worker and the CRD admit (one definition of a backup URI): recon_validate refuses the
 * others as InvalidSpec naming the field, and the pods of the others build. */
TEST(validate_backup_uri_table) {
  backup_uri_row *rows = NULL;
  int n = backup_uris_load(BACKUP_URIS_TSV, &rows);
  ASSERT_GE(n, 60);
  world w;
  world_init(&w, 1, 2, 0);
  int wrong = 0;
  for (int i = 0; i < n; i++) {
    char msg[512] = "", err[512] = "";
    cJSON *ck = cJSON_CreateObject();
    cJSON_AddStringToObject(ck, "uri", rows[i].uri);
    cJSON_AddStringToObject(ck, "credentialsSecret", "creds");
    rw_set_spec(&w, "checkpoint", ck);
    int ok = recon_validate(w.job, msg, sizeof(msg)) == CTRAIN_OK;
    cJSON *pod = NULL;
    int built = podbuild_pod(parsed_spec(w.job), PODBUILD_WORKER, 0, 1, &pod, err, sizeof(err)) ==
                CTRAIN_OK;
    cJSON_Delete(pod);
    if (ok != rows[i].accepted || built != ok || (!ok && !strstr(msg, "spec.checkpoint.uri"))) {
      fprintf(stderr, "backup_uris.tsv:%d: %s (%s): table %s, controller %s, podbuild %s: %s\n",
              rows[i].line, rows[i].uri, rows[i].why, rows[i].accepted ? "yes" : "no",
              ok ? "yes" : "no", built ? "yes" : "no", ok ? err : msg);
      wrong++;
    }
  }
  free(rows);
  world_free(&w);
  ASSERT_EQ(wrong, 0);
}

TEST(token_failure_is_an_error) {
  world w;
  world_init(&w, 0, 1, 0);
  w.token_fail = 1;
  char err[256] = "";
  recon_input in = {
      .job = w.job, .pods = w.pods, .now = w.now, .token = rw_fake_token, .token_ctx = &w};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "token");
  ASSERT_EQ(w.res.n_actions, 0);
  ASSERT_NULL(w.res.status);
  /* A job without a uid is the caller's error. */
  rw_merge_patch_text(w.job, "{'metadata':{'uid':null}}");
  w.token_fail = 0;
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "uid");
  /* So is a missing token callback. */
  recon_input none = {.job = w.job, .pods = w.pods, .now = w.now};
  ASSERT_EQ(recon_reconcile(&none, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "token");
  world_free(&w);
}

TEST(pod_list_object_accepted) {
  world w;
  world_init(&w, 0, 1, 0);
  rw_settle(&w);
  cJSON *list = cJSON_CreateObject();
  cJSON_AddStringToObject(list, "kind", "PodList");
  cJSON_AddItemToObject(list, "items", w.pods);
  w.pods = list;
  rw_run(&w);
  w.pods = cJSON_DetachItemFromObject(list, "items");
  cJSON_Delete(list);
  EXPECT_PASS(&w, "{'CreatePod':[]}");
  world_free(&w);
}

TEST(time_round_trip) {
  char buf[40];
  int64_t t = 0;
  ASSERT_OK(kube_time_format(NOW, buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "2023-11-14T22:13:20Z");
  ASSERT_OK(kube_time_parse(buf, &t));
  ASSERT_EQ(t, NOW);
  ASSERT_OK(kube_time_parse("2023-11-14T22:13:20.123456Z", &t));
  ASSERT_EQ(t, NOW);
  ASSERT_OK(kube_time_parse("2023-11-14T23:13:20+01:00", &t));
  ASSERT_EQ(t, NOW);
  ASSERT_EQ(kube_time_parse("2023-11-14 22:13:20", &t), CTRAIN_E_PARSE);
  ASSERT_EQ(kube_time_parse("2023-11-14T22:13:20Zjunk", &t), CTRAIN_E_PARSE);
  ASSERT_EQ(kube_time_parse(NULL, &t), CTRAIN_E_PARSE);
}

/* TF_CONFIG of container `c` as the kubelet gives it: the $(CTRAIN_TF_CLUSTER)
 * reference replaced by the ConfigMap's cluster, the variable defined from
 * the ConfigMap of the pod's attempt and earlier in the list. Owned. */
static char *expand_cluster(world *w, const cJSON *c, const char *tfc) {
  const cJSON *e;
  int at = 0, var_at = -1, tf_at = -1;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, "env")) {
    const char *n = rw_str_at(e, "name", NULL);
    if (!strcmp(n, CTRAIN_ENV_TF_CLUSTER)) {
      char want[256];
      snprintf(want, sizeof(want),
               "{'valueFrom':{'configMapKeyRef':{'name':'tj-cluster-%d','key':'%s'}}}",
               w->cluster_attempt, PODBUILD_CLUSTER_KEY);
      EXPECT_JSON(e, want);
      var_at = at;
    }
    if (!strcmp(n, "TF_CONFIG"))
      tf_at = at;
    at++;
  }
  ASSERT_GE(var_at, 0);
  ASSERT_LT(var_at, tf_at);
  ASSERT_NOT_NULL(w->cluster);
  const char *ref = strstr(tfc, "$(" CTRAIN_ENV_TF_CLUSTER ")");
  ASSERT_NOT_NULL(ref);
  size_t rl = strlen("$(" CTRAIN_ENV_TF_CLUSTER ")");
  size_t n = strlen(tfc) - rl + strlen(w->cluster) + 1;
  char *x = malloc(n);
  ASSERT_NOT_NULL(x);
  snprintf(x, n, "%.*s%s%s", (int)(ref - tfc), tfc, w->cluster, ref + rl);
  return x;
}

TEST(created_pod_tfconfig_parses_back) {
  world w;
  world_init(&w, 1, 2, 1);
  rw_settle(&w);
  static const struct {
    const char *name;
    tfconfig_task_type type;
    int index, rank;
  } want[] = {{"tj-chief-0", TFCONFIG_CHIEF, 0, 0},
              {"tj-worker-0", TFCONFIG_WORKER, 0, 1},
              {"tj-worker-1", TFCONFIG_WORKER, 1, 2},
              {"tj-evaluator-0", TFCONFIG_EVALUATOR, 0, -1}};
  for (size_t i = 0; i < 4; i++) {
    cJSON *p = rw_pod_named(&w, want[i].name);
    const cJSON *c = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "spec"), "containers"),
        0);
    const char *tfc = NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, "env")) {
      if (!strcmp(rw_str_at(e, "name", NULL), "TF_CONFIG"))
        tfc = rw_str_at(e, "value", NULL);
    }
    /* The kubelet expands the reference from the variable before it. */
    char *x = expand_cluster(&w, c, tfc);
    tfconfig tc;
    char err[256] = "";
    ASSERT_OK(tfconfig_parse(&tc, x, err, sizeof(err)));
    free(x);
    ASSERT_EQ(tc.type, want[i].type);
    ASSERT_EQ(tc.index, want[i].index);
    ASSERT_EQ(tc.rank, want[i].rank);
    ASSERT_EQ(tc.world, 3);
    char addr[128];
    snprintf(addr, sizeof(addr), "%s.tj.default.svc:2222", want[i].name);
    ASSERT_STR_EQ(tc.self_addr, addr);
    tfconfig_free(&tc);
  }
  world_free(&w);
}

TEST(action_kind_names) {
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_POD), "CreatePod");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_REQUEUE), "Requeue");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_SECRET), "CreateSecret");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_NETWORK_POLICY), "CreateNetworkPolicy");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_CREATE_CONFIGMAP), "CreateConfigMap");
  ASSERT_STR_EQ(recon_action_kind_name(RECON_DELETE_CONFIGMAP), "DeleteConfigMap");
  ASSERT_STR_EQ(recon_action_kind_name((recon_action_kind)99), "Unknown");
}

TEST(failed_pass_rolls_back_expectations) {
  world w;
  world_init(&w, 0, 1, 1);
  rw_settle(&w);
  rw_terminate(&w, "tj-evaluator-0", 1, "Error", 1);
  rw_lost_peer(&w, "tj-worker-0", 2);
  /* The restart pass deletes pods, then needs a new token and fails. */
  w.token_fail = 1;
  recon_result_free(&w.res); /* settle's last pass */
  char err[256] = "";
  recon_input in = {.job = w.job,
                    .pods = w.pods,
                    .service = w.job,
                    .token_attempt = w.token_attempt,
                    .now = w.now,
                    .token = rw_fake_token,
                    .token_ctx = &w};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_EQ(recon_expectations_pending(&w.x), 0);
  ASSERT_EQ(w.x.attempt, 0);
  /* The retry decides the same restart, with its deletes. */
  w.token_fail = 0;
  rw_run(&w);
  EXPECT_PASS(&w, "{'status':{'attempt':2,'restarts':1},'Event':{'$has':[{'reason':'Restarting'}]},"
                  "'DeletePod':{'$count':2},'pending':2}");
  world_free(&w);
}

/* A result that still holds a pass is refused and left alone: zeroing it
 * (as recon_reconcile once did) leaked its actions and status. */
TEST(non_empty_result_refused) {
  world w;
  world_init(&w, 0, 1, 0);
  rw_run(&w);
  recon_action *actions = w.res.actions;
  cJSON *status = w.res.status;
  size_t n = w.res.n_actions;
  ASSERT_GT(n, 0);
  char err[256] = "";
  recon_input in = {
      .job = w.job, .pods = w.pods, .now = w.now, .token = rw_fake_token, .token_ctx = &w};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "not empty");
  ASSERT(w.res.actions == actions);
  ASSERT(w.res.status == status);
  ASSERT_EQ(w.res.n_actions, n);
  /* A status alone counts as holding a pass too. */
  recon_result only_status = {.status = cJSON_CreateObject()};
  ASSERT_EQ(recon_reconcile(&in, &w.x, &only_status, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NOT_NULL(only_status.status);
  recon_result_free(&only_status);
  ASSERT_EQ(recon_reconcile(&in, &w.x, NULL, err, sizeof(err)), CTRAIN_E_INVAL);
  /* Freed, it is accepted again. */
  recon_result_free(&w.res);
  ASSERT_OK(recon_reconcile(&in, &w.x, &w.res, err, sizeof(err)));
  ASSERT_NOT_NULL(w.res.status);
  world_free(&w);
}

/* The object UPDATE_STATUS writes, with each of its allocations failing in
 * turn: CTRAIN_E_NOMEM and nothing, or the job with the whole new status.
 * Before, a failed copy of the status gave the job without one, which the
 * controller PUT to the status subresource. */
TEST(status_object_whole_or_nothing) {
  world w;
  world_init(&w, 0, 1, 0);
  rw_settle(&w); /* w.job has an old status; w.res.status is a new one */
  cJSON *status = cJSON_Duplicate(w.res.status, 1);
  cJSON_ReplaceItemInObjectCaseSensitive(status, "attempt", cJSON_CreateNumber(9));
  int failures = 0;
  for (long n = 0;; n++) {
    cJSON *obj = (cJSON *)1;
    test_alloc_fail_nth(n);
    ctrain_err r = recon_status_object(w.job, status, &obj);
    int fired = test_alloc_fired();
    test_alloc_off();
    if (fired) {
      failures++;
      if (r != CTRAIN_E_NOMEM || obj)
        TEST_FAIL_("allocation %ld failed: result %d, object %p; want NOMEM and none", n, (int)r,
                   (void *)obj);
      continue;
    }
    ASSERT_OK(r);
    ASSERT(cJSON_Compare(cJSON_GetObjectItemCaseSensitive(obj, "status"), status, 1));
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON *job = cJSON_Duplicate(w.job, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(job, "status");
    ASSERT(cJSON_Compare(obj, job, 1)); /* the rest is the job's */
    cJSON_Delete(job);
    cJSON_Delete(obj);
    break;
  }
  ASSERT_GT(failures, 10);
  cJSON_Delete(status);
  world_free(&w);
}

/* What one job stores, as the controller sends it, at the CRD's maximum of
 * 4096 workers (plus a chief): linear in the workers. Before, every pod
 * carried the whole cluster in TF_CONFIG (n pods x n addresses). */
TEST(stored_bytes_at_4096_workers) {
  world w;
  world_init(&w, 1, 4096, 0);
  w.burst = 5000;
  rw_run(&w);
  ASSERT_EQ(rw_count(&w, RECON_CREATE_POD), 4097);
  size_t pods = 0, cm = 0, n = 0, max_pod = 0;
  for (size_t i = 0; i < w.res.n_actions; i++) {
    const recon_action *a = &w.res.actions[i];
    if (a->kind != RECON_CREATE_POD && a->kind != RECON_CREATE_CONFIGMAP)
      continue;
    char *t = cJSON_PrintUnformatted(a->object);
    ASSERT_NOT_NULL(t);
    if (a->kind == RECON_CREATE_POD) {
      pods += strlen(t);
      max_pod = strlen(t) > max_pod ? strlen(t) : max_pod;
      n++;
    } else {
      cm += strlen(t);
    }
    free(t);
  }
  /* The same pods before: TF_CONFIG held the cluster itself, and there was
   * no variable for it nor a ConfigMap. */
  size_t cluster = 0;
  ASSERT_OK(podbuild_cluster_size(parsed_spec(w.job), &cluster));
  const size_t var_entry =
      strlen(",{\"name\":\"" CTRAIN_ENV_TF_CLUSTER "\",\"valueFrom\":{\"configMapKeyRef\":{"
             "\"name\":\"tj-cluster-1\",\"key\":\"" PODBUILD_CLUSTER_KEY "\"}}}");
  const size_t before = pods + n * (cluster - strlen("$(" CTRAIN_ENV_TF_CLUSTER ")") - var_entry);
  const size_t after = pods + cm;
  printf("stored per job at 4096 workers + chief: before %zu bytes (%.1f MB), after %zu bytes "
         "(%.2f MB: %zu pods of <= %zu bytes, the cluster ConfigMap %zu bytes)\n",
         before, before / 1e6, after, after / 1e6, n, max_pod, cm);
  ASSERT_GT(before, (size_t)600 * 1000 * 1000);
  ASSERT_LT(after, (size_t)16 * 1024 * 1024);
  ASSERT_LT(max_pod, (size_t)4096);
  ASSERT_GT(cm, cluster);
  ASSERT_LT(cm, cluster + cluster / 10); /* its quotes escaped */
  world_free(&w);
}

/* A job whose objects would exceed the budgets is refused before anything
 * is created, the message naming the budget. */
TEST(budget_refuses_oversized_jobs) {
  world w;
  world_init(&w, 1, 4096, 1);
  char msg[512];
  ASSERT_OK(recon_validate(w.job, msg, sizeof(msg)));
  /* A 20 KiB template: 4096 x 20 KiB is over 64 MiB. */
  cJSON *c = cJSON_GetArrayItem(
      cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(
                  cJSON_GetObjectItemCaseSensitive(
                      cJSON_GetObjectItemCaseSensitive(rw_spec_of(&w), "replicaSpecs"), "Worker"),
                  "template"),
              "spec"),
          "containers"),
      0);
  char *big = malloc(20 * 1024 + 1);
  ASSERT_NOT_NULL(big);
  memset(big, 'x', 20 * 1024);
  big[20 * 1024] = 0;
  cJSON *args = cJSON_AddArrayToObject(c, "args");
  cJSON_AddItemToArray(args, cJSON_CreateString(big));
  free(big);
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "per-job budget of 67108864 bytes (64 MiB)");
  ASSERT_STR_CONTAINS(msg, "4098 pods");
  rw_run(&w);
  EXPECT_PASS(&w, "{'cond':{'Failed':{'status':'True','reason':'InvalidSpec'}},'CreatePod':[],"
                  "'CreateConfigMap':[]}");
  world_free(&w);
  /* The cluster ConfigMap's own budget: only a name longer than the CRD
   * allows gets there (validation refuses the pod names first otherwise),
   * so the builder is checked directly. */
  world_init(&w, 0, 4096, 0);
  cJSON *md = cJSON_GetObjectItemCaseSensitive(w.job, "metadata");
  char ns[300];
  memset(ns, 'n', 253);
  ns[253] = 0;
  cJSON_ReplaceItemInObjectCaseSensitive(md, "namespace", cJSON_CreateString(ns));
  size_t size = 0;
  ASSERT_OK(podbuild_cluster_size(parsed_spec(w.job), &size));
  ASSERT_GT(size, (size_t)PODBUILD_CLUSTER_BYTES_MAX);
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "over the budget of 983040 bytes");
  cJSON *cm = NULL;
  char err[256];
  ASSERT_NE(podbuild_cluster_configmap(parsed_spec(w.job), 1, &cm, err, sizeof(err)), CTRAIN_OK);
  ASSERT_NULL(cm);
  world_free(&w);
}

/* The matcher itself: what it accepts and refuses (a matcher that accepts
 * everything would make every table pass). */
TEST(matcher_refuses_mismatches) {
  cJSON *a = rw_qparse("{'s':'abc','n':2,'b':true,'arr':[{'k':1},{'k':2}],'o':{'x':1,'y':2},"
                       "'j':'{\\\"p\\\":[1,2]}'}");
  ASSERT_NOT_NULL(a);
  static const char *const good[] = {
      "{}",
      "{'s':'abc','n':2,'b':true}",
      "{'s':{'$contains':['ab','bc']},'n':{'$gt':1,'$le':2}}",
      "{'arr':[{'k':1},{'k':2}],'o':{'x':1}}",
      "{'arr':{'$count':2,'$has':[{'k':2}],'$none':[{'k':3}],'-1':{'k':2}}}",
      "{'o':{'$count':2},'missing':null,'gone':{'$absent':true},'s':{'$absent':false}}",
      "{'j':{'$json':{'p':[1,2]}}}",
      "{'arr':{'$order':[{'k':1},{'k':2}]}}",
  };
  static const char *const bad[] = {
      "{'s':'abd'}",
      "{'n':3}",
      "{'b':false}",
      "{'missing':1}",
      "{'s':null}",
      "{'arr':[{'k':1}]}",
      "{'arr':[{'k':2},{'k':1}]}",
      "{'arr':{'$count':3}}",
      "{'arr':{'$has':[{'k':3}]}}",
      "{'arr':{'$none':[{'k':1}]}}",
      "{'arr':{'$order':[{'k':2},{'k':1}]}}",
      "{'s':{'$contains':'x'}}",
      "{'n':{'$lt':2}}",
      "{'o':{'x':2}}",
      "{'o':{'$count':1}}",
      "{'s':{'$absent':true}}",
      "{'j':{'$json':{'p':[1]}}}",
      "{'n':'2'}",
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
    if (jm_check(a, good[i], good[i]))
      TEST_FAIL_("refused: %s", good[i]);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cJSON *e = rw_qparse(bad[i]);
    ASSERT_NOT_NULL(e);
    if (!jm_match(a, e, "", 1))
      TEST_FAIL_("accepted: %s", bad[i]);
    cJSON_Delete(e);
  }
  cJSON_Delete(a);
}

/* ---- progressDeadlineSeconds: the position, polling off ------------------ */

/* A poll of a chief at (epoch, step) of an epoch of one step (a small or
 * fine-tuning data set), without a global step. */
#define POS_POLL(epoch, step)                                                                      \
  "{'epoch':" #epoch ",'epochs':9,'step':" #step ",'stepsPerEpoch':1,'lastPollTime':'now'}"
/* The same with the global step the ctrain worker and ctrain_keras report. */
#define GPOS_POLL(epoch, step, global)                                                             \
  "{'epoch':" #epoch ",'epochs':9,'step':" #step ",'stepsPerEpoch':1,'globalStep':" #global        \
  ",'lastPollTime':'now'}"

static const rcase progress_position_cases[] = {
    /* Row 4: one step per epoch, so every poll lands on step 1 of the next
     * epoch. The chief moves (epoch 1, 2, 3): never NoProgress, though the
     * polls span more than the deadline. Once the position stops, the
     * deadline holds as before, the message naming the position. */
    {"deadline_judges_epoch_and_step_together", 1, 1, 0, "{'spec':{'progressDeadlineSeconds':60}}",
     STEPS(POLL_INTERVAL(10), SETTLE_(), ADVANCE(10), PROGRESS(POS_POLL(1, 1)), RUN_(), APPLY(),
           EXPECT("{'status':{'progress':{'lastProgressTime':'2023-11-14T22:13:30Z'}}}"),
           ADVANCE(50), PROGRESS(POS_POLL(2, 1)),
           RUN("{'status':{'attempt':1,'restarts':0,'progress':{'epoch':2,'step':1,"
               "'lastProgressTime':'2023-11-14T22:14:20Z'}},'cond':{'Restarting':null}}"),
           APPLY(), ADVANCE(50), PROGRESS(POS_POLL(3, 1)),
           RUN("{'status':{'attempt':1,'restarts':0,'progress':{'epoch':3,"
               "'lastProgressTime':'2023-11-14T22:15:10Z'}},'cond':{'Restarting':null},"
               "'requeueAfter':60}"),
           APPLY(),
           /* The chief stays at epoch 3 step 1: the deadline runs from 22:15:10. */
           ADVANCE(50), PROGRESS(POS_POLL(3, 1)),
           RUN("{'status':{'attempt':1,'progress':{'lastProgressTime':'2023-11-14T22:15:10Z'}}}"),
           APPLY(), ADVANCE(10), PROGRESS(POS_POLL(3, 1)),
           RUN("{'status':{'attempt':2,'restarts':1},'cond':{'Restarting':{'reason':'NoProgress',"
               "'message':{'$contains':['no progress for 60 s','reports epoch 3 step 1,']}}}}"))},
    /* The global step, when the chief reports one, is its position: it is
     * kept in status.progress and named in the message. */
    {"deadline_judges_the_global_step", 1, 1, 0, "{'spec':{'progressDeadlineSeconds':60}}",
     STEPS(POLL_INTERVAL(10), SETTLE_(), ADVANCE(10), PROGRESS(GPOS_POLL(1, 1, 1)), RUN_(), APPLY(),
           ADVANCE(50), PROGRESS(GPOS_POLL(2, 1, 2)),
           RUN("{'status':{'attempt':1,'progress':{'globalStep':2,"
               "'lastProgressTime':'2023-11-14T22:14:20Z'}}}"),
           APPLY(), ADVANCE(50), PROGRESS(GPOS_POLL(3, 1, 3)),
           RUN("{'status':{'attempt':1,'progress':{'globalStep':3}},'cond':{'Restarting':null}}"),
           APPLY(), ADVANCE(60), PROGRESS(GPOS_POLL(3, 1, 3)),
           RUN("{'status':{'attempt':2,'restarts':1},'cond':{'Restarting':{'reason':'NoProgress',"
               "'message':{'$contains':'reports epoch 3 step 1 (global step 3),'}}}}"))},
    /* Row 5: --progress-interval 0 polls nothing, so the deadline is not
     * enforced: said once in a condition (kept out of the State column)
     * and a Warning event, never a NoProgress restart. */
    {"deadline_not_enforced_without_polls", 1, 1, 0, "{'spec':{'progressDeadlineSeconds':60}}",
     STEPS(POLL_INTERVAL(0),
           RUN("{'cond':{'ProgressDeadlineNotEnforced':{'status':'True','reason':'PollingDisabled',"
               "'message':{'$contains':['spec.progressDeadlineSeconds 60',"
               "'--progress-interval 0']}}},'state':'Created',"
               "'Event':{'$has':[{'reason':'ProgressDeadlineNotEnforced','type':'Warning',"
               "'message':{'$contains':'--progress-interval 0'}}]}}"),
           APPLY(), ALL_RUNNING(),
           SETTLE("{'state':'Running','Event':{'$none':[{'reason':"
                  "'ProgressDeadlineNotEnforced'}]}}"),
           ADVANCE(1000),
           RUN("{'status':{'attempt':1,'restarts':0},'state':'Running','statusChanged':false,"
               "'cond':{'Restarting':null,'ProgressDeadlineNotEnforced':{'status':'True'}},"
               "'Event':{'$none':[{'reason':'ProgressDeadlineNotEnforced'}]}}"),
           ADVANCE(100000), RUN("{'status':{'attempt':1},'state':'Running'}"),
           /* A controller that polls again enforces it, from then on. */
           POLL_INTERVAL(10),
           RUN("{'status':{'attempt':1},'state':'Running','requeueAfter':60,"
               "'cond':{'ProgressDeadlineNotEnforced':{'status':'False',"
               "'reason':'PollingEnabled'}}}"),
           APPLY(), ADVANCE(59), RUN("{'status':{'attempt':1}}"), ADVANCE(1),
           RUN("{'status':{'attempt':2,'restarts':1},'cond':{'Restarting':{'reason':'NoProgress',"
               "'message':{'$contains':'has not answered a /progress poll'}}}}"))},
    /* Polling off, no deadline: nothing to say. */
    {"no_deadline_no_condition_without_polls", 1, 1, 0, NULL,
     STEPS(POLL_INTERVAL(0),
           SETTLE("{'state':'Running','cond':{'ProgressDeadlineNotEnforced':null},"
                  "'Event':{'$none':[{'reason':'ProgressDeadlineNotEnforced'}]}}"))},
};

TEST(progress_position_cases) {
  CASES_RUN(progress_position_cases);
}

TEST_MAIN(T(create_cases), T(lifecycle_cases), T(restart_table), T(status_cases),
          T(disruption_cases), T(state_of_no_status), T(validate_direct), T(validate_backup_uri),
          T(validate_backup_uri_table), T(token_failure_is_an_error), T(pod_list_object_accepted),
          T(time_round_trip), T(created_pod_tfconfig_parses_back), T(action_kind_names),
          T(failed_pass_rolls_back_expectations), T(non_empty_result_refused),
          T(status_object_whole_or_nothing), T(stored_bytes_at_4096_workers),
          T(budget_refuses_oversized_jobs), T(matcher_refuses_mismatches),
          T(progress_position_cases))
