/* kube_client_int.h - what the files of the REST client share (private to
 * kube/; not installed): the client itself, and the transport calls the
 * verbs and the stream build on.
 *
 *   kube_client.c   the transport: per-thread handles, URL/TLS/auth setup,
 *                   one request with retries, backoff and Retry-After (and
 *                   the KUBE_GVR_* constants)
 *   kube_status.c   the apiserver's Status and the HTTP-code mapping
 *   kube_rest.c     paths, query strings and the REST verbs
 *   kube_stream.c   the cancellable streaming GET (watch) */
#ifndef CTRAIN_KUBE_CLIENT_INT_H
#define CTRAIN_KUBE_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include <curl/curl.h>

#include "ctrain/kube_client.h"
#include "ctrain/kube_ratelimit.h"

/* One easy handle per (client, thread); on the client's list so that
 * kube_client_free can release the handles of threads still alive. */
typedef struct handle_node {
  CURL *h;
  struct kube_client *c;
  struct handle_node *prev, *next;
} handle_node;

struct kube_client {
  kube_config *cfg; /* borrowed */
  kube_client_opts opts;
  char *user_agent;
  kube_ratelimit rl;
  pthread_key_t key;
  pthread_mutex_t mu; /* guards handles */
  handle_node *handles;
  atomic_long requests; /* HTTP requests sent: retries and streams included */
  /* With tls-server-name: URLs name that host (so SNI and verification use
   * it) and CONNECT_TO sends the connection to the configured server. */
  char *base_url;                /* scheme://host[:port] of every request URL */
  struct curl_slist *connect_to; /* NULL without tls-server-name */
};

/* 1 when s is a non-empty Kubernetes name or path segment (DNS labels and
 * subdomains, plus the ':' and '@' RBAC and user names have), and not "."
 * or ".." (as the apiserver's ValidatePathSegmentName: they would climb). */
int kube_name_ok(const char *s);

/* Sets every option of one request on `h` (fresh or after curl_easy_reset):
 * URL, method, TLS, auth, timeouts. *hdrs is owned by the caller afterwards
 * and must outlive the transfer; curl_err (CURL_ERROR_SIZE bytes) too. A
 * token that cannot be read is reported in st->message. */
CTRAIN_NODISCARD ctrain_err kube_client_setup(kube_client *c, CURL *h, const char *method,
                                              const char *path, const char *content_type,
                                              const char *body, size_t body_len,
                                              struct curl_slist **hdrs, char *curl_err,
                                              kube_status *st);

/* The ctrain_err for a failed transfer. */
CTRAIN_NODISCARD ctrain_err kube_curl_to_err(CURLcode cc);

/* The Retry-After header of h's response in seconds (capped), 0 if none
 * or an HTTP date. */
int kube_retry_after(CURL *h);

#endif
