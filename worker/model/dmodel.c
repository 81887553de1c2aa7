/* dmodel.c - the model's forward, loss and backward and the optimizer's
 * update, issued as kernels.h ops on any backend. */
#include "worker/model/dmodel.h"
#include "worker/model/dmodel_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dmodel_free(dmodel_t *d) {
  if (!d)
    return;
  const kern_ops *o = d->k->ops;
  o->free(d->k, d->params);
  o->free(d->k, d->own_grads);
  o->free(d->k, d->state);
  o->free(d->k, d->acts);
  o->free(d->k, d->d0);
  o->free(d->k, d->d1);
  o->free(d->k, d->probs);
  o->free(d->k, d->stats);
  for (int i = 0; i < KERN_SLOTS; i++) {
    o->free_host(d->k, d->host[i]);
    o->free(d->k, d->staged[i]);
  }
  dmodel_cnn_free(d);
  free(d->y);
  free(d->mask);
  free(d->out);
  free(d);
}

ctrain_err dmodel_create(kern_t *k, const model_t *m, const optim_t *opt, int cap, dmodel_t **out,
                         char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  dmodel_t *d = NULL;
  const kern_ops *o = k->ops;
  *out = NULL;
  if (cap < 1) {
    snprintf(errbuf, errlen, "dmodel: batch capacity %d", cap);
    return CTRAIN_E_INVAL;
  }
  d = calloc(1, sizeof(*d));
  if (!d || !(d->y = calloc((size_t)m->n_layers, sizeof(float *))) ||
      !(d->mask = calloc((size_t)m->n_layers, sizeof(float *))) ||
      !(d->out = calloc((size_t)m->n_layers, sizeof(float *)))) {
    result = CTRAIN_E_NOMEM;
    snprintf(k->err, sizeof(k->err), "dmodel: out of memory");
    goto out;
  }
  d->k = k;
  d->m = m;
  d->cap = cap;
  d->n_params = m->n_params;
  d->n_slots = opt ? opt->n_slots : 0;
  size_t B = (size_t)cap, total = 0, maxf = (size_t)m->input_dim, t;
  d->first_param = m->n_layers;
  for (int i = m->n_layers - 1; i >= 0; i--)
    if (model_layer_params(&m->layers[i]))
      d->first_param = i;
  for (int i = 0; i < m->n_layers; i++) {
    const model_layer *L = &m->layers[i];
    total += (size_t)L->out;
    if (L->kind == MODEL_DROPOUT)
      d->mask_floats += (size_t)L->out;
    if ((size_t)L->out > maxf)
      maxf = (size_t)L->out;
  }
  /* Sizes that do not fit size_t are allocations that cannot succeed. */
  if (__builtin_mul_overflow(total + maxf + (size_t)m->input_dim + d->mask_floats + 2, B, &t) ||
      __builtin_mul_overflow(t, sizeof(float) * 2, &t)) {
    result = CTRAIN_E_NOMEM;
    snprintf(k->err, sizeof(k->err), "dmodel: batch %d of %zu features does not fit memory", cap,
             total);
    goto out;
  }
  d->stage_bytes =
      B * ((size_t)m->input_dim + d->mask_floats) * sizeof(float) + B * sizeof(int32_t);
  OP(o->alloc(k, (void **)&d->params, d->n_params * sizeof(float)));
  OP(o->alloc(k, (void **)&d->own_grads, d->n_params * sizeof(float)));
  d->grads = d->own_grads;
  if (d->n_slots)
    OP(o->alloc(k, (void **)&d->state, (size_t)d->n_slots * d->n_params * sizeof(float)));
  OP(o->alloc(k, (void **)&d->acts, total * B * sizeof(float)));
  OP(o->alloc(k, (void **)&d->d0, maxf * B * sizeof(float)));
  OP(o->alloc(k, (void **)&d->d1, maxf * B * sizeof(float)));
  OP(o->alloc(k, (void **)&d->probs, (size_t)m->n_classes * B * sizeof(float)));
  OP(o->alloc(k, (void **)&d->stats, 2 * sizeof(double)));
  OP(dmodel_cnn_alloc(d, cap));
  for (int i = 0; i < KERN_SLOTS; i++) {
    OP(o->alloc_host(k, &d->host[i], d->stage_bytes));
    OP(o->alloc(k, &d->staged[i], d->stage_bytes));
  }
  OP(o->memset0(k, d->params, d->n_params * sizeof(float)));
  OP(o->memset0(k, d->grads, d->n_params * sizeof(float)));
  if (d->state)
    OP(o->memset0(k, d->state, (size_t)d->n_slots * d->n_params * sizeof(float)));
  float *p = d->acts;
  for (int i = 0; i < m->n_layers; i++) {
    d->y[i] = p;
    p += (size_t)m->layers[i].out * B;
  }
  *out = d;
  d = NULL;
out:
  if (result)
    snprintf(errbuf, errlen, "%s", kern_errmsg(k));
  dmodel_free(d);
  return result;
}

