/* ctrain/lnode_status.h - a pod's status as the kubelet reports it.
 *
 * The agent keeps one lnode_cstatus per container and one lnode_pstatus per
 * pod; this module turns them into the phase (Pending, Running, Succeeded,
 * Failed), the four conditions with their transition times, and the JSON of
 * `status` sent to the status subresource. Pure: no clock, no I/O. */
#ifndef CTRAIN_LNODE_STATUS_H
#define CTRAIN_LNODE_STATUS_H

#include <stddef.h>
#include <time.h>

#include <cjson/cJSON.h>

typedef enum { LNODE_C_WAITING = 0, LNODE_C_RUNNING, LNODE_C_TERMINATED } lnode_ckind;

typedef struct lnode_term {
  int exit_code;
  int signal;        /* 0: exited normally */
  char reason[64];   /* Completed, Error, StartError, ... */
  char message[512]; /* "" or why */
  time_t started_at; /* 0: never started */
  time_t finished_at;
} lnode_term;

typedef struct lnode_cstatus {
  char name[256];
  char image[512];
  lnode_ckind kind;
  char waiting_reason[64]; /* ContainerCreating, CrashLoopBackOff, CreateContainerConfigError */
  char waiting_message[512];
  time_t started_at; /* when running */
  lnode_term term;   /* when terminated */
  int has_last;      /* lastState.terminated is set (after a restart) */
  lnode_term last;
  int restart_count;
  long pid; /* 0: none; containerID is localnode://<pid> */
} lnode_cstatus;

enum {
  LNODE_COND_SCHEDULED = 0,
  LNODE_COND_INITIALIZED,
  LNODE_COND_CONTAINERS_READY,
  LNODE_COND_READY,
  LNODE_COND_N
};

typedef struct lnode_cond {
  int status; /* 1 True, 0 False, -1 not set yet */
  time_t ltt; /* lastTransitionTime */
  char reason[64];
} lnode_cond;

typedef struct lnode_pstatus {
  char pod_ip[64]; /* "" until the sandbox has one */
  char host_ip[64];
  time_t start_time;
  lnode_cond conds[LNODE_COND_N];
  /* Set when the node ends the pod itself (shutdown): phase Failed with
   * this reason and message, whatever the containers say. */
  char reason[64];
  char message[256];
} lnode_pstatus;

/* The exit code the kubelet reports for a waitpid() status: the code, or
 * 128+n for a process killed by signal n (*signal set to n, else 0). */
int lnode_exit_code(int wait_status, int *signal);

/* "Completed" for 0, else "Error". */
const char *lnode_term_reason(int exit_code);

/* Phase from the containers and the restartPolicy ("Always", "OnFailure",
 * "Never"; NULL is Always). Static string. */
const char *lnode_status_phase(const lnode_cstatus *cs, size_t n, const char *restart_policy);

/* Updates the conditions for `phase` at time `now`: a condition whose
 * status changes gets now as lastTransitionTime. */
void lnode_status_conditions(lnode_pstatus *ps, const lnode_cstatus *cs, size_t n,
                             const char *phase, time_t now);

/* The `status` object (owned by the caller) for `phase`. */
cJSON *lnode_status_json(const lnode_pstatus *ps, const lnode_cstatus *cs, size_t n,
                         const char *phase);

#endif
