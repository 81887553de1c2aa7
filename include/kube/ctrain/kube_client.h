/* ctrain/kube_client.h - REST verbs on any Kubernetes resource over libcurl.
 *
 * One client per config, shared by all threads. Each thread that calls it
 * gets its own reused curl easy handle (so connections stay alive, and
 * HTTP/2 is used when the apiserver offers it); handles are freed when the
 * thread exits or the client is freed. TLS is verified unless the config
 * says insecure-skip-tls-verify explicitly.
 *
 * Every call takes an optional kube_status: on failure it holds the HTTP
 * code and the apiserver's own Status (reason, message, details), or the
 * transport error when no response came. Results map to ctrain_err:
 *   404 CTRAIN_E_NOTFOUND, 409 CTRAIN_E_CONFLICT (Conflict or AlreadyExists:
 *   see st->reason), 410 CTRAIN_E_GONE, 401/403 CTRAIN_E_AUTH, 400/422
 *   CTRAIN_E_INVAL, other non-2xx CTRAIN_E_HTTP; a certificate that does not
 *   verify CTRAIN_E_TLS; connect/resolve/reset CTRAIN_E_NET; a deadline
 *   CTRAIN_E_TIMEOUT; a body over the cap CTRAIN_E_TOOBIG.
 * 429 and 5xx (and connection failures of GETs) are retried with
 * exponential backoff, honouring Retry-After, up to max_retries times.
 * Every request first takes a token from the client's QPS/burst limiter.
 *
 * curl_global_init() must have been called (once, in main) before. */
#ifndef CTRAIN_KUBE_CLIENT_H
#define CTRAIN_KUBE_CLIENT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"
#include "ctrain/kube_config.h"

/* The apiserver's metav1.Status, decoded into fixed buffers (truncated). */
typedef struct kube_status {
  int http_code;           /* 0: no HTTP response (transport error) */
  char reason[64];         /* "NotFound", "Conflict", "AlreadyExists", ... */
  char message[1024];      /* Status.message, or the transport error text */
  char details_name[256];  /* Status.details.name */
  char details_group[128]; /* Status.details.group */
  char details_kind[128];  /* Status.details.kind */
  char details_uid[64];    /* Status.details.uid */
  char details_cause[512]; /* first of details.causes as "field: message" */
  int retry_after_s;       /* Retry-After header or details.retryAfterSeconds */
  int attempts;            /* requests sent, retries included */
  int http_version;        /* of the last response: 11 (HTTP/1.1), 20 (HTTP/2), 0 none */
} kube_status;

/* Fills st from an apiserver response body (a Status object or anything
 * else) and its HTTP code. Never fails; a body that is not a Status leaves
 * reason empty and puts its start into message. */
void kube_status_decode(const char *body, size_t len, int http_code, kube_status *st);

/* Same, from an already parsed object (a watch ERROR event's Status), so a
 * watch line is never parsed twice. obj is borrowed; may be NULL. */
void kube_status_from_object(const cJSON *obj, int http_code, kube_status *st);

/* Maps an HTTP code to a ctrain_err as described above (2xx: CTRAIN_OK). */
CTRAIN_NODISCARD ctrain_err kube_status_to_err(int http_code);

/* A resource by group/version/resource. group "" is the core group. */
typedef struct kube_gvr {
  const char *group;
  const char *version;
  const char *resource; /* plural, lower-case: "pods", "trainingjobs" */
} kube_gvr;

extern const kube_gvr KUBE_GVR_PODS, KUBE_GVR_SERVICES, KUBE_GVR_CONFIGMAPS, KUBE_GVR_SECRETS,
    KUBE_GVR_EVENTS, KUBE_GVR_NAMESPACES, KUBE_GVR_LEASES, KUBE_GVR_NODES;

typedef struct kube_client_opts {
  double qps;              /* client-side rate; default 50, < 0 unlimited */
  int burst;               /* default 100 */
  long timeout_ms;         /* whole request (one attempt); default 60000 */
  long connect_timeout_ms; /* default 10000 */
  int max_retries;         /* 429/5xx retries; default 5, < 0 none */
  size_t max_body;         /* response body cap; default 512 MiB */
  const char *user_agent;  /* default "ctrain/<version>"; copied */
  int http1;               /* 1: HTTP/1.1 only (see below); 0: HTTP/2 when offered */
} kube_client_opts;

