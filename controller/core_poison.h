/* controller/core_poison.h - what the pure core (ctrain_core, see
 * controller/CMakeLists.txt) may not call. It is force-included (-include,
 * first) into every source of the core, and by the layering_core_* tests
 * (tests/unit/layering/core.cmake), never included by name.
 *
 * The core decides: its input is JSON and numbers, its output JSON, and time
 * comes in as a number. So it opens no file or socket, starts or locks no
 * thread, reads no clock, environment or entropy, prints nothing and makes
 * no HTTP call; a use of any name below is a compile error ("attempt to use
 * poisoned"), in gcc and clang alike. Its kube client is kept out otherwise:
 * the core links only ctrain_common, so "ctrain/kube_client.h" is not on its
 * include path.
 *
 * A poisoned name may not appear in any later code, declarations included,
 * so the system headers that declare them come first: a core file that
 * includes one of them again gets nothing new (include guards), and the
 * declarations are not uses. A macro that a system header defined before the
 * poison may still expand to a poisoned name (gcc and clang both allow it):
 * what is poisoned is what the core's own code spells. printf is not here:
 * the common headers spell their format attribute format(printf, ...); the
 * streams are (stdout, stderr), so the core cannot print through them. */
#ifndef CTRAIN_CORE_POISON_H
#define CTRAIN_CORE_POISON_H

/* The headers that declare what is poisoned below, before the poison. */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* glibc defines the streams as macros of themselves; undefined, the names
 * are the variables, which can be poisoned without a warning. */
#undef stdin
#undef stdout
#undef stderr

/* Files and streams. */
#pragma GCC poison fopen freopen fdopen popen pclose tmpfile fclose fread fwrite fgets fputs
#pragma GCC poison fflush fprintf vfprintf vprintf puts perror stdin stdout stderr
#pragma GCC poison open openat creat read write pread pwrite close lseek dup dup2 pipe
#pragma GCC poison unlink rename remove mkdir rmdir opendir readdir mmap ioctl fsync
/* Sockets and name resolution. */
#pragma GCC poison socket connect bind listen accept accept4 send sendto sendmsg recv
#pragma GCC poison recvfrom recvmsg shutdown getaddrinfo gethostbyname select poll
/* Threads: the core holds no lock and starts nothing. */
#pragma GCC poison pthread_create pthread_join pthread_detach pthread_mutex_lock
#pragma GCC poison pthread_mutex_unlock pthread_cond_wait pthread_cond_timedwait
#pragma GCC poison ctrain_mutex_lock ctrain_mutex_unlock ctrain_cond_wait ctrain_cond_timedwait
/* Clocks and sleeping: time is recon_input.now. */
#pragma GCC poison time clock clock_gettime gettimeofday timespec_get localtime mktime
#pragma GCC poison sleep usleep nanosleep
/* The environment, processes, signals. */
#pragma GCC poison getenv secure_getenv setenv putenv system fork execv execve execvp
#pragma GCC poison raise kill
/* Entropy: a decision is a function of its input. */
#pragma GCC poison rand srand random srandom getrandom RAND_bytes
/* HTTP (libcurl) and the kube client, should a declaration ever reach the
 * core some other way than "ctrain/kube_client.h". */
#pragma GCC poison curl_easy_init curl_easy_perform curl_multi_init curl_multi_perform
#pragma GCC poison kube_client_new kube_client_get kube_client_list kube_client_create
#pragma GCC poison kube_client_update kube_client_update_status kube_client_patch
#pragma GCC poison kube_client_delete kube_client_request kube_client_stream

#endif
