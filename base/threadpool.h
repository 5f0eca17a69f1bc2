/*
 * threadpool.h - a fixed pool of worker threads for CPU kernels.
 *
 * Internal header. tsr_threadpool_run() splits `n_tasks` among the workers
 * and the calling thread and returns when all are done. Workers spin briefly
 * then sleep, so decode-sized work (microseconds) does not pay a futex wake
 * per call when calls come back to back.
 */
#ifndef TSR_THREADPOOL_H
#define TSR_THREADPOOL_H

#include "tessera.h"

typedef struct tsr_threadpool tsr_threadpool_t;

/* fn(arg, task, thread): task in [0, n_tasks), thread in [0, n_threads). */
typedef void (*tsr_task_fn)(void *arg, int task, int thread);

/* CPUs this process may run on (its affinity mask: a process bound by
 * taskset, a container's cpuset or mpirun gets that many), at least 1. */
int tsr_cpu_count(void);
/* CPUs online on the machine, at least 1. */
int tsr_cpu_online(void);

/* n_threads <= 0: one per CPU of tsr_cpu_count(). n_threads == 1: no worker
 * threads. */
tsr_status_t tsr_threadpool_create(int n_threads, tsr_threadpool_t **out);
void tsr_threadpool_destroy(tsr_threadpool_t *pool);
int tsr_threadpool_size(const tsr_threadpool_t *pool);
/* pool may be NULL: runs everything on the caller. */
void tsr_threadpool_run(tsr_threadpool_t *pool, int n_tasks, tsr_task_fn fn, void *arg);

#endif
