/* test_ctl_failrules.c - spec.failurePolicy.rules (controller/recon_failrules.c
 * and its parsing in controller/jobspec.c), as tables of the reconcile
 * world (reconcile_world.h): each action, first match wins, NotIn,
 * containerName, the kubelet's OOMKilled retried twice then Failed, pod
 * conditions, the per-rule counts in status.ruleRestarts and their caps,
 * no match falling back to restartPolicy, and what recon_validate refuses.
 * `RECON_CASE=prefix ./test_ctl_failrules <table>` runs some cases. */
#include "reconcile_world.h"

#include "controller/jobspec.h"

/* A job with these rules (JSON with ' for "). */
#define RULES(r)            "{'spec':{'failurePolicy':{'rules':[" r "]}}}"
#define RULES_WITH(r, more) "{'spec':{" more ",'failurePolicy':{'rules':[" r "]}}}"
#define EXIT_RULE(action, op, values)                                                              \
  "{'action':'" action "','onExitCodes':{'operator':'" op "','values':" values "}}"

/* A gang restart decided, the old attempt's pods gone, the next one Running. */
#define NEXT_ATTEMPT() APPLY(), REAP(), SETTLE("{'podCount':2}")

/* The pod of a worker with two containers: `train` exited 0, `sidecar`
 * with `code`. */
#define SIDECAR_FAILED(code)                                                                       \
  "{'status':{'phase':'Failed','containerStatuses':["                                              \
  "{'name':'train','state':{'terminated':{'exitCode':0,'reason':'Completed',"                      \
  "'finishedAt':'2023-11-14T22:13:23Z'}}},"                                                        \
  "{'name':'sidecar','state':{'terminated':{'exitCode':" #code ",'reason':'Error',"                \
  "'finishedAt':'2023-11-14T22:13:23Z'}}}]}}"
#define TWO_CONTAINERS                                                                             \
  "'replicaSpecs':{'Worker':{'template':{'spec':{'containers':["                                   \
  "{'name':'train','image':'ctrain:dev'},{'name':'sidecar','image':'busybox'}]}}}}"

#define DISRUPTED                                                                                  \
  "{'status':{'phase':'Failed','reason':'Evicted','conditions':[{'type':'DisruptionTarget',"       \
  "'status':'True','reason':'EvictionByEvictionAPI'}]}}"

