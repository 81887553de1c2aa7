/* test_fs.h - scratch directories and small files for the unit tests that
 * touch the file system (one copy, header-only like test.h). */
#ifndef CTRAIN_TEST_FS_H
#define CTRAIN_TEST_FS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

/* A fresh directory /tmp/<prefix>.XXXXXX in dir[len]. */
__attribute__((unused)) static void fs_make_dir(char *dir, size_t len, const char *prefix) {
  snprintf(dir, len, "/tmp/%s.XXXXXX", prefix);
  ASSERT_NOT_NULL(mkdtemp(dir));
}

/* Removes dir and everything below it (best effort). */
__attribute__((unused)) static void fs_rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    char p[4096];
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
    if (unlink(p))
      fs_rm_rf(p);
  }
  if (d)
    closedir(d);
  rmdir(dir);
}

__attribute__((unused)) static void fs_put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  ASSERT_OK(fclose(f));
}

/* The whole (small) file as a string, "" when missing; a static buffer. */
__attribute__((unused)) static const char *fs_slurp(const char *path) {
  static char buf[65536];
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return buf;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

#endif
