/* cmd.c - container argv and executable lookup (see ctrain/lnode_cmd.h). */
#include "ctrain/lnode_cmd.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/lnode_util.h"

void lnode_cmd_argv_free(char **argv) {
  if (!argv)
    return;
  for (char **p = argv; *p; p++)
    free(*p);
  free(argv);
}

ctrain_err lnode_cmd_argv(const cJSON *container, const lnode_env *env, char ***out, char *err,
                          size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(container, "command");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(container, "args");
  int n = cJSON_GetArraySize(cmd) + cJSON_GetArraySize(args);
  char **argv = NULL;
  int k = 0;
  if (n == 0) {
    result =
        ctrain_errf(CTRAIN_E_INVAL, err, errlen,
                    "container %s has neither command nor args (no image entrypoint here)",
                    lnode_json_str(container, "name") ? lnode_json_str(container, "name") : "");
    goto out;
  }
  argv = calloc((size_t)n + 1, sizeof(*argv));
  if (!argv) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  const cJSON *lists[2] = {cmd, args};
  for (int l = 0; l < 2; l++) {
    const cJSON *it;
    cJSON_ArrayForEach(it, lists[l]) {
      if (!cJSON_IsString(it)) {
        result = ctrain_errf(CTRAIN_E_INVAL, err, errlen, "command/args element is not a string");
        goto out;
      }
      argv[k] = lnode_env_expand(env, it->valuestring);
      if (!argv[k]) {
        result = CTRAIN_E_NOMEM;
        goto out;
      }
      k++;
    }
  }
  *out = argv;
  argv = NULL;
out:
  lnode_cmd_argv_free(argv);
  return result;
}

static int is_exec_file(const char *p) {
  struct stat st;
  return !stat(p, &st) && S_ISREG(st.st_mode) && !access(p, X_OK);
}

/* Searches one ':'-list; *out set on a hit. */
static ctrain_err search(const char *name, const char *dirs, char **out) {
  const char *p = dirs;
  char buf[4096];
  while (p && *p) {
    const char *c = strchr(p, ':');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    if (n == 0) {
      /* An empty PATH element is the current directory; not for us. */
    } else if (!lnode_fmt(buf, sizeof(buf), "%.*s/%s", (int)n, p, name) && is_exec_file(buf)) {
      *out = strdup(buf);
      return *out ? CTRAIN_OK : CTRAIN_E_NOMEM;
    }
    if (!c)
      break;
    p = c + 1;
  }
  return CTRAIN_E_NOTFOUND;
}

ctrain_err lnode_cmd_resolve(const char *name, const char *bin_dirs, const char *path, char **out,
                             char *err, size_t errlen) {
  ctrain_err result;
  if (!name || !*name)
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "empty executable name");
  if (strchr(name, '/')) {
    *out = strdup(name);
    return *out ? CTRAIN_OK : CTRAIN_E_NOMEM;
  }
  result = search(name, bin_dirs, out);
  if (result == CTRAIN_E_NOTFOUND)
    result = search(name, path, out);
  if (result == CTRAIN_E_NOTFOUND)
    ctrain_errf(result, err, errlen, "exec: \"%s\": executable file not found in $PATH", name);
  return result;
}
