/* ckpt.c - BackupAndRestore files: atomic, checksummed writes and a reader
 * that trusts nothing it has not verified. */
#include "ctrain/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/log.h"

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

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* Sizes of the variable sections; 0 from the function on overflow. */
static int section_sizes(uint64_t world, uint64_t n_params, uint64_t slots, uint64_t *rank_b,
                         uint64_t *param_b, uint64_t *state_b, uint64_t *total) {
  if (world > CKPT_MAX_WORLD || slots > 2 || n_params > (UINT64_MAX / 16))
    return 0;
  *rank_b = world * CKPT_RANK_WORDS * 8;
  *param_b = n_params * 4;
  *state_b = slots * n_params * 4;
  *total = CKPT_HEADER_BYTES + *rank_b + *param_b + *state_b + CKPT_HASH_BYTES;
  return 1;
}

uint64_t ckpt_file_size(const ckpt_state *s) {
  uint64_t a, b, c, total;
  if (!section_sizes(s->world, s->n_params, s->optim_slots, &a, &b, &c, &total))
    return 0;
  return total;
}

static void encode_header(const ckpt_state *s, uint8_t h[CKPT_HEADER_BYTES]) {
  memset(h, 0, CKPT_HEADER_BYTES);
  memcpy(h, CKPT_MAGIC, 8);
  put32(h + 8, CKPT_VERSION);
  put32(h + 12, CKPT_HEADER_BYTES);
  memcpy(h + 16, s->config_hash, CKPT_HASH_BYTES);
  put64(h + 48, s->global_step);
  put64(h + 56, s->epoch);
  put64(h + 64, s->step);
  put64(h + 72, s->data_seed);
  put64(h + 80, s->data_position);
  put64(h + 88, s->world);
  put32(h + 96, s->optim_kind);
  put32(h + 100, s->optim_slots);
  put64(h + 104, s->optim_iterations);
  put64(h + 112, s->n_params);
}

static int nospace(int e) {
  return e == ENOSPC || e == EFBIG || e == EDQUOT;
}

/* Writes all of buf (short writes and EINTR retried). */
static ctrain_err write_all(int fd, const void *buf, size_t n, const char *path, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const uint8_t *p = buf;
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    ssize_t w = write(fd, p, chunk);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      CTRAIN_FAIL(nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "%s: write: %s", path,
                  strerror(errno));
    if (w == 0)
      CTRAIN_FAIL(CTRAIN_E_NOSPACE, "%s: write: no progress (disk full?)", path);
    p += w;
    n -= (size_t)w;
  }
out:
  return result;
}

static ctrain_err fsync_dir(const char *dir, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: open directory: %s", dir, strerror(errno));
  if (fsync(fd) && errno != EINVAL)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: fsync directory: %s", dir, strerror(errno));
out:
  if (fd >= 0)
    close(fd);
  return result;
}

/* The checksum is computed on a second thread while the same bytes are
 * written, so a save costs about a plain write, not write + SHA-256. */
typedef struct {
  const void *ptr[4];
  size_t len[4];
  int n;
  uint8_t digest[CKPT_HASH_BYTES];
  int ok;
} hash_job;

static void *hash_main(void *arg) {
  hash_job *j = arg;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  unsigned int dlen = 0;
  uint8_t d[EVP_MAX_MD_SIZE];
  j->ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
  for (int i = 0; j->ok && i < j->n; i++)
    j->ok = EVP_DigestUpdate(md, j->ptr[i], j->len[i]) == 1;
  j->ok = j->ok && EVP_DigestFinal_ex(md, d, &dlen) == 1 && dlen == CKPT_HASH_BYTES;
  if (j->ok)
    memcpy(j->digest, d, CKPT_HASH_BYTES);
  EVP_MD_CTX_free(md);
  return NULL;
}

ctrain_err ckpt_prepare_dir(const char *dir, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char p[4096];
  struct stat st;
  if ((size_t)snprintf(p, sizeof(p), "%s", dir) >= sizeof(p))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--backup-dir %s: path too long", dir);
  /* mkdir -p: each prefix, then the whole path. */
  for (char *q = p + 1; *q; q++) {
    if (*q != '/')
      continue;
    *q = 0;
    if (mkdir(p, 0755) && errno != EEXIST)
      CTRAIN_FAIL(nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "--backup-dir %s: mkdir %s: %s",
                  dir, p, strerror(errno));
    *q = '/';
  }
  if (mkdir(p, 0755) && errno != EEXIST)
    CTRAIN_FAIL(nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "--backup-dir %s: mkdir: %s", dir,
                strerror(errno));
  if (stat(dir, &st) || !S_ISDIR(st.st_mode))
    CTRAIN_FAIL(CTRAIN_E_IO, "--backup-dir %s: not a directory", dir);
  if (access(dir, W_OK | X_OK))
    CTRAIN_FAIL(CTRAIN_E_IO, "--backup-dir %s: not writable: %s", dir, strerror(errno));
out:
  return result;
}

