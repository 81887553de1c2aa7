/* volume.c - pod volumes as host directories (see ctrain/lnode_volume.h). */
#include "ctrain/lnode_volume.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/lnode_util.h"

void lnode_volumes_free(lnode_volumes *vs) {
  for (size_t i = 0; i < vs->n; i++) {
    free(vs->v[i].name);
    free(vs->v[i].path);
  }
  free(vs->v);
  vs->v = NULL;
  vs->n = 0;
  vs->token_refresh_at = 0;
}

const lnode_volume *lnode_volumes_find(const lnode_volumes *vs, const char *name) {
  for (size_t i = 0; i < vs->n; i++)
    if (!strcmp(vs->v[i].name, name))
      return &vs->v[i];
  return NULL;
}

static ctrain_err add_volume(lnode_volumes *vs, const char *name, const char *path, int ro) {
  lnode_volume *nv = realloc(vs->v, (vs->n + 1) * sizeof(*nv));
  if (!nv)
    return CTRAIN_E_NOMEM;
  vs->v = nv;
  nv[vs->n].name = strdup(name);
  nv[vs->n].path = strdup(path);
  nv[vs->n].read_only = ro;
  if (!nv[vs->n].name || !nv[vs->n].path) {
    free(nv[vs->n].name);
    free(nv[vs->n].path);
    return CTRAIN_E_NOMEM;
  }
  vs->n++;
  return CTRAIN_OK;
}

/* A relative file path inside a volume: no "..", not absolute. */
static int safe_rel(const char *p) {
  if (!p || !*p || *p == '/')
    return 0;
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 2 && s[0] == '.' && s[1] == '.')
      return 0;
    s += n;
    if (*s == '/')
      s++;
  }
  return 1;
}

static ctrain_err write_in(const char *dir, const char *rel, const void *data, size_t len, int mode,
                           char *err, size_t errlen) {
  char path[4096];
  if (!safe_rel(rel))
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "bad file path '%s'", rel ? rel : "");
  if (lnode_fmt(path, sizeof(path), "%s/%s", dir, rel))
    return ctrain_errf(CTRAIN_E_TOOBIG, err, errlen, "path too long: %s/%s", dir, rel);
  char *slash = strrchr(path, '/');
  *slash = '\0';
  ctrain_err result = lnode_mkdir_p(path, 0755, err, errlen);
  *slash = '/';
  if (result)
    return result;
  return lnode_write_file_atomic(path, data, len, (mode_t)mode, err, errlen);
}

/* Writes the keys of a ConfigMap or Secret (all, or `items`). */
static ctrain_err write_keys(const lnode_volume_ctx *ctx, lnode_ref_kind kind, const cJSON *src,
                             const char *dir, int def_mode, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *obj = NULL;
  char *val = NULL;
  const char *kname = kind == LNODE_REF_SECRET ? "secret" : "configmap";
  const char *name = lnode_json_str(src, kind == LNODE_REF_SECRET ? "secretName" : "name");
  if (!name)
    name = lnode_json_str(src, "name");
  const char *ns = lnode_json_str(ctx->env->pod, "metadata.namespace");
  int optional = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(src, "optional"));
  const cJSON *items = cJSON_GetObjectItemCaseSensitive(src, "items");
  if (!name)
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "%s volume without a name", kname);
  result = ctx->env->lookup(ctx->env->lookup_ud, kind, ns, name, &obj);
  if (result == CTRAIN_E_NOTFOUND && optional)
    return CTRAIN_OK;
  if (result) {
    ctrain_errf(result, err, errlen, "%s \"%s\" %s", kname, name,
                result == CTRAIN_E_NOTFOUND ? "not found" : ctrain_strerror(result));
    goto out;
  }
  const char *maps[2] = {"data", "binaryData"};
  for (int m = 0; m < 2; m++) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(obj, maps[m])) {
      if (!cJSON_IsString(it))
        continue;
      const char *rel = it->string;
      int mode = def_mode;
      if (cJSON_GetArraySize(items) > 0) {
        const cJSON *sel = NULL, *x;
        cJSON_ArrayForEach(x, items) {
          const char *k = lnode_json_str(x, "key");
          if (k && !strcmp(k, it->string))
            sel = x;
        }
        if (!sel)
          continue;
        rel = lnode_json_str(sel, "path");
        mode = (int)lnode_json_num(sel, "mode", def_mode);
      }
      size_t len = strlen(it->valuestring);
      const char *data = it->valuestring;
      if (kind == LNODE_REF_SECRET || m == 1) {
        result = ctrain_b64_decode(it->valuestring, len, &val, &len);
        if (result) {
          ctrain_errf(result, err, errlen, "%s \"%s\" key %s: bad base64", kname, name, it->string);
          goto out;
        }
        data = val;
      }
      result = write_in(dir, rel, data, len, mode, err, errlen);
      free(val);
      val = NULL;
      if (result)
        goto out;
    }
  }
out:
  free(val);
  cJSON_Delete(obj);
  return result;
}

