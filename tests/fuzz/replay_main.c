/* replay_main.c - runs a fuzz target over every file of a corpus directory,
 * for builds without libFuzzer. Exits non-zero if the directory is missing or
 * empty: a fuzz test that ran nothing must not pass. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  DIR *d = opendir(argv[1]);
  if (!d) {
    perror(argv[1]);
    return 1;
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) {
      perror(path);
      closedir(d);
      return 1;
    }
    struct stat st;
    fstat(fileno(f), &st);
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    size_t len = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!buf) {
      closedir(d);
      return 1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    n++;
  }
  closedir(d);
  printf("%s: replayed %d inputs\n", argv[1], n);
  return n > 0 ? 0 : 1;
}
