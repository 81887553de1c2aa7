/* kube_rest.c - paths, query strings and the REST verbs (get, list,
 * create, update, the status subresource, patch, delete); see
 * ctrain/kube_client.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"
#include "kube_client_int.h"

/* ------------------------------------------------------------------------ */
/* Paths and queries */

int kube_name_ok(const char *s) {
  if (!s || !*s || !strcmp(s, ".") || !strcmp(s, "..")) /* a segment that climbs */
    return 0;
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '-' || ch == '.' || ch == '_' || ch == ':' || ch == '@'))
      return 0;
  }
  return 1;
}

ctrain_err kube_client_path(const kube_gvr *gvr, const char *ns, const char *name,
                            const char *subresource, char *buf, size_t buflen) {
  size_t n = 0;
  int w;
  if (!gvr || !gvr->version || !kube_name_ok(gvr->version) || !kube_name_ok(gvr->resource) ||
      (gvr->group && *gvr->group && !kube_name_ok(gvr->group)) ||
      (ns && *ns && !kube_name_ok(ns)) || (name && !kube_name_ok(name)) ||
      (subresource && !kube_name_ok(subresource)))
    return CTRAIN_E_INVAL;
  if (gvr->group && *gvr->group)
    w = snprintf(buf, buflen, "/apis/%s/%s", gvr->group, gvr->version);
  else
    w = snprintf(buf, buflen, "/api/%s", gvr->version);
  if (w < 0 || (size_t)w >= buflen)
    return CTRAIN_E_TOOBIG;
  n = (size_t)w;
  if (ns && *ns) {
    w = snprintf(buf + n, buflen - n, "/namespaces/%s", ns);
    if (w < 0 || (size_t)w >= buflen - n)
      return CTRAIN_E_TOOBIG;
    n += (size_t)w;
  }
  w = snprintf(buf + n, buflen - n, "/%s%s%s%s%s", gvr->resource, name ? "/" : "", name ? name : "",
               subresource ? "/" : "", subresource ? subresource : "");
  if (w < 0 || (size_t)w >= buflen - n)
    return CTRAIN_E_TOOBIG;
  return CTRAIN_OK;
}

ctrain_err kube_client_query_add(char *buf, size_t cap, const char *k, const char *v) {
  static const char hex[] = "0123456789ABCDEF";
  if (!v)
    return CTRAIN_OK;
  size_t start = strlen(buf), n = start;
  int w = snprintf(buf + n, cap - n, "%c%s=", strchr(buf, '?') ? '&' : '?', k);
  if (w < 0 || (size_t)w >= cap - n)
    goto toobig;
  n += (size_t)w;
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    /* RFC 3986 unreserved characters stay; everything else is %XX. */
    int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                *p == '-' || *p == '.' || *p == '_' || *p == '~';
    if (n + (plain ? 1 : 3) >= cap)
      goto toobig;
    if (plain) {
      buf[n++] = (char)*p;
    } else {
      buf[n++] = '%';
      buf[n++] = hex[*p >> 4];
      buf[n++] = hex[*p & 15];
    }
  }
  buf[n] = '\0';
  return CTRAIN_OK;
toobig:
  buf[start] = '\0'; /* as it was */
  return CTRAIN_E_TOOBIG;
}

/* Runs a request and decodes a JSON response into *out (when out != NULL). */
static ctrain_err do_json(kube_client *c, const char *method, const char *path,
                          const char *content_type, const char *body, cJSON **out,
                          kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  char *resp = NULL;
  size_t len = 0;
  if (out)
    *out = NULL;
  result = kube_client_request(c, method, path, content_type, body, body ? strlen(body) : 0, &resp,
                               &len, st);
  if (result)
    goto out;
  if (out) {
    *out = cJSON_ParseWithLength(resp, len);
    if (!*out) {
      result = CTRAIN_E_PARSE;
      if (st)
        snprintf(st->message, sizeof(st->message), "%s %.900s: response is not JSON", method, path);
    }
  }
out:
  free(resp);
  return result;
}

#define PATH_CAP 8192