ctrain_err ckpt_save(const char *dir, const ckpt_state *s, char *path_out, size_t path_len,
                     char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t *ranks = NULL;
  int fd = -1, made_tmp = 0, hashing = 0;
  char path[4096], tmp[4096];
  uint8_t hdr[CKPT_HEADER_BYTES];
  hash_job job;
  pthread_t hasher;
  uint64_t rank_b, param_b, state_b, total;
  memset(&job, 0, sizeof(job));
  if (!section_sizes(s->world, s->n_params, s->optim_slots, &rank_b, &param_b, &state_b, &total))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "backup: world %llu / %llu parameters out of range",
                (unsigned long long)s->world, (unsigned long long)s->n_params);
  if ((size_t)snprintf(path, sizeof(path), "%s/" NAME_PREFIX "%0*llu" NAME_SUFFIX, dir, NAME_DIGITS,
                       (unsigned long long)s->global_step) >= sizeof(path) ||
      (size_t)snprintf(tmp, sizeof(tmp), "%s/." NAME_PREFIX "%0*llu" NAME_SUFFIX ".tmp", dir,
                       NAME_DIGITS, (unsigned long long)s->global_step) >= sizeof(tmp))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--backup-dir %s: path too long", dir);
  if (mkdir(dir, 0755) && errno != EEXIST)
    CTRAIN_FAIL(nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "--backup-dir %s: mkdir: %s", dir,
                strerror(errno));
  encode_header(s, hdr);
  ranks = malloc(rank_b ? rank_b : 1);
  if (!ranks)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", path);
  for (uint64_t i = 0; i < s->world * CKPT_RANK_WORDS; i++)
    put64(ranks + 8 * i, s->per_rank[i]);
  job.ptr[0] = hdr;
  job.len[0] = sizeof(hdr);
  job.ptr[1] = ranks;
  job.len[1] = rank_b;
  job.ptr[2] = s->params;
  job.len[2] = param_b;
  job.ptr[3] = s->optim_state;
  job.len[3] = state_b;
  job.n = state_b ? 4 : 3;
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    CTRAIN_FAIL(nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "%s: open: %s", tmp,
                strerror(errno));
  made_tmp = 1;
  if (pthread_create(&hasher, NULL, hash_main, &job) == 0)
    hashing = 1;
  else
    hash_main(&job); /* no thread: hash first, then write */
  for (int i = 0; i < job.n; i++) {
    result = write_all(fd, job.ptr[i], job.len[i], tmp, errbuf, errlen);
    if (result)
      goto out;
  }
  if (hashing) {
    pthread_join(hasher, NULL);
    hashing = 0;
  }
  if (!job.ok)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: SHA-256 failed", tmp);
  result = write_all(fd, job.digest, CKPT_HASH_BYTES, tmp, errbuf, errlen);
  if (result)
    goto out;
  if (fsync(fd))
    CTRAIN_FAIL(nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "%s: fsync: %s", tmp,
                strerror(errno));
  int rc = close(fd);
  fd = -1;
  if (rc)
    CTRAIN_FAIL(nospace(errno) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "%s: close: %s", tmp,
                strerror(errno));
  if (rename(tmp, path))
    CTRAIN_FAIL(CTRAIN_E_IO, "rename %s -> %s: %s", tmp, path, strerror(errno));
  made_tmp = 0;
  /* The rename is durable only once the directory entry is. */
  result = fsync_dir(dir, errbuf, errlen);
  if (result)
    goto out;
  if (path_out)
    snprintf(path_out, path_len, "%s", path);
out:
  if (hashing)
    pthread_join(hasher, NULL); /* it reads ranks and the caller's arrays */
  if (fd >= 0)
    close(fd);
  if (made_tmp)
    unlink(tmp);
  free(ranks);
  return result;
}

/* Verifies and parses the image `blob` (taken: it becomes out->blob, or is
 * freed on failure). The arrays point into it; the host is little-endian
 * and every section starts 8-byte aligned, so no decoding is needed. */
