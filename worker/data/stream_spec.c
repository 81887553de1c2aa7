/* stream_spec.c - a --data spec into the stream's files: local entries
 * through files.c, s3:// and gs:// entries listed (stream.h). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "worker/data/files.h"
#include "worker/data/numpy.h"
#include "worker/data/stream_impl.h"

static int is_uri(const char *e) {
  return !strncmp(e, "s3://", 5) || !strncmp(e, "gs://", 5);
}

int data_spec_has_uri(const char *spec) {
  for (const char *e = spec; e && *e; e = strchr(e, ',') ? strchr(e, ',') + 1 : NULL)
    if (is_uri(e))
      return 1;
  return 0;
}

void stream_files_free(data_stream *s) {
  for (int i = 0; i < s->nfiles; i++) {
    free(s->files[i].name);
    free(s->files[i].key);
    free(s->files[i].bucket_uri);
    free(s->files[i].cache_path);
  }
  free(s->files);
  s->files = NULL;
  s->nfiles = 0;
}

/* Appends a file (strings copied). */
static ctrain_err add_file(data_stream *s, const char *name, const char *key,
                           const char *bucket_uri, int64_t size, const char *etag, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  stream_file *grown = NULL, *f = NULL;
  if (s->nfiles == FILES_MAX)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: more than %d files", s->o.flag, FILES_MAX);
  grown = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof(*grown));
  if (!grown)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", s->o.flag);
  s->files = grown;
  f = &s->files[s->nfiles++];
  memset(f, 0, sizeof(*f));
  f->name = strdup(name);
  f->key = key ? strdup(key) : NULL;
  f->bucket_uri = bucket_uri ? strdup(bucket_uri) : NULL;
  f->size = size;
  snprintf(f->etag, sizeof(f->etag), "%s", etag);
  if (!f->name || (key && !f->key) || (bucket_uri && !f->bucket_uri))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", s->o.flag);
out:
  return result;
}

static ctrain_err add_local(data_stream *s, const char *entry, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  files_list fl = {0};
  struct stat st;
  char mt[80];
  result = files_expand(entry, 1, s->o.flag, &fl, errbuf, errlen);
  for (int i = 0; i < fl.n && !result; i++) {
    if (stat(fl.names[i], &st))
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s %s: no such file", s->o.flag, fl.names[i]);
    snprintf(mt, sizeof(mt), "%lld.%09ld", (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    result = add_file(s, fl.names[i], NULL, NULL, (int64_t)st.st_size, mt, errbuf, errlen);
  }
out:
  files_free(&fl);
  return result;
}

/* Whether the listed key is taken for the entry's path: "" or ".../" every
 * object under it, a pattern its matches (`*` not crossing '/'), else the
 * key itself. */
static int takes(const char *path, const char *key) {
  size_t n = strlen(path), k = strlen(key);
  if (k && key[k - 1] == '/')
    return 0; /* a "directory" marker */
  if (!n || path[n - 1] == '/')
    return 1;
  if (strpbrk(path, "*?["))
    return fnmatch(path, key, FNM_PATHNAME) == 0;
  return !strcmp(path, key);
}

/* The objects an s3:// or gs:// entry names, listed in key order. */
static ctrain_err add_uri(data_stream *s, const char *entry, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s3_options o = s->s3;
  s3_client *c = NULL;
  s3_object_list l = {0};
  char bucket_uri[300], prefix[1025], name[2048], why[STREAM_MSG];
  const char *slash = strchr(entry + 5, '/');
  const char *path = slash ? slash + 1 : "";
  int first = s->nfiles;
  size_t blen = slash ? (size_t)(slash - entry) : strlen(entry);
  if (blen >= sizeof(bucket_uri) || strlen(path) >= sizeof(prefix))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s %s: URI too long", s->o.flag, entry);
  snprintf(bucket_uri, sizeof(bucket_uri), "%.*s", (int)blen, entry);
  snprintf(prefix, sizeof(prefix), "%.*s", (int)strcspn(path, "*?["), path);
  o.uri = bucket_uri;
  if (s3_client_new(&o, &c, why, sizeof(why)))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s %s: %s", s->o.flag, entry, why);
  ctrain_err rc = s3_list(c, prefix, &l, why, sizeof(why));
  if (rc) /* retried to the end: exit 75, as a range */
    CTRAIN_FAIL(s3_client_last_retryable(c) ? CTRAIN_E_NET : rc, "%s %s: listing: %s", s->o.flag,
                entry, why);
  for (size_t i = 0; i < l.n && !result; i++) {
    if (!takes(path, l.items[i].name))
      continue;
    snprintf(name, sizeof(name), "%s/%s", bucket_uri, l.items[i].name);
    result = add_file(s, name, l.items[i].name, bucket_uri, l.items[i].size, l.items[i].etag,
                      errbuf, errlen);
  }
  if (!result && s->nfiles == first)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s %s: no object matches", s->o.flag, entry);
out:
  s3_object_list_free(&l);
  s3_client_free(c);
  return result;
}

/* NumPy: the .npy labels files of another file are read with it. */
static ctrain_err drop_partners(data_stream *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char **names = calloc((size_t)s->nfiles + 1, sizeof(char *));
  int n = s->nfiles, k = 0;
  if (!names)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", s->o.flag);
  for (int i = 0; i < n && !result; i++)
    if (!(names[i] = strdup(s->files[i].name)))
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", s->o.flag);
  npy_drop_partners(names, &n, &s->fmt);
  for (int i = 0, j = 0; i < s->nfiles; i++) {
    if (j < n && !strcmp(names[j], s->files[i].name)) {
      s->files[k++] = s->files[i];
      j++;
      continue;
    }
    free(s->files[i].name);
    free(s->files[i].key);
    free(s->files[i].bucket_uri);
  }
  s->nfiles = k;
out:
  for (int i = 0; names && i < n; i++)
    free(names[i]);
  free(names);
  return result;
}

ctrain_err stream_expand(data_stream *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char *copy = strdup(s->o.spec);
  if (!copy)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", s->o.flag);
  for (char *save = NULL, *e = strtok_r(copy, ",", &save); e && !result;
       e = strtok_r(NULL, ",", &save))
    result = is_uri(e) ? add_uri(s, e, errbuf, errlen) : add_local(s, e, errbuf, errlen);
  if (result)
    goto out;
  if (!s->nfiles)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: no data files given", s->o.flag);
  s->format = s->fmt.format;
  if (s->format == DATA_FMT_AUTO)
    s->format = npy_name_matches(s->files[0].name) ? DATA_FMT_NUMPY : DATA_FMT_TFRECORD;
  if (s->format != DATA_FMT_TFRECORD && s->format != DATA_FMT_NUMPY)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s: streaming reads TFRecord or NumPy data, not this format",
                s->o.flag);
  if (s->format == DATA_FMT_NUMPY)
    result = drop_partners(s, errbuf, errlen);
out:
  free(copy);
  return result;
}
