/* test_lnode_node.c - Node object, capacity parsing, GPU counting, taints,
 * Lease. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/lnode_node.h"
#include "ctrain/lnode_util.h"
#include "test.h"

TEST(meminfo) {
  ASSERT_EQ(lnode_meminfo_total_kib("MemTotal:       16384000 kB\nMemFree: 1 kB\n"), 16384000);
  ASSERT_EQ(lnode_meminfo_total_kib("MemFree: 1 kB\n"), -1);
}

TEST(gpu_count_from_device_files) {
  char d[] = "/tmp/lnode-dev-XXXXXX", p[256];
  ASSERT_NOT_NULL(mkdtemp(d));
  ASSERT_EQ(lnode_count_gpus(d), 0);
  const char *files[] = {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia12", "nvidia"};
  for (size_t i = 0; i < 6; i++) {
    snprintf(p, sizeof(p), "%s/%s", d, files[i]);
    close(open(p, O_CREAT | O_WRONLY, 0644));
  }
  ASSERT_EQ(lnode_count_gpus(d), 3);
  snprintf(p, sizeof(p), "rm -rf %s", d);
  ASSERT_EQ(system(p), 0);
}

TEST(node_object) {
  lnode_resources r = {.cpus = 8, .memory_kib = 1024, .storage_bytes = 0, .pods = 110, .gpus = 2};
  lnode_node_info ni = {"n1", "10.88.0.1", "0.1.0", 1, NULL, NULL};
  cJSON *n = lnode_node_object(&ni, &r, 1700000000);
  ASSERT_STR_EQ(lnode_json_str(n, "metadata.name"), "n1");
  const cJSON *labels = lnode_json_at(n, "metadata.labels");
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(labels, "kubernetes.io/hostname")->valuestring,
                "n1");
  const cJSON *cap = lnode_json_at(n, "status.capacity");
  ASSERT_STR_EQ(lnode_json_str(cap, "cpu"), "8");
  ASSERT_STR_EQ(lnode_json_str(cap, "memory"), "1024Ki");
  ASSERT_STR_EQ(lnode_json_str(cap, "pods"), "110");
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(cap, "nvidia.com/gpu")->valuestring, "2");
  ASSERT_STR_EQ(
      cJSON_GetObjectItemCaseSensitive(lnode_json_at(n, "status.allocatable"), "nvidia.com/gpu")
          ->valuestring,
      "2");
  const cJSON *c, *ready = NULL;
  cJSON_ArrayForEach(c, lnode_json_at(n, "status.conditions")) {
    if (!strcmp(lnode_json_str(c, "type"), "Ready"))
      ready = c;
  }
  ASSERT_NOT_NULL(ready);
  ASSERT_STR_EQ(lnode_json_str(ready, "status"), "True");
  ASSERT_STR_EQ(lnode_json_str(ready, "lastHeartbeatTime"), "2023-11-14T22:13:20Z");
  const cJSON *addr = cJSON_GetArrayItem(lnode_json_at(n, "status.addresses"), 0);
  ASSERT_STR_EQ(lnode_json_str(addr, "type"), "InternalIP");
  ASSERT_STR_EQ(lnode_json_str(addr, "address"), "10.88.0.1");
  cJSON_Delete(n);
  r.gpus = 0;
  n = lnode_node_object(&ni, &r, 1700000000);
  ASSERT_NULL(
      cJSON_GetObjectItemCaseSensitive(lnode_json_at(n, "status.capacity"), "nvidia.com/gpu"));
  cJSON_Delete(n);
}

TEST(taints) {
  cJSON *n =
      cJSON_Parse("{\"spec\":{\"taints\":[{\"key\":\"node.kubernetes.io/not-ready\","
                  "\"effect\":\"NoSchedule\"},{\"key\":\"mine\",\"effect\":\"NoSchedule\"},"
                  "{\"key\":\"node.kubernetes.io/unreachable\",\"effect\":\"NoExecute\"}]}}");
  ASSERT_EQ(lnode_node_drop_notready_taints(n), 2);
  const cJSON *t = lnode_json_at(n, "spec.taints");
  ASSERT_EQ(cJSON_GetArraySize(t), 1);
  ASSERT_STR_EQ(lnode_json_str(cJSON_GetArrayItem(t, 0), "key"), "mine");
  ASSERT_EQ(lnode_node_drop_notready_taints(n), 0);
  cJSON_Delete(n);
}

TEST(lease) {
  struct timespec ts = {1700000000, 123456789};
  cJSON *l = lnode_lease_object("n1", "uid-1", 40, &ts);
  ASSERT_STR_EQ(lnode_json_str(l, "metadata.namespace"), "kube-node-lease");
  ASSERT_STR_EQ(lnode_json_str(l, "spec.holderIdentity"), "n1");
  ASSERT_STR_EQ(lnode_json_str(l, "spec.renewTime"), "2023-11-14T22:13:20.123456Z");
  ASSERT_EQ(lnode_json_num(l, "spec.leaseDurationSeconds", 0), 40);
  ASSERT_STR_EQ(
      lnode_json_str(cJSON_GetArrayItem(lnode_json_at(l, "metadata.ownerReferences"), 0), "uid"),
      "uid-1");
  cJSON_Delete(l);
}

TEST_MAIN(T(meminfo), T(gpu_count_from_device_files), T(node_object), T(taints), T(lease))
