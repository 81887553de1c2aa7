/* files.c - a data spec into its files (file, directory, glob). */
#include "worker/data/files.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void files_free(files_list *fl) {
  if (!fl)
    return;
  for (int i = 0; i < fl->n; i++)
    free(fl->names[i]);
  free(fl->names);
  fl->names = NULL;
  fl->n = 0;
}

/* Appends a copy of `name` (dir/name when dir is given). */
static ctrain_err add(files_list *fl, const char *dir, const char *name, const char *flag,
                      char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char **grown = NULL;
  if (fl->n == FILES_MAX)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: more than %d files", flag, FILES_MAX);
  grown = realloc(fl->names, (size_t)(fl->n + 1) * sizeof(char *));
  if (!grown)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", flag);
  fl->names = grown;
  size_t len = (dir ? strlen(dir) + 1 : 0) + strlen(name) + 1;
  char *s = malloc(len);
  if (!s)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", flag);
  snprintf(s, len, "%s%s%s", dir ? dir : "", dir ? "/" : "", name);
  fl->names[fl->n++] = s;
out:
  return result;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_regular(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The regular files of directory `dir`, sorted. */
static ctrain_err add_dir(files_list *fl, const char *dir, const char *flag, char *errbuf,
                          size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  DIR *d = opendir(dir);
  struct dirent *e;
  int first = fl->n;
  if (!d)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s %s: cannot open directory: %s", flag, dir, strerror(errno));
  while ((e = readdir(d))) {
    char p[4096];
    if (e->d_name[0] == '.')
      continue;
    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
    if (!is_regular(p))
      continue;
    result = add(fl, dir, e->d_name, flag, errbuf, errlen);
    if (result)
      goto out;
  }
  if (fl->n == first)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s %s: the directory holds no data files", flag, dir);
  qsort(fl->names + first, (size_t)(fl->n - first), sizeof(char *), by_name);
out:
  if (d)
    closedir(d);
  return result;
}

static ctrain_err add_glob(files_list *fl, const char *pat, const char *flag, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  glob_t g;
  int rc = glob(pat, 0, NULL, &g);
  if (rc == GLOB_NOMATCH)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s %s: no file matches the pattern", flag, pat);
  if (rc)
    CTRAIN_FAIL(rc == GLOB_NOSPACE ? CTRAIN_E_NOMEM : CTRAIN_E_DATA, "%s %s: glob failed", flag,
                pat);
  for (size_t i = 0; i < g.gl_pathc && !result; i++)
    result = add(fl, NULL, g.gl_pathv[i], flag, errbuf, errlen);
out:
  if (rc == 0)
    globfree(&g);
  return result;
}

ctrain_err files_expand(const char *spec, int expand, const char *flag, files_list *fl,
                        char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char *copy = strdup(spec);
  struct stat st;
  memset(fl, 0, sizeof(*fl));
  if (!copy)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", flag);
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (expand && strpbrk(tok, "*?["))
      result = add_glob(fl, tok, flag, errbuf, errlen);
    else if (expand && stat(tok, &st) == 0 && S_ISDIR(st.st_mode))
      result = add_dir(fl, tok, flag, errbuf, errlen);
    else
      result = add(fl, NULL, tok, flag, errbuf, errlen);
    if (result)
      goto out;
  }
out:
  free(copy);
  if (result)
    files_free(fl);
  return result;
}
