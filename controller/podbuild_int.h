/* controller/podbuild_int.h - what the files of the builders share
 * (private to them): the JSON helpers, the checked names and the job's
 * common object shape.
 *
 *   podbuild.c          names, the ownerReference, the pods
 *   podbuild_objects.c  the job's other objects: the headless Service, the
 *                       NetworkPolicy, the token Secret, the cluster
 *                       ConfigMap */
#ifndef CTRAIN_PODBUILD_INT_H
#define CTRAIN_PODBUILD_INT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "controller/podbuild.h"
#include "ctrain/err.h"
#include "ctrain/tfconfig.h"

#define PODBUILD_OOM() CTRAIN_FAIL(CTRAIN_E_NOMEM, "podbuild: out of memory")

/* o[k] as an object, created (or replacing a non-object) when needed; NULL
 * when out of memory. */
cJSON *podbuild_obj_at(cJSON *o, const char *k);

/* o[k] as an array, created (or replacing a non-array) when needed. */
cJSON *podbuild_arr_at(cJSON *o, const char *k);

/* A new object {apiVersion, kind, metadata} of the job: name, namespace,
 * the job-name label and the controller ownerReference; *md (optional) its
 * metadata. NULL when out of memory. */
cJSON *podbuild_new_object(const job_spec *js, const char *api, const char *kind, const char *name,
                           cJSON **md);

/* The names every builder needs (metadata.name, .namespace, .uid), checked
 * once: CTRAIN_E_INVAL naming the missing field. */
CTRAIN_NODISCARD ctrain_err podbuild_job_names(const job_spec *js, const char **name,
                                               const char **ns, char *errbuf, size_t errlen);

/* What TF_CONFIG renders from for task `index` of type `t` (borrowed
 * strings: the job's). */
tfconfig_render_args podbuild_render_args(const job_spec *js, podbuild_type t, int index);

#endif
