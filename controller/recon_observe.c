/* recon_observe.c - what the reconciler reads from the observed pods:
 * phase, failure, why a pending pod cannot start, and which pod holds each
 * desired name. */
#include "controller/recon_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "controller/podsec.h"
#include "ctrain/json.h"
#include "ctrain/kube_time.h"

int recon_parse_uint(const char *s) {
  long v = 0;
  if (!s || !*s || strlen(s) > 9)
    return -1;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p))
      return -1;
    v = v * 10 + (*p - '0');
  }
  return (int)v;
}

/* Fills the failure fields of a pod: the first container that terminated
 * with a non-zero code. Returns 1 when one did. */
static int container_failure(obs_pod *p, const cJSON *pod_status) {
  const cJSON *cs;
  cJSON_ArrayForEach(cs, ctrain_json_get(pod_status, "containerStatuses")) {
    const cJSON *term = ctrain_json_get(ctrain_json_get(cs, "state"), "terminated");
    if (!term)
      continue;
    int64_t code = ctrain_json_int(term, "exitCode", 0);
    if (code == 0)
      continue;
    p->exit_code = (int)code;
    p->reason = ctrain_json_str(term, "reason");
    int64_t t = 0;
    if (!kube_time_parse(ctrain_json_str(term, "finishedAt"), &t))
      p->finished = t;
    return 1;
  }
  return 0;
}

/* Waiting reasons after which a container does not start by itself soon:
 * image problems and bad container configuration (kubelet's names). */
static const char *stuck_waiting_reason(const char *r) {
  static const char *const reasons[] = {
      "ErrImagePull",     "ImagePullBackOff",           "ErrImageNeverPull",
      "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
      "RunContainerError"};
  for (size_t i = 0; r && i < sizeof(reasons) / sizeof(reasons[0]); i++)
    if (!strcmp(r, reasons[i]))
      return reasons[i]; /* static: event reasons outlive the input */
  return NULL;
}

/* A runAsNonRoot refusal in the job's words: what is wrong, and the fix in
 * the replica's template (controller/podsec.h says why runAsUser, not
 * runAsNonRoot: false). Static, by refusal, kind (a TrainingJob's
 * runAsNonRoot is our default; a TFJob's its own, which tfjob.c words as
 * spec.tfReplicaSpecs) and replica type. The pod spec cannot change: the
 * fix reaches the pods when the job is edited and the gang restarts. */
#define U_ PODSEC_RUN_AS_USER_STR
#define FIX(type)                                                                                  \
  "set spec.replicaSpecs." type ".template.spec.securityContext.runAsUser: " U_                    \
  " and runAsGroup: " U_ " (the uid of ctrain's own workers, so both can write a shared "          \
  "checkpoint volume; runAsNonRoot: false is not enough there: its root has every capability "     \
  "dropped), then delete the pod: the gang restarts with the new template"
#define ROOT(type, ours)                                                                           \
  "the image runs as root, which the pod's runAsNonRoot" ours " forbids; " FIX(type)
#define USER_NAME(type, ours)                                                                      \
  "the image's user is a name, not a uid, so the kubelet cannot check the pod's runAsNonRoot" ours \
  "; " FIX(type)
#define OURS " (ctrain's Pod Security default)"
#define BY_TYPE(m, ours)                                                                           \
  { m("Chief", ours), m("Worker", ours), m("Evaluator", ours) }
static const char *const refusal_msg[2][2][PODBUILD_NTYPES] = {
    {BY_TYPE(ROOT, OURS), BY_TYPE(ROOT, "")}, {BY_TYPE(USER_NAME, OURS), BY_TYPE(USER_NAME, "")}};
#undef BY_TYPE
#undef OURS
#undef USER_NAME
#undef ROOT
#undef FIX
#undef U_

/* Rewords a CreateContainerConfigError of runAsNonRoot (the kubelet
 * retries it for good, naming neither the cause in our terms nor the fix).
 * `ours`: the job is a TrainingJob. The job keeps waiting, as for every
 * stuck reason: the kubelet keeps retrying, and an image whose tag comes
 * back with a non-root USER starts. */
