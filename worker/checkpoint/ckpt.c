/* ckpt.c - BackupAndRestore files: atomic, checksummed writes (through
 * ctrain/fileio.h) and a streaming reader that trusts nothing in the backup
 * directory it has not verified. */
#include "worker/checkpoint/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/endian.h"
#include "ctrain/fileio.h"
#include "ctrain/log.h"
#include "worker/checkpoint/ckpt_tree.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt.c writes floats in host order and expects a little-endian host"
#endif

#define NAME_PREFIX "backup-"
#define NAME_SUFFIX ".ckpt"
#define NAME_DIGITS 20

void ckpt_state_free(ckpt_state *s) {
  if (!s || !s->owned)
    return;
  free(s->blob);
  s->blob = NULL;
  s->per_rank = NULL;
  s->params = NULL;
  s->optim_state = NULL;
  s->owned = 0;
}

void ckpt_config_hash(const void *text, size_t len, uint8_t out[CKPT_HASH_BYTES]) {
  unsigned int n = 0;
  EVP_Digest(text, len, out, &n, EVP_sha256(), NULL);
}

void ckpt_hex(const uint8_t hash[CKPT_HASH_BYTES], char out[2 * CKPT_HASH_BYTES + 1]) {
  static const char hx[] = "0123456789abcdef";
  for (int i = 0; i < CKPT_HASH_BYTES; i++) {
    out[2 * i] = hx[hash[i] >> 4];
    out[2 * i + 1] = hx[hash[i] & 15];
  }
  out[2 * CKPT_HASH_BYTES] = 0;
}

/* Sizes of the variable sections; 0 from the function when world, slots or
 * n_params exceed their caps (which also keeps every sum far from overflow)
 * or n_params is 0 (a model has parameters: such a header is damage, and
 * its optimizer slots would have no state to point at). */
static int section_sizes(uint64_t world, uint64_t replicas, uint64_t n_params, uint64_t slots,
                         uint64_t *rank_b, uint64_t *param_b, uint64_t *state_b, uint64_t *total) {
  if (world > CKPT_MAX_WORLD || replicas < 1 || replicas > CKPT_MAX_REPLICAS ||
      world * replicas > CKPT_MAX_WORLD || slots > 2 || n_params < 1 || n_params > CKPT_MAX_PARAMS)
    return 0;
  *rank_b = world * replicas * CKPT_RANK_WORDS * 8;
  *param_b = n_params * 4;
  *state_b = slots * n_params * 4;
  *total = CKPT_HEADER_BYTES + *rank_b + *param_b + *state_b + CKPT_HASH_BYTES;
  return 1;
}

uint64_t ckpt_file_size(const ckpt_state *s) {
  uint64_t a, b, c, total;
  if (!section_sizes(s->world, s->replicas, s->n_params, s->optim_slots, &a, &b, &c, &total))
    return 0;
  return total;
}

static void encode_header(const ckpt_state *s, uint32_t version, uint8_t h[CKPT_HEADER_BYTES]) {
  memset(h, 0, CKPT_HEADER_BYTES);
  memcpy(h, CKPT_MAGIC, 8);
  ctrain_put_le32(h + 8, version);
  ctrain_put_le32(h + 12, CKPT_HEADER_BYTES);
  memcpy(h + 16, s->config_hash, CKPT_HASH_BYTES);
  ctrain_put_le64(h + 48, s->global_step);
  ctrain_put_le64(h + 56, s->epoch);
  ctrain_put_le64(h + 64, s->step);
  ctrain_put_le64(h + 72, s->data_seed);
  ctrain_put_le64(h + 80, s->data_position);
  ctrain_put_le64(h + 88, s->world);
  ctrain_put_le32(h + 96, s->optim_kind);
  ctrain_put_le32(h + 100, s->optim_slots);
  ctrain_put_le64(h + 104, s->optim_iterations);
  ctrain_put_le64(h + 112, s->n_params);
  ctrain_put_le64(h + 120, s->replicas);
}

static int nospace(int e) {
  return e == ENOSPC || e == EFBIG || e == EDQUOT;
}