static ctrain_err parse_take(uint8_t *blob, size_t len, ckpt_state *out, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ckpt_state s;
  const uint8_t *buf = blob;
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned int dlen = 0;
  uint64_t rank_b, param_b, state_b, total;
  memset(&s, 0, sizeof(s));
  s.owned = 1;
  s.blob = blob;
  memset(out, 0, sizeof(*out));
  if (len < CKPT_HEADER_BYTES + CKPT_HASH_BYTES)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "truncated: %zu bytes, shorter than a header", len);
  if (memcmp(buf, CKPT_MAGIC, 8))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "bad magic (not a ctrain backup)");
  if (get32(buf + 8) != CKPT_VERSION)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "format version %u, this build reads %u", get32(buf + 8),
                CKPT_VERSION);
  if (get32(buf + 12) != CKPT_HEADER_BYTES)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "header size %u, expected %u", get32(buf + 12),
                CKPT_HEADER_BYTES);
  memcpy(s.config_hash, buf + 16, CKPT_HASH_BYTES);
  s.global_step = get64(buf + 48);
  s.epoch = get64(buf + 56);
  s.step = get64(buf + 64);
  s.data_seed = get64(buf + 72);
  s.data_position = get64(buf + 80);
  s.world = get64(buf + 88);
  s.optim_kind = get32(buf + 96);
  s.optim_slots = get32(buf + 100);
  s.optim_iterations = get64(buf + 104);
  s.n_params = get64(buf + 112);
  if (s.world < 1 || s.optim_kind > 1 ||
      !section_sizes(s.world, s.n_params, s.optim_slots, &rank_b, &param_b, &state_b, &total))
    CTRAIN_FAIL(
        CTRAIN_E_CORRUPT, "header out of range (world %llu, optimizer %u/%u slots, %llu params)",
        (unsigned long long)s.world, s.optim_kind, s.optim_slots, (unsigned long long)s.n_params);
  if (total != (uint64_t)len)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "truncated or padded: %zu bytes, the header implies %llu", len,
                (unsigned long long)total);
  if (EVP_Digest(buf, len - CKPT_HASH_BYTES, digest, &dlen, EVP_sha256(), NULL) != 1 ||
      dlen != CKPT_HASH_BYTES)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "SHA-256 failed");
  if (memcmp(digest, buf + len - CKPT_HASH_BYTES, CKPT_HASH_BYTES))
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "SHA-256 mismatch (the file was altered or partly written)");
  _Static_assert(CKPT_HEADER_BYTES % 8 == 0 && CKPT_RANK_WORDS * 8 % 8 == 0,
                 "sections must stay 8-byte aligned");
  s.per_rank = (uint64_t *)(void *)(blob + CKPT_HEADER_BYTES);
  s.params = (float *)(void *)(blob + CKPT_HEADER_BYTES + rank_b);
  s.optim_state = state_b ? (float *)(void *)(blob + CKPT_HEADER_BYTES + rank_b + param_b) : NULL;
  *out = s;
  memset(&s, 0, sizeof(s));
out:
  ckpt_state_free(&s);
  return result;
}

ctrain_err ckpt_parse(const uint8_t *buf, size_t len, ckpt_state *out, char *errbuf,
                      size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t *blob = NULL;
  memset(out, 0, sizeof(*out));
  blob = malloc(len ? len : 1);
  if (!blob)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "out of memory for a %zu-byte backup", len);
  if (len)
    memcpy(blob, buf, len);
  result = parse_take(blob, len, out, errbuf, errlen);
out:
  return result;
}

