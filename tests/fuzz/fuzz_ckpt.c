/* fuzz_ckpt.c - the backup reader on arbitrary bytes, both ways in: from a
 * buffer (ckpt_parse) and from a file descriptor (ckpt_read_fd on a memfd,
 * the path a restore takes). Neither crashes or over-reads, both reach the
 * same verdict, an image they accept is self-consistent, and the header
 * check agrees with the full read about what it rejects. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/checkpoint/ckpt.h"

static void check_accepted(const ckpt_state *s, size_t size) {
  if (ckpt_file_size(s) != size || s->world < 1 || !s->per_rank || !s->params ||
      (s->optim_slots && !s->optim_state) || !s->owned || s->n_params > CKPT_MAX_PARAMS)
    abort();
  /* Touch every array end so ASan catches a short allocation. */
  volatile float f = s->n_params ? s->params[s->n_params - 1] : 0;
  volatile uint64_t r = s->per_rank[s->world * s->replicas * CKPT_RANK_WORDS - 1];
  (void)f;
  (void)r;
}

/* ckpt_read_fd on a memfd holding data; -1 when no memfd could be had. */
static int read_via_fd(const uint8_t *data, size_t size, ckpt_state *s, char *err, size_t errlen) {
  int fd = memfd_create("fuzz_ckpt", MFD_CLOEXEC), rc = -1;
  if (fd < 0)
    return -1;
  size_t off = 0;
  while (off < size) {
    ssize_t w = write(fd, data + off, size - off);
    if (w <= 0)
      goto out;
    off += (size_t)w;
  }
  if (lseek(fd, 0, SEEK_SET) != 0)
    goto out;
  rc = (int)ckpt_read_fd(fd, s, err, errlen);
out:
  close(fd);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ckpt_state s, t, h;
  char err[256] = "", err2[256] = "", err3[256] = "";
  ctrain_err r = ckpt_parse(data, size, &s, err, sizeof(err));
  if (r == CTRAIN_OK) {
    check_accepted(&s, size);
  } else if (!err[0] || s.params || s.per_rank || s.owned) {
    abort();
  }
  /* The header alone: whatever it rejects, the full read rejects too, and
   * it never hands out arrays. */
  if (size >= CKPT_HEADER_BYTES) {
    ctrain_err hr = ckpt_check_header(data, size, &h, err3, sizeof(err3));
    if (h.params || h.per_rank || h.owned || (hr != CTRAIN_OK && r == CTRAIN_OK) ||
        (hr != CTRAIN_OK && !err3[0]))
      abort();
  }
  int fr = read_via_fd(data, size, &t, err2, sizeof(err2));
  if (fr >= 0) {
    if ((fr == CTRAIN_OK) != (r == CTRAIN_OK))
      abort();
    if (fr == CTRAIN_OK) {
      check_accepted(&t, size);
      if (memcmp(s.blob, t.blob, size - CKPT_HASH_BYTES))
        abort();
      ckpt_state_free(&t);
    } else if (!err2[0] || t.params || t.per_rank) {
      abort();
    }
  }
  ckpt_state_free(&s);
  return 0;
}
