/* dmodel_cnn.c - the forward and backward of Conv2D (the backend's direct
 * convolution where it has one, else im2col + its GEMM), pooling and batch normalization, as
 * kernels.h ops; see dmodel_internal.h. Batch normalization's statistics are synchronized over
 * every replica through d->bn_sync, on the host (a few floats a channel). */
#include "worker/model/dmodel_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kern_win win_of(const model_layer *L, int B) {
  kern_win g = {B, L->ih, L->iw, L->ic, L->kh, L->kw, L->sh, L->sw, L->pt, L->pl, L->h, L->w};
  return g;
}

/* Layer i is a BatchNormalization whose output only the pooling layer after
 * it reads, and the backend pools it without writing it (bn_pool_*): the
 * normalized tensor is never written, the pooling reads the normalization's
 * input. Not for a first layer (its input is the staged batch). */
static int bn_pool_fused(const dmodel_t *d, int i) {
  const kern_ops *o = d->k->ops;
  const model_t *m = d->m;
  if (d->unfused || !o->bn_pool_ok || i < 1 || i + 1 >= m->n_layers ||
      m->layers[i].kind != MODEL_BATCHNORM ||
      (m->layers[i + 1].kind != MODEL_MAXPOOL && m->layers[i + 1].kind != MODEL_AVGPOOL))
    return 0;
  kern_win g = win_of(&m->layers[i + 1], 1);
  return o->bn_pool_ok(d->k, &g);
}

/* BatchNormalization layer i's normalization: mean, inv (backend, from its
 * last forward), gamma and beta (NULL without scale, center). */
typedef struct {
  const float *mean, *inv, *gamma, *beta;
} bn_params;

static bn_params bn_params_of(const dmodel_t *d, int i) {
  const model_layer *L = &d->m->layers[i];
  const float *mean = d->bn + d->bn_off[i];
  bn_params p = {mean, mean + L->c, L->scale ? d->params + L->gamma_off : NULL,
                 L->center ? d->params + L->beta_off : NULL};
  return p;
}

/* Samples per im2col chunk of a Conv2D layer. */
static int conv_chunk(const model_layer *L, int B) {
  size_t per = (size_t)L->h * L->w * L->kh * L->kw * L->ic, n = DMODEL_COL_FLOATS / per;
  if (n < 1)
    n = 1;
  return n < (size_t)B ? (int)n : B;
}

static int needs_ops(const kern_ops *o, model_kind kind) {
  switch (kind) {
  case MODEL_CONV2D:
    return o->im2col && o->col2im;
  case MODEL_MAXPOOL:
  case MODEL_AVGPOOL:
  case MODEL_GAP:
    return o->pool_fwd && o->pool_bwd;
  case MODEL_BATCHNORM:
    return o->chan_sums && o->bn_fwd && o->bn_bwd_sums && o->bn_bwd;
  default:
    return 1;
  }
}

