/* worker/checkpoint/ckpt.h - BackupAndRestore files (docs/design.md "Worker contract", Backup).
 *
 * One file per save, `DIR/backup-<global step, 20 digits>.ckpt`. Layout
 * (integers little-endian, floats IEEE-754 little-endian):
 *
 *   magic           8 bytes  "CTRNBKUP"
 *   version         u32      CKPT_VERSION (3) when written; 2 is read too
 *   header bytes    u32      CKPT_HEADER_BYTES (size of the fixed part)
 *   config hash     32 bytes SHA-256 of the config that must match to resume
 *   global step     u64      optimizer steps taken
 *   epoch           u64      epoch to resume in (0-based)
 *   step            u64      steps of that epoch already taken
 *   data seed       u64      shuffle seed of the epoch order
 *   data position   u64      samples of the epoch order each worker consumed
 *                            (step x replicas x per-replica batch)
 *   world           u64      workers that wrote the per-rank state
 *   optim kind      u32      0 SGD, 1 Adam
 *   optim slots     u32      0, 1 (velocity) or 2 (Adam m, v)
 *   optim iter      u64      optimizer updates applied (Adam's t)
 *   n params        u64
 *   replicas        u64      local replicas per worker (--device cpu:R|gpu:R)
 *   per replica     (world x replicas, CKPT_RANK_WORDS) u64, worker-major:
 *                   the replica's dropout RNG s[0..3], then (replica 0 of
 *                   each worker) the epoch's partial loss sum (f64 bits) and
 *                   correct count of that worker, zeros for the others
 *   params          (n params) f32
 *   optim state     (slots, n params) f32
 *   checksum        32 bytes over every byte before it (the image, B):
 *                   version 3: the root of a SHA-256 list tree over B in
 *                     fixed 4 MiB leaves, so several threads hash it:
 *                       n    = ceil(len(B) / 4194304)
 *                       d_i  = SHA-256(B[i * 4194304, min(len(B), (i+1) * 4194304)))
 *                       root = SHA-256("CTRNTREE" || u64le 4194304 || u64le n
 *                                      || d_0 || ... || d_{n-1})
 *                     (ckpt_tree.h; "CTRNTREE" is its 8 ASCII bytes)
 *                   version 2: SHA-256(B)
 *
 * Versions 2 and 3 differ in the checksum only; a build reads both (a job
 * resumes across an upgrade). ckpt_save (a directory) writes 3; an object
 * store's image (ckpt_image, ckpt_write_fd with file_sha256) is written as
 * 2, since its x-amz-checksum-sha256 must be the plain SHA-256 of the whole
 * object anyway and version 2's checksum falls out of that same pass. Any
 * other version is not a backup (CTRAIN_E_CORRUPT, so a restore skips it
 * and falls back to the previous one).
 *
 * Saves go through ctrain/fileio.h (a temp file created O_EXCL|O_NOFOLLOW
 * under an unpredictable name in DIR, fsync, rename, fsync of DIR); a crash
 * at any point leaves the previous backups as they were.
 *
 * The reader trusts nothing in DIR: it opens with O_NOFOLLOW|O_NONBLOCK,
 * takes regular files only, checks the fixed header (magic, version, sizes
 * within CKPT_MAX_WORLD / CKPT_MAX_PARAMS and equal to the file's size) before
 * it allocates or reads the body, and hashes the body as it streams in. So
 * the memory a restore takes is bounded by the state the header declares, not
 * by whatever file sits under a backup's name. */
#ifndef CTRAIN_CKPT_H
#define CTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

#define CKPT_MAGIC          "CTRNBKUP"
#define CKPT_VERSION        3u /* 2: replicas; 3: the checksum is a SHA-256 tree */
#define CKPT_VERSION_LINEAR 2u /* read still: the checksum is one SHA-256 */
#define CKPT_VERSION_OLDEST 2u /* the oldest version this build reads */
/* A version up to this far past CKPT_VERSION is a newer build's backup,
 * not damage: CTRAIN_E_UNSUPPORTED, and a restore stops there (the file is
 * kept, never moved aside), so rolling an image back cannot throw away
 * what the newer one saved. Further past, it is damage (CTRAIN_E_CORRUPT). */
