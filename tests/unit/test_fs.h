/* test_fs.h - scratch directories and small files for the unit tests that
 * touch the file system (one copy, header-only like test.h). */
#ifndef CTRAIN_TEST_FS_H
#define CTRAIN_TEST_FS_H

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/fileio.h"
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

/* Shared by the tests of common's writer (test_fileio.c) and of the model
 * writer that uses it (test_safetensors.c). */

__attribute__((unused)) static int is_regular(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Deterministic nonces, so a test knows every temp name a writer will try. */
__attribute__((unused)) static uint64_t g_nonce;
__attribute__((unused)) static uint64_t counting_nonce(void *arg) {
  (void)arg;
  return g_nonce++;
}

/* Plants `n` symbolic links, one at each of the temp names the next writer
 * of `target` will try (nonces from `first`), each to its own victim file in
 * `outside` holding "victim <i>". */
__attribute__((unused)) static void plant_temp_links(const char *target, const char *outside,
                                                     uint64_t first, int n) {
  for (int i = 0; i < n; i++) {
    char tmp[4096], victim[4200], text[64];
    ASSERT_OK(ctrain_file_format_temp(target, first + (uint64_t)i, tmp, sizeof(tmp)));
    snprintf(victim, sizeof(victim), "%s/victim-%s-%d", outside, strrchr(target, '/') + 1, i);
    snprintf(text, sizeof(text), "victim %d", i);
    fs_put_file(victim, text);
    ASSERT_OK(symlink(victim, tmp));
  }
}

__attribute__((unused)) static void check_victims(const char *target, const char *outside, int n) {
  for (int i = 0; i < n; i++) {
    char victim[4200], text[64];
    snprintf(victim, sizeof(victim), "%s/victim-%s-%d", outside, strrchr(target, '/') + 1, i);
    snprintf(text, sizeof(text), "victim %d", i);
    ASSERT_STR_EQ(fs_slurp(victim), text);
  }
}

/* Copies file `from` to `to`. */
__attribute__((unused)) static void fs_copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  ASSERT_NOT_NULL(a);
  ASSERT_NOT_NULL(b);
  char buf[8192];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
    ASSERT_EQ(fwrite(buf, 1, n, b), n);
  fclose(a);
  ASSERT_OK(fclose(b));
}

/* XORs the byte at `off` of `path` with 0x40. */
__attribute__((unused)) static void fs_flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  ASSERT_NOT_NULL(f);
  ASSERT_OK(fseek(f, off, SEEK_SET));
  int c = fgetc(f);
  ASSERT_NE(c, EOF);
  ASSERT_OK(fseek(f, off, SEEK_SET));
  ASSERT_EQ(fputc(c ^ 0x40, f), c ^ 0x40);
  ASSERT_OK(fclose(f));
}

#endif
