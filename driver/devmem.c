/* devmem.c - best-fit allocator over a flat device address range. */
#include "driver/devmem.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* One segment of the range; segments tile [base, base+size) in order. */
typedef struct seg {
  uint64_t addr;
  uint64_t size; /* rounded size of the segment                     */
  uint64_t req;  /* size the caller asked for (used segments only)  */
  bool used;
} seg_t;

struct tsr_devmem {
  uint64_t base, size;
  pthread_mutex_t mu; /* guards segs and n: HAL calls come from any thread */
  seg_t *segs; /* (n) address-ordered */
  size_t n, cap;
};

/* The lock of an allocator a caller passes as const (queries). */
static void lock(const tsr_devmem_t *dm) { pthread_mutex_lock(&((tsr_devmem_t *)dm)->mu); }
static void unlock(const tsr_devmem_t *dm) { pthread_mutex_unlock(&((tsr_devmem_t *)dm)->mu); }
static void reset_locked(tsr_devmem_t *dm);
static void stats_locked(const tsr_devmem_t *dm, tsr_devmem_stats_t *out);

static bool is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

tsr_status_t tsr_devmem_create(uint64_t base, uint64_t size, tsr_devmem_t **out) {
  *out = NULL;
  if (size < TSR_DEVMEM_MIN_ALIGN || base % TSR_DEVMEM_MIN_ALIGN)
    return TSR_ERR(INVALID_ARGUMENT,
                   "device memory [0x%" PRIx64 ", +0x%" PRIx64 ") must be %u-byte aligned "
                   "and at least %u bytes",
                   base, size, TSR_DEVMEM_MIN_ALIGN, TSR_DEVMEM_MIN_ALIGN);
  if (base + size < base)
    return TSR_ERR(INVALID_ARGUMENT, "device memory range 0x%" PRIx64 " + 0x%" PRIx64
                   " wraps around", base, size);
  tsr_devmem_t *dm = calloc(1, sizeof *dm);
  if (!dm) return TSR_ERR(RESOURCE_EXHAUSTED, "devmem: out of host memory");
  dm->base = base;
  dm->size = size - size % TSR_DEVMEM_MIN_ALIGN;
  dm->cap = 16;
  dm->segs = malloc(dm->cap * sizeof *dm->segs);
  if (!dm->segs) {
    free(dm);
    return TSR_ERR(RESOURCE_EXHAUSTED, "devmem: out of host memory");
  }
  pthread_mutex_init(&dm->mu, NULL);
  reset_locked(dm);
  *out = dm;
  return TSR_OK;
}

void tsr_devmem_destroy(tsr_devmem_t *dm) {
  if (!dm) return;
  pthread_mutex_destroy(&dm->mu);
  free(dm->segs);
  free(dm);
}

void tsr_devmem_reset(tsr_devmem_t *dm) {
  lock(dm);
  reset_locked(dm);
  unlock(dm);
}

static void reset_locked(tsr_devmem_t *dm) {
  dm->n = 1;
  dm->segs[0] = (seg_t){.addr = dm->base, .size = dm->size, .req = 0, .used = false};
}

/* Inserts `s` before index `at`. */
static bool seg_insert(tsr_devmem_t *dm, size_t at, seg_t s) {
  if (dm->n == dm->cap) {
    size_t cap = dm->cap * 2;
    seg_t *p = realloc(dm->segs, cap * sizeof *p);
    if (!p) return false;
    dm->segs = p;
    dm->cap = cap;
  }
  memmove(dm->segs + at + 1, dm->segs + at, (dm->n - at) * sizeof *dm->segs);
  dm->segs[at] = s;
  dm->n++;
  return true;
}

static void seg_remove(tsr_devmem_t *dm, size_t at) {
  memmove(dm->segs + at, dm->segs + at + 1, (dm->n - at - 1) * sizeof *dm->segs);
  dm->n--;
}

static tsr_status_t alloc_locked(tsr_devmem_t *dm, uint64_t size, uint64_t align,
                                 uint64_t *out_addr);

