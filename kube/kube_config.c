/* kube_config.c - kubeconfig files and in-cluster config; see ctrain/kube_config.h. */
#include "ctrain/kube_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <yaml.h>

#include "ctrain/log.h"
#include "ctrain/thread.h"
#include "kube_util.h"
#include "kube_yaml.h"

/* ------------------------------------------------------------------------ */

static char *join_path(const char *base_dir, const char *p) {
  if (p[0] == '/' || !base_dir || !*base_dir)
    return strdup(p);
  size_t n = strlen(base_dir) + strlen(p) + 2;
  char *s = malloc(n);
  if (s)
    snprintf(s, n, "%s/%s", base_dir, p);
  return s;
}

/* Loads PEM material either inline (`<field>-data`, base64) or from a file
 * (`<field>`); the inline form wins, as in client-go. Absent: *out stays NULL. */
static ctrain_err load_pem(yaml_document_t *doc, yaml_node_t *m, const char *src, const char *where,
                           const char *field, const char *base_dir, char **out, size_t *outlen,
                           char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char datakey[64];
  char *path = NULL;
  char ferr[256] = "";
  int bad = 0;
  snprintf(datakey, sizeof(datakey), "%s-data", field);
  const char *data = kube_yaml_str(doc, m, datakey, &bad);
  const char *file = kube_yaml_str(doc, m, field, &bad);
  if (bad) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.%s: expected a string", src, where,
                         data ? field : datakey);
    goto out;
  }
  if (data) {
    result = ctrain_b64_decode(data, strlen(data), out, outlen);
    if (result == CTRAIN_E_PARSE || (!result && *outlen == 0)) {
      free(*out);
      *out = NULL;
      result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.%s: not valid base64", src, where,
                           datakey);
    }
    goto out;
  }
  if (file) {
    path = join_path(base_dir, file);
    if (!path) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    result = ctrain_read_file(path, KUBE_CONFIG_MAX_FILE, out, outlen, ferr, sizeof(ferr));
    if (result)
      result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.%s: %s", src, where, field, ferr);
  }
out:
  free(path);
  return result;
}

static ctrain_err dup_into(char **dst, const char *s) {
  if (!s)
    return CTRAIN_OK;
  *dst = strdup(s);
  return *dst ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

static ctrain_err new_config(kube_config **out) {
  kube_config *c = calloc(1, sizeof(*c));
  if (!c)
    return CTRAIN_E_NOMEM;
  pthread_mutex_init(&c->token_mu, NULL);
  *out = c;
  return CTRAIN_OK;
}

static ctrain_err check_server(kube_config *c, const char *src, const char *where, char *err,
                               size_t errlen) {
  if (!c->server || !*c->server)
    return ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.server: missing", src, where);
  if (strncmp(c->server, "https://", 8) && strncmp(c->server, "http://", 7))
    return ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.server: \"%s\" is not an http(s) URL",
                       src, where, c->server);
  size_t n = strlen(c->server);
  while (n > 8 && c->server[n - 1] == '/')
    c->server[--n] = '\0';
  return CTRAIN_OK;
}

/* One parsed kubeconfig file. Several merge the way client-go merges
 * $KUBECONFIG: the first file that names a context, cluster or user wins,
 * and relative paths resolve against the file the entry came from. */
typedef struct kc_file {
  yaml_document_t doc;
  int loaded;
  yaml_node_t *root;
  const char *src;      /* borrowed */
  const char *base_dir; /* borrowed */
} kc_file;

static ctrain_err kc_load(kc_file *f, const char *data, size_t len, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  yaml_parser_t parser;
  int have_parser = 0;
  if (len > KUBE_CONFIG_MAX_FILE) {
    result = ctrain_errf(CTRAIN_E_TOOBIG, err, errlen, "%s: larger than %u bytes", f->src,
                         KUBE_CONFIG_MAX_FILE);
    goto out;
  }
  if (!yaml_parser_initialize(&parser)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  have_parser = 1;
  yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
  if (!yaml_parser_load(&parser, &f->doc)) {
    result =
        ctrain_errf(CTRAIN_E_PARSE, err, errlen, "%s: line %zu: %s", f->src,
                    parser.problem_mark.line + 1, parser.problem ? parser.problem : "bad YAML");
    goto out;
  }
  f->loaded = 1;
  if ((result = kube_yaml_no_duplicate_keys(&f->doc, f->src, err, errlen)))
    goto out;
  f->root = yaml_document_get_root_node(&f->doc);
  if (!f->root || f->root->type != YAML_MAPPING_NODE) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                         "%s: not a kubeconfig (top level is not a mapping)", f->src);
    goto out;
  }
