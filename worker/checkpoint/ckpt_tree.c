/* ckpt_tree.c - the version-3 backup checksum (ckpt_tree.h): leaves taken in
 * order by a few threads (and the caller at the end), each hashed whole with
 * SHA-256, then the root over the leaf digests. */
#include "worker/checkpoint/ckpt_tree.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/endian.h"
#include "ctrain/thread.h"

/* Leaves a backup can have: CKPT_MAX_PARAMS x 3 slots x 4 bytes plus the
 * ranks is far below this; a cap keeps the digest table bounded anyway. */
#define MAX_LEAVES ((uint64_t)1 << 20)

struct ckpt_tree {
  ckpt_seg seg[4];
  int nseg;
  uint64_t total, n_leaves;
  uint8_t (*digest)[CKPT_TREE_HASH]; /* (n_leaves, 32), owned */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* ready grew, a leaf was done, or cancelled */
  uint64_t ready;    /* bytes of B that may be read */
  uint64_t next;     /* first leaf nobody took */
  uint64_t done;     /* leaves hashed (or failed) */
  int failed;        /* a SHA-256 call failed */
  int cancel;
  int have_mu, have_cv;
  pthread_t thread[CKPT_TREE_THREADS];
  int threads;
};

/* SHA-256 of B[off, off + len) (across segments) into out; 0 on failure. */
static int hash_range(const ckpt_tree *t, EVP_MD_CTX *md, uint64_t off, uint64_t len,
                      uint8_t out[CKPT_TREE_HASH]) {
  unsigned int dlen = 0;
  int ok = EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
  uint64_t base = 0;
  for (int i = 0; ok && i < t->nseg && len > 0; base += t->seg[i].len, i++) {
    if (off >= base + t->seg[i].len)
      continue;
    uint64_t n = base + t->seg[i].len - off;
    n = n < len ? n : len;
    ok = EVP_DigestUpdate(md, (const uint8_t *)t->seg[i].ptr + (off - base), (size_t)n) == 1;
    off += n;
    len -= n;
  }
  return ok && len == 0 && EVP_DigestFinal_ex(md, out, &dlen) == 1 && dlen == CKPT_TREE_HASH;
}

/* Takes leaves until none is left (or the work is cancelled), each once all
 * its bytes are ready. */
static void take_leaves(ckpt_tree *t) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  ctrain_mutex_lock(&t->mu);
  while (!t->cancel && t->next < t->n_leaves) {
    uint64_t i = t->next++;
    uint64_t off = i * CKPT_LEAF_BYTES;
    uint64_t len = t->total - off < CKPT_LEAF_BYTES ? t->total - off : CKPT_LEAF_BYTES;
    while (!t->cancel && t->ready < off + len)
      ctrain_cond_wait(&t->cv, &t->mu);
    if (t->cancel)
      break;
    ctrain_mutex_unlock(&t->mu);
    int ok = md && hash_range(t, md, off, len, t->digest[i]);
    ctrain_mutex_lock(&t->mu);
    t->failed |= !ok;
    t->done++;
    if (t->done == t->n_leaves)
      ctrain_cond_broadcast(&t->cv);
  }
  ctrain_mutex_unlock(&t->mu);
  EVP_MD_CTX_free(md);
}

static void *tree_main(void *arg) {
  take_leaves(arg);
  return NULL;
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > CKPT_TREE_THREADS ? CKPT_TREE_THREADS : (int)n;
}

/* Frees t (NULL fine); its threads must be joined. */
static void tree_free(ckpt_tree *t) {
  if (!t)
    return;
  if (t->have_cv)
    pthread_cond_destroy(&t->cv);
  if (t->have_mu)
    pthread_mutex_destroy(&t->mu);
  free(t->digest);
  free(t);
}

ctrain_err ckpt_tree_start(const ckpt_seg *segs, int nseg, uint64_t total, uint64_t ready,
                           ckpt_tree **out) {
  ctrain_err result = CTRAIN_OK;
  ckpt_tree *t = NULL;
  uint64_t n = total / CKPT_LEAF_BYTES + (total % CKPT_LEAF_BYTES != 0);
  uint64_t sum = 0;
  *out = NULL;
  result = CTRAIN_E_INVAL;
  if (nseg < 1 || nseg > 4)
    goto out;
  for (int i = 0; i < nseg; i++)
    sum += segs[i].len;
  if (total == 0 || n > MAX_LEAVES || sum < total)
    goto out;
  result = CTRAIN_E_NOMEM;
  t = calloc(1, sizeof(*t));
  if (!t)
    goto out;
  memcpy(t->seg, segs, (size_t)nseg * sizeof(*segs));
  t->nseg = nseg;
  t->total = total;
  t->n_leaves = n;
  t->ready = ready < total ? ready : total;
  t->digest = malloc((size_t)n * CKPT_TREE_HASH);
  if (!t->digest || pthread_mutex_init(&t->mu, NULL))
    goto out;
  t->have_mu = 1;
  if (pthread_cond_init(&t->cv, NULL))
    goto out;
  t->have_cv = 1;
  result = CTRAIN_OK;
  /* One leaf: the caller hashes it in ckpt_tree_end, no thread to start. */
  int want = n > 1 ? online_cpus() : 0;
  want = (uint64_t)want > n ? (int)n : want;
  while (t->threads < want && pthread_create(&t->thread[t->threads], NULL, tree_main, t) == 0)
    t->threads++;
  *out = t;
  t = NULL;
out:
  tree_free(t);
  return result;
}

void ckpt_tree_ready(ckpt_tree *t, uint64_t ready) {
  ctrain_mutex_lock(&t->mu);
  if (ready > t->ready) {
    t->ready = ready < t->total ? ready : t->total;
    ctrain_cond_broadcast(&t->cv);
  }
  ctrain_mutex_unlock(&t->mu);
}

ctrain_err ckpt_tree_end(ckpt_tree *t, uint8_t root[CKPT_TREE_HASH]) {
  ctrain_err result = CTRAIN_OK;
  EVP_MD_CTX *md = NULL;
  unsigned int dlen = 0;
  if (!t)
    return root ? CTRAIN_E_INVAL : CTRAIN_OK;
  ctrain_mutex_lock(&t->mu);
  if (!root || t->ready < t->total) {
    t->cancel = 1;
    ctrain_cond_broadcast(&t->cv);
  }
  ctrain_mutex_unlock(&t->mu);
  take_leaves(t);
  ctrain_mutex_lock(&t->mu);
  while (!t->cancel && t->done < t->n_leaves)
    ctrain_cond_wait(&t->cv, &t->mu);
  ctrain_mutex_unlock(&t->mu);
  for (int i = 0; i < t->threads; i++)
    pthread_join(t->thread[i], NULL);
  if (!root)
    goto out;
  result = CTRAIN_E_IO;
  if (t->cancel || t->failed)
    goto out;
  uint8_t head[24];
  memcpy(head, CKPT_TREE_TAG, 8);
  ctrain_put_le64(head + 8, CKPT_LEAF_BYTES);
  ctrain_put_le64(head + 16, t->n_leaves);
  md = EVP_MD_CTX_new();
  if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
      EVP_DigestUpdate(md, head, sizeof(head)) != 1 ||
      EVP_DigestUpdate(md, t->digest, (size_t)t->n_leaves * CKPT_TREE_HASH) != 1 ||
      EVP_DigestFinal_ex(md, root, &dlen) != 1 || dlen != CKPT_TREE_HASH)
    goto out;
  result = CTRAIN_OK;
out:
  EVP_MD_CTX_free(md);
  tree_free(t);
  return result;
}
