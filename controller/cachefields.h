/* controller/cachefields.h - what the controller's informer caches keep of
 * each kind (kube_informer_opts.transform): the fields the reconciler, the
 * executor and the progress poller read, nothing else. A pod arrives with
 * its whole spec, managedFields and every status detail (several KiB); the
 * cache keeps its identity, labels, owners, node, phase and what the
 * reconciler reads of its conditions and container states, so 4,000 pods
 * fit in a few MiB. A reader that needs another field adds it to the list
 * in cachefields.c (the unit test names each one). */
#ifndef CTRAIN_CONTROLLER_CACHEFIELDS_H
#define CTRAIN_CONTROLLER_CACHEFIELDS_H

#include <cjson/cJSON.h>

/* Transforms for kube_informer_opts.transform (ud unused): prune obj in
 * place. */
void ctl_cache_pod_fields(void *ud, cJSON *obj);
void ctl_cache_job_fields(void *ud, cJSON *obj);
void ctl_cache_service_fields(void *ud, cJSON *obj);

#endif