#define CKPT_VERSIONS_AHEAD 64u
#define CKPT_HASH_BYTES     32
#define CKPT_HEADER_BYTES   128u
#define CKPT_RANK_WORDS     6      /* rng s[4], loss sum bits, correct */
#define CKPT_MAX_WORLD      65536u /* workers, and workers x replicas */
#define CKPT_MAX_REPLICAS   64u
/* The model's own cap on parameters (model.c MODEL_MAX_PARAMS): no larger
 * state can be saved, so a header declaring one is not a backup. */
#define CKPT_MAX_PARAMS (1ull << 30)

typedef struct {
  uint8_t config_hash[CKPT_HASH_BYTES];
  uint64_t global_step;
  uint64_t epoch;
  uint64_t step;
  uint64_t data_seed;
  uint64_t data_position;
  uint64_t world;
  uint32_t optim_kind;
  uint32_t optim_slots;
  uint64_t optim_iterations;
  uint64_t n_params;
  uint64_t replicas;  /* per worker, 1..CKPT_MAX_REPLICAS */
  uint64_t *per_rank; /* (world * replicas, CKPT_RANK_WORDS), worker-major */
  float *params;      /* (n_params) */
  float *optim_state; /* (optim_slots, n_params) */
  int owned;          /* 1: the arrays above point into `blob`, owned (ckpt_state_free) */
  void *blob;         /* the verified file image less its checksum, when owned */
} ckpt_state;

/* Releases a state filled by ckpt_parse/ckpt_read_fd/ckpt_load_file (its
 * arrays point into one owned image, read straight into place, so a 100 MB
 * restore holds one copy); a state whose arrays are borrowed (owned == 0) is
 * left alone. NULL is fine. */
void ckpt_state_free(ckpt_state *s);

/* SHA-256 of `len` bytes of `text` into out. */
void ckpt_config_hash(const void *text, size_t len, uint8_t out[CKPT_HASH_BYTES]);

/* Lowercase hex of a hash into out (65 bytes with the NUL). */
void ckpt_hex(const uint8_t hash[CKPT_HASH_BYTES], char out[2 * CKPT_HASH_BYTES + 1]);

/* Bytes ckpt_save writes for s (0 when world, replicas or n_params is out of
 * range). */
uint64_t ckpt_file_size(const ckpt_state *s);

/* Creates DIR (and missing parents, ctrain_mkdir_p) if needed and checks it is a writable
 * directory, so an unusable --backup-dir fails at start rather than at the
 * first save. CTRAIN_E_IO (or CTRAIN_E_NOSPACE) naming the path. */
CTRAIN_NODISCARD ctrain_err ckpt_prepare_dir(const char *dir, char *errbuf, size_t errlen);

/* Writes s (borrowed) to DIR/backup-<global step>.ckpt atomically and makes
 * it durable; the final path goes to path_out when non-NULL. Disk full or a
 * file-size limit is CTRAIN_E_NOSPACE, any other failure CTRAIN_E_IO; either
 * way errbuf names the file and no partial file is left under the final
 * name. */
CTRAIN_NODISCARD ctrain_err ckpt_save(const char *dir, const ckpt_state *s, char *path_out,
                                      size_t path_len, char *errbuf, size_t errlen);

/* Decodes the fixed header `hdr` (CKPT_HEADER_BYTES, borrowed) of a file of
 * `file_size` bytes and checks it before any body is read: magic, version,
 * header size, ranges, and that the sizes it declares add up to file_size.
 * On success the scalar fields of `out` are set and its arrays are NULL
 * (owned 0, nothing to free); CTRAIN_E_CORRUPT with the reason otherwise. */
CTRAIN_NODISCARD ctrain_err ckpt_check_header(const uint8_t *hdr, uint64_t file_size,
                                              ckpt_state *out, char *errbuf, size_t errlen);

/* Parses a whole backup image (borrowed) with the same reader as the files:
 * header first, then the body hashed as it is copied. CTRAIN_E_CORRUPT with
 * the reason in errbuf for a bad magic, version, size or checksum. On
 * success `out` owns copies of the arrays (ckpt_state_free). */
CTRAIN_NODISCARD ctrain_err ckpt_parse(const uint8_t *buf, size_t len, ckpt_state *out,
                                       char *errbuf, size_t errlen);