/* The checksum is computed by other threads while the same bytes are
 * written, so a save costs about a plain write, not write + SHA-256:
 * version 3's tree (ckpt_tree.h) by several, version 2's SHA-256 by one. An
 * image whose whole SHA-256 is wanted (an object store's checksum) is
 * written as version 2: that one pass then gives both (the image's SHA-256,
 * continued over the checksum), where version 3 would need a second pass. */
typedef struct {
  ckpt_seg seg[4]; /* the image's sections, in order */
  int n;
  uint64_t body;    /* their total: the bytes before the checksum */
  uint32_t version; /* CKPT_VERSION or CKPT_VERSION_LINEAR */
  ckpt_tree *tree;  /* version 3: the leaves, hashed meanwhile */
  uint8_t digest[CKPT_HASH_BYTES];
  int want_file_digest;
  EVP_MD_CTX *whole; /* SHA-256 of the image, on its own thread */
  pthread_t linear;
  int linear_running, linear_ok;
  uint8_t file_digest[CKPT_HASH_BYTES]; /* SHA-256 of the image and its checksum */
  int started, finished, ok;
} hash_job;

/* The image's plain SHA-256 up to the checksum: version 2's checksum, and
 * the start of the whole file's. */
static void *linear_main(void *arg) {
  hash_job *j = arg;
  int ok = EVP_DigestInit_ex(j->whole, EVP_sha256(), NULL) == 1;
  for (int i = 0; ok && i < j->n; i++)
    ok = EVP_DigestUpdate(j->whole, j->seg[i].ptr, (size_t)j->seg[i].len) == 1;
  j->linear_ok = ok;
  return NULL;
}

/* Starts the hashing threads of j (its sections and version set). */
static ctrain_err hash_start(hash_job *j, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  j->started = 1;
  if (j->version != CKPT_VERSION_LINEAR &&
      (result = ckpt_tree_start(j->seg, j->n, j->body, j->body, &j->tree)))
    CTRAIN_FAIL(result, "backup: SHA-256 threads: %s", ctrain_strerror(result));
  if (j->want_file_digest || j->version == CKPT_VERSION_LINEAR) {
    j->whole = EVP_MD_CTX_new();
    if (!j->whole)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "backup: out of memory");
    if (pthread_create(&j->linear, NULL, linear_main, j) == 0)
      j->linear_running = 1;
    else
      linear_main(j); /* no thread: hash first, then write */
  }
out:
  return result;
}

/* Waits for j's threads (once; with version 3 the caller's thread helps
 * with the leaves left) and, when `want`, sets its digests: 1 when they are
 * good. Without `want` (a failed write) the leaves left are abandoned. */
static int hash_finish(hash_job *j, int want) {
  unsigned int dlen = 0;
  if (j->finished || !j->started)
    return j->ok;
  j->finished = 1;
  if (j->version == CKPT_VERSION_LINEAR)
    j->ok = want;
  else
    j->ok = ckpt_tree_end(j->tree, want ? j->digest : NULL) == CTRAIN_OK && want;
  j->tree = NULL;
  if (j->linear_running)
    pthread_join(j->linear, NULL);
  j->linear_running = 0;
  EVP_MD_CTX *copy = j->ok && j->whole ? EVP_MD_CTX_new() : NULL;
  j->ok = j->ok && (!j->whole || (j->linear_ok && copy && EVP_MD_CTX_copy_ex(copy, j->whole) == 1));
  if (j->version == CKPT_VERSION_LINEAR)
    j->ok = j->ok && EVP_DigestFinal_ex(copy, j->digest, &dlen) == 1 && dlen == CKPT_HASH_BYTES;
  if (j->want_file_digest)
    j->ok = j->ok && EVP_DigestUpdate(j->whole, j->digest, CKPT_HASH_BYTES) == 1 &&
            EVP_DigestFinal_ex(j->whole, j->file_digest, &dlen) == 1 && dlen == CKPT_HASH_BYTES;
  EVP_MD_CTX_free(copy);
  EVP_MD_CTX_free(j->whole);
  j->whole = NULL;
  return j->ok;
}

ctrain_err ckpt_prepare_dir(const char *dir, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char why[1024];
  result = ctrain_mkdir_p(dir, 0755, why, sizeof(why));
  if (result)
    CTRAIN_FAIL(result, "--backup-dir %s", why);
  if (access(dir, W_OK | X_OK))
    CTRAIN_FAIL(CTRAIN_E_IO, "--backup-dir %s: not writable: %s", dir, strerror(errno));
out:
  return result;
}

