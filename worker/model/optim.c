/* optim.c - Keras's SGD and Adam update rules. */
#include "worker/model/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ctrain_err optim_create(const char *name, size_t n_params, float momentum, int nesterov,
                        optim_t **out, char *errbuf, size_t errlen) {
  optim_t *o = NULL;
  *out = NULL;
  if (strcmp(name, "sgd") && strcmp(name, "adam")) {
    snprintf(errbuf, errlen, "optimizer: unknown optimizer '%s' (known: sgd, adam)", name);
    return CTRAIN_E_CONFIG;
  }
  o = calloc(1, sizeof(*o));
  if (!o)
    return CTRAIN_E_NOMEM;
  o->n_params = n_params;
  o->beta1 = 0.9f;
  o->beta2 = 0.999f;
  o->epsilon = 1e-7f;
  if (!strcmp(name, "adam")) {
    o->kind = OPTIM_ADAM;
    o->n_slots = 2;
  } else {
    o->kind = OPTIM_SGD;
    o->momentum = momentum;
    o->nesterov = nesterov;
    o->n_slots = momentum > 0 ? 1 : 0;
  }
  if (o->n_slots) {
    o->state = calloc((size_t)o->n_slots * n_params, sizeof(float));
    if (!o->state) {
      free(o);
      snprintf(errbuf, errlen, "optimizer: out of memory");
      return CTRAIN_E_NOMEM;
    }
  }
  *out = o;
  return CTRAIN_OK;
}

void optim_free(optim_t *o) {
  if (!o)
    return;
  free(o->state);
  free(o);
}

ctrain_err optim_update(optim_t *o, kern_t *k, float *w, const float *g, float *state, float lr) {
  size_t n = o->n_params;
  o->iterations++;
  if (o->kind == OPTIM_SGD)
    return k->ops->sgd(k, w, g, o->n_slots ? state : NULL, n, lr, o->momentum, o->nesterov);
  /* Keras 3 Adam: alpha = lr*sqrt(1-b2^t)/(1-b1^t); m += (g-m)(1-b1);
   * v += (g^2-v)(1-b2); w -= alpha*m/(sqrt(v)+eps) (the kernel). */
  double t = (double)o->iterations;
  float alpha = (float)(lr * sqrt(1.0 - pow(o->beta2, t)) / (1.0 - pow(o->beta1, t)));
  return k->ops->adam(k, w, g, state, state + n, n, alpha, o->beta1, o->beta2, o->epsilon);
}