out:
  if (have_parser)
    yaml_parser_delete(&parser);
  return result;
}

static void kc_unload(kc_file *f) {
  if (f->loaded)
    yaml_document_delete(&f->doc);
  f->loaded = 0;
}

/* A named entry found in one of the files, e.g. clusters[name].cluster. */
#define WHERE_CAP 512
typedef struct kc_at {
  yaml_document_t *doc;
  yaml_node_t *node;     /* the entry's <field> mapping */
  const char *src;       /* its file, for messages */
  const char *base_dir;  /* relative paths in it start here */
  char where[WHERE_CAP]; /* "<list>[<name>].<field>", for messages */
} kc_at;

/* Finds the entry `name` of `list` in the first file that has it. Absent:
 * CTRAIN_E_CONFIG naming the file `src` that asked and, when given, the
 * field `from` whose value it was. */
static ctrain_err kc_entry(kc_file *fs, int n, const char *list, const char *field,
                           const char *name, const char *src, const char *from, kc_at *at,
                           char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    if ((at->node = kube_yaml_named(&fs[i].doc, fs[i].root, list, field, name))) {
      at->doc = &fs[i].doc;
      at->src = fs[i].src;
      at->base_dir = fs[i].base_dir;
      snprintf(at->where, sizeof(at->where), "%s[%s].%s", list, name, field);
      return CTRAIN_OK;
    }
  }
  return ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s: no %s named \"%s\"%s%s%s%s%s", src,
                     list, field, name, from ? " (from " : "", from ? from : "", from ? "." : "",
                     from ? field : "", from ? ")" : "");
}

/* Fills c's server and TLS settings from the cluster entry e. */
static ctrain_err kc_cluster(const kc_at *e, kube_config *c, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int bad = 0;
  if ((result = dup_into(&c->server, kube_yaml_str(e->doc, e->node, "server", &bad))))
    goto out;
  if (bad) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.server: expected a string", e->src,
                         e->where);
    goto out;
  }
  if ((result = check_server(c, e->src, e->where, err, errlen)))
    goto out;
  if ((result =
           dup_into(&c->tls_server_name, kube_yaml_str(e->doc, e->node, "tls-server-name", &bad))))
    goto out;
  const char *insecure = kube_yaml_str(e->doc, e->node, "insecure-skip-tls-verify", &bad);
  if (bad || (insecure && kube_yaml_bool(insecure) < 0)) {
    result =
        ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                    "%s: %s.insecure-skip-tls-verify: expected true or false", e->src, e->where);
    goto out;
  }
  c->insecure_skip_tls_verify = insecure ? kube_yaml_bool(insecure) : 0;
  if ((result = load_pem(e->doc, e->node, e->src, e->where, "certificate-authority", e->base_dir,
                         &c->ca_pem, &c->ca_pem_len, err, errlen)))
    goto out;
  if (c->insecure_skip_tls_verify && c->ca_pem) {
    /* client-go refuses this combination; so do we, loudly. */
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                         "%s: %s: insecure-skip-tls-verify together with a certificate authority",
                         e->src, e->where);
    goto out;
  }
out:
  return result;
}

/* Fills c's credentials (client certificate, token or token file) from
 * the user entry e. */