ctrain_err dmodel_push(dmodel_t *d, const model_t *m, const optim_t *opt) {
  ctrain_err result = CTRAIN_OK;
  OP(d->k->ops->h2d(d->k, d->params, m->params, d->n_params * sizeof(float)));
  if (opt && d->n_slots)
    OP(d->k->ops->h2d(d->k, d->state, opt->state,
                      (size_t)d->n_slots * d->n_params * sizeof(float)));
  OP(d->k->ops->sync(d->k)); /* the host copies may be pageable: done before return */
out:
  return result;
}

ctrain_err dmodel_pull(dmodel_t *d, model_t *m, optim_t *opt) {
  ctrain_err result = CTRAIN_OK;
  OP(d->k->ops->d2h(d->k, m->params, d->params, d->n_params * sizeof(float)));
  if (opt && d->n_slots)
    OP(d->k->ops->d2h(d->k, opt->state, d->state,
                      (size_t)d->n_slots * d->n_params * sizeof(float)));
out:
  return result;
}

/* Draws this step's Dropout masks into hm on the host, layer by layer (all
 * ones when not training or a layer's rate is 0). Returns the floats drawn. */
static size_t step_draw_masks(const model_t *m, float *hm, int B, int training, rng_t *rng) {
  size_t moff = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const model_layer *L = &m->layers[i];
    if (L->kind != MODEL_DROPOUT)
      continue;
    size_t n = (size_t)B * (size_t)L->out;
    float *mk = hm + moff;
    if (training && L->rate > 0) {
      float keep = 1.0f - L->rate, sc = 1.0f / keep;
      rng_uniform_fill(rng, mk, n);
      for (size_t q = 0; q < n; q++)
        mk[q] = mk[q] < keep ? sc : 0.0f;
    } else {
      for (size_t q = 0; q < n; q++)
        mk[q] = 1.0f;
    }
    moff += n;
  }
  return moff;
}

/* Points each Dropout layer's mask into the staged masks dm. */
static void step_point_masks(dmodel_t *d, const float *dm, int B) {
  const model_t *m = d->m;
  size_t moff = 0;
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == MODEL_DROPOUT) {
      d->mask[i] = (float *)dm + moff;
      moff += (size_t)B * (size_t)m->layers[i].out;
    }
}

/* 1. Stage x | labels | masks into this step's slot. The masks are drawn
 * here on the host, layer by layer, so every backend sees the same masks.
 * A host-memory backend runs each op before it returns: it reads x and
 * labels where they are (borrowed for the call), and the masks from the
 * slot's buffer, with no copy. *slot_out: the slot; *dx_out, *dy_out:
 * where the backend reads x and labels. */
