/* test_model_cnn.c - the CNN layers (Conv2D, MaxPooling2D, AveragePooling2D,
 * GlobalAveragePooling2D, BatchNormalization, Reshape) on the CPU reference
 * backend: every layer's gradient against central finite differences,
 * through the loss as training runs it; the forward against direct loops
 * written from Keras' definitions (HWIO kernel, TensorFlow's 'same'
 * padding); batch normalization's moving statistics and its synchronized
 * statistics (two half-batch replicas summing through the hook equal one
 * whole batch). */
#include "test.h"

#include <pthread.h>
#include <string.h>

#include "worker/model/dmodel.h"
#include "worker/model/dmodel_internal.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"

#include "test_cpu_model.h"

/* d(0.5 * loss)/d(params) against central differences of step h for every
 * parameter (the moving statistics: exactly 0), with Conv2D on the patches
 * path (gemm 1) or the backend's direct convolution where it has one. */
static void check_gradients_on(const char *json, int B, float h, int gemm) {
  cpu_model c;
  kern_cpu_blas_threads(1); /* the direct convolution is the one-thread path */
  cpu_open(&c, build(json), B);
  c.d->conv_gemm = gemm;
  model_t *m = c.m;
  float *x = calloc((size_t)B * m->input_dim, sizeof(float));
  int32_t *y = calloc((size_t)B, sizeof(int32_t));
  float *grads = calloc(m->n_params, sizeof(float));
  ASSERT(x && y && grads);
  random_batch(m, B, 3, x, y);
  rng_t r;
  rng_seed(&r, 5, 0);
  model_init(m, 11);
  for (size_t k = 0; k < m->n_params; k++) /* non-zero biases, gamma != 1 too */
    m->params[k] += (rng_uniform(&r) - 0.5f) * 0.2f;
  loss_at(&c, x, y, B, 0.5f, grads);
  size_t nonzero = 0;
  for (size_t k = 0; k < m->n_params; k++) {
    float save = m->params[k];
    m->params[k] = save + h;
    double lp = loss_at(&c, x, y, B, 1, NULL);
    m->params[k] = save - h;
    double lm = loss_at(&c, x, y, B, 1, NULL);
    m->params[k] = save;
    double num = 0.5 * (lp - lm) / (2.0 * h);
    if (fabs(grads[k] - num) > 2e-3 + 2e-2 * fabs(num))
      TEST_FAIL_("param %zu of %zu: analytic %.6g, numeric %.6g", k, m->n_params, grads[k], num);
    nonzero += grads[k] != 0;
  }
  ASSERT_GT(nonzero, m->n_params / 2);
  free(x);
  free(y);
  free(grads);
  cpu_close(&c);
}

static void check_gradients(const char *json, int B, float h) {
  check_gradients_on(json, B, h, 1);
  check_gradients_on(json, B, h, 0);
}

/* 'same' padding with strides 2 x 1 and a 3 x 2 kernel on a 6 x 5 x 2 image. */
TEST(grad_conv_same_strided) {
  check_gradients("{\"input_shape\":[6,5,2],\"layers\":["
                  "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":[3,2],\"strides\":[2,1],"
                  "\"padding\":\"same\",\"activation\":\"tanh\"},"
                  "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
                  4, 1e-2f);
}

/* Conv (valid, no bias) -> MaxPooling2D (same: a padded last row/column) ->
 * Conv: the pooling's input gradient reaches the first kernel. A smaller
 * step: at 1e-2 a window's maximum changes hands for one weight (the
 * difference then crosses the kink; it converges to the analytic value as
 * the step shrinks). */
TEST(grad_conv_maxpool_conv) {
  check_gradients(
      "{\"input_shape\":[7,7,1],\"layers\":["
      "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,\"use_bias\":false,"
      "\"activation\":\"tanh\"},"
      "{\"type\":\"MaxPooling2D\",\"pool_size\":2,\"padding\":\"same\"},"
      "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":2,\"activation\":\"sigmoid\"},"
      "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
      3, 3e-4f);
}