ctrain_err dmodel_cnn_alloc(dmodel_t *d, int cap) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const model_t *m = d->m;
  size_t bn = 0, maxc = 0, kept = 0;
  if (!(d->bn_off = calloc((size_t)m->n_layers, sizeof(size_t))) ||
      !(d->bn_n = calloc((size_t)m->n_layers, sizeof(float))) ||
      !(d->col_kept = calloc((size_t)m->n_layers, sizeof(float *))) ||
      !(d->col_kept_in = calloc((size_t)m->n_layers, sizeof(float *))) ||
      !(d->col_kept_b = calloc((size_t)m->n_layers, sizeof(int)))) {
    snprintf(k->err, sizeof(k->err), "dmodel: out of memory");
    return CTRAIN_E_NOMEM;
  }
  for (int i = 0; i < m->n_layers; i++) {
    const model_layer *L = &m->layers[i];
    if (!needs_ops(k->ops, L->kind)) {
      snprintf(k->err, sizeof(k->err),
               "the %s backend has no kernels for layer %s (%s) yet: train this model on the CPU "
               "(replicas cpu:N)",
               k->ops->name, L->name, L->kind == MODEL_CONV2D ? "Conv2D" : "pooling/normalization");
      return CTRAIN_E_UNSUPPORTED;
    }
    if (L->kind == MODEL_CONV2D) {
      int ch = conv_chunk(L, cap);
      size_t n = (size_t)ch * L->h * L->w * L->kh * L->kw * L->ic;
      d->col_floats = n > d->col_floats ? n : d->col_floats;
      if (ch == cap && kept + n <= DMODEL_COL_KEPT) {
        OP(k->ops->alloc(k, (void **)&d->col_kept[i], n * sizeof(float)));
        kept += n;
      }
    }
    if (L->kind == MODEL_BATCHNORM) {
      d->bn_off[i] = bn;
      bn += 2 * (size_t)L->c;
      maxc = (size_t)L->c > maxc ? (size_t)L->c : maxc;
    }
  }
  d->bn_scratch = bn;
  d->dx_block = DMODEL_DX_BLOCK;
  if (d->col_floats)
    OP(k->ops->alloc(k, (void **)&d->col, d->col_floats * sizeof(float)));
  if (maxc) {
    OP(k->ops->alloc(k, (void **)&d->bn, (bn + 2 * maxc) * sizeof(float)));
    if (!(d->bn_host = calloc(5 * maxc + 2, sizeof(float)))) {
      snprintf(k->err, sizeof(k->err), "dmodel: out of memory");
      return CTRAIN_E_NOMEM;
    }
  }
out:
  return result;
}

void dmodel_cnn_free(dmodel_t *d) {
  for (int i = 0; d->col_kept && i < d->m->n_layers; i++)
    d->k->ops->free(d->k, d->col_kept[i]);
  free(d->col_kept);
  free(d->col_kept_in);
  free(d->col_kept_b);
  d->k->ops->free(d->k, d->col);
  d->k->ops->free(d->k, d->bn);
  free(d->bn_off);
  free(d->bn_n);
  free(d->bn_host);
}

/* Layer i keeps its patches of a whole batch of B from its forward for its
 * backward: the buffer, or NULL when the batch is more than one chunk or
 * the layer has none. */
static float *kept_col(const dmodel_t *d, int i, int B) {
  return conv_chunk(&d->m->layers[i], B) >= B ? d->col_kept[i] : NULL;
}

/* Layer i runs without patches (the backend's direct convolution) at batch
 * B. */
static int conv_direct(dmodel_t *d, const model_layer *L, int B) {
  kern_win g = win_of(L, B);
  return !d->conv_gemm && d->k->ops->conv_direct && d->k->ops->conv_direct(d->k, &g, L->c);
}

/* The forward through patches: im2col a chunk of the batch at a time, then
 * the GEMM onto the bias. */
static ctrain_err conv_fwd_patches(dmodel_t *d, int i, const float *in, float *y, int B) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  const model_layer *L = &d->m->layers[i];
  int K = L->kh * L->kw * L->ic, ch = conv_chunk(L, B), hw = L->h * L->w;
  float *keep = kept_col(d, i, B), *col = keep ? keep : d->col;
  for (int c0 = 0; c0 < B; c0 += ch) {
    int n = B - c0 < ch ? B - c0 : ch;
    kern_win g = win_of(L, n);
    float *yc = y + (size_t)c0 * L->out;
    OP(o->im2col(k, &g, in + (size_t)c0 * L->in, col));
    if (L->use_bias)
      OP(o->bias_fill(k, yc, d->params + L->b_off, n * hw, L->c));
    OP(o->gemm(k, 0, 0, n * hw, L->c, K, 1.0f, col, K, d->params + L->w_off, L->c,
               L->use_bias ? 1.0f : 0.0f, yc, L->c));
  }
  if (keep) {
    d->col_kept_in[i] = in;
    d->col_kept_b[i] = B;
  }
out:
  return result;
}