static ctrain_err write_downward(const lnode_volume_ctx *ctx, const cJSON *items, const char *dir,
                                 int def_mode, char *err, size_t errlen) {
  const cJSON *it;
  cJSON_ArrayForEach(it, items) {
    const char *fp = lnode_json_str(it, "fieldRef.fieldPath");
    const char *rel = lnode_json_str(it, "path");
    char *val = NULL;
    ctrain_err result = fp ? lnode_env_field(ctx->env, fp, &val) : CTRAIN_E_UNSUPPORTED;
    if (result)
      return ctrain_errf(result, err, errlen, "downwardAPI %s: unsupported field", rel ? rel : "");
    result = write_in(dir, rel, val, strlen(val), (int)lnode_json_num(it, "mode", def_mode), err,
                      errlen);
    free(val);
    if (result)
      return result;
  }
  return CTRAIN_OK;
}

/* TokenRequest for the pod's service account, bound to the pod. */
static ctrain_err write_token(const lnode_volume_ctx *ctx, const cJSON *src, const char *dir,
                              int mode, time_t *refresh_at, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *pod = ctx->env->pod;
  const char *ns = lnode_json_str(pod, "metadata.namespace");
  const char *sa = lnode_json_str(pod, "spec.serviceAccountName");
  const char *aud = lnode_json_str(src, "audience");
  long exp = (long)lnode_json_num(src, "expirationSeconds", 3607);
  char path[1024];
  char *body = NULL, *resp = NULL;
  size_t resp_len = 0;
  cJSON *req = NULL, *ans = NULL;
  kube_status st;
  if (!sa)
    sa = "default";
  if (lnode_fmt(path, sizeof(path), "/api/v1/namespaces/%s/serviceaccounts/%s/token", ns, sa))
    return CTRAIN_E_TOOBIG;
  req = cJSON_CreateObject();
  cJSON *spec = cJSON_AddObjectToObject(req, "spec");
  cJSON *auds = cJSON_AddArrayToObject(spec, "audiences");
  if (aud && *aud)
    cJSON_AddItemToArray(auds, cJSON_CreateString(aud));
  cJSON_AddNumberToObject(spec, "expirationSeconds", (double)exp);
  cJSON *ref = cJSON_AddObjectToObject(spec, "boundObjectRef");
  cJSON_AddStringToObject(ref, "kind", "Pod");
  cJSON_AddStringToObject(ref, "apiVersion", "v1");
  cJSON_AddStringToObject(ref, "name", lnode_json_str(pod, "metadata.name"));
  cJSON_AddStringToObject(ref, "uid", lnode_json_str(pod, "metadata.uid"));
  body = cJSON_PrintUnformatted(req);
  if (!body) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = kube_client_request(ctx->kc, "POST", path, "application/json", body, strlen(body), &resp,
                               &resp_len, &st);
  if (result) {
    ctrain_errf(result, err, errlen, "TokenRequest for serviceaccount %s/%s: %d %s %s", ns, sa,
                st.http_code, st.reason, st.message);
    goto out;
  }
  ans = cJSON_ParseWithLength(resp, resp_len);
  const char *tok = lnode_json_str(ans, "status.token");
  if (!tok) {
    result = ctrain_errf(CTRAIN_E_PARSE, err, errlen, "TokenRequest answer without status.token");
    goto out;
  }
  result = write_in(dir, lnode_json_str(src, "path"), tok, strlen(tok), mode, err, errlen);
  if (result)
    goto out;
  time_t r = time(NULL) + (time_t)(exp * 8 / 10);
  if (!*refresh_at || r < *refresh_at)
    *refresh_at = r;
out:
  free(body);
  free(resp);
  cJSON_Delete(req);
  cJSON_Delete(ans);
  return result;
}

static ctrain_err api_volume(const lnode_volume_ctx *ctx, const cJSON *vol, const char *dir,
                             time_t *refresh_at, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *src;
  result = lnode_mkdir_p(dir, 0755, err, errlen);
  if (result)
    return result;
  if ((src = cJSON_GetObjectItemCaseSensitive(vol, "configMap")))
    return write_keys(ctx, LNODE_REF_CONFIGMAP, src, dir,
                      (int)lnode_json_num(src, "defaultMode", 0644), err, errlen);
  if ((src = cJSON_GetObjectItemCaseSensitive(vol, "secret")))
    return write_keys(ctx, LNODE_REF_SECRET, src, dir,
                      (int)lnode_json_num(src, "defaultMode", 0644), err, errlen);
  if ((src = cJSON_GetObjectItemCaseSensitive(vol, "downwardAPI")))
    return write_downward(ctx, cJSON_GetObjectItemCaseSensitive(src, "items"), dir,
                          (int)lnode_json_num(src, "defaultMode", 0644), err, errlen);
  src = cJSON_GetObjectItemCaseSensitive(vol, "projected");
  int mode = (int)lnode_json_num(src, "defaultMode", 0644);
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(src, "sources")) {
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "serviceAccountToken")))
      result = write_token(ctx, x, dir, mode, refresh_at, err, errlen);
    else if ((x = cJSON_GetObjectItemCaseSensitive(s, "configMap")))
      result = write_keys(ctx, LNODE_REF_CONFIGMAP, x, dir, mode, err, errlen);
    else if ((x = cJSON_GetObjectItemCaseSensitive(s, "secret")))
      result = write_keys(ctx, LNODE_REF_SECRET, x, dir, mode, err, errlen);
    else if ((x = cJSON_GetObjectItemCaseSensitive(s, "downwardAPI")))
      result =
          write_downward(ctx, cJSON_GetObjectItemCaseSensitive(x, "items"), dir, mode, err, errlen);
    else
      result = ctrain_errf(CTRAIN_E_UNSUPPORTED, err, errlen, "unsupported projected source");
    if (result)
      return result;
  }
  return CTRAIN_OK;
}