/* AveragePooling2D (same, stride 1: windows cut by the border) and
 * GlobalAveragePooling2D. */
TEST(grad_avgpool_gap) {
  check_gradients("{\"input_shape\":[5,6,2],\"layers\":["
                  "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"padding\":\"same\","
                  "\"activation\":\"tanh\"},"
                  "{\"type\":\"AveragePooling2D\",\"pool_size\":[2,3],\"strides\":1,"
                  "\"padding\":\"same\"},"
                  "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":2,\"activation\":\"tanh\"},"
                  "{\"type\":\"GlobalAveragePooling2D\"},{\"type\":\"Dense\",\"units\":3}]}",
                  3, 1e-2f);
}

/* 2x2 pooling windows that tile the image (kernels_cpu_cnn.c's pool_*_2x2
 * path), max and mean, after a conv. */
TEST(grad_pool_2x2_tiles) {
  check_gradients("{\"input_shape\":[6,4,2],\"layers\":["
                  "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"padding\":\"same\","
                  "\"activation\":\"tanh\"},{\"type\":\"MaxPooling2D\"},"
                  "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":1,\"activation\":\"tanh\"},"
                  "{\"type\":\"AveragePooling2D\"},"
                  "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
                  3, 3e-4f);
}

/* BatchNormalization on an image (batch statistics over B*h*w rows), with
 * gamma and beta, and without either; then after a Dense (rows = B). */
TEST(grad_batchnorm) {
  check_gradients("{\"input_shape\":[4,4,2],\"layers\":["
                  "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"padding\":\"same\","
                  "\"use_bias\":false},"
                  "{\"type\":\"BatchNormalization\",\"momentum\":0.9},"
                  "{\"type\":\"Activation\",\"activation\":\"tanh\"},"
                  "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":2},"
                  "{\"type\":\"BatchNormalization\",\"center\":false,\"scale\":false},"
                  "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
                  4, 1e-2f);
  check_gradients("{\"input_shape\":[6],\"layers\":[{\"type\":\"Dense\",\"units\":5},"
                  "{\"type\":\"BatchNormalization\",\"epsilon\":0.01},"
                  "{\"type\":\"Activation\",\"activation\":\"sigmoid\"},"
                  "{\"type\":\"Dense\",\"units\":3}]}",
                  6, 1e-2f);
}

/* Reshape (with -1) from a flat input into an image and back. */
TEST(grad_reshape) {
  check_gradients("{\"input_shape\":[12],\"layers\":["
                  "{\"type\":\"Reshape\",\"target_shape\":[2,-1,2]},"
                  "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":2,\"activation\":\"tanh\"},"
                  "{\"type\":\"Reshape\",\"target_shape\":[4]},"
                  "{\"type\":\"Dense\",\"units\":3}]}",
                  4, 1e-2f);
}

/* --- forward against direct loops ------------------------------------- */

/* TensorFlow's output size and leading padding for one axis. */
static int tf_axis(int in, int k, int s, int same, int *pad) {
  int out = same ? (in + s - 1) / s : (in - k) / s + 1;
  int total = (out - 1) * s + k - in;
  *pad = same && total > 0 ? total / 2 : 0;
  return out;
}

typedef struct {
  int H, W, C;
} shape3;

/* y[oh][ow][f] = b[f] + sum_{i,j,c} x[oh*sh+i-pt][ow*sw+j-pl][c] w[i][j][c][f]. */
static shape3 ref_conv(const float *x, shape3 in, const float *w, const float *b, int F, int kh,
                       int kw, int sh, int sw, int same, float *y) {
  int pt, pl, OH = tf_axis(in.H, kh, sh, same, &pt), OW = tf_axis(in.W, kw, sw, same, &pl);
  for (int oh = 0; oh < OH; oh++)
    for (int ow = 0; ow < OW; ow++)
      for (int f = 0; f < F; f++) {
        double s = b ? b[f] : 0;
        for (int i = 0; i < kh; i++)
          for (int j = 0; j < kw; j++)
            for (int c = 0; c < in.C; c++) {
              int ih = oh * sh + i - pt, iw = ow * sw + j - pl;
              if (ih >= 0 && ih < in.H && iw >= 0 && iw < in.W)
                s += (double)x[(ih * in.W + iw) * in.C + c] * w[((i * kw + j) * in.C + c) * F + f];
            }
        y[(oh * OW + ow) * F + f] = (float)s;
      }
  return (shape3){OH, OW, F};
}