static ctrain_err conv_fwd(dmodel_t *d, int i, const float *in, float *y, int B) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const model_layer *L = &d->m->layers[i];
  kern_win g = win_of(L, B);
  d->col_kept_in[i] = NULL;
  int relu = 0;
  if (conv_direct(d, L, B)) {
    relu = L->act == MODEL_RELU;
    OP(k->ops->conv_fwd(k, &g, in, d->params + L->w_off, L->use_bias ? d->params + L->b_off : NULL,
                        L->c, relu, y));
  } else {
    OP(conv_fwd_patches(d, i, in, y, B));
  }
  if (!relu)
    OP(k->ops->act_fwd(k, L->act, y, (size_t)B * L->out));
out:
  return result;
}

/* g: d(loss)/d(y) with the activation's factor applied. The patches of in
 * are the forward's when it kept them for this input and batch (the same
 * floats: im2col of the same input), else built again. */
static ctrain_err conv_bwd(dmodel_t *d, int i, const float *in, const float *g, float *dx, int B,
                           int bias_done) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  const model_layer *L = &d->m->layers[i];
  int K = L->kh * L->kw * L->ic, ch = conv_chunk(L, B), hw = L->h * L->w;
  float *keep = kept_col(d, i, B);
  int have = keep && d->col_kept_in[i] == in && d->col_kept_b[i] == B;
  d->col_kept_in[i] = NULL;
  if (L->use_bias && !bias_done)
    OP(o->bias_grad(k, d->grads + L->b_off, g, B * hw, L->c));
  if (conv_direct(d, L, B)) {
    kern_win w = win_of(L, B);
    OP(o->conv_dw(k, &w, in, g, L->c, d->grads + L->w_off));
    if (dx)
      OP(o->conv_dx(k, &w, g, d->params + L->w_off, L->c, dx));
    goto out;
  }
  for (int c0 = 0; c0 < B; c0 += ch) {
    int n = B - c0 < ch ? B - c0 : ch;
    kern_win w = win_of(L, n);
    const float *gc = g + (size_t)c0 * L->out;
    if (!have)
      OP(o->im2col(k, &w, in + (size_t)c0 * L->in, d->col));
    OP(o->gemm(k, 1, 0, K, L->c, n * hw, 1.0f, have ? keep : d->col, K, gc, L->c, c0 ? 1.0f : 0.0f,
               d->grads + L->w_off, L->c));
    if (!dx)
      continue;
    /* On the CPU, dx image block by image block, so that the patches'
     * gradient is turned into dx while it is in cache (a block per OpenBLAS
     * thread); each of its rows is the same dot products as in one GEMM of
     * the chunk, so the same floats. */
    int sub = o->is_device
                  ? n
                  : (int)(d->dx_block * (size_t)kern_cpu_blas_threads_now() / ((size_t)hw * K));
    sub = sub < 1 ? 1 : sub > n ? n : sub;
    for (int s0 = 0; s0 < n; s0 += sub) {
      int ns = n - s0 < sub ? n - s0 : sub;
      kern_win ws = win_of(L, ns);
      OP(o->gemm(k, 0, 1, ns * hw, K, L->c, 1.0f, gc + (size_t)s0 * L->out, L->c,
                 d->params + L->w_off, L->c, 0.0f, d->col, K));
      OP(o->col2im(k, &ws, d->col, dx + (size_t)(c0 + s0) * L->in));
    }
  }
out:
  return result;
}

/* v (n host floats) summed over every replica, when there are others. */
static ctrain_err bn_allsum(dmodel_t *d, const model_layer *L, float *v, size_t n) {
  char why[320] = ""; /* with the layer name, fits k->err */
  ctrain_err result = d->bn_sync ? d->bn_sync(d->bn_sync_ctx, v, n, why, sizeof(why)) : CTRAIN_OK;
  if (result)
    snprintf(d->k->err, sizeof(d->k->err),
             "synchronizing the batch statistics of layer %s over the replicas: %s", L->name,
             why[0] ? why : ctrain_strerror(result));
  return result;
}

/* mean, inv (backend) of layer i from this batch, over every replica; the
 * moving statistics follow them (Keras 3: the biased variance). */
