/* env.c - container environment and $(VAR) expansion (see ctrain/lnode_env.h). */
#include "ctrain/lnode_env.h"

#include <stdlib.h>
#include <string.h>

#include "ctrain/lnode_util.h"

void lnode_env_free(lnode_env *e) {
  if (!e || !e->kv)
    return;
  for (size_t i = 0; i < e->n; i++)
    free(e->kv[i]);
  free(e->kv);
  e->kv = NULL;
  e->n = 0;
}

const char *lnode_env_get(const lnode_env *e, const char *name) {
  size_t nl = strlen(name);
  for (size_t i = 0; i < e->n; i++)
    if (!strncmp(e->kv[i], name, nl) && e->kv[i][nl] == '=')
      return e->kv[i] + nl + 1;
  return NULL;
}

/* Sets NAME=value (copied), replacing an earlier entry of that name. */
static ctrain_err env_set(lnode_env *e, const char *name, const char *value) {
  size_t nl = strlen(name), vl = strlen(value);
  char *kv = malloc(nl + vl + 2);
  if (!kv)
    return CTRAIN_E_NOMEM;
  memcpy(kv, name, nl);
  kv[nl] = '=';
  memcpy(kv + nl + 1, value, vl + 1);
  for (size_t i = 0; i < e->n; i++) {
    if (!strncmp(e->kv[i], name, nl) && e->kv[i][nl] == '=') {
      free(e->kv[i]);
      e->kv[i] = kv;
      return CTRAIN_OK;
    }
  }
  char **nkv = realloc(e->kv, (e->n + 2) * sizeof(*nkv));
  if (!nkv) {
    free(kv);
    return CTRAIN_E_NOMEM;
  }
  e->kv = nkv;
  e->kv[e->n++] = kv;
  e->kv[e->n] = NULL;
  return CTRAIN_OK;
}