ctrain_err lnode_volumes_prepare(const lnode_volume_ctx *ctx, int only_projected,
                                 lnode_volumes *out, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  lnode_volumes vs = {0};
  char path[4096];
  char verr[512] = "";
  const cJSON *pod = ctx->env->pod;
  const char *ns = lnode_json_str(pod, "metadata.namespace");
  const cJSON *vol;
  cJSON_ArrayForEach(vol, lnode_json_at(pod, "spec.volumes")) {
    const char *name = lnode_json_str(vol, "name");
    const cJSON *src;
    int ro = 0, api = 0;
    if (!name)
      continue;
    if ((src = cJSON_GetObjectItemCaseSensitive(vol, "hostPath"))) {
      const char *p = lnode_json_str(src, "path");
      const char *type = lnode_json_str(src, "type");
      if (!p || *p != '/') {
        result = ctrain_errf(CTRAIN_E_INVAL, verr, sizeof(verr), "hostPath without absolute path");
        goto fail;
      }
      if (lnode_fmt(path, sizeof(path), "%s", p))
        goto toolong;
      if (!only_projected && type && !strcmp(type, "DirectoryOrCreate")) {
        result = lnode_mkdir_p(path, 0755, verr, sizeof(verr));
      } else if (!only_projected && type && !strcmp(type, "FileOrCreate") && access(path, F_OK)) {
        result = lnode_write_file_inplace(path, "", 0, 0644, verr, sizeof(verr));
      } else if (!only_projected && access(path, F_OK)) {
        result =
            ctrain_errf(CTRAIN_E_NOTFOUND, verr, sizeof(verr), "hostPath %s does not exist", path);
      }
    } else if ((src = cJSON_GetObjectItemCaseSensitive(vol, "emptyDir"))) {
      if (lnode_fmt(path, sizeof(path), "%s/volumes/%s", ctx->pod_dir, name))
        goto toolong;
      if (!only_projected)
        result = lnode_mkdir_p(path, 0777, verr, sizeof(verr));
      if (!result && !only_projected)
        chmod(path, 0777);
    } else if ((src = cJSON_GetObjectItemCaseSensitive(vol, "persistentVolumeClaim"))) {
      const char *claim = lnode_json_str(src, "claimName");
      ro = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(src, "readOnly"));
      if (!claim || !safe_rel(claim) || strchr(claim, '/')) {
        result = ctrain_errf(CTRAIN_E_INVAL, verr, sizeof(verr), "bad claimName");
        goto fail;
      }
      if (lnode_fmt(path, sizeof(path), "%s/pvc/%s/%s", ctx->state_dir, ns, claim))
        goto toolong;
      if (!only_projected)
        result = lnode_mkdir_p(path, 0777, verr, sizeof(verr));
    } else if (cJSON_GetObjectItemCaseSensitive(vol, "configMap") ||
               cJSON_GetObjectItemCaseSensitive(vol, "secret") ||
               cJSON_GetObjectItemCaseSensitive(vol, "downwardAPI") ||
               cJSON_GetObjectItemCaseSensitive(vol, "projected")) {
      api = 1;
      ro = 1;
      if (lnode_fmt(path, sizeof(path), "%s/volumes/%s", ctx->pod_dir, name))
        goto toolong;
      result = api_volume(ctx, vol, path, &vs.token_refresh_at, verr, sizeof(verr));
    } else {
      result = ctrain_errf(CTRAIN_E_UNSUPPORTED, verr, sizeof(verr), "unsupported volume type");
    }
    (void)api;
    if (result)
      goto fail;
    result = add_volume(&vs, name, path, ro);
    if (result)
      goto fail;
    continue;
  toolong:
    result = ctrain_errf(CTRAIN_E_TOOBIG, verr, sizeof(verr), "path too long");
  fail:
    ctrain_errf(result, err, errlen, "volume \"%s\": %s", name, verr);
    goto out;
  }
  *out = vs;
  memset(&vs, 0, sizeof(vs));
out:
  lnode_volumes_free(&vs);
  return result;
}
