/*
 * queue.h - the command queue every backend shares: fences, the completion
 * table, deadlines, abort on reset, and the device lock.
 *
 * Internal to driver/. A backend embeds one tsr_queue_t per device and
 * keeps only what is its own: how a command is started and how its
 * completion is detected. The queue owns
 *   - fences: command N (counting from 1 since open) has fence N;
 *   - the completion table: the state and result of every command not yet
 *     forgotten; results of the last TSR_QUEUE_KEEP_DONE finished commands
 *     stay available to wait();
 *   - deadlines: wait() with a timeout ends in DEADLINE_EXCEEDED
 *     ("NAME: command N not done after T ns");
 *   - reset: commands not finished complete as aborted ("NAME: command N
 *     was aborted by a reset", DEVICE);
 *   - the messages for fences never issued (INVALID_ARGUMENT) or whose
 *     result is no longer kept (NOT_FOUND);
 *   - one mutex per device. Every queue call is safe from any thread. The
 *     backend's start/poll/reset hooks run with the mutex held, so they are
 *     serialized with each other; a backend whose device is single-threaded
 *     (a simulator, a bus link) takes the same mutex with tsr_queue_lock()
 *     around its other device calls (copies).
 *
 * Completion is detected one of two ways:
 *   - a worker (ops->poll NULL): the backend's own thread takes commands
 *     with tsr_queue_worker_next(), executes them without the lock and
 *     reports them with tsr_queue_worker_done(); wait() sleeps on a
 *     condition variable, so it never holds the lock while blocking;
 *   - polling (ops->poll set): wait() calls poll() with the lock held; poll
 *     does a bounded amount of work (a slice of simulated cycles, one status
 *     query) and reports what finished with tsr_queue_complete(); between
 *     polls that found nothing to do, wait() sleeps without the lock (from
 *     poll_first_ns, doubling up to poll_max_ns), so submit() and copies from
 *     other threads proceed. Polls themselves are serialized by the lock.
 */
#ifndef TSR_QUEUE_H
#define TSR_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver/hal.h"
#include "tessera.h"

/* Finished commands whose results wait() can still return. */
#define TSR_QUEUE_KEEP_DONE 1024

typedef enum tsr_queue_state {
  TSR_QUEUE_QUEUED,    /* accepted, not given to the device yet             */
  TSR_QUEUE_STARTED,   /* given to the device (or hung there)               */
  TSR_QUEUE_EXECUTING, /* a worker runs it without the lock                 */
  TSR_QUEUE_DONE,      /* finished: `res` holds what the device reported    */
  TSR_QUEUE_FAILED,    /* finished with an error (wait returns it)          */
  TSR_QUEUE_ABORTED,   /* abandoned by a reset                              */
} tsr_queue_state_t;

/* One command in the completion table. Pointers to it are valid only while
 * the lock is held (submit may move the table). */
typedef struct tsr_queue_cmd {
  tsr_hal_command_t cmd;
  tsr_queue_state_t state;
  tsr_hal_result_t res;
  uint64_t aux[2]; /* backend-private numbers (a start cycle, a board tag) */
  void *priv;      /* backend-private object, released by ops->release     */
  tsr_status_code_t err_code; /* FAILED: the error wait() returns          */
  char err_msg[240];
  /* queue mode (cmd.flags & TSR_HAL_CMD_QUEUE): what the host published and
   * whether it closed (tsr_queue_doorbell), and the counters so far as the
   * backend last saw them (tsr_queue_set_live; progress() returns them) */
  uint32_t q_tail;
  bool q_close;
  tsr_hal_result_t live;
} tsr_queue_cmd_t;

typedef struct tsr_queue tsr_queue_t;

/* The backend's side. Every hook is optional; `impl` is the backend's
 * device. All are called with the queue's lock held. */