/* HTTP/1.1 or HTTP/2: each thread's handle holds its own connection, so
 * HTTP/2 multiplexes nothing here; it costs each connection its framing
 * buffers (~100 KiB with nghttp2's) and the apiserver per-stream work. A
 * program with many request threads (the controller) asks for HTTP/1.1. */

typedef struct kube_client kube_client;

/* `cfg` is borrowed and must outlive the client. `opts` may be NULL
 * (defaults); zero fields take defaults. *out owned by the caller. */
CTRAIN_NODISCARD ctrain_err kube_client_new(kube_config *cfg, const kube_client_opts *opts,
                                            kube_client **out, char *err, size_t errlen);

/* Accepts NULL. No other thread may be inside a call on this client. */
void kube_client_free(kube_client *c);

/* Borrowed; valid for the client's life. */
kube_config *kube_client_config(kube_client *c);

/* HTTP requests this client has sent (each retry and each stream counts
 * one); any thread, lock-free. */
long kube_client_requests(kube_client *c);

/* Builds "/api/v1/namespaces/<ns>/<resource>[/<name>[/<sub>]]" (or /apis/...)
 * into buf. ns NULL or "": cluster-scoped or all namespaces. CTRAIN_E_INVAL
 * for a name with characters no Kubernetes name has, CTRAIN_E_TOOBIG when
 * buf is short. */
CTRAIN_NODISCARD ctrain_err kube_client_path(const kube_gvr *gvr, const char *ns, const char *name,
                                             const char *subresource, char *buf, size_t buflen);

/* Appends "?k=<v>" to buf (NUL-terminated, `cap` bytes), or "&k=<v>" when
 * it already has a query, with v percent-encoded (all but RFC 3986
 * unreserved characters). v NULL: nothing. CTRAIN_E_TOOBIG when it does not
 * fit, buf unchanged. The one query encoder of every request path. */
CTRAIN_NODISCARD ctrain_err kube_client_query_add(char *buf, size_t cap, const char *k,
                                                  const char *v);

typedef struct kube_list_opts {
  const char *label_selector;
  const char *field_selector;
  long limit;                 /* 0: no limit */
  const char *continue_token; /* from metadata.continue of the previous page */
  const char *resource_version;
  const char *resource_version_match; /* "NotOlderThan" / "Exact" */
} kube_list_opts;

typedef struct kube_write_opts {
  const char *field_manager; /* required for server-side apply */
  int force;                 /* apply: take ownership of conflicting fields */
  int dry_run;               /* dryRun=All */
} kube_write_opts;

typedef enum {
  KUBE_PATCH_MERGE = 0, /* application/merge-patch+json (RFC 7386) */
  KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902) */
  KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in types) */
  KUBE_PATCH_APPLY      /* application/apply-patch+yaml: server-side apply */
} kube_patch_type;

typedef struct kube_delete_opts {
  const char *propagation_policy; /* "Foreground", "Background", "Orphan" or NULL */
  const char *precondition_uid;   /* delete only this incarnation */
  const char *precondition_rv;    /* delete only this version */
  long grace_period_seconds;      /* < 0: server default. NB: 0 means "now" */
  int dry_run;
} kube_delete_opts;

/* Verbs. `*out`, when the call succeeds and out is non-NULL, is the decoded
 * response object owned by the caller (cJSON_Delete). Inputs are borrowed.
 * `st` may be NULL. */
CTRAIN_NODISCARD ctrain_err kube_client_get(kube_client *c, const kube_gvr *gvr, const char *ns,
                                            const char *name, cJSON **out, kube_status *st);
CTRAIN_NODISCARD ctrain_err kube_client_list(kube_client *c, const kube_gvr *gvr, const char *ns,
                                             const kube_list_opts *o, cJSON **out, kube_status *st);
CTRAIN_NODISCARD ctrain_err kube_client_create(kube_client *c, const kube_gvr *gvr, const char *ns,
                                               const cJSON *obj, const kube_write_opts *o,
                                               cJSON **out, kube_status *st);

