/* kernels_cpu.c - the CPU reference backend (plain loops and OpenBLAS's
 * cblas_sgemm) and the kern_* dispatch. Training on the CPU runs these ops;
 * the CUDA backend is tested against them (test_kernels.c), the ops through
 * the model against finite differences (test_model.c). */
#include "worker/model/kernels.h"
#include "worker/model/kernels_cpu_cnn.h"
#include "worker/model/kernels_row.h"
#include "worker/model/model.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ctrain_err cpu_alloc(kern_t *k, void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  if (!*p) {
    snprintf(k->err, sizeof(k->err), "malloc(%zu): out of memory", bytes);
    return CTRAIN_E_NOMEM;
  }
  return CTRAIN_OK;
}

static void cpu_free(kern_t *k, void *p) {
  (void)k;
  free(p);
}

static ctrain_err cpu_copy_bytes(kern_t *k, void *dst, const void *src, size_t bytes) {
  (void)k;
  if (bytes)
    memmove(dst, src, bytes);
  return CTRAIN_OK;
}

static ctrain_err cpu_memset0(kern_t *k, void *dst, size_t bytes) {
  (void)k;
  memset(dst, 0, bytes);
  return CTRAIN_OK;
}

static ctrain_err cpu_slot_noop(kern_t *k, int slot) {
  (void)k;
  (void)slot;
  return CTRAIN_OK;
}

static ctrain_err cpu_stage(kern_t *k, int slot, void *dst, const void *src, size_t bytes) {
  (void)slot;
  return cpu_copy_bytes(k, dst, src, bytes);
}

static ctrain_err cpu_sync(kern_t *k) {
  (void)k;
  return CTRAIN_OK;
}

/* OpenBLAS threads only for GEMMs big enough to pay for waking them: the
 * model's shapes (a batch of 32 through layers of a few hundred units) run
 * faster on the calling thread, and the woken threads spin in sched_yield
 * afterwards, taking the core from the next op (or from the other worker on
 * a shared machine). Above the threshold, OpenBLAS's own count
 * (OPENBLAS_NUM_THREADS or the cores). The count is plain state: it changes
 * only while one thread runs the CPU backend; once several may
 * (kern_cpu_blas_one_thread), it stays 1. */
#define KERN_BLAS_SMALL_MNK ((double)(1u << 24))

static int g_blas_default = -1; /* OpenBLAS's count before we changed it */
static int g_blas_now = -1;     /* the count set now */
static int g_blas_pinned;       /* 1: one thread for good */

void kern_cpu_blas_one_thread(void) {
  if (!g_blas_pinned)
    openblas_set_num_threads(1);
  g_blas_pinned = 1;
}

int kern_cpu_blas_threads(int n) {
  if (g_blas_pinned)
    return 1;
  int have = openblas_get_num_threads();
  g_blas_default = n >= 1 && n < have ? n : have;
  if (g_blas_default != have)
    openblas_set_num_threads(g_blas_default);
  g_blas_now = g_blas_default;
  return g_blas_default;
}

/* OpenBLAS's x86 core names by the vectors their kernels use (the names
 * its dynamic-arch builds report; a core not listed is left alone). */
static const struct {
  const char *name;
  int level;
} g_blas_cores[] = {
    {"Katmai", 0},        {"Coppermine", 0},     {"Northwood", 0},  {"Prescott", 0},
    {"Banias", 0},        {"Core2", 0},          {"Penryn", 0},     {"Dunnington", 0},
    {"Nehalem", 0},       {"Atom", 0},           {"Athlon", 0},     {"Opteron", 0},
    {"Opteron(SSE3)", 0}, {"Barcelona", 0},      {"Bobcat", 0},     {"Nano", 0},
    {"Sandybridge", 1},   {"Bulldozer", 1},      {"Piledriver", 1}, {"Steamroller", 1},
    {"Haswell", 2},       {"Excavator", 2},      {"Zen", 2},        {"SkylakeX", 3},
    {"Cooperlake", 3},    {"SapphireRapids", 3},
};