static ctrain_err bn_batch_stats(dmodel_t *d, int i, const float *in, int rows) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  const model_layer *L = &d->m->layers[i];
  int C = L->c;
  float *mean = d->bn + d->bn_off[i], *inv = mean + C, *scr = d->bn + d->bn_scratch;
  float *h = d->bn_host, *hm = h + C + 1, *hi = hm + C, *mov = hi + C, mo = L->momentum;
  OP(o->chan_sums(k, in, NULL, rows, C, scr));
  OP(o->d2h(k, h, scr, (size_t)C * sizeof(float)));
  h[C] = (float)rows;
  OP(bn_allsum(d, L, h, (size_t)C + 1));
  float N = d->bn_n[i] = h[C];
  for (int c = 0; c < C; c++)
    hm[c] = h[c] / N;
  OP(o->h2d(k, mean, hm, (size_t)C * sizeof(float)));
  OP(o->chan_sums(k, in, mean, rows, C, scr));
  OP(o->d2h(k, h, scr, (size_t)C * sizeof(float)));
  OP(bn_allsum(d, L, h, (size_t)C));
  OP(o->d2h(k, mov, d->params + L->mean_off, 2 * (size_t)C * sizeof(float)));
  for (int c = 0; c < C; c++) {
    float var = h[c] / N;
    hi[c] = 1.0f / sqrtf(var + L->epsilon);
    mov[c] = mov[c] * mo + hm[c] * (1.0f - mo);
    mov[C + c] = mov[C + c] * mo + var * (1.0f - mo);
  }
  OP(o->h2d(k, inv, hi, (size_t)C * sizeof(float)));
  OP(o->h2d(k, d->params + L->mean_off, mov, 2 * (size_t)C * sizeof(float)));
out:
  return result;
}

/* mean, inv (backend) of layer i from its moving statistics. */
static ctrain_err bn_moving_stats(dmodel_t *d, int i) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = d->k;
  const model_layer *L = &d->m->layers[i];
  int C = L->c;
  float *h = d->bn_host;
  OP(k->ops->d2h(k, h, d->params + L->mean_off, 2 * (size_t)C * sizeof(float)));
  for (int c = 0; c < C; c++)
    h[C + c] = 1.0f / sqrtf(h[C + c] + L->epsilon);
  OP(k->ops->h2d(k, d->bn + d->bn_off[i], h, 2 * (size_t)C * sizeof(float)));
out:
  return result;
}

static ctrain_err bn_fwd(dmodel_t *d, int i, const float *in, float *y, int B, int training) {
  ctrain_err result = CTRAIN_OK;
  const model_layer *L = &d->m->layers[i];
  int rows = B * (L->out / L->c);
  OP(training ? bn_batch_stats(d, i, in, rows) : bn_moving_stats(d, i));
  if (bn_pool_fused(d, i))
    goto out; /* the pooling after it normalizes as it reads */
  bn_params p = bn_params_of(d, i);
  OP(d->k->ops->bn_fwd(d->k, in, rows, L->c, p.mean, p.inv, p.gamma, p.beta, y));
out:
  return result;
}

/* gamma, beta's gradients (this replica's sums, all-reduced with the
 * others'), 0 for the moving statistics, and dx: with batch statistics its
 * sums run over every replica, with moving ones (a backward after an
 * evaluation forward) dx = gamma * inv * g. */