/* Max or mean over the window's positions inside the image. */
static shape3 ref_pool(const float *x, shape3 in, int k, int s, int same, int max, float *y) {
  int pt, pl, OH = tf_axis(in.H, k, s, same, &pt), OW = tf_axis(in.W, k, s, same, &pl);
  for (int oh = 0; oh < OH; oh++)
    for (int ow = 0; ow < OW; ow++)
      for (int c = 0; c < in.C; c++) {
        double acc = max ? -INFINITY : 0;
        int n = 0;
        for (int i = 0; i < k; i++)
          for (int j = 0; j < k; j++) {
            int ih = oh * s + i - pt, iw = ow * s + j - pl;
            if (ih < 0 || ih >= in.H || iw < 0 || iw >= in.W)
              continue;
            double v = x[(ih * in.W + iw) * in.C + c];
            acc = max ? fmax(acc, v) : acc + v;
            n++;
          }
        y[(oh * OW + ow) * in.C + c] = (float)(max ? acc : acc / n);
      }
  return (shape3){OH, OW, in.C};
}

/* Cross-entropy of logits = dense(feat) against label y. */
static double ref_ce(const float *feat, int n, const float *w, const float *b, int classes,
                     int32_t y) {
  double z[16], mx = -INFINITY, sum = 0;
  for (int k = 0; k < classes; k++) {
    z[k] = b[k];
    for (int i = 0; i < n; i++)
      z[k] += (double)feat[i] * w[i * classes + k];
    mx = fmax(mx, z[k]);
  }
  for (int k = 0; k < classes; k++)
    sum += exp(z[k] - mx);
  return mx + log(sum) - z[y];
}

/* Input (H, W, C) -> Conv2D(F, k, s, padding, no activation) -> pooling
 * (pk, ps, padding, max or mean; pk 0: none, -1: global average) -> Flatten
 * -> Dense(3): the dmodel's summed loss against the direct loops'. */
typedef struct {
  shape3 in;
  int F, k, s, same;
  int pk, ps, psame, pmax;
  int B;
} conv_case;

