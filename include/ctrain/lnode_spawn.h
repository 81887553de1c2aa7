/* ctrain/lnode_spawn.h - starting one container process in a pod's
 * namespaces.
 *
 * The child joins the pod's network namespace (a netns file), unshares a
 * mount and UTS namespace of its own, makes every mount private, sets the
 * pod hostname, bind-mounts each volume (and /etc/hosts) at its path,
 * changes to the working directory, sends stdout and stderr to the log file
 * and execs. It leads its own process group, so the pod's processes get
 * signals as a group. A failure before exec comes back to the parent
 * through a close-on-exec pipe, so "started" means exec succeeded. */
#ifndef CTRAIN_LNODE_SPAWN_H
#define CTRAIN_LNODE_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

#include "ctrain/err.h"

typedef struct lnode_mount {
  const char *src; /* host path (file or directory) */
  const char *dst; /* path inside the container */
  int read_only;
} lnode_mount;

typedef struct lnode_spawn_req {
  const char *path;       /* executable (absolute or relative to workdir) */
  char *const *argv;      /* NULL-terminated */
  char *const *envp;      /* NULL-terminated */
  const char *netns_path; /* /run/netns/<name>; NULL: host network */
  const char *hostname;   /* NULL: unchanged */
  const lnode_mount *mounts;
  size_t n_mounts;      /* applied in order: parents before children */
  const char *workdir;  /* NULL: "/" */
  const char *log_path; /* stdout+stderr, appended */
} lnode_spawn_req;

/* Starts the process. On success *pid is its pid (also its process group).
 * On failure `err` says which step failed (the kubelet's StartError
 * message) and no process is left behind. All inputs are borrowed. */
ctrain_err lnode_spawn(const lnode_spawn_req *r, pid_t *pid, char *err, size_t errlen);

/* Sorts mounts so that a path comes after its parents (stable by depth). */
void lnode_mounts_sort(lnode_mount *m, size_t n);

#endif
