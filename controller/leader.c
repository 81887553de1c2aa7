/* leader.c - the leader's label on its own pod; see controller/leader.h. */
#include "controller/leader.h"

#include <stdio.h>

ctrain_err leader_patch(int leading, char *buf, size_t len) {
  int n = snprintf(buf, len, "{\"metadata\":{\"labels\":{\"" LEADER_LABEL "\":%s}}}",
                   leading ? "\"true\"" : "null");
  return (n < 0 || (size_t)n >= len) ? CTRAIN_E_TOOBIG : CTRAIN_OK;
}

ctrain_err leader_mark(kube_client *c, const char *ns, const char *pod, int leading, char *errbuf,
                       size_t errlen) {
  char patch[128];
  kube_status st = {0};
  ctrain_err result = leader_patch(leading, patch, sizeof(patch));
  if (!result)
    result = kube_client_patch(c, &KUBE_GVR_PODS, ns, pod, NULL, KUBE_PATCH_MERGE, patch, NULL,
                               NULL, &st);
  if (result == CTRAIN_E_NOTFOUND && !leading)
    result = CTRAIN_OK;
  if (result)
    snprintf(errbuf, errlen, "%s label %s on pod %s/%s: %s (HTTP %d %s: %s)",
             leading ? "setting" : "removing", LEADER_LABEL, ns, pod, ctrain_strerror(result),
             st.http_code, st.reason, st.message);
  return result;
}