static void check_forward(const conv_case *t) {
  char json[1024], pool[256] = "";
  if (t->pk > 0)
    snprintf(
        pool, sizeof(pool), "{\"type\":\"%s\",\"pool_size\":%d,\"strides\":%d,\"padding\":\"%s\"},",
        t->pmax ? "MaxPooling2D" : "AveragePooling2D", t->pk, t->ps, t->psame ? "same" : "valid");
  else if (t->pk < 0)
    snprintf(pool, sizeof(pool), "{\"type\":\"GlobalAveragePooling2D\"},");
  snprintf(json, sizeof(json),
           "{\"input_shape\":[%d,%d,%d],\"layers\":[{\"type\":\"Conv2D\",\"filters\":%d,"
           "\"kernel_size\":%d,\"strides\":%d,\"padding\":\"%s\"},%s{\"type\":\"Flatten\"},"
           "{\"type\":\"Dense\",\"units\":3}]}",
           t->in.H, t->in.W, t->in.C, t->F, t->k, t->s, t->same ? "same" : "valid", pool);
  cpu_model c;
  cpu_open(&c, build(json), t->B);
  model_t *m = c.m;
  const model_layer *conv = &m->layers[0], *dense = &m->layers[m->n_layers - 1];
  float *x = calloc((size_t)t->B * m->input_dim, sizeof(float));
  int32_t *y = calloc((size_t)t->B, sizeof(int32_t));
  float *a = calloc((size_t)conv->out, sizeof(float)),
        *p = calloc((size_t)conv->out, sizeof(float));
  ASSERT(x && y && a && p);
  random_batch(m, t->B, 9, x, y);
  model_init(m, 4);
  rng_t r;
  rng_seed(&r, 8, 0);
  for (size_t k = 0; k < m->n_params; k++)
    m->params[k] += (rng_uniform(&r) - 0.5f) * 0.2f;
  double want = 0;
  for (int b = 0; b < t->B; b++) {
    shape3 s = ref_conv(x + (size_t)b * m->input_dim, t->in, m->params + conv->w_off,
                        m->params + conv->b_off, t->F, t->k, t->k, t->s, t->s, t->same, a);
    const float *feat = a;
    if (t->pk > 0)
      s = ref_pool(a, s, t->pk, t->ps, t->psame, t->pmax, p), feat = p;
    if (t->pk < 0) {
      for (int f = 0; f < s.C; f++) {
        double acc = 0;
        for (int q = 0; q < s.H * s.W; q++)
          acc += a[q * s.C + f];
        p[f] = (float)(acc / (s.H * s.W));
      }
      s = (shape3){1, 1, s.C}, feat = p;
    }
    ASSERT_EQ(s.H * s.W * s.C, dense->in);
    want += ref_ce(feat, dense->in, m->params + dense->w_off, m->params + dense->b_off, 3, y[b]);
  }
  double got = loss_at(&c, x, y, t->B, 1, NULL);
  ASSERT_NEAR(got, want, 1e-4 * fabs(want) + 1e-5);
  free(x);
  free(y);
  free(a);
  free(p);
  cpu_close(&c);
}

TEST(forward_matches_direct_loops) {
  /* same, strided; max pooling 3/2 same (windows cut at the border) */
  conv_case a = {{7, 6, 3}, 4, 3, 2, 1, 3, 2, 1, 1, 3};
  check_forward(&a);
  /* valid; average pooling 2/2 same on an odd size */
  conv_case b = {{9, 9, 2}, 3, 4, 1, 0, 2, 2, 1, 0, 2};
  check_forward(&b);
  /* valid max pooling, 1x1 kernel */
  conv_case c = {{6, 8, 2}, 5, 1, 1, 0, 2, 2, 0, 1, 2};
  check_forward(&c);
  /* 64x64x8 with a 3x3 kernel: 294912 patch floats a sample, so a batch of
   * 20 is built in chunks (DMODEL_COL_FLOATS); global average pooling */
  conv_case d = {{64, 64, 8}, 2, 3, 1, 1, -1, 0, 0, 0, 20};
  check_forward(&d);
}

/* Two gradient runs of one model on one random batch: the model, the batch
 * and two gradient buffers (a, b) to compare. */
typedef struct {
  cpu_model c;
  float *x, *a, *b;
  int32_t *y;
} grad_pair;

static void pair_open(grad_pair *p, const char *json, int B, uint64_t init, uint64_t data) {
  cpu_open(&p->c, build(json), B);
  p->c.d->conv_gemm = 1; /* these tests are of the patches path */
  model_init(p->c.m, init);
  p->x = calloc((size_t)B * p->c.m->input_dim, sizeof(float));
  p->y = calloc((size_t)B, sizeof(int32_t));
  p->a = calloc(p->c.m->n_params, sizeof(float));
  p->b = calloc(p->c.m->n_params, sizeof(float));
  ASSERT(p->x && p->y && p->a && p->b);
  random_batch(p->c.m, B, data, p->x, p->y);
}

static int pair_same(const grad_pair *p) {
  return memcmp(p->a, p->b, p->c.m->n_params * sizeof(float)) == 0;
}

static void pair_close(grad_pair *p) {
  free(p->x);
  free(p->y);
  free(p->a);
  free(p->b);
  cpu_close(&p->c);
}

/* A Conv2D layer's backward takes the patches its forward kept (dmodel's
 * col_kept) or builds them again: the gradients are the same floats either
 * way, for two conv layers (the second's input is the first's pooled
 * output), and a second backward without a forward builds them again. */
