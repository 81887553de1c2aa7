/* ctrain/lnode_agent.h - the ctrain-localnode daemon: Node registration,
 * Lease heartbeats, the pod watch and the loop that runs pods.
 *
 * Threads: the main thread owns every pod and every child process (it
 * forks, reaps and runs `ip`); a watch thread turns pod events into a
 * queue; a heartbeat thread renews the Lease and posts Node status. */
#ifndef CTRAIN_LNODE_AGENT_H
#define CTRAIN_LNODE_AGENT_H

#include "ctrain/err.h"
#include "ctrain/lnode_options.h"

/* Checks privileges and tools: CAP_SYS_ADMIN, CAP_NET_ADMIN and `ip`.
 * CTRAIN_E_AUTH / CTRAIN_E_NOTFOUND with a message saying which is missing. */
ctrain_err lnode_agent_preflight(char *err, size_t errlen);

/* Runs until *stop becomes non-zero (set from a signal handler), then kills
 * the pods' processes, removes their namespaces and marks the Node
 * NotReady. `o` is borrowed. Returns an error only when start-up fails. */
ctrain_err lnode_agent_run(const lnode_options *o, volatile int *stop, char *err, size_t errlen);

#endif
