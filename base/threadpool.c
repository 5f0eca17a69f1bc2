/*
 * threadpool.c - fixed worker pool: spin-then-futex workers, caller joins in.
 *
 * One job at a time. A job is a 64-bit ticket word holding (job id, task
 * count, next task index); every thread, the caller included, claims tasks
 * with one fetch_add on it, so uneven tasks balance themselves and the
 * count and index are read in the same atomic step (a late worker can never
 * pair an index of one job with the size of another). The caller returns
 * when `done` reaches the task count: it never waits for a worker that took
 * no task, which matters on a shared machine where a worker may be
 * descheduled for a whole time slice.
 *
 * Idle workers spin on a generation counter for a short while, then sleep
 * on it with FUTEX_WAIT; a publisher issues FUTEX_WAKE only when somebody
 * sleeps, so back-to-back decode calls never enter the kernel.
 */
#include "base/threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TSR_CPU_RELAX() _mm_pause()
#else
#define TSR_CPU_RELAX() ((void)0)
#endif

/* How long an idle worker spins before sleeping. A decode step issues
 * matmuls a few microseconds apart; tens of microseconds of spinning cover
 * that gap without burning a core between tokens. */
enum { TSR_POOL_SPIN = 1 << 13 };

/* Ticket word layout: [63:40] job id, [39:20] task count, [19:0] next. At
 * most one failed claim per thread per job lands past the count, so the
 * index field cannot carry into the count while tasks < TSR_POOL_MAX_TASKS. */
#define TSR_POOL_FIELD 20
#define TSR_POOL_MASK ((1u << TSR_POOL_FIELD) - 1)
#define TSR_POOL_MAX_TASKS (1 << 19)

struct tsr_threadpool {
  int n_threads; /* including the caller */
  pthread_t *threads;
  pthread_mutex_t run_lock; /* serializes concurrent callers of run() */

  /* the current job: fn/arg are written before the ticket is published and
   * stay valid until `done` reaches the task count */
  tsr_task_fn fn;
  void *arg;
  _Atomic uint64_t ticket;
  atomic_int done;
  uint64_t job_id;

  atomic_uint generation; /* futex word: bumped once per job */
  atomic_int sleepers;    /* workers in (or about to enter) FUTEX_WAIT */
  atomic_bool stop;
};

typedef struct {
  tsr_threadpool_t *pool;
  int index;
} tsr_worker_arg_t;

static void futex_wait(atomic_uint *word, unsigned expected) {
  syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word) {
  syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claims and runs tasks of whatever job is current until it is exhausted. */
static void run_tasks(tsr_threadpool_t *p, int thread) {
  for (;;) {
    uint64_t t = atomic_fetch_add_explicit(&p->ticket, 1, memory_order_acq_rel);
    unsigned idx = (unsigned)(t & TSR_POOL_MASK);
    unsigned n = (unsigned)((t >> TSR_POOL_FIELD) & TSR_POOL_MASK);
    if (idx >= n) break;
    p->fn(p->arg, (int)idx, thread);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
  }
}

static void *worker_main(void *varg) {
  tsr_worker_arg_t *wa = varg;
  tsr_threadpool_t *p = wa->pool;
  int index = wa->index;
  free(wa);
  /* The generation is 0 when the pool is created; reading it here instead
   * could miss a job published before this thread got scheduled. */
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
      if (++spins < TSR_POOL_SPIN) {
        TSR_CPU_RELAX();
        continue;
      }
      /* Announce the sleep before re-checking, so a publisher that bumps
       * the generation after our check also sees sleepers > 0 and wakes us;
       * FUTEX_WAIT itself re-checks the word atomically. */
      atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&p->generation, memory_order_seq_cst) == seen)
        futex_wait(&p->generation, seen);
      atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
      spins = 0;
    }
    seen = g;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    run_tasks(p, index);
  }
  return NULL;
}

/* Task indices of a slice of a job larger than TSR_POOL_MAX_TASKS. */
typedef struct {
  tsr_task_fn fn;
  void *arg;
  int base;
} tsr_pool_slice_t;

static void slice_fn(void *arg, int task, int thread) {
  const tsr_pool_slice_t *sl = arg;
  sl->fn(sl->arg, sl->base + task, thread);
}