/* Reads a backup from the start of `fd` (borrowed, left open): a regular
 * file only, header checked against its size before the body is allocated,
 * SHA-256 computed while the body streams in. CTRAIN_E_CORRUPT for anything
 * that is not a valid backup (not a regular file, bad header, size mismatch,
 * checksum), CTRAIN_E_IO for a read error, CTRAIN_E_NOMEM when the state the
 * verified header declares does not fit in memory. */
CTRAIN_NODISCARD ctrain_err ckpt_read_fd(int fd, ckpt_state *out, char *errbuf, size_t errlen);

/* Opens one file (O_NOFOLLOW: a symbolic link is refused; O_NONBLOCK: a FIFO
 * never blocks) and reads it with ckpt_read_fd; errors name it (CTRAIN_E_IO
 * when it cannot be opened or read, CTRAIN_E_CORRUPT when it is not a backup
 * that verifies). */
CTRAIN_NODISCARD ctrain_err ckpt_load_file(const char *path, ckpt_state *out, char *errbuf,
                                           size_t errlen);

/* Writes the image of s (borrowed) to fd (borrowed, left open) from its
 * current offset, what ckpt_save writes, and nothing else: no fsync, no
 * rename. For a local staging file (an object store's upload); `what` names
 * it in messages. file_sha256 (optional) receives the SHA-256 of all the
 * bytes written, computed on the way, so an upload need not read the file
 * twice; with it the image is written as version 2 (CKPT_VERSION_LINEAR),
 * whose checksum is the same pass's SHA-256, so the two cost one pass;
 * without it, as version 3. CTRAIN_E_NOSPACE, CTRAIN_E_IO. */
CTRAIN_NODISCARD ctrain_err ckpt_write_fd(int fd, const char *what, const ckpt_state *s,
                                          uint8_t file_sha256[CKPT_HASH_BYTES], char *errbuf,
                                          size_t errlen);

/* A backup image read straight from a state's own arrays (no staging copy),
 * for an upload: the header and ranks are encoded at open, the parameters
 * and optimizer state are read in place, and the SHA-256s (the image's own
 * checksum, its last 32 bytes, and the whole file's) are computed on a
 * second thread meanwhile, so the bytes before the checksum can be sent
 * while it runs. The image is version 2 (CKPT_VERSION_LINEAR: its checksum
 * and the object's SHA-256 are one pass), the bytes ckpt_write_fd writes
 * with file_sha256. The state (borrowed) must stay alive and unchanged
 * until ckpt_image_free. Reads may be repeated (a retried upload). */
typedef struct ckpt_image ckpt_image;

/* *out owned by the caller (ckpt_image_free). CTRAIN_E_INVAL for sizes out of
 * range, CTRAIN_E_NOMEM. */
CTRAIN_NODISCARD ctrain_err ckpt_image_open(const ckpt_state *s, ckpt_image **out, char *errbuf,
                                            size_t errlen);

/* Bytes of the image (ckpt_file_size of the state). */
uint64_t ckpt_image_size(const ckpt_image *im);

/* Copies the image's bytes [off, off+len) into buf; *got is fewer only at
 * the end. Reading the checksum waits for the hasher. CTRAIN_E_IO when
 * hashing failed. */
CTRAIN_NODISCARD ctrain_err ckpt_image_pread(ckpt_image *im, uint64_t off, void *buf, size_t len,
                                             size_t *got);

/* The SHA-256 of the whole image (waits for the hasher); CTRAIN_E_IO when
 * hashing failed. */
CTRAIN_NODISCARD ctrain_err ckpt_image_sha256(ckpt_image *im, uint8_t out[CKPT_HASH_BYTES]);

/* Waits for the hasher and frees im (NULL fine). */
void ckpt_image_free(ckpt_image *im);

/* Bytes of a backup's name with its NUL: backup-<20 digits>.ckpt. */
#define CKPT_NAME_BYTES 40

/* The name of the backup of global step `global_step` into out. */
void ckpt_backup_name(uint64_t global_step, char out[CKPT_NAME_BYTES]);

/* 1 when name is a backup's name (backup-<20 digits>.ckpt), with its global
 * step in *step; 0 for anything else. */
int ckpt_parse_backup_name(const char *name, uint64_t *step);

#endif
