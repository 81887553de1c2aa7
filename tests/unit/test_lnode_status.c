/* test_lnode_status.c - pod phase, conditions and status JSON as a kubelet
 * reports them. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ctrain/lnode_status.h"
#include "ctrain/lnode_util.h"
#include "test.h"

static lnode_cstatus cs_running(void) {
  lnode_cstatus c;
  memset(&c, 0, sizeof(c));
  c.kind = LNODE_C_RUNNING;
  return c;
}

static lnode_cstatus cs_term(int code) {
  lnode_cstatus c;
  memset(&c, 0, sizeof(c));
  c.kind = LNODE_C_TERMINATED;
  c.term.exit_code = code;
  return c;
}

TEST(exit_codes) {
  int sig = -1;
  /* Build wait statuses the way the kernel encodes them. */
  ASSERT_EQ(lnode_exit_code(3 << 8, &sig), 3);
  ASSERT_EQ(sig, 0);
  ASSERT_EQ(lnode_exit_code(9, &sig), 137);
  ASSERT_EQ(sig, 9);
  ASSERT_EQ(lnode_exit_code(15, &sig), 143);
  ASSERT_EQ(sig, 15);
  ASSERT_STR_EQ(lnode_term_reason(0), "Completed");
  ASSERT_STR_EQ(lnode_term_reason(1), "Error");
  /* A real child killed by SIGTERM. */
  pid_t p = fork();
  if (p == 0) {
    pause();
    _exit(0);
  }
  kill(p, SIGTERM);
  int ws = 0;
  waitpid(p, &ws, 0);
  ASSERT_EQ(lnode_exit_code(ws, &sig), 128 + SIGTERM);
}

TEST(phases) {
  lnode_cstatus w;
  memset(&w, 0, sizeof(w));
  lnode_cstatus r = cs_running(), ok = cs_term(0), bad = cs_term(3);
  lnode_cstatus restarting = w;
  restarting.has_last = 1;
  ASSERT_STR_EQ(lnode_status_phase(NULL, 0, "Never"), "Pending");
  ASSERT_STR_EQ(lnode_status_phase(&w, 1, "Never"), "Pending");
  ASSERT_STR_EQ(lnode_status_phase(&r, 1, "Never"), "Running");
  ASSERT_STR_EQ(lnode_status_phase(&ok, 1, "Never"), "Succeeded");
  ASSERT_STR_EQ(lnode_status_phase(&bad, 1, "Never"), "Failed");
  ASSERT_STR_EQ(lnode_status_phase(&bad, 1, "OnFailure"), "Running");
  ASSERT_STR_EQ(lnode_status_phase(&ok, 1, "OnFailure"), "Succeeded");
  ASSERT_STR_EQ(lnode_status_phase(&ok, 1, "Always"), "Running");
  ASSERT_STR_EQ(lnode_status_phase(&ok, 1, NULL), "Running");
  ASSERT_STR_EQ(lnode_status_phase(&restarting, 1, "Always"), "Running");
  lnode_cstatus two[2] = {ok, r};
  ASSERT_STR_EQ(lnode_status_phase(two, 2, "Never"), "Running");
  lnode_cstatus mixed[2] = {ok, bad};
  ASSERT_STR_EQ(lnode_status_phase(mixed, 2, "Never"), "Failed");
  lnode_cstatus starting[2] = {r, w};
  ASSERT_STR_EQ(lnode_status_phase(starting, 2, "Never"), "Running");
}

TEST(conditions_keep_transition_times) {
  lnode_pstatus ps;
  memset(&ps, 0, sizeof(ps));
  for (int i = 0; i < LNODE_COND_N; i++)
    ps.conds[i].status = -1;
  lnode_cstatus w;
  memset(&w, 0, sizeof(w));
  lnode_status_conditions(&ps, &w, 1, "Pending", 100);
  ASSERT_EQ(ps.conds[LNODE_COND_READY].status, 0);
  ASSERT_EQ(ps.conds[LNODE_COND_READY].ltt, 100);
  ASSERT_STR_EQ(ps.conds[LNODE_COND_READY].reason, "ContainersNotReady");
  lnode_cstatus r = cs_running();
  lnode_status_conditions(&ps, &r, 1, "Running", 200);
  ASSERT_EQ(ps.conds[LNODE_COND_READY].status, 1);
  ASSERT_EQ(ps.conds[LNODE_COND_READY].ltt, 200);
  ASSERT_EQ(ps.conds[LNODE_COND_SCHEDULED].ltt, 100); /* unchanged: time kept */
  lnode_status_conditions(&ps, &r, 1, "Running", 300);
  ASSERT_EQ(ps.conds[LNODE_COND_READY].ltt, 200);
  lnode_cstatus t = cs_term(0);
  lnode_status_conditions(&ps, &t, 1, "Succeeded", 400);
  ASSERT_EQ(ps.conds[LNODE_COND_READY].status, 0);
  ASSERT_STR_EQ(ps.conds[LNODE_COND_READY].reason, "PodCompleted");
  ASSERT_EQ(ps.conds[LNODE_COND_CONTAINERS_READY].ltt, 400);
}