static const rcase action_cases[] = {
    /* "exit code 1 from my script is a bug: fail at once" (OnFailure alone
     * would restart it). */
    {"fail_job_on_exit_1", 0, 2, 0, RULES(EXIT_RULE("FailJob", "In", "[1]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-1", 1, "Error", 3),
           RUN("{'cond':{'Failed':{'status':'True','reason':'FailurePolicyFailJob',"
               "'message':{'$contains':['tj-worker-1','exit code 1',"
               "'spec.failurePolicy.rules[0] (FailJob)']}},'Restarting':null},"
               "'status':{'attempt':1,'restarts':0,'ruleRestarts':[0]},"
               "'Event':{'$has':[{'reason':'Failed','type':'Warning'}]},'CreatePod':[]}"))},
    {"no_rules_exit_1_restarts", 0, 2, 0, NULL,
     STEPS(SETTLE_(), TERMINATE("tj-worker-1", 1, "Error", 3),
           RUN("{'status':{'attempt':2,'restarts':1,'ruleRestarts':null},"
               "'cond':{'Restarting':{'reason':'GangRestart'}}}"))},
    /* "exit 137 from our preemption hook is not a failure": a restart that
     * backoffLimit 0 does not stop, counted as a disruption and per rule,
     * capped by maxRestarts. */
    {"restart_not_counted_exit_137_until_max_restarts", 0, 2, 0,
     RULES_WITH(
         "{'action':'RestartNotCounted','maxRestarts':2,'onExitCodes':{'containerName':'train',"
         "'operator':'In','values':[137]}}",
         "'backoffLimit':0"),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "Error", 3),
           RUN("{'status':{'attempt':2,'restarts':0,'disruptions':1,'ruleRestarts':[1]},"
               "'cond':{'Restarting':{'status':'True','reason':'RestartNotCounted',"
               "'message':{'$contains':['container train of pod tj-worker-0',"
               "'exit code 137','spec.failurePolicy.rules[0] (RestartNotCounted)',"
               "'restart 1 of 2','counted against maxDisruptions, not backoffLimit']}}}}"),
           NEXT_ATTEMPT(), TERMINATE("tj-worker-1", 137, "Error", 5),
           RUN("{'status':{'attempt':3,'restarts':0,'disruptions':2,'ruleRestarts':[2]}}"),
           NEXT_ATTEMPT(), TERMINATE("tj-worker-1", 137, "Error", 7),
           RUN("{'cond':{'Failed':{'status':'True','reason':'FailurePolicyMaxRestarts',"
               "'message':{'$contains':['spec.failurePolicy.rules[0] (RestartNotCounted)',"
               "'maxRestarts 2 reached after 2','exit code 137']}}},"
               "'status':{'attempt':3,'ruleRestarts':[2]}}"))},
    /* RestartNotCounted without maxRestarts cannot loop forever: its restarts
     * are disruptions, capped by spec.maxDisruptions. */
    {"restart_not_counted_without_max_is_capped_by_max_disruptions", 0, 1, 0,
     RULES_WITH(EXIT_RULE("RestartNotCounted", "In", "[137]"), "'maxDisruptions':1"),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "Error", 3),
           RUN("{'status':{'attempt':2,'disruptions':1,'ruleRestarts':[1]}}"), APPLY(), REAP(),
           SETTLE("{'podCount':1}"), TERMINATE("tj-worker-0", 137, "Error", 5),
           RUN("{'cond':{'Failed':{'reason':'DisruptionLimitExceeded','message':{'$contains':"
               "['maxDisruptions 1','rules[0] (RestartNotCounted)']}}}}"))},
    /* "retry an OOMKilled worker twice, then fail": the kubelet's
     * termination reason; counted against backoffLimit too. */
    {"oomkilled_twice_then_fail", 0, 2, 0,
     RULES_WITH("{'action':'Restart','maxRestarts':2,'onTerminationReasons':{'values':"
                "['OOMKilled']}}",
                "'backoffLimit':10"),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "OOMKilled", 3),
           RUN("{'status':{'attempt':2,'restarts':1,'ruleRestarts':[1]},"
               "'cond':{'Restarting':{'reason':'GangRestart','message':{'$contains':["
               "'exit code 137 (OOMKilled)','spec.failurePolicy.rules[0] (Restart)',"
               "'restart 1 of 2','gang restart 1 of 10']}}}}"),
           NEXT_ATTEMPT(), TERMINATE("tj-worker-1", 137, "OOMKilled", 5),
           RUN("{'status':{'attempt':3,'restarts':2,'ruleRestarts':[2]}}"), NEXT_ATTEMPT(),
           /* Another failure in between: no rule, restartPolicy's restart. */
           TERMINATE("tj-worker-1", 1, "Error", 6),
           RUN("{'status':{'attempt':4,'restarts':3,'ruleRestarts':[2]},"
               "'cond':{'Restarting':{'message':{'$contains':'gang restart 3 of 10'}}}}"),
           NEXT_ATTEMPT(), TERMINATE("tj-worker-0", 137, "OOMKilled", 7),
           RUN("{'cond':{'Failed':{'status':'True','reason':'FailurePolicyMaxRestarts',"
               "'message':{'$contains':['rules[0] (Restart): maxRestarts 2 reached after 2',"
               "'tj-worker-0','OOMKilled']}}},'status':{'attempt':4,'restarts':3}}"))},
    /* The per-rule count survives a new controller (it lives in the status). */
    {"rule_counts_read_from_the_status", 0, 1, 0,
     RULES("{'action':'Restart','maxRestarts':1,'onTerminationReasons':{'values':['OOMKilled']}}"),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "OOMKilled", 3),
           RUN("{'status':{'ruleRestarts':[1]}}"), APPLY(), FORGET(), REAP(),
           SETTLE("{'podCount':1,'status':{'ruleRestarts':[1]}}"),
           TERMINATE("tj-worker-0", 137, "OOMKilled", 5),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyMaxRestarts'}}}"))},
    /* A job cache behind our own status write: the count goes with the
     * attempt the expectations remember, never lost nor counted twice. */
    {"rule_counts_survive_a_stale_cache", 0, 1, 0,
     RULES("{'action':'Restart','maxRestarts':1,'onTerminationReasons':{'values':['OOMKilled']}}"),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "OOMKilled", 3),
           RUN("{'status':{'attempt':2,'ruleRestarts':[1]}}"), APPLY_NO_STATUS(), REAP(),
           RUN("{'status':{'attempt':2,'restarts':1,'ruleRestarts':[1]}}"), APPLY(),
           SETTLE("{'podCount':1,'status':{'attempt':2,'ruleRestarts':[1]}}"),
           TERMINATE("tj-worker-0", 137, "OOMKilled", 5),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyMaxRestarts'}},"
               "'status':{'attempt':2,'ruleRestarts':[1]}}"))},
};