TEST(kept_patches_change_nothing) {
  enum { B = 6 };
  grad_pair p;
  pair_open(&p,
            "{\"input_shape\":[9,8,2],\"layers\":["
            "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,\"padding\":\"same\","
            "\"activation\":\"relu\"},{\"type\":\"MaxPooling2D\"},"
            "{\"type\":\"Conv2D\",\"filters\":5,\"kernel_size\":[2,3]},"
            "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
            B, 4, 9);
  int n_kept = 0;
  for (int i = 0; i < p.c.m->n_layers; i++)
    n_kept += p.c.d->col_kept[i] != NULL;
  ASSERT_EQ(n_kept, 2);
  loss_at(&p.c, p.x, p.y, B, 1, p.a);
  for (int i = 0; i < p.c.m->n_layers; i++) {
    p.c.k->ops->free(p.c.k, p.c.d->col_kept[i]);
    p.c.d->col_kept[i] = NULL;
  }
  loss_at(&p.c, p.x, p.y, B, 1, p.b);
  ASSERT(pair_same(&p));
  pair_close(&p);
}

/* On the CPU a Conv2D layer turns its patch gradient into dx a block of
 * images at a time (dmodel's dx_block): any block gives the same floats as
 * one block for the whole batch, down to one image a block with a short
 * last block (B = 5 in blocks of 2). */
TEST(dx_blocks_change_nothing) {
  enum { B = 5 };
  grad_pair p;
  pair_open(&p,
            "{\"input_shape\":[9,8,2],\"layers\":["
            "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":3,\"padding\":\"same\","
            "\"activation\":\"relu\"},"
            "{\"type\":\"Conv2D\",\"filters\":5,\"kernel_size\":[2,3],\"strides\":[2,1]},"
            "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
            B, 6, 13);
  const model_layer *L = &p.c.m->layers[1]; /* the conv whose dx is needed */
  size_t per_image = (size_t)L->h * L->w * L->kh * L->kw * L->ic;
  size_t blocks[] = {per_image * 2, per_image, 1};
  p.c.d->dx_block = per_image * B * 64; /* one block */
  loss_at(&p.c, p.x, p.y, B, 1, p.a);
  for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
    size_t per_thread = blocks[i] / (size_t)kern_cpu_blas_threads_now();
    p.c.d->dx_block = per_thread ? per_thread : 1;
    loss_at(&p.c, p.x, p.y, B, 1, p.b);
    printf("# dx blocks of %zu floats: %s\n", blocks[i],
           pair_same(&p) ? "the same floats" : "differ");
    ASSERT(pair_same(&p));
  }
  pair_close(&p);
}

/* --- batch normalization ----------------------------------------------- */

/* BatchNormalization followed by 2x2 pooling that tiles the image: the CPU
 * backend pools the normalization's input, normalized as it is read
 * (bn_pool_*), without writing the normalized tensor. The loss and every
 * gradient are the same floats as with the two ops apart, for max and mean
 * pooling, with gamma and beta and without; and the normalized tensor's
 * buffer is indeed left unwritten. */