typedef struct tsr_queue_ops {
  /* submit(): command `fence` was added (state QUEUED). Start it, or leave
   * it queued for poll (or the worker) to start later; may complete it at
   * once with tsr_queue_complete(). An error removes the command again and
   * is what submit() returns (the fence is then reused). */
  tsr_status_t (*start)(void *impl, tsr_queue_t *q, uint64_t fence, tsr_queue_cmd_t *c);
  /* wait(fence): make progress for at most about `budget_ns` of wall time
   * and report finished commands with tsr_queue_complete(). Set *idle when
   * nothing was done that is worth retrying at once (wait then sleeps). An
   * error ends the wait with it. NULL: completion comes from a worker. */
  tsr_status_t (*poll)(void *impl, tsr_queue_t *q, uint64_t fence, uint64_t budget_ns,
                       bool *idle);
  /* reset(): return the device to idle. Afterwards the queue marks every
   * command not finished as aborted and calls release for it. */
  tsr_status_t (*reset)(void *impl, tsr_queue_t *q);
  /* Frees c->priv (a command forgotten, aborted or the queue destroyed). */
  void (*release)(void *impl, tsr_queue_cmd_t *c);
  /* Appends detail to a DEADLINE_EXCEEDED message for command `fence`
   * (e.g. " (the device hung; reset it)"). */
  void (*pending_note)(void *impl, tsr_queue_t *q, uint64_t fence, char *buf, size_t cap);
  /* Queue mode: the host raised c->q_tail or set c->q_close of the running
   * queue-mode command `fence` (tsr_queue_doorbell checked both). A polling
   * backend passes it to the device here; a worker backend leaves it NULL
   * (its worker sees it in tsr_queue_worker_park). */
  tsr_status_t (*doorbell)(void *impl, tsr_queue_t *q, uint64_t fence, tsr_queue_cmd_t *c);
} tsr_queue_ops_t;

typedef struct tsr_queue_config {
  const char *name;           /* backend name for messages ("sim")          */
  const tsr_queue_ops_t *ops; /* static storage                             */
  void *impl;                 /* passed to every hook                        */
  uint64_t poll_first_ns;     /* first pause between idle polls (0: 20 us)  */
  uint64_t poll_max_ns;       /* longest pause (0: 1 ms)                    */
  bool queue_mode;            /* the backend runs TSR_HAL_CMD_QUEUE commands;
                                 submit() refuses them otherwise            */
} tsr_queue_config_t;

struct tsr_queue {
  tsr_queue_config_t cfg;
  pthread_mutex_t mu;
  pthread_cond_t cv_done; /* a command finished or was aborted, or a reset  */
  pthread_cond_t cv_work; /* worker: a command was queued, reset, or stop   */
  tsr_queue_cmd_t *cmds;  /* (n) fence f is cmds[f - 1 - base_fence]        */
  uint64_t n, cap;
  uint64_t base_fence;    /* fences up to this one were forgotten           */
  uint64_t head;          /* index of the oldest command not finished       */
  uint64_t next;          /* worker: index of the next command to take      */
  uint32_t executing;     /* worker: commands running without the lock      */
  bool stalled;           /* worker: hung until a reset                      */
  bool worker_idle;       /* worker sleeps on cv_work                        */
  bool stop;
  atomic_uint_fast64_t published; /* commands submitted, read without the lock */
  bool ready;
};

/* Initializes `q` (mutex, condition variables on CLOCK_MONOTONIC, an empty
 * table). */
tsr_status_t tsr_queue_init(tsr_queue_t *q, const tsr_queue_config_t *cfg);
/* Releases every command's private data and the table. A worker must have
 * stopped (tsr_queue_stop, then join it). A zeroed, never initialized queue
 * is accepted. */
void tsr_queue_destroy(tsr_queue_t *q);

/* The HAL's submit, wait and reset, for the backend's vtable to call. */
tsr_status_t tsr_queue_submit(tsr_queue_t *q, const tsr_hal_command_t *cmd,
                              uint64_t *out_fence);