TEST(action_cases) {
  CASES_RUN(action_cases);
}

static const rcase match_cases[] = {
    /* Ordered, the first match wins. */
    {"first_match_wins/not_counted_first", 0, 2, 0,
     RULES(EXIT_RULE("RestartNotCounted", "In", "[1,2]") "," EXIT_RULE("FailJob", "In", "[1]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 1, "Error", 3),
           RUN("{'status':{'attempt':2,'restarts':0,'ruleRestarts':[1,0]},"
               "'cond':{'Failed':null,'Restarting':{'reason':'RestartNotCounted',"
               "'message':{'$contains':'rules[0] (RestartNotCounted)'}}}}"))},
    {"first_match_wins/fail_first", 0, 2, 0,
     RULES(EXIT_RULE("FailJob", "In", "[1]") "," EXIT_RULE("RestartNotCounted", "In", "[1,2]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 1, "Error", 3),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyFailJob',"
               "'message':{'$contains':'rules[0] (FailJob)'}}},'status':{'ruleRestarts':[0,0]}}"))},
    {"first_match_wins/second_rule", 0, 2, 0,
     RULES(EXIT_RULE("FailJob", "In", "[1]") "," EXIT_RULE("RestartNotCounted", "In", "[1,2]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 2, "Error", 3),
           RUN("{'status':{'attempt':2,'ruleRestarts':[0,1]},"
               "'cond':{'Restarting':{'message':{'$contains':'rules[1] (RestartNotCounted)'}}}}"))},
    /* NotIn: every failure but the listed codes fails the job. */
    {"not_in/listed_code_falls_back", 0, 2, 0, RULES(EXIT_RULE("FailJob", "NotIn", "[75,137]")),
     STEPS(SETTLE_(), LOST_PEER("tj-worker-0", 1),
           RUN("{'status':{'attempt':2,'restarts':1,'ruleRestarts':[0]},"
               "'cond':{'Restarting':{'reason':'GangRestart'},'Failed':null}}"))},
    {"not_in/other_code_fails", 0, 2, 0, RULES(EXIT_RULE("FailJob", "NotIn", "[75,137]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 3, "Error", 1),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyFailJob','message':{'$contains':"
               "'exit code 3'}}}}"))},
    /* containerName: only that container's code counts. */
    {"container_name/other_container_no_match", 0, 2, 0,
     RULES_WITH("{'action':'FailJob','onExitCodes':{'containerName':'sidecar','operator':'In',"
                "'values':[1]}}",
                TWO_CONTAINERS),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 1, "Error", 3),
           RUN("{'status':{'attempt':2,'restarts':1},'cond':{'Failed':null}}"))},
    {"container_name/named_container_matches", 0, 2, 0,
     RULES_WITH("{'action':'FailJob','onExitCodes':{'containerName':'sidecar','operator':'In',"
                "'values':[1]}}",
                TWO_CONTAINERS),
     STEPS(SETTLE_(), PATCH_POD("tj-worker-1", SIDECAR_FAILED(1)),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyFailJob','message':{'$contains':"
               "['container sidecar of pod tj-worker-1','exit code 1','rules[0]']}}}}"))},
    /* Every matcher of a rule must match: exit 137 and OOMKilled. */
    {"matchers_all_must_match", 0, 2, 0,
     RULES("{'action':'FailJob','onExitCodes':{'operator':'In','values':[137]},"
           "'onTerminationReasons':{'values':['OOMKilled']}}"),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "Error", 3),
           RUN("{'status':{'attempt':2},'cond':{'Failed':null}}"), NEXT_ATTEMPT(),
           TERMINATE("tj-worker-0", 137, "OOMKilled", 5),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyFailJob'}}}"))},
    /* No rule matches: restartPolicy and the exit table, as without rules. */
    {"no_match_falls_back_to_exit_table", 0, 2, 0,
     RULES(EXIT_RULE("RestartNotCounted", "In", "[137]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 78, "Error", 3),
           RUN("{'cond':{'Failed':{'reason':'NotRetryable','message':{'$contains':"
               "'exit code 78'}}},'status':{'ruleRestarts':[0]}}"))},
    /* A rule overrides the table: Restart retries a permanent code. */
    {"restart_rule_retries_a_permanent_code", 0, 2, 0, RULES(EXIT_RULE("Restart", "In", "[78]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 78, "Error", 3),
           RUN("{'status':{'attempt':2,'restarts':1,'ruleRestarts':[1]},'cond':{'Failed':null}}"))},
    /* onPodConditions: a disruption a rule matches follows the rule. */
    {"pod_condition/disruption_fails_the_job", 0, 2, 0,
     RULES("{'action':'FailJob','onPodConditions':[{'type':'DisruptionTarget'}]}"),
     STEPS(SETTLE_(), PATCH_POD("tj-worker-1", DISRUPTED),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyFailJob','message':{'$contains':"
               "['tj-worker-1','rules[0] (FailJob)']}}},'status':{'disruptions':0}}"))},
    {"pod_condition/not_counted_disruption_counts_per_rule", 0, 2, 0,
     RULES("{'action':'RestartNotCounted','maxRestarts':5,'onPodConditions':[{'type':'"
           "DisruptionTarget',"
           "'status':'True'}]}"),
     STEPS(SETTLE_(), PATCH_POD("tj-worker-1", DISRUPTED),
           RUN("{'status':{'attempt':2,'disruptions':1,'restarts':0,'ruleRestarts':[1]},"
               "'cond':{'Restarting':{'reason':'RestartNotCounted'}}}"))},
    {"pod_condition/unmatched_disruption_as_before", 0, 2, 0,
     RULES("{'action':'FailJob','onPodConditions':[{'type':'DisruptionTarget','status':'False'}]}"),
     STEPS(SETTLE_(), PATCH_POD("tj-worker-1", DISRUPTED),
           RUN("{'status':{'attempt':2,'disruptions':1},"
               "'cond':{'Restarting':{'reason':'Disruption'}}}"))},
    /* A FailJob match anywhere in the attempt wins over an earlier cause. */
    {"fail_job_wins_over_earlier_restart", 0, 3, 0, RULES(EXIT_RULE("FailJob", "In", "[1]")),
     STEPS(SETTLE_(), TERMINATE("tj-worker-0", 137, "Error", 3),
           TERMINATE("tj-worker-2", 1, "Error", 9),
           RUN("{'cond':{'Failed':{'reason':'FailurePolicyFailJob','message':{'$contains':"
               "'tj-worker-2'}}}}"))},
};

