/* controller/podsec.h - Pod Security defaults for the pods the controller
 * builds, so that they pass the `restricted` profile (Pod Security
 * Standards, `restricted:latest`) unless the user's template asks for more.
 *
 * Each default fills a field the template leaves unset; a field the
 * template sets is never changed (a template that sets privileged,
 * capabilities.drop or its own seccompProfile keeps them, and runs where
 * the namespace's policy admits it):
 * - pod: seccompProfile RuntimeDefault; runAsNonRoot true (when asked and
 *   no runAsUser in the pod is 0: a template that runs as root says so);
 *   fsGroup PODSEC_FS_GROUP with fsGroupChangePolicy OnRootMismatch (when
 *   asked: the checkpoint volume becomes group-writable for any uid, on
 *   volume types whose ownership the kubelet manages);
 * - every container and init container: allowPrivilegeEscalation false
 *   (not on a privileged one: the API refuses the pair) and
 *   capabilities.drop [ALL] (capabilities.add still applies).
 * An image that runs as root fails to start under runAsNonRoot (the
 * kubelet refuses it); its template sets securityContext.runAsNonRoot:
 * false, or runAsUser. */
#ifndef CTRAIN_PODSEC_H
#define CTRAIN_PODSEC_H

#include <cjson/cJSON.h>

#include "ctrain/err.h"

/* The ctrain image's user and group (Dockerfile: USER 65532:65532). */
#define PODSEC_FS_GROUP 65532

typedef struct podsec_opts {
  int non_root; /* default runAsNonRoot true */
  int fs_group; /* default fsGroup PODSEC_FS_GROUP */
} podsec_opts;

/* Applies the defaults to the pod spec `spec` (borrowed, modified in
 * place). CTRAIN_E_NOMEM when out of memory (spec then partly filled). */
ctrain_err podsec_apply(cJSON *spec, const podsec_opts *opts);

#endif