ctrain_err ckpt_load_file(const char *path, ckpt_state *out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int fd = -1;
  uint8_t *buf = NULL;
  struct stat st;
  char why[512];
  memset(out, 0, sizeof(*out));
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: %s", path, strerror(errno));
  if (st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX / 2)
    CTRAIN_FAIL(CTRAIN_E_CORRUPT, "%s: size %lld out of range", path, (long long)st.st_size);
  size_t len = (size_t)st.st_size, got = 0;
  buf = malloc(len ? len : 1);
  if (!buf)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory for %zu bytes", path, len);
  while (got < len) {
    ssize_t r = read(fd, buf + got, len - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      CTRAIN_FAIL(CTRAIN_E_IO, "%s: read: %s", path, strerror(errno));
    if (r == 0)
      break;
    got += (size_t)r;
  }
  result = parse_take(buf, got, out, why, sizeof(why));
  buf = NULL; /* taken */
  if (result)
    CTRAIN_FAIL(result, "%s: %s", path, why);
out:
  if (fd >= 0)
    close(fd);
  free(buf);
  return result;
}

typedef struct {
  uint64_t step;
  char name[NAME_DIGITS + 32];
} entry;

static int cmp_newest_first(const void *a, const void *b) {
  const entry *x = a, *y = b;
  return (x->step < y->step) - (x->step > y->step);
}

/* 1 when name is backup-<20 digits>.ckpt, with the step in *step. */
static int parse_name(const char *name, uint64_t *step) {
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

/* The backups of dir, newest first (*out owned by the caller, free()). A
 * missing dir is an empty list. With clean_tmp, leftover temp files of an
 * interrupted save are removed. */
static ctrain_err list_backups(const char *dir, int clean_tmp, entry **out, size_t *n, char *errbuf,
                               size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  DIR *d = NULL;
  entry *v = NULL;
  size_t cnt = 0, cap = 0;
  *out = NULL;
  *n = 0;
  d = opendir(dir);
  if (!d && errno == ENOENT)
    goto out; /* no backups yet */
  if (!d)
    CTRAIN_FAIL(CTRAIN_E_IO, "--backup-dir %s: %s", dir, strerror(errno));
  struct dirent *de;
  while ((de = readdir(d))) {
    uint64_t step;
    size_t nl = strlen(de->d_name);
    if (clean_tmp && de->d_name[0] == '.' && !strncmp(de->d_name + 1, NAME_PREFIX, 7) && nl > 4 &&
        !strcmp(de->d_name + nl - 4, ".tmp")) {
      char p[4096];
      snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
      if (!unlink(p))
        LOG_INFO("backup: removed %s, left by an interrupted save", p);
      continue;
    }
    if (!parse_name(de->d_name, &step))
      continue;
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 16;
      entry *nv = realloc(v, nc * sizeof(*v));
      if (!nv)
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "--backup-dir %s: out of memory", dir);
      v = nv;
      cap = nc;
    }
    v[cnt].step = step;
    /* parse_name checked the length: it fits with its NUL. */
    memcpy(v[cnt].name, de->d_name, strlen(de->d_name) + 1);
    cnt++;
  }
  if (cnt)
    qsort(v, cnt, sizeof(*v), cmp_newest_first);
  *out = v;
  *n = cnt;
  v = NULL;
out:
  if (d)
    closedir(d);
  free(v);
  return result;
}

ctrain_err ckpt_restore_latest(const char *dir, ckpt_state *out, char *path_out, size_t path_len,
                               char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  entry *v = NULL;
  size_t n = 0, bad = 0;
  memset(out, 0, sizeof(*out));
  result = list_backups(dir, 1, &v, &n, errbuf, errlen);
  if (result)
    goto out;
  for (size_t i = 0; i < n; i++) {
    char path[4096], why[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, v[i].name);
    ctrain_err r = ckpt_load_file(path, out, why, sizeof(why));
    if (r == CTRAIN_OK) {
      if (path_out)
        snprintf(path_out, path_len, "%s", path);
      goto out;
    }
    if (r == CTRAIN_E_NOMEM) {
      result = r;
      snprintf(errbuf, errlen, "%s", why);
      goto out;
    }
    bad++;
    /* Out of the rotation, so newer saves are never pruned in its favour,
     * but kept for a post-mortem. */
    char aside[4200];
    snprintf(aside, sizeof(aside), "%s.corrupt", path);
    if (rename(path, aside) == 0)
      LOG_WARN("backup: skipping %s: %s (moved aside to %s)", path, why, aside);
    else
      LOG_WARN("backup: skipping %s: %s", path, why);
  }
  if (bad)
    LOG_WARN("backup: none of the %zu backups in %s verifies; starting fresh", bad, dir);
  result = CTRAIN_E_NOTFOUND;
  snprintf(errbuf, errlen, "--backup-dir %s: no backup that verifies", dir);
out:
  free(v);
  return result;
}

static ctrain_err remove_from(const char *dir, size_t first, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  entry *v = NULL;
  size_t n = 0;
  result = list_backups(dir, 0, &v, &n, errbuf, errlen);
  if (result)
    goto out;
  for (size_t i = first; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, v[i].name);
    if (unlink(path) && errno != ENOENT)
      CTRAIN_FAIL(CTRAIN_E_IO, "%s: unlink: %s", path, strerror(errno));
  }
  if (n > first)
    result = fsync_dir(dir, errbuf, errlen);
out:
  free(v);
  return result;
}

ctrain_err ckpt_prune(const char *dir, int keep, char *errbuf, size_t errlen) {
  return remove_from(dir, keep > 0 ? (size_t)keep : 1, errbuf, errlen);
}

ctrain_err ckpt_remove_all(const char *dir, char *errbuf, size_t errlen) {
  return remove_from(dir, 0, errbuf, errlen);
}
