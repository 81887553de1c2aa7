/* test_ctl_podsec.c - controller/podsec.h's reading of the kubelet's
 * runAsNonRoot refusals (podsec_refusal_of); what podsec_apply sets on a
 * pod is test_podbuild.c's, how a refusal reaches the job test_reconcile.c's
 * (status_cases, image_runs_as_root_*). The messages are the kubelet's
 * (v1.35.4, pkg/kubelet/kuberuntime/security_context_others.go
 * verifyRunAsNonRoot), as a container's state.waiting.message. */
#include "test.h"

#include <stdio.h>

#include "controller/podsec.h"

typedef struct {
  const char *message;
  podsec_refusal want;
} refusal_case;

static const refusal_case refusal_cases[] = {
    /* The two that the image causes and runAsUser fixes. */
    {"container has runAsNonRoot and image will run as root (pod: \"tf-worker-0_ns(0d4c)\", "
     "container: tensorflow)",
     PODSEC_REFUSAL_ROOT},
    {"container has runAsNonRoot and image has non-numeric user (tensorflow), cannot verify user "
     "is non-root (pod: \"tf-worker-0_ns(0d4c)\", container: tensorflow)",
     PODSEC_REFUSAL_USER_NAME},
    /* Wording matched by parts, whatever the case or what surrounds them:
     * an older kubelet's bare sentence, a CRI wrapper's prefix. */
    {"container has runAsNonRoot and image will run as root", PODSEC_REFUSAL_ROOT},
    {"Error: Container has RunAsNonRoot and image will run as ROOT", PODSEC_REFUSAL_ROOT},
    {"runAsNonRoot is set but the image runs as root", PODSEC_REFUSAL_ROOT},
    {"CONTAINER HAS RUNASNONROOT AND IMAGE HAS NON-NUMERIC USER (app)", PODSEC_REFUSAL_USER_NAME},
    /* Not ours to reword: the template's own runAsUser 0 against its own
     * runAsNonRoot (podsec sets no runAsNonRoot then), an invalid uid, the
     * other config errors, no message. */
    {"container's runAsUser breaks non-root policy (pod: \"p_ns(1)\", container: c)",
     PODSEC_REFUSAL_NONE},
    {"container has runAsNonRoot and image has an invalid user id (-1). (Must be 1-(2147483647)): "
     "must be between 0 and 2147483647, inclusive (pod: \"p_ns(1)\", container: c)",
     PODSEC_REFUSAL_NONE},
    {"configmap \"tj-cluster-1\" not found", PODSEC_REFUSAL_NONE},
    {"secret \"tj-token-1\" not found", PODSEC_REFUSAL_NONE},
    {"image will run as root", PODSEC_REFUSAL_NONE}, /* no runAsNonRoot named */
    {"runAsNonRoot", PODSEC_REFUSAL_NONE},
    {"runAsNonRo", PODSEC_REFUSAL_NONE},
    {"", PODSEC_REFUSAL_NONE},
    {NULL, PODSEC_REFUSAL_NONE},
};

TEST(refusal_of_kubelet_messages) {
  for (size_t i = 0; i < sizeof(refusal_cases) / sizeof(refusal_cases[0]); i++) {
    const refusal_case *k = &refusal_cases[i];
    podsec_refusal got = podsec_refusal_of(k->message);
    if (got != k->want)
      TEST_FAIL_("podsec_refusal_of(\"%s\") = %d, want %d", k->message ? k->message : "(null)",
                 (int)got, (int)k->want);
  }
}

/* The uid the messages name is the one the constant says, and the ctrain
 * image's group (fsGroup), so a stock image run as it shares the volume. */
TEST(run_as_user_string_matches) {
  char buf[16];
  snprintf(buf, sizeof(buf), "%d", PODSEC_RUN_AS_USER);
  ASSERT_STR_EQ(buf, PODSEC_RUN_AS_USER_STR);
  ASSERT_EQ(PODSEC_RUN_AS_USER, PODSEC_FS_GROUP);
}

TEST_MAIN(T(refusal_of_kubelet_messages), T(run_as_user_string_matches))
