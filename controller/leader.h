/* controller/leader.h - the leader's mark on its own pod.
 *
 * Of the controller's replicas only the leader has counters worth reading
 * (a standby runs no informers and decides nothing), so the metrics Service
 * (manifests/base/metrics-service.yaml) selects the label
 * LEADER_LABEL=true besides the app's, and the replica that leads puts
 * that label on its pod (POD_NAME in POD_NAMESPACE, from the downward API):
 * every scrape through the Service lands on the leader. A replica removes
 * the label from its pod before it campaigns, so a container that lost the
 * Lease, exited and was restarted in the same pod stops receiving scrapes;
 * a leader that lost the Lease exits (controller.c). A PodMonitor that
 * scrapes every replica still sees both, with ctrain_leader telling them
 * apart. */
#ifndef CTRAIN_LEADER_H
#define CTRAIN_LEADER_H

#include <stddef.h>

#include "ctrain/err.h"
#include "ctrain/kube_client.h"

#define LEADER_LABEL "ctrain.dev/leader"

/* The merge patch that sets (leading) or removes the label, into buf.
 * CTRAIN_E_TOOBIG when it does not fit. */
CTRAIN_NODISCARD ctrain_err leader_patch(int leading, char *buf, size_t len);

/* Sends that patch to pod `pod` in `ns` (borrowed). Removing the label
 * from a pod that is gone (404) is success. On error errbuf says which pod
 * and what the apiserver answered. */
CTRAIN_NODISCARD ctrain_err leader_mark(kube_client *c, const char *ns, const char *pod,
                                        int leading, char *errbuf, size_t errlen);

#endif
