/* ctrain/kube_config.h - where the apiserver is and how to authenticate to it.
 *
 * Two sources, as client-go has them: a kubeconfig file (explicit path,
 * $KUBECONFIG, ~/.kube/config; the current context or a named one) and the
 * in-cluster service account (KUBERNETES_SERVICE_HOST/PORT plus the files
 * under /var/run/secrets/kubernetes.io/serviceaccount).
 *
 * Files named in a kubeconfig (certificate-authority, client-certificate,
 * client-key) are read once at load time and kept in memory; relative paths
 * resolve against the kubeconfig's directory. A token file (tokenFile, or the
 * in-cluster token) is re-read whenever it changes on disk, because the
 * kubelet rotates projected tokens.
 *
 * A config that cannot be used fails with CTRAIN_E_CONFIG (or _PARSE, _IO)
 * and a message that names the file and the field. Token and key contents
 * never appear in a message or a log line. */
#ifndef CTRAIN_KUBE_CONFIG_H
#define CTRAIN_KUBE_CONFIG_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "ctrain/err.h"

/* Largest kubeconfig, certificate, key or token file read (bytes). */
#define KUBE_CONFIG_MAX_FILE (4u << 20)
/* Largest bearer token kept (bytes). */
#define KUBE_CONFIG_MAX_TOKEN (64u << 10)

#define KUBE_INCLUSTER_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct kube_config {
  char *server;          /* "https://host:port", no trailing slash; owned */
  char *tls_server_name; /* tls-server-name: SNI and the name verified instead of the
                          * server's host (the client connects to `server`); NULL: none */
  char *ca_pem;          /* CA bundle (PEM bytes) or NULL: system store; owned */
  size_t ca_pem_len;
  char *cert_pem; /* client certificate (PEM) or NULL; owned */
  size_t cert_pem_len;
  char *key_pem; /* client key (PEM) or NULL; owned, wiped on free */
  size_t key_pem_len;
  int insecure_skip_tls_verify; /* 1 only when the kubeconfig says so explicitly */
  char *namespace_;             /* context's namespace, in-cluster namespace, or "default"; owned */
  char *source;                 /* file the config came from, for messages; owned */
  char *context;                /* context used (kubeconfig only), or NULL; owned */

  /* Bearer token: static (`token`) or re-read from `token_file`. Read it with
   * kube_config_token(), never directly: the file case changes under us. */
  char *token_file; /* owned; NULL when none */
  pthread_mutex_t token_mu;
  char *token;                 /* current token (owned, wiped on free) or NULL */
  struct timespec token_mtime; /* stat of token_file at the last read */
  dev_t token_dev;
  ino_t token_ino;
  off_t token_size;
  int token_loaded;
} kube_config;

/* Parses kubeconfig text. `source` names it in messages (borrowed),
 * `base_dir` resolves relative file paths (borrowed; NULL: cwd), `context`
 * picks a context (NULL: current-context). On success *out is owned by the
 * caller (kube_config_free). `err` receives a message on failure. */
CTRAIN_NODISCARD ctrain_err kube_config_parse(const char *data, size_t len, const char *source,
                                              const char *base_dir, const char *context,
                                              kube_config **out, char *err, size_t errlen);

/* Loads one kubeconfig file. `context` as above. */
CTRAIN_NODISCARD ctrain_err kube_config_load_file(const char *path, const char *context,
                                                  kube_config **out, char *err, size_t errlen);

/* Loads several kubeconfig files merged as client-go merges $KUBECONFIG:
 * current-context from the first file that sets it; each context, cluster
 * and user from the first file that defines that name; relative paths
 * against the defining file's directory. `paths` borrowed. */
CTRAIN_NODISCARD ctrain_err kube_config_load_files(const char *const *paths, int n,
                                                   const char *context, kube_config **out,
                                                   char *err, size_t errlen);

/* Loads the in-cluster config from the service-account directory `sa_dir`
 * (NULL: KUBE_INCLUSTER_SA_DIR) and KUBERNETES_SERVICE_HOST/PORT. */
CTRAIN_NODISCARD ctrain_err kube_config_load_incluster(const char *sa_dir, kube_config **out,
                                                       char *err, size_t errlen);

/* What ctrain-controller does: `explicit_path` if set, else the existing
 * files of $KUBECONFIG (a ':'-separated list) merged, else in-cluster when
 * KUBERNETES_SERVICE_HOST is set, else ~/.kube/config. */
CTRAIN_NODISCARD ctrain_err kube_config_load_default(const char *explicit_path, const char *context,
                                                     kube_config **out, char *err, size_t errlen);

/* Copies the current bearer token into buf (NUL-terminated); buf[0] = '\0'
 * when the config has none. Re-reads the token file when its inode, size or
 * mtime changed since the last read. Thread-safe. */
CTRAIN_NODISCARD ctrain_err kube_config_token(kube_config *cfg, char *buf, size_t buflen, char *err,
                                              size_t errlen);

/* Accepts NULL. Wipes token and key memory. */
void kube_config_free(kube_config *cfg);

#endif