static ctrain_err step_stage(dmodel_t *d, const float *x, const int32_t *labels, int B,
                             int training, rng_t *rng, int *slot_out, const float **dx_out,
                             const int32_t **dy_out) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  const model_t *m = d->m;
  int slot = (d->slot + 1) % KERN_SLOTS;
  int host_mem = !o->is_device;
  d->slot = slot;
  *slot_out = slot;
  OP(o->stage_wait(k, slot));
  size_t nx = (size_t)B * (size_t)m->input_dim;
  float *hx = d->host[slot];
  int32_t *hy = (int32_t *)(hx + nx);
  float *hm = (float *)(hy + B);
  if (!host_mem) {
    memcpy(hx, x, nx * sizeof(float));
    memcpy(hy, labels, (size_t)B * sizeof(int32_t));
  }
  size_t moff = step_draw_masks(m, hm, B, training, rng);
  const float *dx = x;
  const int32_t *dy = labels;
  const float *dm = hm;
  if (!host_mem) {
    size_t bytes = (nx + moff) * sizeof(float) + (size_t)B * sizeof(int32_t);
    OP(o->stage(k, slot, d->staged[slot], d->host[slot], bytes));
    dx = d->staged[slot];
    dy = (const int32_t *)(dx + nx);
    dm = (const float *)(dy + B);
  }
  step_point_masks(d, dm, B);
  *dx_out = dx;
  *dy_out = dy;
out:
  return result;
}

/* 2. Forward. */
static ctrain_err step_forward(dmodel_t *d, const float *dx, int B, int training) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  const model_t *m = d->m;
  const float *in = dx;
  for (int i = 0; i < m->n_layers; i++) {
    const model_layer *L = &m->layers[i];
    float *y = d->y[i];
    size_t n = (size_t)B * (size_t)L->out;
    switch (L->kind) {
    case MODEL_DENSE:
      OP(o->bias_fill(k, y, d->params + L->b_off, B, L->out));
      OP(o->gemm(k, 0, 0, B, L->out, L->in, 1.0f, in, L->in, d->params + L->w_off, L->out, 1.0f, y,
                 L->out));
      OP(o->act_fwd(k, L->act, y, n));
      break;
    case MODEL_ACTIVATION:
      OP(o->copy(k, y, in, n));
      OP(o->act_fwd(k, L->act, y, n));
      break;
    case MODEL_FLATTEN: /* the same floats, another shape */
    case MODEL_RESHAPE:
      d->out[i] = in;
      continue;
    case MODEL_CONV2D:
    case MODEL_MAXPOOL:
    case MODEL_AVGPOOL:
    case MODEL_GAP:
    case MODEL_BATCHNORM:
      OP(dmodel_cnn_fwd(d, i, in, y, B, training));
      break;
    case MODEL_N_KINDS:
      break;
    case MODEL_DROPOUT:
      if (!(training && L->rate > 0)) { /* the identity */
        d->out[i] = in;
        continue;
      }
      OP(o->mul(k, y, in, d->mask[i], n));
      break;
    }
    d->out[i] = y;
    in = y;
  }
out:
  return result;
}

/* 4. Backward: d(scale * summed loss)/d(params). */
static ctrain_err step_backward(dmodel_t *d, const float *dx, const int32_t *dy, int B,
                                int training, float scale) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  const model_t *m = d->m;
  float *g = d->d0, *gn = d->d1;
  OP(o->ce_grad(k, d->probs, dy, B, m->n_classes, scale, g));
  for (int i = m->n_layers - 1; i >= d->first_param; i--) {
    const model_layer *L = &m->layers[i];
    const float *lin = i > 0 ? d->out[i - 1] : dx;
    size_t n = (size_t)B * (size_t)L->out;
    switch (L->kind) {
    case MODEL_DENSE:
      if (L->act != MODEL_SOFTMAX)
        OP(o->act_bwd(k, L->act, d->y[i], g, n));
      OP(o->gemm(k, 1, 0, L->in, L->out, B, 1.0f, lin, L->in, g, L->out, 0.0f, d->grads + L->w_off,
                 L->out));
      OP(o->bias_grad(k, d->grads + L->b_off, g, B, L->out));
      if (i > d->first_param) { /* the gradient of this layer's input */
        OP(o->gemm(k, 0, 1, B, L->in, L->out, 1.0f, g, L->out, d->params + L->w_off, L->out, 0.0f,
                   gn, L->in));
        float *t = g;
        g = gn;
        gn = t;
      }
      break;
    case MODEL_ACTIVATION:
      if (L->act != MODEL_SOFTMAX)
        OP(o->act_bwd(k, L->act, d->y[i], g, n));
      break;
    case MODEL_FLATTEN:
    case MODEL_RESHAPE:
    case MODEL_N_KINDS:
      break;
    case MODEL_DROPOUT:
      if (training && L->rate > 0)
        OP(o->mul(k, g, g, d->mask[i], n));
      break;
    default: { /* the CNN layers */
      OP(dmodel_cnn_bwd(d, i, lin, g, i > d->first_param ? gn : NULL, B));
      float *t = g;
      g = gn;
      gn = t;
    }
    }
    if (d->ready && model_layer_params(L) > 0 &&
        (result = d->ready(d->ready_ctx, model_layer_first_param(L), k->err, sizeof(k->err))))
      goto out;
  }