TEST(status_json) {
  lnode_pstatus ps;
  memset(&ps, 0, sizeof(ps));
  for (int i = 0; i < LNODE_COND_N; i++)
    ps.conds[i].status = -1;
  snprintf(ps.pod_ip, sizeof(ps.pod_ip), "10.88.0.2");
  snprintf(ps.host_ip, sizeof(ps.host_ip), "10.88.0.1");
  ps.start_time = 1700000000;
  lnode_cstatus c[2];
  memset(c, 0, sizeof(c));
  snprintf(c[0].name, sizeof(c[0].name), "main");
  c[0].kind = LNODE_C_TERMINATED;
  c[0].term.exit_code = 137;
  c[0].term.signal = 9;
  snprintf(c[0].term.reason, sizeof(c[0].term.reason), "Error");
  c[0].term.started_at = 1700000001;
  c[0].term.finished_at = 1700000002;
  c[0].restart_count = 2;
  c[0].has_last = 1;
  c[0].last.exit_code = 1;
  c[0].pid = 42;
  snprintf(c[1].name, sizeof(c[1].name), "side");
  c[1].kind = LNODE_C_RUNNING;
  c[1].started_at = 1700000003;
  lnode_status_conditions(&ps, c, 2, "Running", 1700000004);
  cJSON *st = lnode_status_json(&ps, c, 2, "Running");
  ASSERT_STR_EQ(lnode_json_str(st, "phase"), "Running");
  ASSERT_STR_EQ(lnode_json_str(st, "podIP"), "10.88.0.2");
  ASSERT_STR_EQ(lnode_json_str(st, "hostIP"), "10.88.0.1");
  ASSERT_STR_EQ(lnode_json_str(st, "startTime"), "2023-11-14T22:13:20Z");
  ASSERT_STR_EQ(lnode_json_str(cJSON_GetArrayItem(lnode_json_at(st, "podIPs"), 0), "ip"),
                "10.88.0.2");
  ASSERT_EQ(cJSON_GetArraySize(lnode_json_at(st, "conditions")), 4);
  const cJSON *m = cJSON_GetArrayItem(lnode_json_at(st, "containerStatuses"), 0);
  ASSERT_STR_EQ(lnode_json_str(m, "name"), "main");
  ASSERT_EQ(lnode_json_num(m, "state.terminated.exitCode", -1), 137);
  ASSERT_EQ(lnode_json_num(m, "state.terminated.signal", -1), 9);
  ASSERT_STR_EQ(lnode_json_str(m, "state.terminated.reason"), "Error");
  ASSERT_STR_EQ(lnode_json_str(m, "state.terminated.startedAt"), "2023-11-14T22:13:21Z");
  ASSERT_STR_EQ(lnode_json_str(m, "state.terminated.finishedAt"), "2023-11-14T22:13:22Z");
  ASSERT_EQ(lnode_json_num(m, "lastState.terminated.exitCode", -1), 1);
  ASSERT_EQ(lnode_json_num(m, "restartCount", -1), 2);
  ASSERT_STR_EQ(lnode_json_str(m, "containerID"), "localnode://42");
  ASSERT(cJSON_IsFalse(lnode_json_at(m, "ready")));
  const cJSON *s = cJSON_GetArrayItem(lnode_json_at(st, "containerStatuses"), 1);
  ASSERT_STR_EQ(lnode_json_str(s, "state.running.startedAt"), "2023-11-14T22:13:23Z");
  ASSERT(cJSON_IsTrue(lnode_json_at(s, "started")));
  cJSON_Delete(st);
  /* The node ended the pod: Failed with its reason whatever the containers say. */
  snprintf(ps.reason, sizeof(ps.reason), "Terminated");
  st = lnode_status_json(&ps, c, 2, "Running");
  ASSERT_STR_EQ(lnode_json_str(st, "phase"), "Failed");
  ASSERT_STR_EQ(lnode_json_str(st, "reason"), "Terminated");
  cJSON_Delete(st);
}

TEST_MAIN(T(exit_codes), T(phases), T(conditions_keep_transition_times), T(status_json))
