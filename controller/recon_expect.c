/* recon_expect.c - expectations: the creates and deletes this controller
 * decided and its cache has not shown yet, as the Job controller keeps them
 * (controller/reconcile.h). */
#include "controller/recon_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/buf.h"

void recon_expectations_init(recon_expectations *x) {
  memset(x, 0, sizeof(*x));
}

void recon_expectations_free(recon_expectations *x) {
  if (!x)
    return;
  free(x->e);
  memset(x, 0, sizeof(*x));
}

static void exp_remove_at(recon_expectations *x, size_t i) {
  x->e[i] = x->e[--x->n];
}

void recon_expect_creation_failed(recon_expectations *x, const char *pod_name) {
  for (size_t i = 0; x && pod_name && i < x->n; i++)
    if (!x->e[i].is_delete && !strcmp(x->e[i].name, pod_name)) {
      exp_remove_at(x, i);
      return;
    }
}

void recon_expect_deletion_failed(recon_expectations *x, const char *uid) {
  for (size_t i = 0; x && uid && i < x->n; i++)
    if (x->e[i].is_delete && !strcmp(x->e[i].uid, uid)) {
      exp_remove_at(x, i);
      return;
    }
}

size_t recon_expectations_pending(const recon_expectations *x) {
  return x ? x->n : 0;
}

ctrain_err recon_exp_add(recon_expectations *x, int is_delete, const char *name, const char *uid,
                         int attempt, int64_t now) {
  if (ctrain_grow(&x->e, &x->cap, x->n + 1, sizeof(*x->e), 16, 0))
    return CTRAIN_E_NOMEM;
  recon_expect_entry *en = &x->e[x->n];
  memset(en, 0, sizeof(*en));
  en->is_delete = is_delete;
  snprintf(en->name, sizeof(en->name), "%s", name ? name : "");
  snprintf(en->uid, sizeof(en->uid), "%s", uid ? uid : "");
  en->attempt = attempt;
  en->at = now;
  x->n++;
  return CTRAIN_OK;
}

int recon_exp_pending_create(const recon_expectations *x, const char *name) {
  for (size_t i = 0; i < x->n; i++)
    if (!x->e[i].is_delete && !strcmp(x->e[i].name, name))
      return 1;
  return 0;
}

int recon_exp_pending_delete(const recon_expectations *x, const char *uid) {
  for (size_t i = 0; uid && i < x->n; i++)
    if (x->e[i].is_delete && !strcmp(x->e[i].uid, uid))
      return 1;
  return 0;
}

/* Drops the entries the observed pods satisfy (a create whose pod is seen; a
 * delete whose pod is gone or has a deletionTimestamp, as the Job controller
 * counts it) and the expired ones. Returns the earliest expiry of what is
 * left (INT64_MAX when nothing is). */
int64_t recon_exp_observe(recon_ctx *c) {
  recon_expectations *x = c->x;
  int64_t next = INT64_MAX;
  for (size_t i = 0; i < x->n;) {
    recon_expect_entry *en = &x->e[i];
    int done = en->at + RECON_EXPECTATIONS_TTL_S <= c->in->now;
    if (!done && !en->is_delete) {
      for (size_t k = 0; k < c->n_pods && !done; k++)
        done = !strcmp(c->pods[k].name, en->name);
    } else if (!done) {
      done = 1;
      for (size_t k = 0; k < c->n_pods; k++)
        if (c->pods[k].uid && !strcmp(c->pods[k].uid, en->uid)) {
          done = c->pods[k].deleting;
          break;
        }
    }
    if (done) {
      exp_remove_at(x, i);
      continue;
    }
    if (en->at + RECON_EXPECTATIONS_TTL_S < next)
      next = en->at + RECON_EXPECTATIONS_TTL_S;
    i++;
  }
  return next;
}