TEST(bn_pool_fused_changes_nothing) {
  enum { B = 4 };
  grad_pair p;
  pair_open(&p,
            "{\"input_shape\":[8,8,2],\"layers\":["
            "{\"type\":\"Conv2D\",\"filters\":5,\"kernel_size\":3,\"padding\":\"same\","
            "\"activation\":\"relu\"},{\"type\":\"BatchNormalization\"},"
            "{\"type\":\"MaxPooling2D\"},"
            "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"padding\":\"same\"},"
            "{\"type\":\"BatchNormalization\",\"center\":false,\"scale\":false},"
            "{\"type\":\"AveragePooling2D\"},"
            "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
            B, 5, 17);
  rng_t r;
  rng_seed(&r, 3, 0);
  for (size_t i = 0; i < p.c.m->n_params; i++) /* gamma, beta away from 1, 0 */
    p.c.m->params[i] += (rng_uniform(&r) - 0.5f) * 0.4f;
  p.c.d->unfused = 1;
  double la = loss_at(&p.c, p.x, p.y, B, 1, p.a);
  p.c.d->unfused = 0;
  size_t n1 = (size_t)B * p.c.m->layers[1].out, n4 = (size_t)B * p.c.m->layers[4].out;
  float *y1 = p.c.d->y[1], *y4 = p.c.d->y[4];
  for (size_t i = 0; i < n1; i++) /* the fused path writes neither */
    y1[i] = 7.0f;
  for (size_t i = 0; i < n4; i++)
    y4[i] = 7.0f;
  double lb = loss_at(&p.c, p.x, p.y, B, 1, p.b);
  ASSERT(la == lb);
  ASSERT(pair_same(&p));
  ASSERT(y1[0] == 7.0f && y1[n1 - 1] == 7.0f && y4[0] == 7.0f && y4[n4 - 1] == 7.0f);
  pair_close(&p);
}

/* A Conv2D's ReLU and bias gradients in one pass (relu_bias_grad): the loss
 * and every gradient are the same floats as act_bwd then bias_grad, for
 * filter counts in and past a vector (3, 16, 33), with and without a dx. */
TEST(relu_bias_grad_fused_changes_nothing) {
  enum { B = 3 };
  grad_pair p;
  pair_open(&p,
            "{\"input_shape\":[7,6,2],\"layers\":["
            "{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,\"padding\":\"same\","
            "\"activation\":\"relu\"},"
            "{\"type\":\"Conv2D\",\"filters\":16,\"kernel_size\":3,\"padding\":\"same\","
            "\"activation\":\"relu\"},"
            "{\"type\":\"Conv2D\",\"filters\":33,\"kernel_size\":[2,3],\"activation\":\"relu\"},"
            "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}",
            B, 5, 23);
  p.c.d->unfused = 1;
  double la = loss_at(&p.c, p.x, p.y, B, 1, p.a);
  p.c.d->unfused = 0;
  double lb = loss_at(&p.c, p.x, p.y, B, 1, p.b);
  ASSERT(la == lb);
  ASSERT(pair_same(&p));
  pair_close(&p);
}

/* bn_bwd_sums on the CPU (a register-blocked AVX-512 loop for 16 to 64
 * channels, a plain loop otherwise) gives the doubles of its definition: per
 * channel, over the rows in order, sum += dy and sum += dy * xhat, xhat =
 * (x - mean) * inv in float; then rounded to float. Bitwise, so that the
 * CUDA backend's same operations (test_kernels_cnn) and a resume agree. */
TEST(bn_bwd_sums_are_the_definition) {
  kern_t *k = NULL;
  ASSERT_OK(kern_cpu_create(&k));
  static const int channels[] = {16, 32, 48, 64, 20, 80};
  for (size_t t = 0; t < sizeof(channels) / sizeof(channels[0]); t++) {
    int C = channels[t], rows = 777;
    float *x = malloc((size_t)rows * C * sizeof(float)), *dy = malloc((size_t)rows * C * 4);
    float *mean = malloc((size_t)C * 4), *inv = malloc((size_t)C * 4), *out = malloc(2 * C * 4);
    ASSERT(x && dy && mean && inv && out);
    rng_t r;
    rng_seed(&r, 30 + t, 0);
    for (int i = 0; i < rows * C; i++)
      x[i] = rng_uniform(&r) * 4 - 1, dy[i] = rng_uniform(&r) - 0.5f;
    for (int c = 0; c < C; c++)
      mean[c] = rng_uniform(&r), inv[c] = 0.5f + rng_uniform(&r);
    ASSERT_OK(k->ops->bn_bwd_sums(k, x, dy, rows, C, mean, inv, out));
    for (int c = 0; c < C; c++) {
      double s = 0, u = 0;
      for (int i = 0; i < rows; i++) {
        volatile float xhat = (x[i * C + c] - mean[c]) * inv[c];
        volatile double p = (double)dy[i * C + c] * (double)xhat; /* no contraction */
        s += dy[i * C + c];
        u += p;
      }
      if ((float)s != out[c] || (float)u != out[C + c])
        TEST_FAIL_("C %d channel %d: sums %.9g %.9g, the definition %.9g %.9g", C, c, out[c],
                   out[C + c], (float)s, (float)u);
    }
    free(x), free(dy), free(mean), free(inv), free(out);
  }
  kern_free(k);
}

