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
 * An image that runs as root (stock TensorFlow's) fails to start under
 * runAsNonRoot: the kubelet refuses it (CreateContainerConfigError, see
 * podsec_refusal_of) and retries for good. Its template sets
 * securityContext.runAsUser PODSEC_RUN_AS_USER (and runAsGroup): the image
 * runs as a non-root uid, with no capability and no default changed, and
 * as the same uid as ctrain's own workers, so on a checkpoint volume shared
 * with them each can write the other's directories. runAsNonRoot: false is
 * not the fix: that root has every capability dropped (no
 * CAP_DAC_OVERRIDE, no CAP_CHOWN), so it cannot write a directory another
 * uid made there (PermissionDenied), nor can our workers write its
 * root-owned 0755 ones. Nothing here sets runAsUser by default: an image's
 * own non-root USER (its home, its files) is the template's to keep. */
#ifndef CTRAIN_PODSEC_H
#define CTRAIN_PODSEC_H

#include <cjson/cJSON.h>

#include "ctrain/err.h"

/* The ctrain image's user and group (Dockerfile: USER 65532:65532). */
#define PODSEC_FS_GROUP 65532
/* The uid (and gid) to run a root image as: ctrain's own (see above). The
 * string is for messages built at compile time. */
#define PODSEC_RUN_AS_USER     65532
#define PODSEC_RUN_AS_USER_STR "65532"

typedef struct podsec_opts {
  int non_root; /* default runAsNonRoot true */
  int fs_group; /* default fsGroup PODSEC_FS_GROUP */
} podsec_opts;

/* Applies the defaults to the pod spec `spec` (borrowed, modified in
 * place). CTRAIN_E_NOMEM when out of memory (spec then partly filled). */
CTRAIN_NODISCARD ctrain_err podsec_apply(cJSON *spec, const podsec_opts *opts);

/* What the kubelet's message of a container waiting in
 * CreateContainerConfigError says of runAsNonRoot (its verifyRunAsNonRoot,
 * pkg/kubelet/kuberuntime: "container has runAsNonRoot and image will run
 * as root (pod: ..., container: ...)", "container has runAsNonRoot and
 * image has non-numeric user (NAME), cannot verify user is non-root ...").
 * Matched by its parts, case-insensitively, so the pod and container parts
 * and small changes of wording between releases do not matter. */
typedef enum {
  PODSEC_REFUSAL_NONE = 0, /* something else, or NULL */
  PODSEC_REFUSAL_ROOT,     /* the image runs as uid 0 */
  PODSEC_REFUSAL_USER_NAME /* the image's USER is a name: no uid to check */
} podsec_refusal;

podsec_refusal podsec_refusal_of(const char *kubelet_message);

#endif
