/* spawn.c - container processes in pod namespaces (see ctrain/lnode_spawn.h). */
#include "ctrain/lnode_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctrain/lnode_util.h"

static int depth(const char *p) {
  int d = 0;
  for (; *p; p++)
    if (*p == '/' && p[1] && p[1] != '/')
      d++;
  return d;
}

void lnode_mounts_sort(lnode_mount *m, size_t n) {
  /* Insertion sort: stable, and n is small. */
  for (size_t i = 1; i < n; i++) {
    lnode_mount x = m[i];
    size_t j = i;
    while (j > 0 && depth(m[j - 1].dst) > depth(x.dst)) {
      m[j] = m[j - 1];
      j--;
    }
    m[j] = x;
  }
}

/* Failure report of the child: step and errno, then _exit. Only
 * async-signal-safe calls from here on. */
typedef struct {
  int err;
  char step[120];
} child_fail;

static void die_child(int fd, const char *step, const char *arg) {
  child_fail f;
  size_t n = 0;
  f.err = errno;
  memset(f.step, 0, sizeof(f.step));
  for (const char *s = step; *s && n < sizeof(f.step) - 2; s++)
    f.step[n++] = *s;
  if (arg) {
    f.step[n++] = ' ';
    for (const char *s = arg; *s && n < sizeof(f.step) - 1; s++)
      f.step[n++] = *s;
  }
  ssize_t w = write(fd, &f, sizeof(f));
  (void)w;
  _exit(127);
}

/* mkdir -p inside the child (no allocation). */
static int child_mkdir_p(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n >= sizeof(buf))
    return -1;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) && errno != EEXIST)
      return -1;
    buf[i] = c;
  }
  return 0;
}

static int child_parent_dir(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n >= sizeof(buf))
    return -1;
  memcpy(buf, path, n + 1);
  char *slash = strrchr(buf, '/');
  if (!slash || slash == buf)
    return 0;
  *slash = '\0';
  return child_mkdir_p(buf);
}

static void child(const lnode_spawn_req *r, int logfd, int failfd) {
  sigset_t none;
  sigemptyset(&none);
  for (int s = 1; s < NSIG; s++)
    signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (setsid() < 0)
    die_child(failfd, "setsid", NULL);
  if (r->netns_path) {
    int nfd = open(r->netns_path, O_RDONLY | O_CLOEXEC);
    if (nfd < 0)
      die_child(failfd, "open netns", r->netns_path);
    if (setns(nfd, CLONE_NEWNET))
      die_child(failfd, "setns", r->netns_path);
    close(nfd);
  }
  if (unshare(CLONE_NEWNS | CLONE_NEWUTS))
    die_child(failfd, "unshare", "mount/uts namespace");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
    die_child(failfd, "make / private", NULL);
  if (r->hostname && sethostname(r->hostname, strlen(r->hostname)))
    die_child(failfd, "sethostname", r->hostname);
  for (size_t i = 0; i < r->n_mounts; i++) {
    const lnode_mount *m = &r->mounts[i];
    struct stat st, dt;
    if (stat(m->src, &st))
      die_child(failfd, "stat volume", m->src);
    if (S_ISDIR(st.st_mode)) {
      if (child_mkdir_p(m->dst))
        die_child(failfd, "create mount point", m->dst);
    } else if (stat(m->dst, &dt)) {
      if (child_parent_dir(m->dst))
        die_child(failfd, "create mount point", m->dst);
      int fd = open(m->dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0)
        die_child(failfd, "create mount point", m->dst);
      close(fd);
    }
    if (mount(m->src, m->dst, NULL, MS_BIND | MS_REC, NULL))
      die_child(failfd, "bind mount", m->dst);
    if (m->read_only && mount(NULL, m->dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL))
      die_child(failfd, "read-only remount", m->dst);
  }
  const char *wd = r->workdir && *r->workdir ? r->workdir : "/";
  if (child_mkdir_p(wd) || chdir(wd))
    die_child(failfd, "chdir", wd);
  int nullfd = open("/dev/null", O_RDONLY);
  if (nullfd < 0 || dup2(nullfd, 0) < 0)
    die_child(failfd, "open /dev/null", NULL);
  if (dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
    die_child(failfd, "redirect output", r->log_path);
  /* Everything else the agent had open (sockets of the apiserver client)
   * closes at exec; the failure pipe is already close-on-exec. */
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(r->path, r->argv, r->envp);
  die_child(failfd, "exec", r->path);
}

ctrain_err lnode_spawn(const lnode_spawn_req *r, pid_t *pid, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int pfd[2] = {-1, -1};
  int logfd = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (logfd < 0)
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "open log %s: %s", r->log_path, strerror(errno));
  if (pipe2(pfd, O_CLOEXEC)) {
    result = ctrain_errf(CTRAIN_E_IO, err, errlen, "pipe: %s", strerror(errno));
    goto out;
  }
  pid_t p = fork();
  if (p < 0) {
    result = ctrain_errf(CTRAIN_E_IO, err, errlen, "fork: %s", strerror(errno));
    goto out;
  }
  if (p == 0) {
    close(pfd[0]);
    child(r, logfd, pfd[1]);
    _exit(127);
  }
  close(pfd[1]);
  pfd[1] = -1;
  child_fail f;
  ssize_t n;
  do {
    n = read(pfd[0], &f, sizeof(f));
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    *pid = p;
    goto out;
  }
  /* The child failed before exec: reap it, report the step. */
  while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
  }
  if (n == (ssize_t)sizeof(f)) {
    f.step[sizeof(f.step) - 1] = '\0';
    if (!strncmp(f.step, "exec", 4) && f.err == ENOENT)
      result = ctrain_errf(CTRAIN_E_NOTFOUND, err, errlen,
                           "exec: \"%s\": no such file or directory", r->path);
    else
      result = ctrain_errf(CTRAIN_E_IO, err, errlen, "%s: %s", f.step, strerror(f.err));
  } else {
    result = ctrain_errf(CTRAIN_E_IO, err, errlen, "container process failed before exec");
  }
out:
  if (pfd[0] >= 0)
    close(pfd[0]);
  if (pfd[1] >= 0)
    close(pfd[1]);
  close(logfd);
  return result;
}
