/*
 * test_threadpool.c - every task runs exactly once, on a valid thread
 * index, whether the workers are spinning, asleep, or absent.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "tsr_test.h"

typedef struct {
  atomic_int *count; /* per task */
  atomic_int bad_thread;
  int n_threads;
} count_arg_t;

static void count_fn(void *arg, int task, int thread) {
  count_arg_t *c = arg;
  atomic_fetch_add(&c->count[task], 1);
  if (thread < 0 || thread >= c->n_threads) atomic_fetch_add(&c->bad_thread, 1);
}

/* Runs n_tasks on `pool` `reps` times; returns tasks not run exactly reps times. */
static int run_counted(tsr_threadpool_t *pool, int n_tasks, int reps) {
  count_arg_t c;
  c.count = calloc((size_t)n_tasks, sizeof(atomic_int));
  atomic_init(&c.bad_thread, 0);
  c.n_threads = tsr_threadpool_size(pool);
  for (int r = 0; r < reps; ++r) tsr_threadpool_run(pool, n_tasks, count_fn, &c);
  int bad = atomic_load(&c.bad_thread);
  for (int t = 0; t < n_tasks; ++t) bad += atomic_load(&c.count[t]) != reps;
  free(c.count);
  return bad;
}

static void test_each_task_once(void) {
  int sizes[] = {1, 2, 3, 4};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    tsr_threadpool_t *p;
    TSR_ASSERT_OK(tsr_threadpool_create(sizes[i], &p));
    CU_ASSERT_EQUAL(tsr_threadpool_size(p), sizes[i]);
    CU_ASSERT_EQUAL(run_counted(p, 1, 1), 0);
    CU_ASSERT_EQUAL(run_counted(p, 7, 1), 0);
    CU_ASSERT_EQUAL(run_counted(p, 1000, 3), 0);
    tsr_threadpool_run(p, 0, count_fn, NULL); /* no tasks: fn never called */
    tsr_threadpool_destroy(p);
  }
}

static void test_null_pool_and_default(void) {
  CU_ASSERT_EQUAL(tsr_threadpool_size(NULL), 1);
  CU_ASSERT_EQUAL(run_counted(NULL, 50, 2), 0);
  tsr_threadpool_t *p;
  TSR_ASSERT_OK(tsr_threadpool_create(0, &p)); /* one per CPU */
  CU_ASSERT(tsr_threadpool_size(p) >= 1);
  CU_ASSERT_EQUAL(run_counted(p, 33, 2), 0);
  tsr_threadpool_destroy(p);
  tsr_threadpool_destroy(NULL);
  TSR_ASSERT_ERR(tsr_threadpool_create(100000, &p), TSR_STATUS_INVALID_ARGUMENT, "100000");
  CU_ASSERT_PTR_NULL(p);
}

/* Decode issues thousands of tiny runs back to back. */
static void test_many_tiny_runs(void) {
  tsr_threadpool_t *p;
  TSR_ASSERT_OK(tsr_threadpool_create(3, &p));
  CU_ASSERT_EQUAL(run_counted(p, 2, 20000), 0);
  CU_ASSERT_EQUAL(run_counted(p, 3, 20000), 0);
  tsr_threadpool_destroy(p);
}

/* Workers that fell asleep must wake up for the next run. */
static void test_wake_after_sleep(void) {
  tsr_threadpool_t *p;
  TSR_ASSERT_OK(tsr_threadpool_create(2, &p));
  for (int i = 0; i < 3; ++i) {
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CU_ASSERT_EQUAL(run_counted(p, 64, 1), 0);
  }
  tsr_threadpool_destroy(p);
}

typedef struct {
  atomic_int seen[4];
} spread_arg_t;

/* Slow tasks: the caller and the workers all take some. */
static void slow_fn(void *arg, int task, int thread) {
  spread_arg_t *s = arg;
  struct timespec ts = {0, 2 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_fetch_add(&s->seen[thread], 1);
}

static void test_work_is_shared(void) {
  tsr_threadpool_t *p;
  TSR_ASSERT_OK(tsr_threadpool_create(2, &p));
  spread_arg_t s;
  for (int i = 0; i < 4; ++i) atomic_init(&s.seen[i], 0);
  tsr_threadpool_run(p, 40, slow_fn, &s);
  CU_ASSERT_EQUAL(atomic_load(&s.seen[0]) + atomic_load(&s.seen[1]), 40);
  CU_ASSERT(atomic_load(&s.seen[0]) > 0); /* the caller participates */
  CU_ASSERT(atomic_load(&s.seen[1]) > 0);
  tsr_threadpool_destroy(p);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("threadpool", NULL, NULL);
  CU_add_test(s, "every task exactly once, pools of 1..4", test_each_task_once);
  CU_add_test(s, "NULL pool, default size, bad size", test_null_pool_and_default);
  CU_add_test(s, "many tiny runs back to back", test_many_tiny_runs);
  CU_add_test(s, "workers wake after sleeping", test_wake_after_sleep);
  CU_add_test(s, "caller and workers share the tasks", test_work_is_shared);
  return tsr_test_run_all();
}