/* kube_client_create of an object already serialised: `json` is its JSON
 * text (a pass that holds hundreds of pods to send keeps them as text, ~10x
 * smaller than their cJSON trees). */
CTRAIN_NODISCARD ctrain_err kube_client_create_text(kube_client *c, const kube_gvr *gvr,
                                                    const char *ns, const char *json,
                                                    const kube_write_opts *o, cJSON **out,
                                                    kube_status *st);
/* PUT; the name comes from obj's metadata.name. metadata.resourceVersion in
 * obj makes it a compare-and-swap: a stale one fails with CTRAIN_E_CONFLICT. */
CTRAIN_NODISCARD ctrain_err kube_client_update(kube_client *c, const kube_gvr *gvr, const char *ns,
                                               const cJSON *obj, const kube_write_opts *o,
                                               cJSON **out, kube_status *st);
/* PUT to the status subresource. */
CTRAIN_NODISCARD ctrain_err kube_client_update_status(kube_client *c, const kube_gvr *gvr,
                                                      const char *ns, const cJSON *obj,
                                                      const kube_write_opts *o, cJSON **out,
                                                      kube_status *st);
/* PATCH `patch` (a JSON document; for APPLY, JSON is valid YAML) to the
 * object or its `subresource` ("status", or NULL). */
CTRAIN_NODISCARD ctrain_err kube_client_patch(kube_client *c, const kube_gvr *gvr, const char *ns,
                                              const char *name, const char *subresource,
                                              kube_patch_type type, const char *patch,
                                              const kube_write_opts *o, cJSON **out,
                                              kube_status *st);
/* DELETE with `o` (NULL: no body) as DeleteOptions. Every option set in `o`
 * is sent, or nothing is: a body that cannot be built whole (its
 * preconditions, dryRun) fails with CTRAIN_E_NOMEM before any request. */
CTRAIN_NODISCARD ctrain_err kube_client_delete(kube_client *c, const kube_gvr *gvr, const char *ns,
                                               const char *name, const kube_delete_opts *o,
                                               cJSON **out, kube_status *st);

/* A raw request. `path` starts with '/' and may carry a query string
 * (borrowed). `body` may be NULL. *resp (NUL-terminated, owned by the
 * caller, free()) and *resp_len are set on success and on HTTP errors. */
CTRAIN_NODISCARD ctrain_err kube_client_request(kube_client *c, const char *method,
                                                const char *path, const char *content_type,
                                                const char *body, size_t body_len, char **resp,
                                                size_t *resp_len, kube_status *st);

/* ---- Streaming (watch) ---------------------------------------------------- */

/* Cancels a stream from any thread, promptly (the transfer's poll is woken,
 * no waiting for the next byte). One cancel object per stream owner; it can
 * be fired before the stream starts. */
typedef struct kube_client_cancel kube_client_cancel;
CTRAIN_NODISCARD ctrain_err kube_client_cancel_new(kube_client_cancel **out);
void kube_client_cancel_fire(kube_client_cancel *k);
int kube_client_cancel_fired(kube_client_cancel *k);
void kube_client_cancel_free(kube_client_cancel *k); /* accepts NULL */

/* Receives body bytes of a 2xx stream as they come; returns 0 to go on or a
 * ctrain_err to stop the stream with that result. `data` is borrowed. */
typedef ctrain_err (*kube_client_stream_fn)(void *ud, const char *data, size_t len);

/* GETs `path` and hands the body to `fn` as it arrives, on its own
 * connection, until the server ends it (CTRAIN_OK), `fn` stops it, `cancel`
 * fires (CTRAIN_E_CANCELLED), no byte arrives for `idle_timeout_ms`
 * (CTRAIN_E_TIMEOUT; 0: none), or an error. A non-2xx answer is decoded into
 * st like any other call. Not retried: the caller reconnects. */
CTRAIN_NODISCARD ctrain_err kube_client_stream(kube_client *c, const char *path,
                                               kube_client_stream_fn fn, void *ud,
                                               kube_client_cancel *cancel, long idle_timeout_ms,
                                               kube_status *st);

#endif