ctrain_err kube_client_get(kube_client *c, const kube_gvr *gvr, const char *ns, const char *name,
                           cJSON **out, kube_status *st) {
  char path[PATH_CAP];
  ctrain_err result = kube_client_path(gvr, ns, name, NULL, path, sizeof(path));
  if (result)
    return result;
  return do_json(c, "GET", path, NULL, NULL, out, st);
}

ctrain_err kube_client_list(kube_client *c, const kube_gvr *gvr, const char *ns,
                            const kube_list_opts *o, cJSON **out, kube_status *st) {
  char path[PATH_CAP], num[32];
  ctrain_err result = kube_client_path(gvr, ns, NULL, NULL, path, sizeof(path));
  if (result)
    return result;
  if (o) {
    if (o->limit > 0)
      snprintf(num, sizeof(num), "%ld", o->limit);
    const char *const q[][2] = {{"labelSelector", o->label_selector},
                                {"fieldSelector", o->field_selector},
                                {"limit", o->limit > 0 ? num : NULL},
                                {"continue", o->continue_token},
                                {"resourceVersion", o->resource_version},
                                {"resourceVersionMatch", o->resource_version_match}};
    for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
      if ((result = kube_client_query_add(path, sizeof(path), q[i][0], q[i][1])))
        return result;
  }
  return do_json(c, "GET", path, NULL, NULL, out, st);
}

static ctrain_err add_write_opts(char *path, size_t cap, const kube_write_opts *o) {
  ctrain_err result = CTRAIN_OK;
  if (!o)
    return CTRAIN_OK;
  if ((result = kube_client_query_add(path, cap, "fieldManager", o->field_manager)) ||
      (result = kube_client_query_add(path, cap, "force", o->force ? "true" : NULL)) ||
      (result = kube_client_query_add(path, cap, "dryRun", o->dry_run ? "All" : NULL)))
    return result;
  return CTRAIN_OK;
}

static ctrain_err send_obj(kube_client *c, const char *method, const kube_gvr *gvr, const char *ns,
                           const char *name, const char *sub, const cJSON *obj,
                           const kube_write_opts *o, cJSON **out, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  char path[PATH_CAP];
  char *body = NULL;
  if ((result = kube_client_path(gvr, ns, name, sub, path, sizeof(path))) ||
      (result = add_write_opts(path, sizeof(path), o)))
    goto out;
  body = cJSON_PrintUnformatted(obj);
  if (!body) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = do_json(c, method, path, "application/json", body, out, st);
out:
  free(body);
  return result;
}

ctrain_err kube_client_create(kube_client *c, const kube_gvr *gvr, const char *ns, const cJSON *obj,
                              const kube_write_opts *o, cJSON **out, kube_status *st) {
  return send_obj(c, "POST", gvr, ns, NULL, NULL, obj, o, out, st);
}

ctrain_err kube_client_create_text(kube_client *c, const kube_gvr *gvr, const char *ns,
                                   const char *json, const kube_write_opts *o, cJSON **out,
                                   kube_status *st) {
  char path[PATH_CAP];
  ctrain_err result = kube_client_path(gvr, ns, NULL, NULL, path, sizeof(path));
  if (!result)
    result = add_write_opts(path, sizeof(path), o);
  if (result) {
    if (st)
      memset(st, 0, sizeof(*st));
    return result;
  }
  return do_json(c, "POST", path, "application/json", json, out, st);
}

static const char *obj_name(const cJSON *obj) {
  return ctrain_json_str(ctrain_json_get(obj, "metadata"), "name");
}

ctrain_err kube_client_update(kube_client *c, const kube_gvr *gvr, const char *ns, const cJSON *obj,
                              const kube_write_opts *o, cJSON **out, kube_status *st) {
  const char *name = obj_name(obj);
  if (!name)
    return CTRAIN_E_INVAL;
  return send_obj(c, "PUT", gvr, ns, name, NULL, obj, o, out, st);
}

ctrain_err kube_client_update_status(kube_client *c, const kube_gvr *gvr, const char *ns,
                                     const cJSON *obj, const kube_write_opts *o, cJSON **out,
                                     kube_status *st) {
  const char *name = obj_name(obj);
  if (!name)
    return CTRAIN_E_INVAL;
  return send_obj(c, "PUT", gvr, ns, name, "status", obj, o, out, st);
}

