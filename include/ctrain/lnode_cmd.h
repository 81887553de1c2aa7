/* ctrain/lnode_cmd.h - a container's argv and the executable it names.
 *
 * There is no image, hence no image entrypoint: argv is `command` followed
 * by `args`, or `args` alone when `command` is empty, each element $(VAR)-
 * expanded against the container's environment. A bare program name is
 * looked up first in the --bin-dir directories, then in PATH. */
#ifndef CTRAIN_LNODE_CMD_H
#define CTRAIN_LNODE_CMD_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"
#include "ctrain/lnode_env.h"

/* Builds argv (NULL-terminated, owned; free with lnode_cmd_argv_free).
 * CTRAIN_E_INVAL with a message when both command and args are empty. */
ctrain_err lnode_cmd_argv(const cJSON *container, const lnode_env *env, char ***out, char *err,
                          size_t errlen);
void lnode_cmd_argv_free(char **argv);

/* Resolves `name`: a name with a '/' is returned as given (it may live in a
 * volume that only the container's mount namespace shows); a bare name is
 * searched in `bin_dirs` then `path` (both ':'-separated, may be NULL) for
 * an executable regular file. *out is owned. CTRAIN_E_NOTFOUND with the
 * kubelet's message ("executable file not found in $PATH"). */
ctrain_err lnode_cmd_resolve(const char *name, const char *bin_dirs, const char *path, char **out,
                             char *err, size_t errlen);

#endif
