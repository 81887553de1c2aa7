/* worker/checkpoint/ckpt_tree.h - the checksum of a version-3 backup: a
 * SHA-256 list tree over fixed leaves, hashed by several threads (ckpt.h
 * gives the file layout).
 *
 * The hashed bytes B (a backup's image, everything before its checksum) are
 * cut into n = ceil(len(B) / CKPT_LEAF_BYTES) leaves, leaf i being
 * B[i * CKPT_LEAF_BYTES, min(len(B), (i + 1) * CKPT_LEAF_BYTES)) (the last
 * one may be shorter; len(B) > 0, so n >= 1). Then
 *
 *   d_i  = SHA-256(leaf i)
 *   root = SHA-256("CTRNTREE" || u64le CKPT_LEAF_BYTES || u64le n ||
 *                  d_0 || d_1 || ... || d_{n-1})
 *
 * and root is the checksum. Leaves are independent, so they are hashed in
 * parallel, and while the bytes are still arriving (a read): a leaf is taken
 * as soon as all of its bytes are there. */
#ifndef CTRAIN_CKPT_TREE_H
#define CTRAIN_CKPT_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

#define CKPT_TREE_TAG     "CTRNTREE"
#define CKPT_LEAF_BYTES   ((uint64_t)4 << 20)
#define CKPT_TREE_HASH    32
#define CKPT_TREE_THREADS 4 /* hashing threads at most (fewer with fewer CPUs or leaves) */

/* One piece of the hashed bytes; B is the pieces in order. */
typedef struct {
  const void *ptr;
  uint64_t len;
} ckpt_seg;

typedef struct ckpt_tree ckpt_tree;

/* Starts hashing the `total` bytes of segs[0..nseg) (nseg <= 4; the array is
 * copied, the bytes are borrowed and must stay unchanged until
 * ckpt_tree_end) on up to CKPT_TREE_THREADS threads. `ready` bytes of B are
 * there now (total: all of it), the rest is announced with ckpt_tree_ready.
 * When no thread can be started the leaves are hashed in ckpt_tree_end.
 * *out owned by the caller (ckpt_tree_end). CTRAIN_E_INVAL for total 0 or
 * a leaf count out of range, CTRAIN_E_NOMEM. */
CTRAIN_NODISCARD ctrain_err ckpt_tree_start(const ckpt_seg *segs, int nseg, uint64_t total,
                                            uint64_t ready, ckpt_tree **out);

/* B[0, ready) may now be read (monotonic; at most total). */
void ckpt_tree_ready(ckpt_tree *t, uint64_t ready);

/* Hashes, on the calling thread too, the leaves no thread has taken yet,
 * waits for the others and writes the root into root; frees t. With root
 * NULL the remaining work is abandoned (the bytes will never all be ready:
 * a failed read) and t freed. NULL t is fine (CTRAIN_E_INVAL when a root
 * is asked of it). CTRAIN_E_IO when SHA-256 failed or not all bytes were
 * announced. */
CTRAIN_NODISCARD ctrain_err ckpt_tree_end(ckpt_tree *t, uint8_t root[CKPT_TREE_HASH]);

#endif