TEST(match_cases) {
  CASES_RUN(match_cases);
}

/* What jobspec_parse refuses (InvalidSpec naming the field): what an older
 * CRD's schema let through, and a containerName no template has. */
TEST(validate_rules) {
  static const struct {
    const char *rules; /* the failurePolicy, JSON with ' */
    const char *named; /* NULL: valid */
  } rows[] = {
      {"{'rules':[{'action':'FailJob','onExitCodes':{'operator':'In','values':[1]}},"
       "{'action':'RestartNotCounted','maxRestarts':3,'onPodConditions':[{'type':'DisruptionTarget'"
       "}]},"
       "{'action':'Restart','maxRestarts':2,'onTerminationReasons':{'containerName':'train',"
       "'values':['OOMKilled']}}]}",
       NULL},
      {"{'rules':[]}", NULL},
      {"{}", NULL},
      {"[]", "spec.failurePolicy: must be an object"},
      {"{'rules':{}}", "spec.failurePolicy.rules: must be a list"},
      {"{'rules':[{'onExitCodes':{'operator':'In','values':[1]}}]}",
       "spec.failurePolicy.rules[0].action: required"},
      {"{'rules':[{'action':'Count','onExitCodes':{'operator':'In','values':[1]}}]}",
       "spec.failurePolicy.rules[0].action: unknown value 'Count'"},
      {"{'rules':[{'action':'FailJob'}]}", "spec.failurePolicy.rules[0]: needs onExitCodes"},
      {"{'rules':[{'action':'FailJob','maxRestarts':1,'onExitCodes':{'operator':'In',"
       "'values':[1]}}]}",
       "spec.failurePolicy.rules[0].maxRestarts: only with action Restart or RestartNotCounted"},
      {"{'rules':[{'action':'Restart','maxRestarts':-1,'onExitCodes':{'operator':'In',"
       "'values':[1]}}]}",
       "spec.failurePolicy.rules[0].maxRestarts"},
      {"{'rules':[{'action':'RestartNotCounted','onExitCodes':{'operator':'In','values':[137]}},"
       "{'action':'FailJob','onExitCodes':{'operator':'In','values':[0]}}]}",
       "spec.failurePolicy.rules[1].onExitCodes.values[0]: 0 is success"},
      {"{'rules':[{'action':'FailJob','onExitCodes':{'operator':'NotIn','values':[0]}}]}", NULL},
      {"{'rules':[{'action':'FailJob','onExitCodes':{'operator':'Is','values':[1]}}]}",
       "spec.failurePolicy.rules[0].onExitCodes.operator"},
      {"{'rules':[{'action':'FailJob','onExitCodes':{'operator':'In','values':[]}}]}",
       "spec.failurePolicy.rules[0].onExitCodes.values: 1..32"},
      {"{'rules':[{'action':'FailJob','onExitCodes':{'operator':'In','values':[1.5]}}]}",
       "spec.failurePolicy.rules[0].onExitCodes.values[0]: must be an int32"},
      {"{'rules':[{'action':'FailJob','onExitCodes':{'containerName':'nope','operator':'In',"
       "'values':[1]}}]}",
       "spec.failurePolicy.rules[0].onExitCodes.containerName: 'nope' is no container"},
      {"{'rules':[{'action':'FailJob','onTerminationReasons':{'values':['']}}]}",
       "spec.failurePolicy.rules[0].onTerminationReasons.values[0]"},
      {"{'rules':[{'action':'FailJob','onPodConditions':[]}]}",
       "spec.failurePolicy.rules[0].onPodConditions: 1..8"},
      {"{'rules':[{'action':'FailJob','onPodConditions':[{'type':'X','status':'yes'}]}]}",
       "spec.failurePolicy.rules[0].onPodConditions[0].status"},
      {"{'rules':[{'action':'FailJob','onPodConditions':[{'status':'True'}]}]}",
       "spec.failurePolicy.rules[0].onPodConditions[0].type: required"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    world w;
    char msg[512] = "", patch[2048];
    world_init(&w, 1, 2, 0);
    snprintf(patch, sizeof(patch), "{'spec':{'failurePolicy':%s}}", rows[i].rules);
    rw_merge_patch_text(w.job, patch);
    ctrain_err r = recon_validate(w.job, msg, sizeof(msg));
    if (!rows[i].named) {
      if (r)
        TEST_FAIL_("row %zu: refused: %s", i, msg);
    } else {
      ASSERT_EQ(r, CTRAIN_E_CONFIG);
      ASSERT_STR_CONTAINS(msg, rows[i].named);
    }
    world_free(&w);
  }
  /* At most JOBSPEC_MAX_RULES (16) rules. */
  world w;
  char msg[512] = "";
  world_init(&w, 0, 1, 0);
  cJSON *fp = cJSON_CreateObject(), *rules = cJSON_AddArrayToObject(fp, "rules");
  for (int i = 0; i <= JOBSPEC_MAX_RULES; i++)
    cJSON_AddItemToArray(rules, rw_qparse(EXIT_RULE("FailJob", "In", "[1]")));
  rw_set_spec(&w, "failurePolicy", fp);
  ASSERT_EQ(recon_validate(w.job, msg, sizeof(msg)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(msg, "spec.failurePolicy.rules: 17 rules, at most 16");
  world_free(&w);
}

/* An invalid rule fails the job in a pass (InvalidSpec) and does nothing else. */
static const rcase invalid_cases[] = {
    {"unknown_container_is_invalid_spec", 0, 2, 0,
     RULES("{'action':'FailJob','onExitCodes':{'containerName':'nope','operator':'In',"
           "'values':[1]}}"),
     STEPS(RUN("{'n':1,'kinds':['UpdateStatus'],'cond':{'Failed':{'status':'True',"
               "'reason':'InvalidSpec','message':{'$contains':"
               "'spec.failurePolicy.rules[0].onExitCodes.containerName'}}}}"))},
};

TEST(invalid_cases) {
  CASES_RUN(invalid_cases);
}

TEST_MAIN(T(action_cases), T(match_cases), T(validate_rules), T(invalid_cases))