#define BN_MODEL                                                                                   \
  "{\"input_shape\":[2,3,2],\"layers\":[{\"type\":\"BatchNormalization\",\"momentum\":0.75,"       \
  "\"epsilon\":0.01},{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}"

/* One training step moves the moving statistics toward the batch's (Keras
 * 3: moving = moving * momentum + batch * (1 - momentum), the variance
 * biased); an evaluation step normalizes with the moving ones. */
TEST(batchnorm_moving_statistics) {
  enum { B = 4, C = 2, ROWS = B * 6 };
  cpu_model c;
  cpu_open(&c, build(BN_MODEL), B);
  model_t *m = c.m;
  const model_layer *bn = &m->layers[0];
  ASSERT_EQ(bn->c, C);
  ASSERT_EQ(model_layer_params(bn), 4 * C);
  float x[B * 12];
  int32_t y[B];
  random_batch(m, B, 21, x, y);
  for (int i = 0; i < B * 12; i++)
    x[i] = x[i] * 3 + (float)(i % 2); /* channel 1 off center */
  model_init(m, 1);
  ASSERT_EQ(m->params[bn->gamma_off], 1);
  ASSERT_EQ(m->params[bn->var_off + 1], 1);
  ASSERT_EQ(m->params[bn->mean_off], 0);
  loss_at(&c, x, y, B, 1, NULL);
  ASSERT_OK(dmodel_pull(c.d, m, NULL));
  for (int ch = 0; ch < C; ch++) {
    double s = 0, v = 0;
    for (int r = 0; r < ROWS; r++)
      s += x[r * C + ch];
    for (int r = 0; r < ROWS; r++)
      v += (x[r * C + ch] - s / ROWS) * (x[r * C + ch] - s / ROWS);
    ASSERT_NEAR(m->params[bn->mean_off + ch], 0.25 * s / ROWS, 1e-5);
    ASSERT_NEAR(m->params[bn->var_off + ch], 0.75 + 0.25 * v / ROWS, 1e-5);
  }
  /* Evaluation: gamma 2, beta -1, the moving statistics just computed; the
   * Dense reads channel 0 of pixel 0 only. */
  const model_layer *d = &m->layers[2];
  memset(m->params + d->w_off, 0, (size_t)(d->b_off - d->w_off) * sizeof(float));
  m->params[d->w_off + 0] = 1; /* logit 0 = y(pixel 0, channel 0) */
  m->params[bn->gamma_off] = 2;
  m->params[bn->beta_off] = -1;
  ASSERT_OK(dmodel_push(c.d, m, NULL));
  ASSERT_OK(dmodel_step(c.d, x, y, 1, 0, NULL, 1, 0));
  double l = 0;
  long correct = 0;
  ASSERT_OK(dmodel_stats(c.d, &l, &correct));
  double z = 2 * (x[0] - m->params[bn->mean_off]) / sqrt(m->params[bn->var_off] + 0.01) - 1;
  double zy = y[0] == 0 ? z : 0, lse = log(exp(z) + 2);
  ASSERT_NEAR(l, lse - zy, 1e-5);
  cpu_close(&c);
}

/* Two replicas, each half the batch, on two threads: the hook sums their
 * vectors (in replica order) at a barrier, as the collective does across
 * workers. Their gradients summed equal one replica's on the whole batch,
 * and both end with the whole batch's moving statistics. */
typedef struct {
  pthread_barrier_t bar;
  float *v[2];
  size_t n[2];
} sum2;