/* Where the image goes: an atomic replacement (ckpt_save) or a plain file
 * descriptor (ckpt_write_fd, a local staging file). */
typedef struct {
  ctrain_file *f;
  int fd;
  const char *what; /* for messages */
} sink;

static ctrain_err sink_write(sink *k, const void *buf, size_t len, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (k->f)
    return ctrain_file_write(k->f, buf, len, errbuf, errlen);
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(k->fd, p, len > (1u << 30) ? (1u << 30) : len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      CTRAIN_FAIL(w < 0 && nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "%s: write: %s",
                  k->what, w < 0 ? strerror(errno) : "no progress");
    p += w;
    len -= (size_t)w;
  }
out:
  return result;
}

/* The sections of s's image (header, ranks, params, optimizer state) into
 * j, with hdr and *ranks (owned by the caller, free()) holding the encoded
 * parts; j->body gets their total, the bytes before the checksum. */
static ctrain_err image_sections(const ckpt_state *s, uint32_t version,
                                 uint8_t hdr[CKPT_HEADER_BYTES], uint8_t **ranks, hash_job *j,
                                 char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint64_t rank_b, param_b, state_b, total;
  memset(j, 0, sizeof(*j));
  *ranks = NULL;
  if (!section_sizes(s->world, s->replicas, s->n_params, s->optim_slots, &rank_b, &param_b,
                     &state_b, &total))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "backup: world %llu x %llu replicas / %llu parameters out of range",
                (unsigned long long)s->world, (unsigned long long)s->replicas,
                (unsigned long long)s->n_params);
  encode_header(s, version, hdr);
  j->version = version;
  *ranks = malloc(rank_b ? rank_b : 1);
  if (!*ranks)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "backup: out of memory");
  for (uint64_t i = 0; i < s->world * s->replicas * CKPT_RANK_WORDS; i++)
    ctrain_put_le64(*ranks + 8 * i, s->per_rank[i]);
  j->seg[0] = (ckpt_seg){hdr, CKPT_HEADER_BYTES};
  j->seg[1] = (ckpt_seg){*ranks, rank_b};
  j->seg[2] = (ckpt_seg){s->params, param_b};
  j->seg[3] = (ckpt_seg){s->optim_state, state_b};
  j->n = state_b ? 4 : 3;
  j->body = total - CKPT_HASH_BYTES;
out:
  return result;
}

/* Writes the image of s to k: the checksum is computed by other threads
 * while the same bytes are written. */
static ctrain_err write_image(const ckpt_state *s, sink *k, uint8_t *file_sha256, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t *ranks = NULL;
  uint8_t hdr[CKPT_HEADER_BYTES];
  hash_job job;
  uint32_t version = file_sha256 ? CKPT_VERSION_LINEAR : CKPT_VERSION;
  if ((result = image_sections(s, version, hdr, &ranks, &job, errbuf, errlen)))
    goto out;
  job.want_file_digest = file_sha256 != NULL;
  if ((result = hash_start(&job, errbuf, errlen)))
    goto out;
  for (int i = 0; i < job.n; i++) {
    result = sink_write(k, job.seg[i].ptr, (size_t)job.seg[i].len, errbuf, errlen);
    if (result)
      goto out;
  }
  /* While the checksum is still being computed, the device takes the body:
   * the commit's fsync then has only the checksum's page left, so a save
   * costs about max(write + flush, SHA-256 / threads), not their sum. */
  if (k->f && (result = ctrain_file_writeback(k->f, errbuf, errlen)))
    goto out;
  if (!hash_finish(&job, 1))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: SHA-256 failed", k->what);
  result = sink_write(k, job.digest, CKPT_HASH_BYTES, errbuf, errlen);
  if (!result && file_sha256)
    memcpy(file_sha256, job.file_digest, CKPT_HASH_BYTES);
out:
  hash_finish(&job, 0); /* its threads read ranks and the caller's arrays */
  free(ranks);
  return result;
}

struct ckpt_image {
  hash_job job; /* the sections; the digests once finished */
  uint8_t hdr[CKPT_HEADER_BYTES];
  uint8_t *ranks; /* owned */
};

