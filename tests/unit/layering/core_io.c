/* tests/unit/layering/core_io.c - compiled, never linked, by the
 * layering_core_* tests (tests/unit/layering/core.cmake) as a file of the
 * pure core (ctrain_core) is: with exactly its include directories and
 * controller/core_poison.h forced in. Each planted I/O must fail to compile:
 * by default "ctrain/kube_client.h" (not on the core's path: it links only
 * common), and with -DCTRAIN_LAYERING_<NAME> a call the poison forbids (a
 * file, a socket, the clock, the environment, a thread). With
 * -DCTRAIN_LAYERING_CONTROL it includes what a core file does and calls what
 * the core may (snprintf, strlen, the JSON accessors, kube_time_format),
 * which must compile, so a failure is the planted line, not the command. */
#if defined(CTRAIN_LAYERING_CONTROL)
#include <stdio.h>
#include <string.h>

#include "controller/recon_internal.h"
#include "ctrain/json.h"
#include "ctrain/kube_time.h"

int layering_probe(const cJSON *obj, char *buf, size_t len);
int layering_probe(const cJSON *obj, char *buf, size_t len) {
  char ts[32];
  if (kube_time_format(0, ts, sizeof(ts)))
    return -1;
  return snprintf(buf, len, "%s %s", ts, ctrain_json_str(obj, "name")) + (int)strlen(ts);
}
#elif defined(CTRAIN_LAYERING_FOPEN)
#include <stdio.h>

int layering_probe(void);
int layering_probe(void) {
  FILE *f = fopen("/etc/hostname", "r");
  return f != NULL;
}
#elif defined(CTRAIN_LAYERING_SOCKET)
#include <sys/socket.h>

int layering_probe(void);
int layering_probe(void) {
  return socket(AF_INET, SOCK_STREAM, 0);
}
#elif defined(CTRAIN_LAYERING_TIME)
#include <time.h>

long layering_probe(void);
long layering_probe(void) {
  return (long)time(NULL);
}
#elif defined(CTRAIN_LAYERING_GETENV)
#include <stdlib.h>

int layering_probe(void);
int layering_probe(void) {
  return getenv("HOME") != NULL;
}
#elif defined(CTRAIN_LAYERING_PTHREAD_CREATE)
#include <pthread.h>

static void *layering_run(void *arg) {
  return arg;
}

int layering_probe(void);
int layering_probe(void) {
  pthread_t t;
  return pthread_create(&t, NULL, layering_run, NULL);
}
#else
#include "ctrain/kube_client.h"

int layering_probe(void);
int layering_probe(void) {
  return 0;
}
#endif