/* What to ask for at each level: the oldest core of it, whose kernels every
 * CPU of the level runs. */
static const char *const g_blas_core_for[] = {NULL, "Sandybridge", "Haswell", "SkylakeX"};

const char *kern_blas_core_better(const char *core, int level) {
  if (!core || level < 1 || level > 3)
    return NULL;
  for (size_t i = 0; i < sizeof(g_blas_cores) / sizeof(g_blas_cores[0]); i++)
    if (!strcmp(core, g_blas_cores[i].name))
      return g_blas_cores[i].level < level ? g_blas_core_for[level] : NULL;
  return NULL;
}

int kern_cpu_vector_level(void) {
#if defined(__x86_64__) || defined(__i386__)
  /* These test the OS's saved vector state too (XGETBV), not only CPUID. */
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return 2;
  return __builtin_cpu_supports("avx") ? 1 : 0;
#else
  return -1;
#endif
}

const char *kern_cpu_blas_core(const char **better) {
  const char *core = openblas_get_corename();
  *better = kern_blas_core_better(core, kern_cpu_vector_level());
  return core;
}

int kern_cpu_blas_threads_now(void) {
  if (g_blas_pinned)
    return 1;
  return g_blas_default >= 1 ? g_blas_default : openblas_get_num_threads();
}

static void blas_threads_for(int M, int N, int K) {
  if (g_blas_pinned)
    return;
  if (g_blas_default < 0) {
    g_blas_default = openblas_get_num_threads();
    g_blas_now = g_blas_default;
  }
  int want = (double)M * N * K < KERN_BLAS_SMALL_MNK ? 1 : g_blas_default;
  if (want != g_blas_now) {
    openblas_set_num_threads(want);
    g_blas_now = want;
  }
}

static ctrain_err cpu_gemm(kern_t *k, int ta, int tb, int M, int N, int K, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C,
                           int ldc) {
  (void)k;
  blas_threads_for(M, N, K);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
  return CTRAIN_OK;
}

/* The elementwise loops vectorised at -O2 too (the default "very cheap"
 * cost model leaves a loop of unknown length scalar). Each element's value
 * is the scalar loop's. */
#define KERN_VECTORIZE                                                                             \
  KERN_CLONES KERN_OPTIMIZE("tree-vectorize", "vect-cost-model=dynamic", "fp-contract=off")

static ctrain_err cpu_bias_fill(kern_t *k, float *y, const float *b, int rows, int n) {
  (void)k;
  for (int r = 0; r < rows; r++)
    memcpy(y + (size_t)r * (size_t)n, b, (size_t)n * sizeof(float));
  return CTRAIN_OK;
}

KERN_VECTORIZE static ctrain_err cpu_bias_grad(kern_t *k, float *gb, const float *d, int rows,
                                               int n) {
  (void)k;
  for (int c = 0; c < n; c++)
    gb[c] = 0;
  for (int r = 0; r < rows; r++) {
    const float *dr = d + (size_t)r * (size_t)n;
    for (int c = 0; c < n; c++)
      gb[c] += dr[c];
  }
  return CTRAIN_OK;
}

/* cpu_act_bwd's ReLU then cpu_bias_grad, a row at a time: each element
 * masked as there, each channel summed over the rows in the same order. */
KERN_VECTORIZE static ctrain_err cpu_relu_bias_grad(kern_t *k, const float *y, float *d, int rows,
                                                    int n, float *gb) {
  (void)k;
  for (int c = 0; c < n; c++)
    gb[c] = 0;
  for (int r = 0; r < rows; r++) {
    const float *yr = y + (size_t)r * (size_t)n;
    float *dr = d + (size_t)r * (size_t)n;
    for (int c = 0; c < n; c++) {
      float v = yr[c] > 0 ? dr[c] : 0;
      dr[c] = v;
      gb[c] += v;
    }
  }
  return CTRAIN_OK;
}