tsr_status_t tsr_devmem_alloc(tsr_devmem_t *dm, uint64_t size, uint64_t align,
                              uint64_t *out_addr) {
  lock(dm);
  tsr_status_t s = alloc_locked(dm, size, align, out_addr);
  unlock(dm);
  return s;
}

static tsr_status_t alloc_locked(tsr_devmem_t *dm, uint64_t size, uint64_t align,
                                 uint64_t *out_addr) {
  *out_addr = 0;
  if (size == 0) return TSR_ERR(INVALID_ARGUMENT, "device allocation of 0 bytes");
  if (align == 0) align = TSR_DEVMEM_MIN_ALIGN;
  if (!is_pow2(align))
    return TSR_ERR(INVALID_ARGUMENT, "alignment %" PRIu64 " is not a power of two", align);
  if (align < TSR_DEVMEM_MIN_ALIGN) align = TSR_DEVMEM_MIN_ALIGN;
  if (size > dm->size || align > dm->size)
    return TSR_ERR(RESOURCE_EXHAUSTED,
                   "device allocation of %" PRIu64 " bytes exceeds the device memory (%" PRIu64
                   " bytes)", size, dm->size);
  uint64_t rsize = (size + TSR_DEVMEM_MIN_ALIGN - 1) & ~(uint64_t)(TSR_DEVMEM_MIN_ALIGN - 1);

  size_t best = SIZE_MAX;
  uint64_t best_size = UINT64_MAX, best_start = 0;
  for (size_t i = 0; i < dm->n; i++) {
    const seg_t *s = &dm->segs[i];
    if (s->used || s->size < rsize) continue;
    uint64_t start = (s->addr + align - 1) & ~(align - 1);
    uint64_t pad = start - s->addr;
    if (pad > s->size || s->size - pad < rsize) continue;
    if (s->size < best_size) {
      best = i;
      best_size = s->size;
      best_start = start;
    }
  }
  if (best == SIZE_MAX) {
    tsr_devmem_stats_t st;
    stats_locked(dm, &st);
    return TSR_ERR(RESOURCE_EXHAUSTED,
                   "no free device block of %" PRIu64 " bytes aligned to %" PRIu64
                   " (free %" PRIu64 " bytes, largest free block %" PRIu64 ")",
                   size, align, st.free, st.largest_free);
  }

  seg_t s = dm->segs[best];
  uint64_t pad = best_start - s.addr;
  uint64_t tail = s.size - pad - rsize;
  /* Reserve room for up to two extra segments before modifying anything. */
  size_t at = best;
  if (pad) {
    if (!seg_insert(dm, at, (seg_t){.addr = s.addr, .size = pad}))
      return TSR_ERR(RESOURCE_EXHAUSTED, "devmem: out of host memory");
    at++;
  }
  dm->segs[at] = (seg_t){.addr = best_start, .size = rsize, .req = size, .used = true};
  if (tail &&
      !seg_insert(dm, at + 1, (seg_t){.addr = best_start + rsize, .size = tail})) {
    /* Undo: give the tail back to the block we just carved. */
    dm->segs[at].size += tail;
  }
  *out_addr = best_start;
  return TSR_OK;
}

/* Index of the segment starting at `addr`, or SIZE_MAX (binary search). */
static size_t seg_find(const tsr_devmem_t *dm, uint64_t addr) {
  size_t lo = 0, hi = dm->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (dm->segs[mid].addr < addr) lo = mid + 1;
    else hi = mid;
  }
  return (lo < dm->n && dm->segs[lo].addr == addr) ? lo : SIZE_MAX;
}

/* Index of the segment containing `addr`, or SIZE_MAX. */
static size_t seg_containing(const tsr_devmem_t *dm, uint64_t addr) {
  if (addr < dm->base || addr - dm->base >= dm->size) return SIZE_MAX;
  size_t lo = 0, hi = dm->n;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (dm->segs[mid].addr <= addr) lo = mid;
    else hi = mid;
  }
  return lo;
}