ctrain_err ckpt_image_open(const ckpt_state *s, ckpt_image **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ckpt_image *im = calloc(1, sizeof(*im));
  *out = NULL;
  if (!im)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "backup: out of memory");
  if ((result =
           image_sections(s, CKPT_VERSION_LINEAR, im->hdr, &im->ranks, &im->job, errbuf, errlen)))
    goto out;
  im->job.want_file_digest = 1;
  if ((result = hash_start(&im->job, errbuf, errlen)))
    goto out;
  *out = im;
  im = NULL;
out:
  ckpt_image_free(im);
  return result;
}

uint64_t ckpt_image_size(const ckpt_image *im) {
  return im->job.body + CKPT_HASH_BYTES;
}

ctrain_err ckpt_image_pread(ckpt_image *im, uint64_t off, void *buf, size_t len, size_t *got) {
  uint8_t *dst = buf;
  uint64_t base = 0, body = im->job.body;
  *got = 0;
  for (int i = 0; i < im->job.n && len > 0; base += im->job.seg[i].len, i++) {
    if (off >= base + im->job.seg[i].len)
      continue;
    size_t n = (size_t)(base + im->job.seg[i].len - off);
    n = n < len ? n : len;
    memcpy(dst, (const uint8_t *)im->job.seg[i].ptr + (off - base), n);
    dst += n;
    off += n;
    len -= n;
    *got += n;
  }
  if (len > 0 && off >= body && off < body + CKPT_HASH_BYTES) {
    if (!hash_finish(&im->job, 1))
      return CTRAIN_E_IO;
    size_t n = (size_t)(body + CKPT_HASH_BYTES - off);
    n = n < len ? n : len;
    memcpy(dst, im->job.digest + (off - body), n);
    *got += n;
  }
  return CTRAIN_OK;
}

ctrain_err ckpt_image_sha256(ckpt_image *im, uint8_t out[CKPT_HASH_BYTES]) {
  if (!hash_finish(&im->job, 1))
    return CTRAIN_E_IO;
  memcpy(out, im->job.file_digest, CKPT_HASH_BYTES);
  return CTRAIN_OK;
}

void ckpt_image_free(ckpt_image *im) {
  if (!im)
    return;
  hash_finish(&im->job, 0); /* its threads read ranks and the state's arrays */
  free(im->ranks);
  free(im);
}

ctrain_err ckpt_write_fd(int fd, const char *what, const ckpt_state *s,
                         uint8_t file_sha256[CKPT_HASH_BYTES], char *errbuf, size_t errlen) {
  sink k = {.f = NULL, .fd = fd, .what = what};
  return write_image(s, &k, file_sha256, errbuf, errlen);
}

void ckpt_backup_name(uint64_t global_step, char out[CKPT_NAME_BYTES]) {
  snprintf(out, CKPT_NAME_BYTES, NAME_PREFIX "%0*llu" NAME_SUFFIX, NAME_DIGITS,
           (unsigned long long)global_step);
}

ctrain_err ckpt_save(const char *dir, const ckpt_state *s, char *path_out, size_t path_len,
                     char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_file *f = NULL;
  char path[4096], name[CKPT_NAME_BYTES];
  ckpt_backup_name(s->global_step, name);
  if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--backup-dir %s: path too long", dir);
  result = ctrain_mkdir_p(dir, 0755, errbuf, errlen);
  if (result)
    goto out;
  result = ctrain_file_create(path, &f, errbuf, errlen);
  if (result)
    goto out;
  sink k = {.f = f, .fd = -1, .what = ctrain_file_temp_path(f)};
  result = write_image(s, &k, NULL, errbuf, errlen);
  if (!result) {
    result = ctrain_file_commit(f, errbuf, errlen);
    f = NULL; /* taken, whatever the result */
  }
  if (result)
    goto out;
  if (path_out)
    snprintf(path_out, path_len, "%s", path);
out:
  ctrain_file_abort(f);
  return result;
}