out:
  return result;
}

ctrain_err dmodel_step(dmodel_t *d, const float *x, const int32_t *labels, int B, int training,
                       rng_t *rng, float scale, int backward) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  const model_t *m = d->m;
  int slot = 0;
  const float *dx = NULL;
  const int32_t *dy = NULL;
  if (B < 1 || B > d->cap) {
    snprintf(k->err, sizeof(k->err), "dmodel: batch %d outside 1..%d", B, d->cap);
    return CTRAIN_E_INVAL;
  }
  OP(step_stage(d, x, labels, B, training, rng, &slot, &dx, &dy));
  OP(step_forward(d, dx, B, training));
  /* 3. Loss. */
  OP(o->softmax_ce(k, d->out[m->n_layers - 1], dy, B, m->n_classes, d->probs, d->stats));
  if (backward)
    OP(step_backward(d, dx, dy, B, training, scale));
  OP(o->release(k, slot));
out:
  return result;
}

ctrain_err dmodel_stats(dmodel_t *d, double *loss, long *correct) {
  double s[2];
  ctrain_err result = d->k->ops->d2h(d->k, s, d->stats, sizeof(s));
  if (result)
    return result;
  *loss = s[0];
  *correct = (long)s[1];
  return CTRAIN_OK;
}

ctrain_err dmodel_grads_to_host(dmodel_t *d, float *host) {
  return d->k->ops->d2h(d->k, host, d->grads, d->n_params * sizeof(float));
}

ctrain_err dmodel_grads_from_host(dmodel_t *d, const float *host) {
  ctrain_err result = d->k->ops->h2d(d->k, d->grads, host, d->n_params * sizeof(float));
  if (!result) /* the host buffer may be pageable and reused at once */
    result = d->k->ops->sync(d->k);
  return result;
}

ctrain_err dmodel_update(dmodel_t *d, optim_t *opt, float lr) {
  return optim_update(opt, d->k, d->params, d->grads, d->state, lr);
}

ctrain_err dmodel_update_with(dmodel_t *d, optim_t *opt, float lr, const float *grads) {
  return optim_update(opt, d->k, d->params, grads, d->state, lr);
}

float *dmodel_host_grads(dmodel_t *d) {
  return d->k->ops->is_device ? NULL : d->grads;
}

ctrain_err dmodel_use_grads(dmodel_t *d, float *grads) {
  if (d->k->ops->is_device) {
    snprintf(d->k->err, sizeof(d->k->err), "dmodel: host gradients on a %s backend",
             d->k->ops->name);
    return CTRAIN_E_UNSUPPORTED;
  }
  d->grads = grads ? grads : d->own_grads;
  return CTRAIN_OK;
}

void dmodel_set_bn_sync(dmodel_t *d, dmodel_sum_fn fn, void *ctx) {
  d->bn_sync = fn;
  d->bn_sync_ctx = ctx;
}

ctrain_err dmodel_set_grads_ready(dmodel_t *d, dmodel_ready_fn fn, void *ctx) {
  if (fn && d->k->ops->is_device) {
    snprintf(d->k->err, sizeof(d->k->err), "dmodel: gradients ready on a %s backend",
             d->k->ops->name);
    return CTRAIN_E_UNSUPPORTED;
  }
  d->ready = fn;
  d->ready_ctx = ctx;
  return CTRAIN_OK;
}

const char *dmodel_errmsg(const dmodel_t *d) {
  return kern_errmsg(d->k);
}
