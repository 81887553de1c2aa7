/* stream_npy.c - a NumPy shard of the stream, read whole (stream.h): a local
 * file as it is; an object (.npz) through a file of its name in a private
 * temporary directory (numpy.c reads files by name), a link to its cache
 * entry or its bytes fetched there (filling the cache). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/data/numpy.h"
#include "worker/data/stream_impl.h"

/* The object's bytes into the new file `path`. */
static ctrain_err fetch_to(data_stream *s, stream_file *f, stream_client *cl, const char *path,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  stream_src src = {.fd = -1};
  uint8_t *buf = malloc(s->chunk);
  size_t got = 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (!buf || fd < 0)
    CTRAIN_FAIL(buf ? CTRAIN_E_IO : CTRAIN_E_NOMEM, "%s %s: staging in %s: %s", s->o.flag, f->name,
                path, buf ? strerror(errno) : "out of memory");
  result = stream_src_open(s, f, cl, 1, &src, errbuf, errlen);
  while (!result) {
    result = stream_src_read(&src, buf, s->chunk, &got, errbuf, errlen);
    if (!result && got && write(fd, buf, got) != (ssize_t)got)
      CTRAIN_FAIL(CTRAIN_E_IO, "%s %s: staging in %s: %s", s->o.flag, f->name, path,
                  strerror(errno));
    if (!result && got < s->chunk)
      break;
  }
out:
  if (src.s) {
    ctrain_err closed = stream_src_close(&src, !result, errbuf, result ? 0 : errlen);
    result = result ? result : closed;
  }
  if (fd >= 0)
    close(fd);
  free(buf);
  return result;
}

/* A .npz object read through a local file of its name. */
static ctrain_err npz_object(data_stream *s, stream_file *f, stream_client *cl, data_set *ds,
                             char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *tmp = getenv("TMPDIR"), *base = strrchr(f->key, '/');
  char dir[512], path[1600];
  snprintf(dir, sizeof(dir), "%s/ctrain-npz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s %s: a staging directory in %s: %s", s->o.flag, f->name, dir,
                strerror(errno));
  snprintf(path, sizeof(path), "%s/%s", dir, base ? base + 1 : f->key);
  if (f->cache_path && !symlink(f->cache_path, path))
    result = CTRAIN_OK;
  else
    result = fetch_to(s, f, cl, path, errbuf, errlen);
  if (!result)
    result = npy_load(path, &s->fmt, ds, errbuf, errlen);
  unlink(path);
  rmdir(dir);
  if (!result && s->o.cache_dir && !f->cache_path)
    result = stream_cache_lookup(s->o.cache_dir, f->name, f->size, f->etag, &f->cache_path, errbuf,
                                 errlen);
out:
  return result;
}

ctrain_err stream_npy_read(data_stream *s, stream_file *f, stream_client *cl, data_set *ds,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t n = f->key ? strlen(f->key) : 0;
  memset(ds, 0, sizeof(*ds));
  if (!f->key)
    return npy_load(f->name, &s->fmt, ds, errbuf, errlen);
  if (n < 4 || strcmp(f->key + n - 4, ".npz"))
    CTRAIN_FAIL(CTRAIN_E_UNSUPPORTED,
                "%s %s: a NumPy object must be a .npz (a .npy's labels are another object)",
                s->o.flag, f->name);
  result = npz_object(s, f, cl, ds, errbuf, errlen);
out:
  return result;
}