KERN_VECTORIZE static ctrain_err cpu_act_fwd(kern_t *k, model_act a, float *y, size_t n) {
  (void)k;
  switch (a) {
  case MODEL_RELU:
    for (size_t i = 0; i < n; i++)
      y[i] = y[i] > 0 ? y[i] : 0;
    break;
  case MODEL_TANH:
    for (size_t i = 0; i < n; i++)
      y[i] = tanhf(y[i]);
    break;
  case MODEL_SIGMOID:
    for (size_t i = 0; i < n; i++)
      y[i] = 1.0f / (1.0f + expf(-y[i]));
    break;
  default:
    break;
  }
  return CTRAIN_OK;
}

KERN_VECTORIZE static ctrain_err cpu_act_bwd(kern_t *k, model_act a, const float *y, float *dy,
                                             size_t n) {
  (void)k;
  switch (a) {
  case MODEL_RELU:
    for (size_t i = 0; i < n; i++)
      dy[i] = y[i] > 0 ? dy[i] : 0;
    break;
  case MODEL_TANH:
    for (size_t i = 0; i < n; i++)
      dy[i] *= 1.0f - y[i] * y[i];
    break;
  case MODEL_SIGMOID:
    for (size_t i = 0; i < n; i++)
      dy[i] *= y[i] * (1.0f - y[i]);
    break;
  default:
    break;
  }
  return CTRAIN_OK;
}

KERN_VECTORIZE static ctrain_err cpu_mul(kern_t *k, float *y, const float *x, const float *mask,
                                         size_t n) {
  (void)k;
  for (size_t i = 0; i < n; i++)
    y[i] = x[i] * mask[i];
  return CTRAIN_OK;
}

static ctrain_err cpu_copy(kern_t *k, float *dst, const float *src, size_t n) {
  return cpu_copy_bytes(k, dst, src, n * sizeof(float));
}

/* probs (rows, C) = softmax of logits; returns the summed cross-entropy of
 * the rows whose label is in [0, C) and adds the correct argmaxes. */
static double softmax_ce_rows(const float *logits, const int32_t *labels, int rows, int C,
                              float *probs, long *correct) {
  double total = 0;
  for (int r = 0; r < rows; r++) {
    double loss;
    int hit;
    if (kern_softmax_ce_row(logits + (size_t)r * (size_t)C, C, labels[r],
                            probs + (size_t)r * (size_t)C, &loss, &hit)) {
      total += loss;
      *correct += hit;
    }
  }
  return total;
}

static ctrain_err cpu_softmax_ce(kern_t *k, const float *logits, const int32_t *labels, int rows,
                                 int C, float *probs, double *stats) {
  (void)k;
  long correct = 0;
  stats[0] = softmax_ce_rows(logits, labels, rows, C, probs, &correct);
  stats[1] = (double)correct;
  return CTRAIN_OK;
}

KERN_VECTORIZE static ctrain_err cpu_ce_grad(kern_t *k, const float *probs, const int32_t *labels,
                                             int rows, int C, float scale, float *d) {
  (void)k;
  for (int r = 0; r < rows; r++) {
    const float *p = probs + (size_t)r * (size_t)C;
    float *g = d + (size_t)r * (size_t)C;
    for (int c = 0; c < C; c++)
      g[c] = p[c] * scale;
    if (labels[r] >= 0 && labels[r] < C)
      g[labels[r]] -= scale;
  }
  return CTRAIN_OK;
}

/* The optimizer updates run with denormal floats flushed to zero, as
 * TensorFlow's CPU kernels do (its threads set flush-to-zero and
 * denormals-are-zero): a moment that decays toward zero (Adam's m and v of a
 * weight whose gradient is mostly 0, a border pixel's) would otherwise pass
 * through the denormal range for many steps, and on Intel cores each
 * denormal operand or result of a vector op costs a microcode assist: on an
 * Emerald Rapids core the MLP's Adam update took 72% of its step. Values at
 * or above FLT_MIN are computed exactly as without the flush. The MXCSR
 * bits are set for the update alone and restored after it. */
