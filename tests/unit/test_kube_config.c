/* test_kube_config.c - kubeconfig parsing (contexts, inline and file PEM,
 * tokens, tokenFile rotation), in-cluster config, and errors that name the
 * file and the field. */
#include "test.h"

#include <sys/stat.h>

#include "ctrain/kube_config.h"

/* base64("CA-PEM") and base64("CERT"), base64("KEY") */
#define KC_HEAD                                                                                    \
  "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"                                           \
  "clusters:\n"                                                                                    \
  "- name: c1\n  cluster:\n    server: https://127.0.0.1:6443/\n"                                  \
  "    certificate-authority-data: Q0EtUEVN\n"                                                     \
  "- name: c2\n  cluster:\n    server: https://10.0.0.1\n    insecure-skip-tls-verify: true\n"     \
  "contexts:\n"                                                                                    \
  "- name: dev\n  context: {cluster: c1, user: u1, namespace: team-a}\n"                           \
  "- name: other\n  context: {cluster: c2, user: u2}\n"

static char err[512];

static kube_config *parse(const char *text, const char *ctx, ctrain_err want) {
  kube_config *c = NULL;
  err[0] = '\0';
  ctrain_err r =
      kube_config_parse(text, strlen(text), "/k/config", "/k", ctx, &c, err, sizeof(err));
  ASSERT_EQ(r, want);
  if (want)
    ASSERT_NULL(c);
  return c;
}