static ctrain_err kc_user(const kc_at *e, kube_config *c, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int bad = 0;
  if ((result = load_pem(e->doc, e->node, e->src, e->where, "client-certificate", e->base_dir,
                         &c->cert_pem, &c->cert_pem_len, err, errlen)))
    goto out;
  if ((result = load_pem(e->doc, e->node, e->src, e->where, "client-key", e->base_dir, &c->key_pem,
                         &c->key_pem_len, err, errlen)))
    goto out;
  if (!c->cert_pem != !c->key_pem) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                         "%s: %s.%s: missing (a client %s needs "
                         "its %s)",
                         e->src, e->where, c->cert_pem ? "client-key" : "client-certificate",
                         c->cert_pem ? "certificate" : "key", c->cert_pem ? "key" : "certificate");
    goto out;
  }
  const char *token = kube_yaml_str(e->doc, e->node, "token", &bad);
  const char *token_file = kube_yaml_str(e->doc, e->node, "tokenFile", &bad);
  if (bad) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                         "%s: %s: token/tokenFile: expected a "
                         "string",
                         e->src, e->where);
    goto out;
  }
  if (token) {
    if (strlen(token) >= KUBE_CONFIG_MAX_TOKEN) {
      result =
          ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.token: too long", e->src, e->where);
      goto out;
    }
    if ((result = dup_into(&c->token, token)))
      goto out;
    c->token_loaded = 1;
  } else if (token_file) {
    c->token_file = join_path(e->base_dir, token_file);
    if (!c->token_file) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
  }
  if (!c->cert_pem && !c->token && !c->token_file &&
      (kube_yaml_get(e->doc, e->node, "exec") || kube_yaml_get(e->doc, e->node, "auth-provider"))) {
    result = ctrain_errf(CTRAIN_E_UNSUPPORTED, err, errlen,
                         "%s: %s.%s: credential plugins are not supported; use a token, "
                         "tokenFile or client certificate",
                         e->src, e->where,
                         kube_yaml_get(e->doc, e->node, "exec") ? "exec" : "auth-provider");
    goto out;
  }
out:
  return result;
}

static ctrain_err kc_resolve(kc_file *fs, int n, const char *context, kube_config **out, char *err,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  kube_config *c = NULL;
  int bad = 0;
  kc_at ctx, cl, user;
  *out = NULL;
  const char *ctx_name = context;
  /* The first file that sets current-context decides it. */
  for (int i = 0; i < n && !ctx_name; i++) {
    ctx_name = kube_yaml_str(&fs[i].doc, fs[i].root, "current-context", &bad);
    if (ctx_name && !*ctx_name)
      ctx_name = NULL;
  }
  if (bad || !ctx_name || !*ctx_name) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                         "%s: current-context: not set and no context was named", fs[0].src);
    goto out;
  }
  if ((result =
           kc_entry(fs, n, "contexts", "context", ctx_name, fs[0].src, NULL, &ctx, err, errlen)))
    goto out;
  const char *cluster_name = kube_yaml_str(ctx.doc, ctx.node, "cluster", &bad);
  const char *user_name = kube_yaml_str(ctx.doc, ctx.node, "user", &bad);
  const char *ns = kube_yaml_str(ctx.doc, ctx.node, "namespace", &bad);
  if (bad || !cluster_name) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: %s.cluster: missing or not a string",
                         ctx.src, ctx.where);
    goto out;
  }

  if ((result = new_config(&c)))
    goto out;
  if ((result = dup_into(&c->source, ctx.src)) || (result = dup_into(&c->context, ctx_name)) ||
      (result = dup_into(&c->namespace_, ns ? ns : "default")))
    goto out;
  if ((result = kc_entry(fs, n, "clusters", "cluster", cluster_name, ctx.src, ctx.where, &cl, err,
                         errlen)) ||
      (result = kc_cluster(&cl, c, err, errlen)))
    goto out;
  /* The user is optional: an anonymous or client-cert-less context is legal. */
  if (user_name && *user_name &&
      ((result =
            kc_entry(fs, n, "users", "user", user_name, ctx.src, ctx.where, &user, err, errlen)) ||
       (result = kc_user(&user, c, err, errlen))))
    goto out;
  *out = c;
  c = NULL;
out:
  kube_config_free(c);
  return result;
}

ctrain_err kube_config_parse(const char *data, size_t len, const char *source, const char *base_dir,
                             const char *context, kube_config **out, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  kc_file f = {.src = source ? source : "kubeconfig", .base_dir = base_dir};
  *out = NULL;
  if ((result = kc_load(&f, data, len, err, errlen)))
    goto out;
  result = kc_resolve(&f, 1, context, out, err, errlen);
out:
  kc_unload(&f);
  return result;
}