tsr_status_t tsr_queue_wait(tsr_queue_t *q, uint64_t fence, uint64_t timeout_ns,
                            tsr_hal_result_t *out);
tsr_status_t tsr_queue_reset(tsr_queue_t *q);

/* Queue mode, for the backend's doorbell() and progress(): checks and
 * records the new tail (never back, at most n_desc past the descriptors
 * done) and close of queue-mode command `fence`, then calls ops->doorbell
 * or wakes the worker. An ended queue is a DEVICE error naming why. */
tsr_status_t tsr_queue_doorbell(tsr_queue_t *q, uint64_t fence, uint32_t tail, int close);
/* Waits like tsr_queue_wait() until command `fence` has ended (*out: what
 * wait() reports) or, still running, has done `done` descriptors (*out:
 * its live counters). */
tsr_status_t tsr_queue_progress(tsr_queue_t *q, uint64_t fence, uint32_t done,
                                uint64_t timeout_ns, tsr_hal_result_t *out);

/* The device lock, for backend calls outside the hooks that touch a
 * single-threaded device. Not recursive: never call a tsr_queue_* function
 * other than the *_locked ones below while holding it. */
void tsr_queue_lock(tsr_queue_t *q);
void tsr_queue_unlock(tsr_queue_t *q);

/* ---- with the lock held (inside hooks, or between lock/unlock) ---------- */

/* The command with this fence, or NULL if it was never issued or is
 * forgotten. */
tsr_queue_cmd_t *tsr_queue_cmd(tsr_queue_t *q, uint64_t fence);
/* Fence of the oldest command not finished, 0 if none. */
uint64_t tsr_queue_oldest_pending(const tsr_queue_t *q);
/* Fence of the newest command issued (0 before the first). */
uint64_t tsr_queue_last_fence(const tsr_queue_t *q);
/* Command `fence` finished with `res` (NULL: all zero). Ignored unless it
 * is QUEUED, STARTED or EXECUTING. */
void tsr_queue_complete(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *res);
/* Command `fence` finished with an error that wait() reports (consumes
 * `err`). */
void tsr_queue_fail(tsr_queue_t *q, uint64_t fence, tsr_status_t err);
/* Command `fence` is abandoned: wait() reports it aborted by a reset (for a
 * reset hook that settles some commands itself). Releases its priv. */
void tsr_queue_abort(tsr_queue_t *q, uint64_t fence);

/* ---- worker backends ----------------------------------------------------- */

/* Blocks until a command is due (marks it EXECUTING and copies it out) or
 * the queue is stopped (returns false). Commands are handed out in fence
 * order; none while the queue is stalled. Spins briefly before sleeping:
 * the host usually submits the next launch within microseconds. */
bool tsr_queue_worker_next(tsr_queue_t *q, uint64_t *fence, tsr_hal_command_t *cmd);
/* The worker finished command `fence` (res NULL: all zero). */
void tsr_queue_worker_done(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *res);
/* The worker will never finish command `fence`: it stays STARTED, and no
 * later command is handed out until a reset. */
void tsr_queue_worker_hang(tsr_queue_t *q, uint64_t fence);
/* Queue mode: the worker caught up with the published descriptors of
 * command `fence` (live: its counters so far, for progress()). It waits,
 * not counted as executing (a reset need not wait for it), until the host
 * publishes more or closes, then returns true with the tail, the close flag
 * and the command's aux[1]; false when the command was aborted or the queue
 * stopped (the worker then drops it). */
bool tsr_queue_worker_park(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *live,
                           uint32_t *tail, int *close, uint64_t *aux1);
/* With the lock held: the live counters of a running queue-mode command;
 * wakes progress() waiters. */
void tsr_queue_set_live(tsr_queue_t *q, uint64_t fence, const tsr_hal_result_t *live);

/* Wakes the worker for good: tsr_queue_worker_next returns false. */
void tsr_queue_stop(tsr_queue_t *q);

#endif /* TSR_QUEUE_H */