ctrain_err ckpt_check_header(const uint8_t *buf, uint64_t file_size, ckpt_state *out, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ckpt_state s;
  uint64_t rank_b, param_b, state_b, total;
  memset(&s, 0, sizeof(s));
  memset(out, 0, sizeof(*out));
  if (file_size < CKPT_HEADER_BYTES + CKPT_HASH_BYTES)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "truncated: %llu bytes, shorter than a header",
                (unsigned long long)file_size);
  if (memcmp(buf, CKPT_MAGIC, 8))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "bad magic (not a ctrain backup)");
  if (ctrain_get_le32(buf + 8) > CKPT_VERSION &&
      ctrain_get_le32(buf + 8) - CKPT_VERSION <= CKPT_VERSIONS_AHEAD)
    CTRAIN_FAIL(CTRAIN_E_UNSUPPORTED,
                "format version %u, written by a newer ctrain (this build reads %u to %u)",
                ctrain_get_le32(buf + 8), CKPT_VERSION_OLDEST, CKPT_VERSION);
  if (ctrain_get_le32(buf + 8) < CKPT_VERSION_OLDEST || ctrain_get_le32(buf + 8) > CKPT_VERSION)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "format version %u, this build reads %u to %u",
                ctrain_get_le32(buf + 8), CKPT_VERSION_OLDEST, CKPT_VERSION);
  if (ctrain_get_le32(buf + 12) != CKPT_HEADER_BYTES)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "header size %u, expected %u", ctrain_get_le32(buf + 12),
                CKPT_HEADER_BYTES);
  memcpy(s.config_hash, buf + 16, CKPT_HASH_BYTES);
  s.global_step = ctrain_get_le64(buf + 48);
  s.epoch = ctrain_get_le64(buf + 56);
  s.step = ctrain_get_le64(buf + 64);
  s.data_seed = ctrain_get_le64(buf + 72);
  s.data_position = ctrain_get_le64(buf + 80);
  s.world = ctrain_get_le64(buf + 88);
  s.optim_kind = ctrain_get_le32(buf + 96);
  s.optim_slots = ctrain_get_le32(buf + 100);
  s.optim_iterations = ctrain_get_le64(buf + 104);
  s.n_params = ctrain_get_le64(buf + 112);
  s.replicas = ctrain_get_le64(buf + 120);
  if (s.world < 1 || s.optim_kind > 1 ||
      !section_sizes(s.world, s.replicas, s.n_params, s.optim_slots, &rank_b, &param_b, &state_b,
                     &total))
    CTRAIN_FAIL(
        CTRAIN_E_CORRUPT,
        "header out of range (world %llu x %llu replicas, optimizer %u/%u slots, %llu params)",
        (unsigned long long)s.world, (unsigned long long)s.replicas, s.optim_kind, s.optim_slots,
        (unsigned long long)s.n_params);
  if (total != file_size)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "truncated or padded: %llu bytes, the header implies %llu",
                (unsigned long long)file_size, (unsigned long long)total);
  *out = s;
out:
  return result;
}

/* Where an image is read from: a file descriptor, or a buffer when fd < 0. */
typedef struct {
  int fd;
  const uint8_t *buf;
  size_t len, pos;
} source;

/* Reads exactly n bytes into dst; a short file is CTRAIN_E_CORRUPT. */
static ctrain_err src_read(source *src, void *dst, size_t n, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t *p = dst;
  if (src->fd < 0) {
    if (src->len - src->pos < n)
      CTRAIN_FAIL(CTRAIN_E_CORRUPT, "truncated: the buffer ends %zu bytes early",
                  n - (src->len - src->pos));
    memcpy(dst, src->buf + src->pos, n);
    src->pos += n;
    goto out;
  }
  while (n > 0) {
    ssize_t r = read(src->fd, p, n > (1u << 30) ? (1u << 30) : n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      CTRAIN_FAIL(CTRAIN_E_IO, "read: %s", strerror(errno));
    if (r == 0)
      CTRAIN_FAIL(CTRAIN_E_CORRUPT, "truncated while being read: %zu bytes missing", n);
    p += r;
    n -= (size_t)r;
    src->pos += (size_t)r;
  }
out:
  return result;
}

/* Chunk of body read (and hashed) at a time: large enough that the syscall
 * cost vanishes, small enough to stay in cache between read and hash. */
#define READ_CHUNK ((size_t)1 << 20)

/* Reads blob[CKPT_HEADER_BYTES, image) from src (the header is there
 * already) and computes a version-2 checksum: one SHA-256 of the image,
 * on this thread as the chunks arrive. */
static ctrain_err read_body_linear(source *src, uint8_t *blob, size_t image,
                                   uint8_t digest[CKPT_HASH_BYTES], char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  unsigned int dlen = 0;
  if (!md)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for SHA-256");
  if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
      EVP_DigestUpdate(md, blob, CKPT_HEADER_BYTES) != 1)
    CTRAIN_FAIL(CTRAIN_E_IO, "SHA-256 failed");
  for (size_t off = CKPT_HEADER_BYTES; off < image;) {
    size_t n = image - off < READ_CHUNK ? image - off : READ_CHUNK;
    result = src_read(src, blob + off, n, errbuf, errlen);
    if (result)
      goto out;
    if (EVP_DigestUpdate(md, blob + off, n) != 1)
      CTRAIN_FAIL(CTRAIN_E_IO, "SHA-256 failed");
    off += n;
  }
  if (EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen != CKPT_HASH_BYTES)
    CTRAIN_FAIL(CTRAIN_E_IO, "SHA-256 failed");
out:
  EVP_MD_CTX_free(md);
  return result;
}

