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

void optim_step(optim_t *o, float *w, const float *g, float lr) {
  size_t n = o->n_params;
  o->iterations++;
  if (o->kind == OPTIM_SGD) {
    if (o->n_slots == 0) {
      for (size_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
      return;
    }
    /* Keras: v = m*v - lr*g; w += v, or w += m*v - lr*g with Nesterov. */
    float mom = o->momentum, *v = o->state;
    for (size_t i = 0; i < n; i++) {
      v[i] = mom * v[i] - lr * g[i];
      w[i] += o->nesterov ? mom * v[i] - lr * g[i] : v[i];
    }
    return;
  }
  /* Keras 3 Adam: alpha = lr*sqrt(1-b2^t)/(1-b1^t); m += (g-m)(1-b1);
   * v += (g^2-v)(1-b2); w -= alpha*m/(sqrt(v)+eps). */
  double t = (double)o->iterations;
  float b1 = o->beta1, b2 = o->beta2, eps = o->epsilon;
  float alpha = (float)(lr * sqrt(1.0 - pow(b2, t)) / (1.0 - pow(b1, t)));
  float *m = o->state, *v = o->state + n;
  for (size_t i = 0; i < n; i++) {
    m[i] += (g[i] - m[i]) * (1.0f - b1);
    v[i] += (g[i] * g[i] - v[i]) * (1.0f - b2);
    w[i] -= alpha * m[i] / (sqrtf(v[i]) + eps);
  }
}