/* A growing string. */
typedef struct {
  char *s;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_add(sbuf *b, const char *p, size_t n) {
  if (b->oom)
    return;
  if (b->n + n + 1 > b->cap) {
    size_t nc = (b->n + n + 1) * 2;
    char *ns = realloc(b->s, nc);
    if (!ns) {
      b->oom = 1;
      return;
    }
    b->s = ns;
    b->cap = nc;
  }
  memcpy(b->s + b->n, p, n);
  b->n += n;
  b->s[b->n] = '\0';
}

char *lnode_env_expand(const lnode_env *e, const char *in) {
  sbuf b = {0};
  sb_add(&b, "", 0);
  const char *p = in;
  while (*p) {
    if (p[0] == '$' && p[1] == '$') {
      sb_add(&b, "$", 1);
      p += 2;
      continue;
    }
    if (p[0] == '$' && p[1] == '(') {
      const char *close = strchr(p + 2, ')');
      if (close && close > p + 2) {
        size_t nl = (size_t)(close - (p + 2));
        char name[256];
        if (nl < sizeof(name)) {
          memcpy(name, p + 2, nl);
          name[nl] = '\0';
          const char *v = e ? lnode_env_get(e, name) : NULL;
          if (v) {
            sb_add(&b, v, strlen(v));
            p = close + 1;
            continue;
          }
        }
        sb_add(&b, p, (size_t)(close + 1 - p));
        p = close + 1;
        continue;
      }
    }
    sb_add(&b, p, 1);
    p++;
  }
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

/* metadata.labels['key'] -> value of key in metadata.labels. */
static const char *map_field(const cJSON *pod, const char *path, const char *prefix) {
  size_t pl = strlen(prefix);
  if (strncmp(path, prefix, pl) || path[pl] != '[')
    return NULL;
  const char *k = path + pl + 1;
  char q = *k;
  if (q != '\'' && q != '"')
    return NULL;
  k++;
  const char *end = strchr(k, q);
  if (!end || end[1] != ']' || end[2] != '\0')
    return NULL;
  char key[320];
  size_t n = (size_t)(end - k);
  if (n >= sizeof(key))
    return NULL;
  memcpy(key, k, n);
  key[n] = '\0';
  const cJSON *m = lnode_json_at(pod, prefix);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

ctrain_err lnode_env_field(const lnode_env_ctx *ctx, const char *fp, char **out) {
  const char *v = NULL;
  if (!strcmp(fp, "metadata.name") || !strcmp(fp, "metadata.namespace") ||
      !strcmp(fp, "metadata.uid") || !strcmp(fp, "spec.serviceAccountName")) {
    v = lnode_json_str(ctx->pod, fp);
    if (!v)
      v = strcmp(fp, "spec.serviceAccountName") ? "" : "default";
  } else if (!strcmp(fp, "spec.nodeName")) {
    v = ctx->node_name ? ctx->node_name : lnode_json_str(ctx->pod, fp);
  } else if (!strcmp(fp, "status.podIP") || !strcmp(fp, "status.podIPs")) {
    v = ctx->pod_ip;
  } else if (!strcmp(fp, "status.hostIP") || !strcmp(fp, "status.hostIPs")) {
    v = ctx->host_ip;
  } else if (!(v = map_field(ctx->pod, fp, "metadata.labels")) &&
             !(v = map_field(ctx->pod, fp, "metadata.annotations"))) {
    return CTRAIN_E_UNSUPPORTED;
  }
  *out = strdup(v ? v : "");
  return *out ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

/* The value of `key` in a Secret (base64-decoded) or ConfigMap; owned. */
static ctrain_err ref_value(const cJSON *obj, lnode_ref_kind kind, const char *key, char **out) {
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(obj, "data");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(data, key);
  if (kind == LNODE_REF_CONFIGMAP) {
    if (!cJSON_IsString(v))
      return CTRAIN_E_NOTFOUND;
    *out = strdup(v->valuestring);
    return *out ? CTRAIN_OK : CTRAIN_E_NOMEM;
  }
  if (!cJSON_IsString(v)) {
    /* stringData is write-only, but a fake or old object may carry it. */
    v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "stringData"), key);
    if (!cJSON_IsString(v))
      return CTRAIN_E_NOTFOUND;
    *out = strdup(v->valuestring);
    return *out ? CTRAIN_OK : CTRAIN_E_NOMEM;
  }
  size_t n = 0;
  return ctrain_b64_decode(v->valuestring, strlen(v->valuestring), out, &n);
}

/* Resolves one valueFrom.{secretKeyRef,configMapKeyRef}. *out NULL when the
 * reference is optional and missing. */
static ctrain_err key_ref(const lnode_env_ctx *ctx, const cJSON *ref, lnode_ref_kind kind,
                          const char *var, char **out, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *obj = NULL;
  const char *kname = kind == LNODE_REF_SECRET ? "secret" : "configmap";
  const char *name = lnode_json_str(ref, "name");
  const char *key = lnode_json_str(ref, "key");
  const char *ns = lnode_json_str(ctx->pod, "metadata.namespace");
  int optional = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ref, "optional"));
  *out = NULL;
  if (!name || !key) {
    result = ctrain_errf(CTRAIN_E_INVAL, err, errlen, "env %s: %sKeyRef without name or key", var,
                         kname);
    goto out;
  }
  if (!ctx->lookup) {
    result = ctrain_errf(CTRAIN_E_UNSUPPORTED, err, errlen, "env %s: no %s lookup", var, kname);
    goto out;
  }
  result = ctx->lookup(ctx->lookup_ud, kind, ns ? ns : "default", name, &obj);
  if (result == CTRAIN_E_NOTFOUND && optional) {
    result = CTRAIN_OK;
    goto out;
  }
  if (result) {
    ctrain_errf(result, err, errlen, "env %s: %s \"%s\" %s", var, kname, name,
                result == CTRAIN_E_NOTFOUND ? "not found" : ctrain_strerror(result));
    goto out;
  }
  result = ref_value(obj, kind, key, out);
  if (result == CTRAIN_E_NOTFOUND && optional) {
    result = CTRAIN_OK;
    goto out;
  }
  if (result)
    ctrain_errf(result, err, errlen, "env %s: couldn't find key %s in %s \"%s\"", var, key, kname,
                name);
out:
  cJSON_Delete(obj);
  return result;
}