/* The same for a version-3 checksum (ckpt_tree.h): each leaf is hashed by
 * another thread as soon as its bytes are in, while the next ones are read. */
static ctrain_err read_body_tree(source *src, uint8_t *blob, size_t image,
                                 uint8_t digest[CKPT_HASH_BYTES], char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ckpt_tree *tree = NULL;
  ckpt_seg seg = {blob, image};
  result = ckpt_tree_start(&seg, 1, image, CKPT_HEADER_BYTES, &tree);
  if (result)
    CTRAIN_FAIL(result, "SHA-256 threads: %s", ctrain_strerror(result));
  for (size_t off = CKPT_HEADER_BYTES; off < image;) {
    size_t n = image - off < READ_CHUNK ? image - off : READ_CHUNK;
    result = src_read(src, blob + off, n, errbuf, errlen);
    if (result)
      goto out;
    off += n;
    ckpt_tree_ready(tree, off);
  }
  result = ckpt_tree_end(tree, digest);
  tree = NULL;
  if (result)
    CTRAIN_FAIL(result, "SHA-256 failed");
out:
  ctrain_ignore(ckpt_tree_end(tree, NULL)); /* NULL root: abandons and frees, cannot fail */
  return result;
}

/* Reads one image of `size` bytes from src: the header is checked against
 * size before anything is allocated; the body goes straight into its final
 * place and is hashed as it arrives. The arrays of out point into the one
 * owned image (the host is little-endian and every section starts 8-byte
 * aligned, so no decoding is needed). */
static ctrain_err read_image(source *src, uint64_t size, ckpt_state *out, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ckpt_state s;
  uint8_t hdr[CKPT_HEADER_BYTES], want[CKPT_HASH_BYTES], got[CKPT_HASH_BYTES];
  uint8_t *blob = NULL;
  uint64_t rank_b = 0, param_b = 0, state_b = 0, total = 0;
  memset(&s, 0, sizeof(s));
  memset(out, 0, sizeof(*out));
  if (size < CKPT_HEADER_BYTES + CKPT_HASH_BYTES)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "truncated: %llu bytes, shorter than a header",
                (unsigned long long)size);
  result = src_read(src, hdr, sizeof(hdr), errbuf, errlen);
  if (result)
    goto out;
  result = ckpt_check_header(hdr, size, &s, errbuf, errlen);
  if (result)
    goto out;
  if (!section_sizes(s.world, s.replicas, s.n_params, s.optim_slots, &rank_b, &param_b, &state_b,
                     &total))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "header out of range"); /* checked above; for the compiler */
  uint64_t image = total - CKPT_HASH_BYTES;
#if SIZE_MAX < UINT64_MAX
  if (image > SIZE_MAX)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "a %llu-byte backup does not fit in memory",
                (unsigned long long)total);