typedef struct {
  sum2 *s;
  int r;
} sum2_arg;

static ctrain_err sum2_fn(void *ctx, float *v, size_t n, char *errbuf, size_t errlen) {
  sum2_arg *a = ctx;
  (void)errbuf;
  (void)errlen;
  a->s->v[a->r] = v;
  a->s->n[a->r] = n;
  pthread_barrier_wait(&a->s->bar);
  float tot[64];
  ASSERT_EQ(a->s->n[0], a->s->n[1]);
  ASSERT_LE(n, 64);
  for (size_t i = 0; i < n; i++)
    tot[i] = a->s->v[0][i] + a->s->v[1][i];
  pthread_barrier_wait(&a->s->bar);
  memcpy(v, tot, n * sizeof(float));
  return CTRAIN_OK;
}

typedef struct {
  cpu_model c;
  const float *x;
  const int32_t *y;
  int B;
  float *grads;
  double loss;
} replica_job;

static void *replica_run(void *p) {
  replica_job *j = p;
  j->loss = loss_at(&j->c, j->x, j->y, j->B, 0.1f, j->grads);
  return NULL;
}

TEST(batchnorm_synchronized_replicas) {
  enum { B = 6, H = B / 2 };
  cpu_model whole;
  float x[B * 25], *g;
  int32_t y[B];
  double lw = sync_reference(&whole, B, 17, x, y, &g);
  model_t *m = whole.m;
  float *mw = malloc(m->n_params * sizeof(float));
  ASSERT_NOT_NULL(mw);
  model_t *pulled = build(SYNC_MODEL);
  ASSERT_OK(dmodel_pull(whole.d, pulled, NULL));
  memcpy(mw, pulled->params, m->n_params * sizeof(float));
  sum2 s;
  ASSERT_EQ(pthread_barrier_init(&s.bar, NULL, 2), 0);
  replica_job j[2];
  sum2_arg args[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    cpu_open(&j[r].c, build(SYNC_MODEL), H);
    memcpy(j[r].c.m->params, m->params, m->n_params * sizeof(float));
    args[r] = (sum2_arg){&s, r};
    dmodel_set_bn_sync(j[r].c.d, sum2_fn, &args[r]);
    j[r].x = x + r * H * 25, j[r].y = y + r * H, j[r].B = H;
    j[r].grads = calloc(m->n_params, sizeof(float));
    ASSERT_NOT_NULL(j[r].grads);
    ASSERT_EQ(pthread_create(&th[r], NULL, replica_run, &j[r]), 0);
  }
  for (int r = 0; r < 2; r++)
    ASSERT_EQ(pthread_join(th[r], NULL), 0);
  ASSERT_NEAR(j[0].loss + j[1].loss, lw, 1e-4);
  for (size_t k = 0; k < m->n_params; k++)
    ASSERT_NEAR(j[0].grads[k] + j[1].grads[k], g[k], 1e-5 + 1e-4 * fabs(g[k]));
  for (int r = 0; r < 2; r++) {
    ASSERT_OK(dmodel_pull(j[r].c.d, pulled, NULL));
    for (size_t k = 0; k < m->n_params; k++)
      ASSERT_NEAR(pulled->params[k], mw[k], 1e-6);
    free(j[r].grads);
    cpu_close(&j[r].c);
  }
  pthread_barrier_destroy(&s.bar);
  model_free(pulled);
  free(mw);
  free(g);
  cpu_close(&whole);
}

TEST_MAIN(T(kept_patches_change_nothing), T(dx_blocks_change_nothing), T(grad_conv_same_strided),
          T(grad_conv_maxpool_conv), T(grad_pool_2x2_tiles), T(grad_avgpool_gap), T(grad_batchnorm),
          T(grad_reshape), T(forward_matches_direct_loops), T(bn_bwd_sums_are_the_definition),
          T(bn_pool_fused_changes_nothing), T(relu_bias_grad_fused_changes_nothing),
          T(batchnorm_moving_statistics), T(batchnorm_synchronized_replicas))