ctrain_err kube_config_load_files(const char *const *paths, int n, const char *context,
                                  kube_config **out, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  kc_file *fs = NULL;
  char **dirs = NULL;
  int loaded = 0;
  *out = NULL;
  if (n <= 0)
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "kubeconfig: no file given");
  fs = calloc((size_t)n, sizeof(*fs));
  dirs = calloc((size_t)n, sizeof(*dirs));
  if (!fs || !dirs) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (; loaded < n; loaded++) {
    char *data = NULL;
    size_t len = 0;
    const char *path = paths[loaded];
    if ((result = ctrain_read_file(path, KUBE_CONFIG_MAX_FILE, &data, &len, err, errlen)))
      goto out;
    dirs[loaded] = strdup(path);
    if (!dirs[loaded]) {
      OPENSSL_cleanse(data, len);
      free(data);
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    char *slash = strrchr(dirs[loaded], '/');
    if (slash)
      *(slash == dirs[loaded] ? slash + 1 : slash) = '\0';
    else
      dirs[loaded][0] = '\0';
    fs[loaded].src = path;
    fs[loaded].base_dir = dirs[loaded];
    result = kc_load(&fs[loaded], data, len, err, errlen);
    OPENSSL_cleanse(data, len); /* may hold tokens and keys */
    free(data);
    if (result) {
      loaded++;
      goto out;
    }
  }
  result = kc_resolve(fs, n, context, out, err, errlen);
out:
  for (int i = 0; fs && i < loaded; i++)
    kc_unload(&fs[i]);
  for (int i = 0; dirs && i < n; i++)
    free(dirs[i]);
  free(fs);
  free(dirs);
  return result;
}

ctrain_err kube_config_load_file(const char *path, const char *context, kube_config **out,
                                 char *err, size_t errlen) {
  return kube_config_load_files(&path, 1, context, out, err, errlen);
}

ctrain_err kube_config_load_incluster(const char *sa_dir, kube_config **out, char *err,
                                      size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  kube_config *c = NULL;
  char path[4096], ferr[256] = "";
  char *ns = NULL;
  size_t nslen = 0;
  const char *host = getenv("KUBERNETES_SERVICE_HOST");
  const char *port = getenv("KUBERNETES_SERVICE_PORT");
  *out = NULL;
  if (!sa_dir)
    sa_dir = KUBE_INCLUSTER_SA_DIR;
  if (!host || !*host || !port || !*port) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                         "in-cluster config: %s is not set (not running in a pod?)",
                         (!host || !*host) ? "KUBERNETES_SERVICE_HOST" : "KUBERNETES_SERVICE_PORT");
    goto out;
  }
  if ((result = new_config(&c)))
    goto out;
  size_t n = strlen(host) + strlen(port) + 16;
  c->server = malloc(n);
  if (!c->server) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  /* An IPv6 service IP needs brackets in a URL. */
  snprintf(c->server, n, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
  if ((result = dup_into(&c->source, "in-cluster")))
    goto out;

  snprintf(path, sizeof(path), "%s/ca.crt", sa_dir);
  if ((result = ctrain_read_file(path, KUBE_CONFIG_MAX_FILE, &c->ca_pem, &c->ca_pem_len, ferr,
                                 sizeof(ferr)))) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "in-cluster config: CA bundle: %s", ferr);
    goto out;
  }
  snprintf(path, sizeof(path), "%s/token", sa_dir);
  if ((result = dup_into(&c->token_file, path)))
    goto out;
  snprintf(path, sizeof(path), "%s/namespace", sa_dir);
  if (ctrain_read_file(path, 4096, &ns, &nslen, NULL, 0) == CTRAIN_OK) {
    while (nslen && (ns[nslen - 1] == '\n' || ns[nslen - 1] == ' '))
      ns[--nslen] = '\0';
  }
  if ((result = dup_into(&c->namespace_, ns && *ns ? ns : "default")))
    goto out;
  /* Read the token now so a missing one fails at start-up, not at the first call. */
  char tok[8];
  if ((result = kube_config_token(c, tok, sizeof(tok), ferr, sizeof(ferr))) &&
      result != CTRAIN_E_TOOBIG) {
    result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "in-cluster config: token: %s", ferr);
    goto out;
  }
  OPENSSL_cleanse(tok, sizeof(tok));
  result = CTRAIN_OK;
  *out = c;
  c = NULL;
out:
  free(ns);
  kube_config_free(c);
  return result;
}