tsr_status_t tsr_devmem_free(tsr_devmem_t *dm, uint64_t addr) {
  lock(dm);
  size_t i = seg_find(dm, addr);
  if (i == SIZE_MAX || !dm->segs[i].used) {
    unlock(dm);
    return TSR_ERR(INVALID_ARGUMENT,
                   "device address 0x%" PRIx64 " is not the start of a live allocation", addr);
  }
  dm->segs[i].used = false;
  dm->segs[i].req = 0;
  if (i + 1 < dm->n && !dm->segs[i + 1].used) {
    dm->segs[i].size += dm->segs[i + 1].size;
    seg_remove(dm, i + 1);
  }
  if (i > 0 && !dm->segs[i - 1].used) {
    dm->segs[i - 1].size += dm->segs[i].size;
    seg_remove(dm, i);
  }
  unlock(dm);
  return TSR_OK;
}

bool tsr_devmem_contains(const tsr_devmem_t *dm, uint64_t addr, uint64_t n) {
  lock(dm);
  size_t i = seg_containing(dm, addr);
  bool in = false;
  if (i != SIZE_MAX && dm->segs[i].used) {
    uint64_t off = addr - dm->segs[i].addr;
    in = off <= dm->segs[i].req && n <= dm->segs[i].req - off;
  }
  unlock(dm);
  return in;
}

uint64_t tsr_devmem_size_of(const tsr_devmem_t *dm, uint64_t addr) {
  lock(dm);
  size_t i = seg_find(dm, addr);
  uint64_t size = (i != SIZE_MAX && dm->segs[i].used) ? dm->segs[i].req : 0;
  unlock(dm);
  return size;
}

void tsr_devmem_stats(const tsr_devmem_t *dm, tsr_devmem_stats_t *out) {
  lock(dm);
  stats_locked(dm, out);
  unlock(dm);
}

static void stats_locked(const tsr_devmem_t *dm, tsr_devmem_stats_t *out) {
  memset(out, 0, sizeof *out);
  out->n_segments = (uint32_t)dm->n;
  for (size_t i = 0; i < dm->n; i++) {
    const seg_t *s = &dm->segs[i];
    if (s->used) {
      out->used += s->size;
      out->n_allocs++;
    } else {
      out->free += s->size;
      if (s->size > out->largest_free) out->largest_free = s->size;
    }
  }
}

tsr_status_t tsr_devmem_buffer_alloc(tsr_devmem_t *dm, const char *backend, uint64_t size,
                                     uint64_t align, tsr_hal_buffer_t *out) {
  memset(out, 0, sizeof *out);
  uint64_t addr = 0;
  TSR_RETURN_IF_ERROR(tsr_devmem_alloc(dm, size, align, &addr), "%s", backend);
  out->addr = addr;
  out->size = size;
  return TSR_OK;
}

void tsr_devmem_buffer_free(tsr_devmem_t *dm, tsr_hal_buffer_t *buf) {
  if (!buf || buf->size == 0) return;
  tsr_status_free(tsr_devmem_free(dm, buf->addr));
  buf->addr = 0;
  buf->size = 0;
}

tsr_status_t tsr_devmem_check_copy(const tsr_devmem_t *dm, const char *backend,
                                   const tsr_hal_buffer_t *buf, uint64_t offset, size_t n,
                                   const char *what) {
  if (!buf) return TSR_ERR(INVALID_ARGUMENT, "%s: %s: NULL buffer", backend, what);
  if (offset > buf->size || n > buf->size - offset)
    return TSR_ERR(OUT_OF_RANGE,
                   "%s: %s of %zu bytes at offset %" PRIu64 " overruns the %" PRIu64
                   "-byte buffer at 0x%" PRIx64, backend, what, n, offset, buf->size, buf->addr);
  if (tsr_devmem_size_of(dm, buf->addr) != buf->size)
    return TSR_ERR(INVALID_ARGUMENT, "%s: %s: buffer 0x%" PRIx64 " (%" PRIu64
                   " bytes) is not a live allocation", backend, what, buf->addr, buf->size);
  return TSR_OK;
}