#if defined(__x86_64__)
#include <xmmintrin.h>
#define KERN_MXCSR_FTZ_DAZ 0x8040u /* flush-to-zero (bit 15), denormals-are-zero (bit 6) */
static unsigned flush_denormals(void) {
  unsigned was = _mm_getcsr();
  _mm_setcsr(was | KERN_MXCSR_FTZ_DAZ);
  return was;
}
static void restore_denormals(unsigned was) {
  _mm_setcsr(was);
}
#else
static unsigned flush_denormals(void) {
  return 0;
}
static void restore_denormals(unsigned was) {
  (void)was;
}
#endif

static ctrain_err cpu_sgd(kern_t *k, float *w, const float *g, float *v, size_t n, float lr,
                          float mom, int nesterov) {
  (void)k;
  unsigned was = flush_denormals();
  if (!v) {
    for (size_t i = 0; i < n; i++)
      w[i] -= lr * g[i];
  } else {
    for (size_t i = 0; i < n; i++) {
      v[i] = mom * v[i] - lr * g[i];
      w[i] += nesterov ? mom * v[i] - lr * g[i] : v[i];
    }
  }
  restore_denormals(was);
  return CTRAIN_OK;
}

/* The update loops, one pass over memory each, vectorised: cloned for
 * AVX-512 and AVX2 (picked at load time) beside the baseline, and built
 * without errno for sqrtf (v >= 0, so sqrtf never sets it) so the loop
 * vectorises at -O2. No FMA contraction (ISO C mode), so every clone
 * computes the scalar loop's exact values. */
/* Keras Adam on elements [i, n): m += (g-m)c1; v += (g^2-v)c2;
 * w -= alpha m/(sqrt(v)+eps). The vector versions below run the same
 * operations, each correctly rounded, in the same order (no FMA), so every
 * path computes these exact values. */
static void adam_scalar(float *restrict w, const float *restrict g, float *restrict m,
                        float *restrict v, size_t i, size_t n, float alpha, float c1, float c2,
                        float eps) {
  for (; i < n; i++) {
    float mi = m[i] + (g[i] - m[i]) * c1;
    float vi = v[i] + (g[i] * g[i] - v[i]) * c2;
    m[i] = mi;
    v[i] = vi;
    w[i] -= alpha * mi / (sqrtf(vi) + eps);
  }
}

typedef void (*adam_fn)(float *restrict w, const float *restrict g, float *restrict m,
                        float *restrict v, size_t n, float alpha, float c1, float c2, float eps);

static void adam_base(float *restrict w, const float *restrict g, float *restrict m,
                      float *restrict v, size_t n, float alpha, float c1, float c2, float eps) {
  adam_scalar(w, g, m, v, 0, n, alpha, c1, c2, eps);
}

#if defined(__x86_64__)
#include <immintrin.h>

/* One pass, 16 (AVX-512) or 8 (AVX2) elements at a time. */
#define ADAM_VEC(name, isa, T, W, load, store, set1, add, sub, mul, div, sqrt)                     \
  __attribute__((target(isa))) static void name(float *restrict w, const float *restrict g,        \
                                                float *restrict m, float *restrict v, size_t n,    \
                                                float alpha, float c1, float c2, float eps) {      \
    T va = set1(alpha), v1 = set1(c1), v2 = set1(c2), ve = set1(eps);                              \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) {                                                                   \
      T gi = load(g + i), mi = load(m + i), vi = load(v + i);                                      \
      mi = add(mi, mul(sub(gi, mi), v1));                                                          \
      vi = add(vi, mul(sub(mul(gi, gi), vi), v2));                                                 \
      store(m + i, mi);                                                                            \
      store(v + i, vi);                                                                            \
      store(w + i, sub(load(w + i), div(mul(va, mi), add(sqrt(vi), ve))));                         \
    }                                                                                              \
    adam_scalar(w, g, m, v, i, n, alpha, c1, c2, eps);                                             \
  }