ctrain_err kube_config_load_default(const char *explicit_path, const char *context,
                                    kube_config **out, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char *list = NULL;
  char path[4096];
  *out = NULL;
  if (explicit_path && *explicit_path) {
    result = kube_config_load_file(explicit_path, context, out, err, errlen);
    goto out;
  }
  const char *env = getenv("KUBECONFIG");
  if (env && *env) {
    list = strdup(env);
    if (!list) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    /* Every existing file of the list, merged; missing ones are skipped. */
    const char *paths[64];
    int n = 0;
    char *save = NULL;
    for (char *p = strtok_r(list, ":", &save); p && n < 64; p = strtok_r(NULL, ":", &save)) {
      struct stat st;
      if (stat(p, &st) == 0)
        paths[n++] = p;
    }
    if (!n) {
      result =
          ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "$KUBECONFIG: no file of \"%s\" exists", env);
      goto out;
    }
    result = kube_config_load_files(paths, n, context, out, err, errlen);
    goto out;
  }
  if (getenv("KUBERNETES_SERVICE_HOST")) {
    result = kube_config_load_incluster(NULL, out, err, errlen);
    goto out;
  }
  const char *home = getenv("HOME");
  snprintf(path, sizeof(path), "%s/.kube/config", home ? home : "");
  result = kube_config_load_file(path, context, out, err, errlen);
out:
  free(list);
  return result;
}

ctrain_err kube_config_token(kube_config *cfg, char *buf, size_t buflen, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char *data = NULL;
  size_t len = 0;
  struct stat st;
  if (!buflen)
    return CTRAIN_E_INVAL;
  buf[0] = '\0';
  ctrain_mutex_lock(&cfg->token_mu);
  if (cfg->token_file) {
    if (stat(cfg->token_file, &st) < 0) {
      /* Keep serving the old token if the file is briefly gone mid-rotation. */
      if (!cfg->token_loaded) {
        result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: tokenFile %s: %s", cfg->source,
                             cfg->token_file, strerror(errno));
        goto out;
      }
    } else if (!cfg->token_loaded || st.st_ino != cfg->token_ino || st.st_dev != cfg->token_dev ||
               st.st_size != cfg->token_size || st.st_mtim.tv_sec != cfg->token_mtime.tv_sec ||
               st.st_mtim.tv_nsec != cfg->token_mtime.tv_nsec) {
      char ferr[256] = "";
      if ((result = ctrain_read_file(cfg->token_file, KUBE_CONFIG_MAX_TOKEN, &data, &len, ferr,
                                     sizeof(ferr)))) {
        if (!cfg->token_loaded) {
          result =
              ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: tokenFile: %s", cfg->source, ferr);
          goto out;
        }
        result = CTRAIN_OK; /* keep the previous token */
      } else {
        while (len && (data[len - 1] == '\n' || data[len - 1] == '\r' || data[len - 1] == ' '))
          data[--len] = '\0';
        if (cfg->token) {
          OPENSSL_cleanse(cfg->token, strlen(cfg->token));
          free(cfg->token);
        }
        cfg->token = data;
        data = NULL;
        cfg->token_loaded = 1;
        cfg->token_ino = st.st_ino;
        cfg->token_dev = st.st_dev;
        cfg->token_size = st.st_size;
        cfg->token_mtime = st.st_mtim;
        LOG_DEBUG("kube: bearer token (re)loaded from %s", cfg->token_file);
      }
    }
  }
  if (cfg->token) {
    size_t n = strlen(cfg->token);
    if (n >= buflen) {
      result = ctrain_errf(CTRAIN_E_TOOBIG, err, errlen, "%s: token longer than %zu bytes",
                           cfg->source, buflen - 1);
      goto out;
    }
    memcpy(buf, cfg->token, n + 1);
  }
out:
  ctrain_mutex_unlock(&cfg->token_mu);
  if (data) {
    OPENSSL_cleanse(data, len);
    free(data);
  }
  return result;
}

void kube_config_free(kube_config *cfg) {
  if (!cfg)
    return;
  if (cfg->key_pem)
    OPENSSL_cleanse(cfg->key_pem, cfg->key_pem_len);
  if (cfg->token)
    OPENSSL_cleanse(cfg->token, strlen(cfg->token));
  free(cfg->server);
  free(cfg->tls_server_name);
  free(cfg->ca_pem);
  free(cfg->cert_pem);
  free(cfg->key_pem);
  free(cfg->namespace_);
  free(cfg->source);
  free(cfg->context);
  free(cfg->token_file);
  free(cfg->token);
  pthread_mutex_destroy(&cfg->token_mu);
  free(cfg);
}