#endif
  /* Only now, with sizes that agree with the file and lie within the caps,
   * is memory committed: the state the header declares, once. */
  blob = malloc((size_t)image);
  if (!blob)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for a %llu-byte backup", (unsigned long long)total);
  memcpy(blob, hdr, sizeof(hdr));
  result = ctrain_get_le32(hdr + 8) == CKPT_VERSION_LINEAR
               ? read_body_linear(src, blob, (size_t)image, got, errbuf, errlen)
               : read_body_tree(src, blob, (size_t)image, got, errbuf, errlen);
  if (result)
    goto out;
  result = src_read(src, want, sizeof(want), errbuf, errlen);
  if (result)
    goto out;
  if (memcmp(got, want, CKPT_HASH_BYTES))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "SHA-256 mismatch (the file was altered or partly written)");
  if (src->fd >= 0) {
    uint8_t extra;
    ssize_t r;
    do
      r = read(src->fd, &extra, 1);
    while (r < 0 && errno == EINTR);
    if (r != 0)
      CTRAIN_FAIL(r > 0 ? CTRAIN_E_CORRUPT : CTRAIN_E_IO, "%s",
                  r > 0 ? "padded: the file grew while being read" : strerror(errno));
  }
  _Static_assert(CKPT_HEADER_BYTES % 8 == 0 && CKPT_RANK_WORDS * 8 % 8 == 0,
                 "sections must stay 8-byte aligned");
  s.owned = 1;
  s.blob = blob;
  s.per_rank = (uint64_t *)(void *)(blob + CKPT_HEADER_BYTES);
  s.params = (float *)(void *)(blob + CKPT_HEADER_BYTES + rank_b);
  s.optim_state = state_b ? (float *)(void *)(blob + CKPT_HEADER_BYTES + rank_b + param_b) : NULL;
  *out = s;
  blob = NULL; /* taken by out */
out:
  free(blob);
  return result;
}

ctrain_err ckpt_parse(const uint8_t *buf, size_t len, ckpt_state *out, char *errbuf,
                      size_t errlen) {
  source src = {.fd = -1, .buf = buf, .len = len, .pos = 0};
  return read_image(&src, len, out, errbuf, errlen);
}

static const char *file_kind(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISLNK(m)  ? "a symbolic link"
                       : "not a regular file";
}

ctrain_err ckpt_read_fd(int fd, ckpt_state *out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  struct stat st;
  memset(out, 0, sizeof(*out));
  if (fstat(fd, &st))
    CTRAIN_FAIL(CTRAIN_E_IO, "fstat: %s", strerror(errno));
  /* Size and content are only meaningful for a regular file: a FIFO would
   * block a read, a device could be endless. */
  if (!S_ISREG(st.st_mode))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s, not a regular file", file_kind(st.st_mode));
  if (st.st_size < 0)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "size %lld out of range", (long long)st.st_size);
  source src = {.fd = fd, .buf = NULL, .len = 0, .pos = 0};
  result = read_image(&src, (uint64_t)st.st_size, out, errbuf, errlen);
out:
  return result;
}

ctrain_err ckpt_load_file(const char *path, ckpt_state *out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int fd = -1;
  char why[512];
  memset(out, 0, sizeof(*out));
  /* O_NOFOLLOW: a link planted under a backup's name is not a backup;
   * O_NONBLOCK: opening a FIFO must not wait for a writer. */
  fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: a symbolic link, not followed", path);
  if (fd < 0)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: %s", path, strerror(errno));
  result = ckpt_read_fd(fd, out, why, sizeof(why));
  if (result)
    CTRAIN_FAIL(result, "%s: %s", path, why);
out:
  if (fd >= 0)
    close(fd);
  return result;
}

int ckpt_parse_backup_name(const char *name, uint64_t *step) {
  size_t pl = strlen(NAME_PREFIX), sl = strlen(NAME_SUFFIX);
  if (strlen(name) != pl + NAME_DIGITS + sl || strncmp(name, NAME_PREFIX, pl) ||
      strcmp(name + pl + NAME_DIGITS, NAME_SUFFIX))
    return 0;
  uint64_t v = 0;
  for (size_t i = pl; i < pl + NAME_DIGITS; i++) {
    if (name[i] < '0' || name[i] > '9')
      return 0;
    uint64_t d = (uint64_t)(name[i] - '0');
    if (v > (UINT64_MAX - d) / 10)
      return 0;
    v = v * 10 + d;
  }
  *step = v;
  return 1;
}