ctrain_err kube_client_patch(kube_client *c, const kube_gvr *gvr, const char *ns, const char *name,
                             const char *subresource, kube_patch_type type, const char *patch,
                             const kube_write_opts *o, cJSON **out, kube_status *st) {
  static const char *const ctypes[] = {
      [KUBE_PATCH_MERGE] = "application/merge-patch+json",
      [KUBE_PATCH_JSON] = "application/json-patch+json",
      [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
      [KUBE_PATCH_APPLY] = "application/apply-patch+yaml",
  };
  char path[PATH_CAP];
  ctrain_err result = CTRAIN_OK;
  if ((unsigned)type > KUBE_PATCH_APPLY || !patch || !name)
    return CTRAIN_E_INVAL;
  if (type == KUBE_PATCH_APPLY && (!o || !o->field_manager))
    return CTRAIN_E_INVAL; /* the apiserver insists on a field manager for apply */
  if ((result = kube_client_path(gvr, ns, name, subresource, path, sizeof(path))) ||
      (result = add_write_opts(path, sizeof(path), o)))
    return result;
  return do_json(c, "PATCH", path, ctypes[type], patch, out, st);
}

/* Prints the DeleteOptions for `o` into *body (owned by the caller), all of
 * them or none: a body that lost its preconditions or dryRun to a failed
 * allocation would delete what the caller meant to protect, so any failure
 * is CTRAIN_E_NOMEM and nothing is sent. */
static ctrain_err delete_body(const kube_delete_opts *o, char **body) {
  ctrain_err result = CTRAIN_E_NOMEM;
  cJSON *opts = cJSON_CreateObject(), *pre = NULL, *dr = NULL, *all = NULL;
  *body = NULL;
  if (!opts || !cJSON_AddStringToObject(opts, "kind", "DeleteOptions") ||
      !cJSON_AddStringToObject(opts, "apiVersion", "v1"))
    goto out;
  if (o->propagation_policy &&
      !cJSON_AddStringToObject(opts, "propagationPolicy", o->propagation_policy))
    goto out;
  if (o->grace_period_seconds >= 0 &&
      !cJSON_AddNumberToObject(opts, "gracePeriodSeconds", (double)o->grace_period_seconds))
    goto out;
  if (o->precondition_uid || o->precondition_rv) {
    if (!(pre = cJSON_AddObjectToObject(opts, "preconditions")))
      goto out;
    if (o->precondition_uid && !cJSON_AddStringToObject(pre, "uid", o->precondition_uid))
      goto out;
    if (o->precondition_rv && !cJSON_AddStringToObject(pre, "resourceVersion", o->precondition_rv))
      goto out;
  }
  if (o->dry_run) {
    if (!(dr = cJSON_AddArrayToObject(opts, "dryRun")) || !(all = cJSON_CreateString("All")) ||
        !cJSON_AddItemToArray(dr, all))
      goto out;
    all = NULL; /* dr owns it */
  }
  *body = cJSON_PrintUnformatted(opts);
  if (*body)
    result = CTRAIN_OK;
out:
  cJSON_Delete(all);
  cJSON_Delete(opts);
  return result;
}

ctrain_err kube_client_delete(kube_client *c, const kube_gvr *gvr, const char *ns, const char *name,
                              const kube_delete_opts *o, cJSON **out, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  char path[PATH_CAP];
  char *body = NULL;
  if (out)
    *out = NULL;
  if ((result = kube_client_path(gvr, ns, name, NULL, path, sizeof(path))))
    goto out;
  if (o && (result = delete_body(o, &body))) {
    if (st) {
      memset(st, 0, sizeof(*st));
      snprintf(st->message, sizeof(st->message), "DELETE %.900s: out of memory for DeleteOptions",
               path);
    }
    goto out;
  }
  result = do_json(c, "DELETE", path, body ? "application/json" : NULL, body, out, st);
out:
  free(body);
  return result;
}