static void reword_refusal(obs_pod *p, int ours) {
  podsec_refusal r = podsec_refusal_of(p->stuck_message);
  if (!r || p->type < 0 || p->type >= PODBUILD_NTYPES)
    return;
  p->stuck_reason = r == PODSEC_REFUSAL_ROOT ? R_IMAGE_ROOT : R_IMAGE_USER_NAME;
  p->stuck_message = refusal_msg[r == PODSEC_REFUSAL_ROOT ? 0 : 1][ours ? 0 : 1][p->type];
}

/* Fills the stuck_* fields of a pending pod; `ours` as reword_refusal's. */
static void observe_stuck(obs_pod *p, const cJSON *st, int ours) {
  const char *kinds[] = {"initContainerStatuses", "containerStatuses"};
  for (size_t k = 0; k < 2; k++) {
    const cJSON *cs;
    cJSON_ArrayForEach(cs, ctrain_json_get(st, kinds[k])) {
      const cJSON *w = ctrain_json_get(ctrain_json_get(cs, "state"), "waiting");
      const char *r = w ? stuck_waiting_reason(ctrain_json_str(w, "reason")) : NULL;
      if (r) {
        p->stuck_reason = r;
        p->stuck_message = ctrain_json_str(w, "message");
        p->stuck_container = ctrain_json_str(cs, "name");
        p->stuck_image = ctrain_json_str(cs, "image");
        if (!strcmp(r, "CreateContainerConfigError"))
          reword_refusal(p, ours);
        return;
      }
    }
  }
  const cJSON *pc;
  cJSON_ArrayForEach(pc, ctrain_json_get(st, "conditions")) {
    const char *t = ctrain_json_str(pc, "type"), *cst = ctrain_json_str(pc, "status"),
               *r = ctrain_json_str(pc, "reason");
    if (t && !strcmp(t, "PodScheduled") && cst && !strcmp(cst, "False") && r &&
        !strcmp(r, "Unschedulable")) {
      p->stuck_reason = "Unschedulable";
      p->stuck_message = ctrain_json_str(pc, "message");
      return;
    }
  }
}

/* The pod's DisruptionTarget=True reason (EvictionByEvictionAPI,
 * PreemptionByScheduler, DeletionByTaintManager, DeletionByPodGC,
 * TerminationByKubelet), or NULL. */
static const char *disruption_target(const cJSON *st) {
  const cJSON *pc;
  cJSON_ArrayForEach(pc, ctrain_json_get(st, "conditions")) {
    const char *t = ctrain_json_str(pc, "type"), *cst = ctrain_json_str(pc, "status");
    if (t && !strcmp(t, "DisruptionTarget") && cst && !strcmp(cst, "True")) {
      const char *r = ctrain_json_str(pc, "reason");
      return r && *r ? r : "DisruptionTarget";
    }
  }
  return NULL;
}

/* Whether the node controller marked a running pod not ready: its Ready
 * condition is False with no reason (MarkPodsNotReady flips the status of
 * the kubelet's Ready=True condition and nothing else; the kubelet's own
 * False carries ContainersNotReady or ReadinessGatesNotReady) while every
 * container the kubelet last reported is running and ready. That is what a
 * node that stopped reporting leaves. */
static int marked_by_node_controller(const cJSON *st) {
  const cJSON *pc, *cs;
  int ready_false = 0, n = 0;
  cJSON_ArrayForEach(pc, ctrain_json_get(st, "conditions")) {
    const char *t = ctrain_json_str(pc, "type"), *cst = ctrain_json_str(pc, "status");
    if (t && !strcmp(t, "Ready")) {
      const char *r = ctrain_json_str(pc, "reason");
      ready_false = cst && !strcmp(cst, "False") && (!r || !*r);
    }
  }
  if (!ready_false)
    return 0;
  cJSON_ArrayForEach(cs, ctrain_json_get(st, "containerStatuses")) {
    if (!cJSON_IsTrue(ctrain_json_get(cs, "ready")) ||
        !ctrain_json_get(ctrain_json_get(cs, "state"), "running"))
      return 0;
    n++;
  }
  return n > 0;
}