int tsr_cpu_online(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int tsr_cpu_count(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return tsr_cpu_online();
}

tsr_status_t tsr_threadpool_create(int n_threads, tsr_threadpool_t **out) {
  *out = NULL;
  if (n_threads <= 0) n_threads = tsr_cpu_count();
  if (n_threads > 1024)
    return TSR_ERR(INVALID_ARGUMENT, "thread pool: n_threads %d exceeds 1024", n_threads);
  tsr_threadpool_t *p = calloc(1, sizeof(*p));
  if (!p) return TSR_ERR(RESOURCE_EXHAUSTED, "thread pool: out of memory");
  p->n_threads = n_threads;
  pthread_mutex_init(&p->run_lock, NULL);
  atomic_init(&p->ticket, 0);
  atomic_init(&p->done, 0);
  atomic_init(&p->generation, 0);
  atomic_init(&p->sleepers, 0);
  atomic_init(&p->stop, false);
  if (n_threads > 1) {
    p->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
    if (!p->threads) {
      pthread_mutex_destroy(&p->run_lock);
      free(p);
      return TSR_ERR(RESOURCE_EXHAUSTED, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; ++i) {
      tsr_worker_arg_t *wa = malloc(sizeof(*wa));
      int rc = wa ? 0 : -1;
      if (wa) {
        wa->pool = p;
        wa->index = i;
        rc = pthread_create(&p->threads[i - 1], NULL, worker_main, wa);
        if (rc) free(wa);
      }
      if (rc) {
        p->n_threads = i; /* destroy joins the i - 1 workers started so far */
        tsr_threadpool_destroy(p);
        return TSR_ERR(RESOURCE_EXHAUSTED, "thread pool: cannot start worker %d of %d (%d)",
                       i, n_threads, rc);
      }
    }
  }
  *out = p;
  return TSR_OK;
}

void tsr_threadpool_destroy(tsr_threadpool_t *p) {
  if (!p) return;
  if (p->threads) {
    atomic_store_explicit(&p->stop, true, memory_order_release);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst);
    futex_wake_all(&p->generation);
    for (int i = 1; i < p->n_threads; ++i) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
  }
  pthread_mutex_destroy(&p->run_lock);
  free(p);
}

int tsr_threadpool_size(const tsr_threadpool_t *p) { return p ? p->n_threads : 1; }

static void run_job(tsr_threadpool_t *p, int n_tasks, tsr_task_fn fn, void *arg) {
  p->fn = fn;
  p->arg = arg;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  p->job_id = (p->job_id + 1) & 0xFFFFFF;
  atomic_store_explicit(&p->ticket,
                        (p->job_id << 40) | ((uint64_t)n_tasks << TSR_POOL_FIELD),
                        memory_order_release);
  /* seq_cst pairs with the sleepers increment in worker_main. */
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst) > 0)
    futex_wake_all(&p->generation);
  run_tasks(p, 0);
  /* Only tasks a worker has already claimed remain; they finish within one
   * task time unless that worker lost its core, hence the yield. */
  int spins = 0;
  while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
    if (++spins < TSR_POOL_SPIN) TSR_CPU_RELAX();
    else sched_yield();
  }
}

void tsr_threadpool_run(tsr_threadpool_t *p, int n_tasks, tsr_task_fn fn, void *arg) {
  if (n_tasks <= 0) return;
  /* A single task or no workers: no reason to touch shared state. */
  if (!p || p->n_threads == 1 || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) fn(arg, t, 0);
    return;
  }
  pthread_mutex_lock(&p->run_lock);
  if (n_tasks <= TSR_POOL_MAX_TASKS) {
    run_job(p, n_tasks, fn, arg);
  } else {
    /* Past the ticket's task field: run in slices with offset indices. */
    for (int base = 0; base < n_tasks; base += TSR_POOL_MAX_TASKS) {
      int cnt = n_tasks - base < TSR_POOL_MAX_TASKS ? n_tasks - base : TSR_POOL_MAX_TASKS;
      tsr_pool_slice_t sl = {fn, arg, base};
      run_job(p, cnt, slice_fn, &sl);
    }
  }
  pthread_mutex_unlock(&p->run_lock);
}
