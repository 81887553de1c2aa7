/* test_lnode_cmd.c - container argv and executable lookup (bin dirs first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/lnode_cmd.h"
#include "test.h"

static void make_exe(const char *path, int exec) {
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs("#!/bin/sh\n", f);
  fclose(f);
  chmod(path, exec ? 0755 : 0644);
}

TEST(argv_command_args_and_expansion) {
  char *kv[] = {"N=7", NULL};
  lnode_env e = {kv, 1};
  char **argv = NULL;
  char err[256];
  cJSON *c = cJSON_Parse("{\"command\":[\"run\",\"-n\",\"$(N)\"],\"args\":[\"x$(M)\",\"$$(N)\"]}");
  ASSERT_OK(lnode_cmd_argv(c, &e, &argv, err, sizeof(err)));
  ASSERT_STR_EQ(argv[0], "run");
  ASSERT_STR_EQ(argv[2], "7");
  ASSERT_STR_EQ(argv[3], "x$(M)");
  ASSERT_STR_EQ(argv[4], "$(N)");
  ASSERT_NULL(argv[5]);
  lnode_cmd_argv_free(argv);
  cJSON_Delete(c);
  /* args alone: the first is the program (there is no image entrypoint). */
  c = cJSON_Parse("{\"args\":[\"echo\",\"hi\"]}");
  ASSERT_OK(lnode_cmd_argv(c, &e, &argv, err, sizeof(err)));
  ASSERT_STR_EQ(argv[0], "echo");
  lnode_cmd_argv_free(argv);
  cJSON_Delete(c);
  c = cJSON_Parse("{\"name\":\"m\",\"image\":\"x\"}");
  ASSERT_EQ(lnode_cmd_argv(c, &e, &argv, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "neither command nor args");
  cJSON_Delete(c);
}

TEST(resolve_bin_dirs_first) {
  char d1[] = "/tmp/lnode-cmd-XXXXXX", d2[] = "/tmp/lnode-cmd-XXXXXX";
  char p[512], dirs[1100], *out = NULL, err[256];
  ASSERT_NOT_NULL(mkdtemp(d1));
  ASSERT_NOT_NULL(mkdtemp(d2));
  snprintf(p, sizeof(p), "%s/tool", d1);
  make_exe(p, 1);
  snprintf(p, sizeof(p), "%s/tool", d2);
  make_exe(p, 1);
  snprintf(p, sizeof(p), "%s/noexec", d1);
  make_exe(p, 0);
  snprintf(p, sizeof(p), "%s/noexec", d2);
  make_exe(p, 1);
  /* --bin-dir d2 wins over PATH d1. */
  ASSERT_OK(lnode_cmd_resolve("tool", d2, d1, &out, err, sizeof(err)));
  snprintf(p, sizeof(p), "%s/tool", d2);
  ASSERT_STR_EQ(out, p);
  free(out);
  /* A file without the execute bit is skipped. */
  snprintf(dirs, sizeof(dirs), "%s:%s", d1, d2);
  ASSERT_OK(lnode_cmd_resolve("noexec", NULL, dirs, &out, err, sizeof(err)));
  snprintf(p, sizeof(p), "%s/noexec", d2);
  ASSERT_STR_EQ(out, p);
  free(out);
  ASSERT_OK(lnode_cmd_resolve("sh", "/nonexistent", "/usr/bin:/bin", &out, err, sizeof(err)));
  ASSERT_STR_CONTAINS(out, "/sh");
  free(out);
  ASSERT_EQ(lnode_cmd_resolve("no-such-tool-xyz", d1, d2, &out, err, sizeof(err)),
            CTRAIN_E_NOTFOUND);
  ASSERT_STR_CONTAINS(err, "executable file not found in $PATH");
  /* A path is taken as given: it may live in a volume only the container sees. */
  ASSERT_OK(lnode_cmd_resolve("/scripts/run.sh", d1, d2, &out, err, sizeof(err)));
  ASSERT_STR_EQ(out, "/scripts/run.sh");
  free(out);
  snprintf(p, sizeof(p), "rm -rf %s %s", d1, d2);
  ASSERT_EQ(system(p), 0);
}

TEST_MAIN(T(argv_command_args_and_expansion), T(resolve_bin_dirs_first))