static ctrain_err bn_bwd(dmodel_t *d, int i, const float *in, const float *g, float *dx, int B) {
  const model_layer *L = &d->m->layers[i];
  int C = L->c, rows = B * (L->out / L->c);
  float *mean = d->bn + d->bn_off[i], *scr = d->bn + d->bn_scratch, n = d->bn_n[i];
  kern_t *k = d->k;
  const kern_ops *o = k->ops;
  ctrain_err result = CTRAIN_OK;
  OP(o->bn_bwd_sums(k, in, g, rows, C, mean, mean + C, scr));
  if (L->scale)
    OP(o->copy(k, d->grads + L->gamma_off, scr + C, (size_t)C));
  if (L->center)
    OP(o->copy(k, d->grads + L->beta_off, scr, (size_t)C));
  OP(o->memset0(k, d->grads + L->mean_off, 2 * (size_t)C * sizeof(float)));
  if (!dx)
    goto out;
  if (!d->training) {
    OP(o->memset0(k, scr, 2 * (size_t)C * sizeof(float)));
    n = 1;
  } else if (d->bn_sync) {
    OP(o->d2h(k, d->bn_host, scr, 2 * (size_t)C * sizeof(float)));
    OP(bn_allsum(d, L, d->bn_host, 2 * (size_t)C));
    OP(o->h2d(k, scr, d->bn_host, 2 * (size_t)C * sizeof(float)));
  }
  OP(o->bn_bwd(k, in, g, rows, C, mean, mean + C, L->scale ? d->params + L->gamma_off : NULL, scr,
               n, dx));
out:
  return result;
}

ctrain_err dmodel_cnn_fwd(dmodel_t *d, int i, const float *in, float *y, int B, int training) {
  const model_layer *L = &d->m->layers[i];
  kern_win g = win_of(L, B);
  d->training = training;
  switch (L->kind) {
  case MODEL_CONV2D:
    return conv_fwd(d, i, in, y, B);
  case MODEL_MAXPOOL:
  case MODEL_AVGPOOL:
    if (bn_pool_fused(d, i - 1)) { /* the pooling's input is the normalization's */
      bn_params p = bn_params_of(d, i - 1);
      return d->k->ops->bn_pool_fwd(d->k, &g, L->kind == MODEL_MAXPOOL, d->out[i - 2], p.mean,
                                    p.inv, p.gamma, p.beta, y);
    }
    return d->k->ops->pool_fwd(d->k, &g, L->kind == MODEL_MAXPOOL, in, y);
  case MODEL_GAP:
    return d->k->ops->pool_fwd(d->k, &g, 0, in, y);
  case MODEL_BATCHNORM:
    return bn_fwd(d, i, in, y, B, training);
  default:
    snprintf(d->k->err, sizeof(d->k->err), "dmodel: layer %s is not a CNN layer", L->name);
    return CTRAIN_E_INVAL;
  }
}

ctrain_err dmodel_cnn_bwd(dmodel_t *d, int i, const float *in, float *g, float *dx, int B) {
  ctrain_err result = CTRAIN_OK;
  const model_layer *L = &d->m->layers[i];
  kern_win w = win_of(L, B);
  switch (L->kind) {
  case MODEL_CONV2D:
    if (L->act == MODEL_RELU && L->use_bias && d->k->ops->relu_bias_grad && !d->unfused) {
      OP(d->k->ops->relu_bias_grad(d->k, d->y[i], g, B * L->h * L->w, L->c, d->grads + L->b_off));
      return conv_bwd(d, i, in, g, dx, B, 1);
    }
    OP(d->k->ops->act_bwd(d->k, L->act, d->y[i], g, (size_t)B * L->out));
    return conv_bwd(d, i, in, g, dx, B, 0);
  case MODEL_MAXPOOL:
  case MODEL_AVGPOOL:
    if (dx && bn_pool_fused(d, i - 1)) {
      bn_params p = bn_params_of(d, i - 1);
      return d->k->ops->bn_pool_bwd(d->k, &w, L->kind == MODEL_MAXPOOL, d->out[i - 2], p.mean,
                                    p.inv, p.gamma, p.beta, g, dx);
    }
    return dx ? d->k->ops->pool_bwd(d->k, &w, L->kind == MODEL_MAXPOOL, in, g, dx) : CTRAIN_OK;
  case MODEL_GAP:
    return dx ? d->k->ops->pool_bwd(d->k, &w, 0, in, g, dx) : CTRAIN_OK;
  case MODEL_BATCHNORM:
    return bn_bwd(d, i, in, g, dx, B);
  default:
    snprintf(d->k->err, sizeof(d->k->err), "dmodel: layer %s is not a CNN layer", L->name);
    return CTRAIN_E_INVAL;
  }
out:
  return result;
}