/* envFrom: every key of a ConfigMap or Secret, with an optional prefix. */
static ctrain_err env_from(const lnode_env_ctx *ctx, const cJSON *src, lnode_env *e, char *err,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *obj = NULL;
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(src, "configMapRef");
  lnode_ref_kind kind = LNODE_REF_CONFIGMAP;
  if (!ref) {
    ref = cJSON_GetObjectItemCaseSensitive(src, "secretRef");
    kind = LNODE_REF_SECRET;
  }
  const char *name = lnode_json_str(ref, "name");
  const char *prefix = lnode_json_str(src, "prefix");
  const char *ns = lnode_json_str(ctx->pod, "metadata.namespace");
  if (!name || !ctx->lookup)
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "envFrom without a resolvable name");
  result = ctx->lookup(ctx->lookup_ud, kind, ns ? ns : "default", name, &obj);
  if (result == CTRAIN_E_NOTFOUND &&
      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ref, "optional")))
    return CTRAIN_OK;
  if (result) {
    ctrain_errf(result, err, errlen, "envFrom: %s \"%s\" %s",
                kind == LNODE_REF_SECRET ? "secret" : "configmap", name,
                result == CTRAIN_E_NOTFOUND ? "not found" : ctrain_strerror(result));
    goto out;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(obj, "data")) {
    char *v = NULL;
    char nm[512];
    result = ref_value(obj, kind, it->string, &v);
    if (result)
      goto out;
    if (lnode_fmt(nm, sizeof(nm), "%s%s", prefix ? prefix : "", it->string)) {
      free(v);
      continue;
    }
    result = env_set(e, nm, v);
    free(v);
    if (result)
      goto out;
  }
out:
  cJSON_Delete(obj);
  return result;
}

ctrain_err lnode_env_build(const lnode_env_ctx *ctx, const cJSON *container, lnode_env *out,
                           char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  lnode_env e = {0};
  char *val = NULL;
  const cJSON *it;
  if (ctx->base_path) {
    result = env_set(&e, "PATH", ctx->base_path);
    if (result)
      goto out;
  }
  if (ctx->hostname) {
    result = env_set(&e, "HOSTNAME", ctx->hostname);
    if (result)
      goto out;
  }
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(container, "envFrom")) {
    result = env_from(ctx, it, &e, err, errlen);
    if (result)
      goto out;
  }
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(container, "env")) {
    const char *name = lnode_json_str(it, "name");
    const cJSON *vf = cJSON_GetObjectItemCaseSensitive(it, "valueFrom");
    if (!name || !*name) {
      result = ctrain_errf(CTRAIN_E_INVAL, err, errlen, "env entry without a name");
      goto out;
    }
    if (vf) {
      const cJSON *ref;
      if ((ref = cJSON_GetObjectItemCaseSensitive(vf, "fieldRef"))) {
        const char *fp = lnode_json_str(ref, "fieldPath");
        result = fp ? lnode_env_field(ctx, fp, &val) : CTRAIN_E_INVAL;
        if (result) {
          ctrain_errf(result, err, errlen, "env %s: unsupported fieldPath '%s'", name,
                      fp ? fp : "");
          goto out;
        }
      } else if ((ref = cJSON_GetObjectItemCaseSensitive(vf, "secretKeyRef"))) {
        result = key_ref(ctx, ref, LNODE_REF_SECRET, name, &val, err, errlen);
      } else if ((ref = cJSON_GetObjectItemCaseSensitive(vf, "configMapKeyRef"))) {
        result = key_ref(ctx, ref, LNODE_REF_CONFIGMAP, name, &val, err, errlen);
      } else {
        result = ctrain_errf(CTRAIN_E_UNSUPPORTED, err, errlen,
                             "env %s: unsupported valueFrom (resourceFieldRef?)", name);
      }
      if (result)
        goto out;
      if (!val)
        continue; /* optional and missing: the variable is not set */
    } else {
      const char *v = lnode_json_str(it, "value");
      val = lnode_env_expand(&e, v ? v : "");
      if (!val) {
        result = CTRAIN_E_NOMEM;
        goto out;
      }
    }
    result = env_set(&e, name, val);
    free(val);
    val = NULL;
    if (result)
      goto out;
  }
  if (!e.kv) {
    e.kv = calloc(1, sizeof(*e.kv));
    if (!e.kv) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
  }
  *out = e;
  e.kv = NULL;
  e.n = 0;
out:
  free(val);
  lnode_env_free(&e);
  return result;
}