ADAM_VEC(adam_avx512, "avx512f", __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps,
         _mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps, _mm512_div_ps, _mm512_sqrt_ps)
ADAM_VEC(adam_avx2, "avx2", __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps,
         _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_div_ps, _mm256_sqrt_ps)

static adam_fn adam_pick(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return adam_avx512;
  if (__builtin_cpu_supports("avx2"))
    return adam_avx2;
  return adam_base;
}
#else
static adam_fn adam_pick(void) {
  return adam_base;
}
#endif

static ctrain_err cpu_adam(kern_t *k, float *w, const float *g, float *m, float *v, size_t n,
                           float alpha, float b1, float b2, float eps) {
  (void)k;
  /* Replicas update on threads of their own: atomic (picking twice is harmless). */
  static adam_fn picked;
  adam_fn fn = __atomic_load_n(&picked, __ATOMIC_RELAXED);
  if (!fn) {
    fn = adam_pick();
    __atomic_store_n(&picked, fn, __ATOMIC_RELAXED);
  }
  unsigned was = flush_denormals();
  fn(w, g, m, v, n, alpha, 1.0f - b1, 1.0f - b2, eps);
  restore_denormals(was);
  return CTRAIN_OK;
}

static void cpu_destroy(kern_t *k) {
  kcpu_conv_free(k);
  free(k);
}

static const kern_ops cpu_ops = {
    .name = "cpu",
    .is_device = 0,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_host = cpu_alloc,
    .free_host = cpu_free,
    .h2d = cpu_copy_bytes,
    .d2h = cpu_copy_bytes,
    .memset0 = cpu_memset0,
    .stage_wait = cpu_slot_noop,
    .stage = cpu_stage,
    .release = cpu_slot_noop,
    .sync = cpu_sync,
    .gemm = cpu_gemm,
    .bias_fill = cpu_bias_fill,
    .bias_grad = cpu_bias_grad,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .relu_bias_grad = cpu_relu_bias_grad,
    .mul = cpu_mul,
    .copy = cpu_copy,
    .softmax_ce = cpu_softmax_ce,
    .ce_grad = cpu_ce_grad,
    .sgd = cpu_sgd,
    .adam = cpu_adam,
    .destroy = cpu_destroy,
    .im2col = kcpu_im2col,
    .col2im = kcpu_col2im,
    .pool_fwd = kcpu_pool_fwd,
    .pool_bwd = kcpu_pool_bwd,
    .chan_sums = kcpu_chan_sums,
    .bn_fwd = kcpu_bn_fwd,
    .bn_bwd_sums = kcpu_bn_bwd_sums,
    .bn_bwd = kcpu_bn_bwd,
    .conv_direct = kcpu_conv_direct,
    .conv_fwd = kcpu_conv_fwd,
    .conv_dw = kcpu_conv_dw,
    .conv_dx = kcpu_conv_dx,
    .bn_pool_ok = kcpu_bn_pool_ok,
    .bn_pool_fwd = kcpu_bn_pool_fwd,
    .bn_pool_bwd = kcpu_bn_pool_bwd,
};

ctrain_err kern_cpu_create(kern_t **out) {
  kern_t *k = calloc(1, sizeof(*k));
  *out = NULL;
  if (!k)
    return CTRAIN_E_NOMEM;
  k->ops = &cpu_ops;
  k->device = -1;
  *out = k;
  return CTRAIN_OK;
}

ctrain_err kern_cuda_create(int device, kern_t **out, char *errbuf, size_t errlen) {
#ifdef CTRAIN_HAVE_CUDA
  return kern_cuda_create_impl(device, out, errbuf, errlen);
#else
  (void)device;
  *out = NULL;
  snprintf(errbuf, errlen, "built without the CUDA path (configure with -DCTRAIN_CUDA=ON)");
  return CTRAIN_E_UNSUPPORTED;
#endif
}

const char *kern_errmsg(const kern_t *k) {
  return k->err;
}

void kern_free(kern_t *k) {
  if (k)
    k->ops->destroy(k);
}