TEST(current_context_inline_data) {
  kube_config *c =
      parse(KC_HEAD "users:\n- name: u1\n  user:\n    client-certificate-data: Q0VSVA==\n"
                    "    client-key-data: S0VZ\n",
            NULL, CTRAIN_OK);
  ASSERT_STR_EQ(c->server, "https://127.0.0.1:6443");
  ASSERT_STR_EQ(c->ca_pem, "CA-PEM");
  ASSERT_EQ(c->ca_pem_len, 6);
  ASSERT_STR_EQ(c->cert_pem, "CERT");
  ASSERT_STR_EQ(c->key_pem, "KEY");
  ASSERT_STR_EQ(c->namespace_, "team-a");
  ASSERT_STR_EQ(c->context, "dev");
  ASSERT_EQ(c->insecure_skip_tls_verify, 0);
  char tok[64];
  ASSERT_OK(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  ASSERT_STR_EQ(tok, "");
  kube_config_free(c);
}

/* Two `token:` (or `server:`) keys: which one counts would be a guess (the
 * first before, silently); kubectl refuses such a file, so do we. */
TEST(duplicate_keys_refused) {
  parse(KC_HEAD "users:\n- name: u2\n  user:\n    token: first\n    token: second\n", "other",
        CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "/k/config: line ");
  ASSERT_STR_CONTAINS(err, "duplicate key 'token'");
  parse(KC_HEAD "current-context: other\n", NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "duplicate key 'current-context'");
}

TEST(named_context_token_insecure) {
  kube_config *c =
      parse(KC_HEAD "users:\n- name: u2\n  user:\n    token: s3cr3t\n", "other", CTRAIN_OK);
  ASSERT_STR_EQ(c->server, "https://10.0.0.1");
  ASSERT_EQ(c->insecure_skip_tls_verify, 1);
  ASSERT_NULL(c->ca_pem);
  ASSERT_STR_EQ(c->namespace_, "default");
  char tok[64];
  ASSERT_OK(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  ASSERT_STR_EQ(tok, "s3cr3t");
  ASSERT_EQ(kube_config_token(c, tok, 4, err, sizeof(err)), CTRAIN_E_TOOBIG);
  ASSERT(!strstr(err, "s3cr3t"));
  kube_config_free(c);
}

TEST(insecure_only_when_explicit) {
  kube_config *c = parse("current-context: x\nclusters:\n- name: c\n  cluster:\n    server: "
                         "https://h\n    insecure-skip-tls-verify: false\n"
                         "contexts:\n- name: x\n  context:\n    cluster: c\n",
                         NULL, CTRAIN_OK);
  ASSERT_EQ(c->insecure_skip_tls_verify, 0);
  kube_config_free(c);
  parse("current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h\n"
        "    insecure-skip-tls-verify: maybe\ncontexts:\n- name: x\n  context:\n    cluster: c\n",
        NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "/k/config");
  ASSERT_STR_CONTAINS(err, "clusters[c].cluster.insecure-skip-tls-verify");
}

TEST(errors_name_file_and_field) {
  parse(KC_HEAD, "nope", CTRAIN_E_CONFIG);
  ASSERT_STR_EQ(err, "/k/config: contexts: no context named \"nope\"");
  parse(KC_HEAD "users: []\n", NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_EQ(err, "/k/config: users: no user named \"u1\" (from contexts[dev].context.user)");
  parse("current-context: x\ncontexts:\n- name: x\n  context: {cluster: gone}\n", NULL,
        CTRAIN_E_CONFIG);
  ASSERT_STR_EQ(
      err, "/k/config: clusters: no cluster named \"gone\" (from contexts[x].context.cluster)");
  parse("current-context: x\nclusters:\n- name: c\n  cluster: {}\n"
        "contexts:\n- name: x\n  context: {cluster: c}\n",
        NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "clusters[c].cluster.server");
  parse("current-context: x\nclusters:\n- name: c\n  cluster: {server: ftp://x}\n"
        "contexts:\n- name: x\n  context: {cluster: c}\n",
        NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "server");
  parse(KC_HEAD "users:\n- name: u1\n  user:\n    client-certificate-data: '!!notb64'\n"
                "    client-key-data: S0VZ\n",
        NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "users[u1].user.client-certificate-data");
  parse(KC_HEAD "users:\n- name: u1\n  user:\n    client-certificate: /nonexistent/cert.pem\n"
                "    client-key-data: S0VZ\n",
        NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "users[u1].user.client-certificate");
  ASSERT_STR_CONTAINS(err, "/nonexistent/cert.pem");
  parse(KC_HEAD "users:\n- name: u1\n  user:\n    client-certificate-data: Q0VSVA==\n", NULL,
        CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "client-key");
  parse(KC_HEAD "users:\n- name: u1\n  user:\n    exec: {command: aws}\n", NULL,
        CTRAIN_E_UNSUPPORTED);
  ASSERT_STR_CONTAINS(err, "users[u1].user.exec");
  parse("a: [unclosed\n", NULL, CTRAIN_E_PARSE);
  ASSERT_STR_CONTAINS(err, "/k/config");
  parse("- just\n- a list\n", NULL, CTRAIN_E_CONFIG);
  parse("clusters: []\n", NULL, CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "current-context");
}

static void write_file(const char *path, const char *s) {
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(s, f);
  fclose(f);
}

TEST(files_relative_to_kubeconfig_and_token_rotation) {
  char dir[] = "/tmp/kubecfgXXXXXX";
  ASSERT_NOT_NULL(mkdtemp(dir));
  char p[256], kc[256];
  snprintf(p, sizeof(p), "%s/ca.pem", dir);
  write_file(p, "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n");
  snprintf(p, sizeof(p), "%s/tok", dir);
  write_file(p, "first\n");
  snprintf(kc, sizeof(kc), "%s/config", dir);
  write_file(kc, "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
                 "    certificate-authority: ca.pem\n"
                 "users:\n- name: u\n  user:\n    tokenFile: tok\n"
                 "contexts:\n- name: x\n  context: {cluster: c, user: u}\n");
  kube_config *c = NULL;
  ASSERT_OK(kube_config_load_file(kc, NULL, &c, err, sizeof(err)));
  ASSERT_STR_CONTAINS(c->ca_pem, "BEGIN CERTIFICATE");
  char tok[64];
  ASSERT_OK(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  ASSERT_STR_EQ(tok, "first");
  /* Rotation: a new file (new inode), as the kubelet's atomic writer does. */
  char tmp[256];
  snprintf(tmp, sizeof(tmp), "%s/tok.new", dir);
  write_file(tmp, "second-token\n");
  ASSERT_OK(rename(tmp, p));
  ASSERT_OK(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  ASSERT_STR_EQ(tok, "second-token");
  /* Briefly missing: the last token stays in use. */
  unlink(p);
  ASSERT_OK(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  ASSERT_STR_EQ(tok, "second-token");
  kube_config_free(c);

  /* $KUBECONFIG: the first existing file of the list. */
  char env[600];
  snprintf(env, sizeof(env), "/nonexistent/a:%s", kc);
  setenv("KUBECONFIG", env, 1);
  write_file(p, "t3\n");
  ASSERT_OK(kube_config_load_default(NULL, NULL, &c, err, sizeof(err)));
  ASSERT_STR_EQ(c->source, kc);
  kube_config_free(c);
  setenv("KUBECONFIG", "/nonexistent/a:/nonexistent/b", 1);
  ASSERT_EQ(kube_config_load_default(NULL, NULL, &c, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "KUBECONFIG");
  unsetenv("KUBECONFIG");
}

TEST(kubeconfig_list_merges) {
  char d1[] = "/tmp/kubemergeAXXXXXX", d2[] = "/tmp/kubemergeBXXXXXX";
  ASSERT_NOT_NULL(mkdtemp(d1));
  ASSERT_NOT_NULL(mkdtemp(d2));
  char a[256], b[256], p[256], env[600];
  /* a: current-context and the context; b: the cluster (with a CA file
   * relative to b's directory) and the user; a's "dup" cluster shadows b's. */
  snprintf(a, sizeof(a), "%s/config", d1);
  snprintf(b, sizeof(b), "%s/config", d2);
  write_file(a, "current-context: merged\n"
                "clusters:\n- name: dup\n  cluster: {server: https://first}\n"
                "contexts:\n- name: merged\n  context: {cluster: c2, user: u2, namespace: m}\n");
  write_file(b, "current-context: ignored\n"
                "clusters:\n- name: c2\n  cluster: {server: 'https://second:6443',"
                " certificate-authority: ca.pem}\n"
                "- name: dup\n  cluster: {server: https://shadowed}\n"
                "users:\n- name: u2\n  user: {token: from-b}\n");
  snprintf(p, sizeof(p), "%s/ca.pem", d2);
  write_file(p, "B-CA");
  snprintf(env, sizeof(env), "%s:/nonexistent/x:%s", a, b);
  setenv("KUBECONFIG", env, 1);
  kube_config *c = NULL;
  ASSERT_OK(kube_config_load_default(NULL, NULL, &c, err, sizeof(err)));
  ASSERT_STR_EQ(c->context, "merged");
  ASSERT_STR_EQ(c->server, "https://second:6443");
  ASSERT_STR_EQ(c->ca_pem, "B-CA"); /* relative to b, where the cluster is defined */
  ASSERT_STR_EQ(c->namespace_, "m");
  char tok[32];
  ASSERT_OK(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  ASSERT_STR_EQ(tok, "from-b");
  kube_config_free(c);
  /* A context that uses the shadowed name gets the first file's entry. */
  write_file(b, "contexts:\n- name: d\n  context: {cluster: dup}\n"
                "clusters:\n- name: dup\n  cluster: {server: https://shadowed}\n");
  ASSERT_OK(kube_config_load_default(NULL, "d", &c, err, sizeof(err)));
  ASSERT_STR_EQ(c->server, "https://first");
  kube_config_free(c);
  /* Errors name the file that holds the bad entry. */
  write_file(b, "users:\n- name: u2\n  user: {client-certificate: missing.pem, client-key-data: "
                "S0VZ}\nclusters:\n- name: c2\n  cluster: {server: https://x}\n");
  ASSERT_EQ(kube_config_load_default(NULL, NULL, &c, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, b);
  ASSERT_STR_CONTAINS(err, "users[u2].user.client-certificate");
  unsetenv("KUBECONFIG");
}

TEST(incluster) {
  char dir[] = "/tmp/kubesaXXXXXX";
  ASSERT_NOT_NULL(mkdtemp(dir));
  char p[256];
  kube_config *c = NULL;
  unsetenv("KUBERNETES_SERVICE_HOST");
  ASSERT_EQ(kube_config_load_incluster(dir, &c, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "KUBERNETES_SERVICE_HOST");
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  ASSERT_EQ(kube_config_load_incluster(dir, &c, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "ca.crt");
  snprintf(p, sizeof(p), "%s/ca.crt", dir);
  write_file(p, "PEM");
  ASSERT_EQ(kube_config_load_incluster(dir, &c, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "token");
  snprintf(p, sizeof(p), "%s/token", dir);
  write_file(p, "sa-token");
  snprintf(p, sizeof(p), "%s/namespace", dir);
  write_file(p, "ctrain-system\n");
  ASSERT_OK(kube_config_load_incluster(dir, &c, err, sizeof(err)));
  ASSERT_STR_EQ(c->server, "https://[fd00::1]:443");
  ASSERT_STR_EQ(c->namespace_, "ctrain-system");
  ASSERT_STR_EQ(c->ca_pem, "PEM");
  char tok[64];
  ASSERT_OK(kube_config_token(c, tok, sizeof(tok), err, sizeof(err)));
  ASSERT_STR_EQ(tok, "sa-token");
  kube_config_free(c);
}

TEST(free_null) {
  kube_config_free(NULL);
}

TEST_MAIN(T(current_context_inline_data), T(named_context_token_insecure),
          T(duplicate_keys_refused), T(insecure_only_when_explicit), T(errors_name_file_and_field),
          T(files_relative_to_kubeconfig_and_token_rotation), T(kubeconfig_list_merges),
          T(incluster), T(free_null))
