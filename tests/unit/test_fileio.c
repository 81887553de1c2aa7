/* test_fileio.c - common's shared-storage writer: atomic replacement, links
 * planted at every temp name it may try and at the target are never
 * followed, a write that fails leaves the old file, the appender refuses
 * links, FIFOs and directories without blocking; `mkdir -p` (ctrain_mkdir_p).
 * (The model writer's use of it is test_safetensors.c.) */
#include "test.h"
#include "test_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "ctrain/fileio.h"

static size_t count_entries(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  size_t n = 0;
  while (d && (de = readdir(d)))
    n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
  if (d)
    closedir(d);
  return n;
}

static int is_link(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

TEST(temp_name_format) {
  char out[128];
  ASSERT_OK(ctrain_file_format_temp("d/e/f.bin", 255, out, sizeof(out)));
  ASSERT_STR_EQ(out, "d/e/.f.bin.00000000000000ff.tmp");
  ASSERT_OK(ctrain_file_format_temp("f", 1, out, sizeof(out)));
  ASSERT_STR_EQ(out, ".f.0000000000000001.tmp");
  ASSERT_EQ(ctrain_file_format_temp("d/", 1, out, sizeof(out)), CTRAIN_E_INVAL);
  ASSERT_EQ(ctrain_file_format_temp("d/..", 1, out, sizeof(out)), CTRAIN_E_INVAL);
  ASSERT_EQ(ctrain_file_format_temp("d/f", 1, out, 8), CTRAIN_E_INVAL);
}

TEST(save_replaces_and_leaves_only_the_target) {
  char dir[64], path[256], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_fileio");
  snprintf(path, sizeof(path), "%s/out.json", dir);
  ASSERT_OK(ctrain_file_save(path, "one", 3, err, sizeof(err)));
  ASSERT_STR_EQ(fs_slurp(path), "one");
  fs_put_file(path, "old and longer");
  ASSERT_OK(ctrain_file_save(path, "two", 3, err, sizeof(err)));
  ASSERT_STR_EQ(fs_slurp(path), "two");
  ASSERT(is_regular(path));
  ASSERT_EQ(count_entries(dir), 1);
  /* Streaming: many writes, one file. */
  ctrain_file *f = NULL;
  ASSERT_OK(ctrain_file_create(path, &f, err, sizeof(err)));
  ASSERT_STR_CONTAINS(ctrain_file_temp_path(f), "/.out.json.");
  for (int i = 0; i < 100; i++)
    ASSERT_OK(ctrain_file_write(f, "x", 1, err, sizeof(err)));
  ASSERT_STR_EQ(fs_slurp(path), "two"); /* untouched until the commit */
  ASSERT_EQ(count_entries(dir), 2);
  ASSERT_OK(ctrain_file_commit(f, err, sizeof(err)));
  ASSERT_EQ(strlen(fs_slurp(path)), 100);
  ASSERT_EQ(count_entries(dir), 1);
  /* Abort: the temp file goes, the target stays. */
  ASSERT_OK(ctrain_file_create(path, &f, err, sizeof(err)));
  ASSERT_OK(ctrain_file_write(f, "y", 1, err, sizeof(err)));
  ctrain_file_abort(f);
  ctrain_file_abort(NULL);
  ASSERT_EQ(strlen(fs_slurp(path)), 100);
  ASSERT_EQ(count_entries(dir), 1);
  /* A path without a directory part works in the current directory. */
  ASSERT_OK(chdir(dir));
  ASSERT_OK(ctrain_file_save("rel.txt", "rel", 3, err, sizeof(err)));
  ASSERT_STR_EQ(fs_slurp("rel.txt"), "rel");
  ASSERT_OK(chdir("/"));
  fs_rm_rf(dir);
}

TEST(links_at_every_temp_name_and_the_target_are_not_followed) {
  char dir[64], outside[64], path[256], victim[256], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_fileio");
  fs_make_dir(outside, sizeof(outside), "test_fileio");
  snprintf(path, sizeof(path), "%s/model.bin", dir);
  snprintf(victim, sizeof(victim), "%s/target-victim", outside);
  fs_put_file(victim, "precious");
  ASSERT_OK(symlink(victim, path));
  /* Every name but the last the writer may try is a link elsewhere. */
  g_nonce = 1000;
  ctrain_file_set_nonce_source(counting_nonce, NULL);
  plant_temp_links(path, outside, 1000, CTRAIN_FILE_TEMP_TRIES - 1);
  ASSERT_OK(ctrain_file_save(path, "new content", 11, err, sizeof(err)));
  ASSERT_EQ(g_nonce, 1000 + CTRAIN_FILE_TEMP_TRIES);
  check_victims(path, outside, CTRAIN_FILE_TEMP_TRIES - 1);
  ASSERT_STR_EQ(fs_slurp(victim), "precious");
  /* The link at the target was replaced, not written through. */
  ASSERT(is_regular(path));
  ASSERT_STR_EQ(fs_slurp(path), "new content");
  for (int i = 0; i < CTRAIN_FILE_TEMP_TRIES - 1; i++) {
    char tmp[4096];
    ASSERT_OK(ctrain_file_format_temp(path, 1000 + (uint64_t)i, tmp, sizeof(tmp)));
    ASSERT(is_link(tmp));
  }
  ASSERT_EQ(count_entries(dir), (size_t)CTRAIN_FILE_TEMP_TRIES);
  ctrain_file_set_nonce_source(NULL, NULL);
  fs_rm_rf(dir);
  fs_rm_rf(outside);
}

TEST(every_temp_name_taken_fails_cleanly) {
  char dir[64], outside[64], path[256], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_fileio");
  fs_make_dir(outside, sizeof(outside), "test_fileio");
  snprintf(path, sizeof(path), "%s/model.bin", dir);
  fs_put_file(path, "old");
  g_nonce = 7;
  ctrain_file_set_nonce_source(counting_nonce, NULL);
  plant_temp_links(path, outside, 7, CTRAIN_FILE_TEMP_TRIES);
  ASSERT_EQ(ctrain_file_save(path, "new", 3, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, path);
  ASSERT_STR_CONTAINS(err, "no free temp name");
  check_victims(path, outside, CTRAIN_FILE_TEMP_TRIES);
  ASSERT_STR_EQ(fs_slurp(path), "old");
  ASSERT_EQ(count_entries(dir), (size_t)CTRAIN_FILE_TEMP_TRIES + 1);
  ctrain_file_set_nonce_source(NULL, NULL);
  /* With real nonces the planted names are never tried. */
  ASSERT_OK(ctrain_file_save(path, "new", 3, err, sizeof(err)));
  ASSERT_STR_EQ(fs_slurp(path), "new");
  check_victims(path, outside, CTRAIN_FILE_TEMP_TRIES);
  fs_rm_rf(dir);
  fs_rm_rf(outside);
}

TEST(failed_write_keeps_the_old_file) {
  char dir[64], path[256], err[512] = "";
  static char big[64 * 1024];
  fs_make_dir(dir, sizeof(dir), "test_fileio");
  snprintf(path, sizeof(path), "%s/big.bin", dir);
  fs_put_file(path, "old");
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
  ASSERT_OK(setrlimit(RLIMIT_FSIZE, &rl));
  ASSERT_EQ(ctrain_file_save(path, big, sizeof(big), err, sizeof(err)), CTRAIN_E_NOSPACE);
  ASSERT_STR_CONTAINS(err, "/.big.bin.");
  ASSERT_STR_CONTAINS(err, "too large");
  ASSERT_STR_EQ(fs_slurp(path), "old");
  ASSERT_EQ(count_entries(dir), 1);
  /* A failed write poisons the stream: commit refuses and cleans up. */
  ctrain_file *f = NULL;
  ASSERT_OK(ctrain_file_create(path, &f, err, sizeof(err)));
  ASSERT_EQ(ctrain_file_write(f, big, sizeof(big), err, sizeof(err)), CTRAIN_E_NOSPACE);
  ASSERT_EQ(ctrain_file_write(f, "x", 1, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_EQ(ctrain_file_commit(f, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_EQ(fs_slurp(path), "old");
  ASSERT_EQ(count_entries(dir), 1);
  /* No directory: an error naming the path, nothing created. */
  snprintf(path, sizeof(path), "%s/missing/x", dir);
  ASSERT_EQ(ctrain_file_save(path, "x", 1, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, path);
  ASSERT_EQ(ctrain_file_fsync_dir(path, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_OK(ctrain_file_fsync_dir(dir, err, sizeof(err)));
  fs_rm_rf(dir);
}

TEST(open_append_refuses_links_fifos_and_directories) {
  char dir[64], outside[64], path[256], victim[256], err[512] = "";
  int fd = 123;
  fs_make_dir(dir, sizeof(dir), "test_fileio");
  fs_make_dir(outside, sizeof(outside), "test_fileio");
  alarm(5); /* a FIFO open that blocks fails here, not at the runner's timeout */
  /* A regular file: appended to, blocking, close-on-exec. */
  snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
  fs_put_file(path, "{\"epoch\":1}\n");
  ASSERT_OK(ctrain_file_open_append(path, &fd, err, sizeof(err)));
  ASSERT_EQ(write(fd, "{\"epoch\":2}\n", 12), 12);
  ASSERT_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  close(fd);
  ASSERT_STR_EQ(fs_slurp(path), "{\"epoch\":1}\n{\"epoch\":2}\n");
  /* Created when missing. */
  snprintf(path, sizeof(path), "%s/new.jsonl", dir);
  ASSERT_OK(ctrain_file_open_append(path, &fd, err, sizeof(err)));
  close(fd);
  ASSERT(is_regular(path));
  /* A link to a file elsewhere, and a dangling one: neither followed nor
   * created through. */
  snprintf(victim, sizeof(victim), "%s/victim", outside);
  fs_put_file(victim, "precious");
  snprintf(path, sizeof(path), "%s/link.jsonl", dir);
  ASSERT_OK(symlink(victim, path));
  ASSERT_EQ(ctrain_file_open_append(path, &fd, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_EQ(fd, -1);
  ASSERT_STR_CONTAINS(err, path);
  ASSERT_STR_CONTAINS(err, "symbolic links are not followed");
  ASSERT_STR_EQ(fs_slurp(victim), "precious");
  snprintf(victim, sizeof(victim), "%s/not-yet", outside);
  snprintf(path, sizeof(path), "%s/dangling.jsonl", dir);
  ASSERT_OK(symlink(victim, path));
  ASSERT_EQ(ctrain_file_open_append(path, &fd, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT(access(victim, F_OK) != 0);
  /* A FIFO with no reader, and one with a reader: both refused at once. */
  snprintf(path, sizeof(path), "%s/fifo.jsonl", dir);
  ASSERT_OK(mkfifo(path, 0644));
  ASSERT_EQ(ctrain_file_open_append(path, &fd, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "not a regular file");
  int rd = open(path, O_RDONLY | O_NONBLOCK);
  ASSERT(rd >= 0);
  ASSERT_EQ(ctrain_file_open_append(path, &fd, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "not a regular file");
  close(rd);
  /* A directory. */
  ASSERT_EQ(ctrain_file_open_append(dir, &fd, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, dir);
  alarm(0);
  fs_rm_rf(dir);
  fs_rm_rf(outside);
}

static int is_dir(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(mkdir_p_nested_existing_and_in_the_way) {
  char dir[64], p[256], err[512];
  fs_make_dir(dir, sizeof(dir), "ctrain-mkdirp");
  snprintf(p, sizeof(p), "%s/a/b//c/", dir); /* doubled and trailing slashes */
  ASSERT_OK(ctrain_mkdir_p(p, 0755, err, sizeof(err)));
  snprintf(p, sizeof(p), "%s/a/b/c", dir);
  ASSERT(is_dir(p));
  ASSERT_OK(ctrain_mkdir_p(p, 0755, err, sizeof(err))); /* all there: fine */
  ASSERT_OK(ctrain_mkdir_p(dir, 0755, err, sizeof(err)));

  /* A file where a parent should be: the error names the path and the file. */
  char file[128];
  snprintf(file, sizeof(file), "%s/a/f", dir);
  fs_put_file(file, "x");
  snprintf(p, sizeof(p), "%s/a/f/g/h", dir);
  ASSERT_EQ(ctrain_mkdir_p(p, 0755, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, p);
  ASSERT_STR_CONTAINS(err, "mkdir");
  ASSERT_STR_CONTAINS(err, file);
  /* ... and as the last component. */
  ASSERT_EQ(ctrain_mkdir_p(file, 0755, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "not a directory");
  snprintf(p, sizeof(p), "%s/a/f/g", dir);
  ASSERT(!is_dir(p));

  /* A relative path, and paths that are no path. */
  char cwd[4096];
  ASSERT_NOT_NULL(getcwd(cwd, sizeof(cwd)));
  ASSERT_EQ(chdir(dir), 0);
  ASSERT_OK(ctrain_mkdir_p("rel/x", 0700, err, sizeof(err)));
  ASSERT(is_dir("rel/x"));
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_EQ(ctrain_mkdir_p("", 0755, err, sizeof(err)), CTRAIN_E_INVAL);
  char *longp = malloc(5000);
  ASSERT_NOT_NULL(longp);
  memset(longp, 'a', 4999);
  longp[4999] = '\0';
  ASSERT_EQ(ctrain_mkdir_p(longp, 0755, err, sizeof(err)), CTRAIN_E_INVAL);
  free(longp);
  fs_rm_rf(dir);
}

TEST_MAIN(T(temp_name_format), T(save_replaces_and_leaves_only_the_target),
          T(links_at_every_temp_name_and_the_target_are_not_followed),
          T(every_temp_name_taken_fails_cleanly), T(failed_write_keeps_the_old_file),
          T(open_append_refuses_links_fifos_and_directories),
          T(mkdir_p_nested_existing_and_in_the_way))