/* `ours`: the job is a TrainingJob (not a TFJob). */
static void observe_pod(obs_pod *p, const cJSON *pod, int ours) {
  const cJSON *md = ctrain_json_get(pod, "metadata"), *labels = ctrain_json_get(md, "labels");
  const cJSON *st = ctrain_json_get(pod, "status");
  const char *phase = ctrain_json_str(st, "phase");
  memset(p, 0, sizeof(*p));
  p->obj = pod;
  p->name = ctrain_json_str(md, "name");
  p->uid = ctrain_json_str(md, "uid");
  p->type = podbuild_type_from_label(ctrain_json_str(labels, PODBUILD_LABEL_TYPE));
  p->index = recon_parse_uint(ctrain_json_str(labels, PODBUILD_LABEL_INDEX));
  p->attempt = recon_parse_uint(ctrain_json_str(labels, PODBUILD_LABEL_ATTEMPT));
  if (p->attempt < 0)
    p->attempt = 0;
  p->deleting = ctrain_json_get(md, "deletionTimestamp") &&
                !cJSON_IsNull(ctrain_json_get(md, "deletionTimestamp"));
  p->exit_code = -1;
  p->finalizer = -1;
  p->node = ctrain_json_str(ctrain_json_get(pod, "spec"), "nodeName");
  if (p->deleting) {
    int64_t t = 0;
    if (!kube_time_parse(ctrain_json_str(md, "deletionTimestamp"), &t))
      p->delete_at = t;
    const cJSON *g = ctrain_json_get(md, "deletionGracePeriodSeconds");
    p->grace0 = cJSON_IsNumber(g) && g->valuedouble == 0;
  }
  p->finalizer = podbuild_finalizer_index(pod);
  p->disruption = disruption_target(st);
  if (!phase || !strcmp(phase, "Pending"))
    p->phase = PH_PENDING;
  else if (!strcmp(phase, "Running"))
    p->phase = PH_RUNNING;
  else if (!strcmp(phase, "Succeeded"))
    p->phase = PH_SUCCEEDED;
  else if (!strcmp(phase, "Failed"))
    p->phase = PH_FAILED;
  else
    p->phase = PH_UNKNOWN;
  /* restartPolicy Never: a container that exited non-zero stays so, even
   * when a sidecar keeps the pod Running. */
  if (p->phase != PH_SUCCEEDED && container_failure(p, st))
    p->phase = PH_FAILED;
  if (p->phase == PH_FAILED && !p->reason)
    p->reason = ctrain_json_str(st, "reason");
  if (p->phase == PH_PENDING)
    observe_stuck(p, st, ours);
  if (p->phase == PH_RUNNING && !p->deleting)
    p->node_lost = marked_by_node_controller(st);
}

/* Builds c->pods and c->slots from the input. */
ctrain_err recon_observe(recon_ctx *c) {
  const cJSON *list = c->in->pods;
  if (cJSON_IsObject(list))
    list = ctrain_json_get(list, "items");
  size_t n = cJSON_IsArray(list) ? (size_t)cJSON_GetArraySize(list) : 0;
  c->pods = calloc(n ? n : 1, sizeof(*c->pods));
  if (!c->pods)
    return CTRAIN_E_NOMEM;
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    c->slots[t] = calloc(c->js.replicas[t] ? (size_t)c->js.replicas[t] : 1, sizeof(obs_pod *));
    if (!c->slots[t])
      return CTRAIN_E_NOMEM;
  }
  const cJSON *pod;
  int ours = !c->js.kind || !strcmp(c->js.kind, PODBUILD_KIND);
  cJSON_ArrayForEach(pod, list) {
    obs_pod *p = &c->pods[c->n_pods];
    observe_pod(p, pod, ours);
    if (!p->name)
      continue;
    /* A pod of someone else's (another controller, a namesake job) is not ours. */
    const cJSON *ref;
    int foreign = 0;
    cJSON_ArrayForEach(ref, ctrain_json_get(ctrain_json_get(pod, "metadata"), "ownerReferences")) {
      const char *ruid = ctrain_json_str(ref, "uid");
      if (cJSON_IsTrue(ctrain_json_get(ref, "controller")) && ruid && strcmp(ruid, c->uid))
        foreign = 1;
    }
    if (foreign)
      continue;
    c->n_pods++;
    if (p->type < 0 || p->index < 0 || p->index >= c->js.replicas[p->type])
      continue;
    char want[256];
    if (podbuild_pod_name(c->name, p->type, p->index, want, sizeof(want)) || strcmp(want, p->name))
      continue;
    if (!c->slots[p->type][p->index]) {
      c->slots[p->type][p->index] = p;
      p->slot = 1;
    }
  }
  return CTRAIN_OK;
}
