/* mapped_file.c - read-only memory mapping of model files. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_file.h"
#include "base/status.h"

/* mmap() refuses length 0, yet an empty file is a valid input that parsers
 * should reject with a FORMAT status; it gets this non-NULL empty buffer. */
static const uint8_t empty_file[1];

tsr_status_t tsr_file_map(const char *path, tsr_mapped_file_t *out) {
  out->data = NULL;
  out->size = 0;
  out->fd = -1;
  out->has_fd = false;
  if (!path) return TSR_ERR(INVALID_ARGUMENT, "file path is NULL");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      return TSR_ERR(NOT_FOUND, "%s: no such file", path);
    return TSR_ERR(IO, "%s: cannot open: %s", path, strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return TSR_ERR(IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return TSR_ERR(IO, "%s: not a regular file", path);
  }
  if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
    close(fd);
    return TSR_ERR(OUT_OF_RANGE, "%s: %lld bytes do not fit in the address space", path,
                   (long long)st.st_size);
  }
  if (st.st_size == 0) {
    close(fd);
    out->data = empty_file;
    return TSR_OK;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  if (p == MAP_FAILED) {
    close(fd);
    return TSR_ERR(IO, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size,
                   strerror(e));
  }
  out->data = p;
  out->size = (size_t)st.st_size;
  out->fd = fd;
  out->has_fd = true;
  return TSR_OK;
}

bool tsr_file_pread(const tsr_mapped_file_t *f, const void *at, size_t n, void *dst) {
  if (!f->has_fd || n == 0) return false;
  const uint8_t *p = at;
  if (p < f->data || (size_t)(p - f->data) > f->size || n > f->size - (size_t)(p - f->data))
    return false;
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(f->fd, (uint8_t *)dst + done, n - done, (off_t)(p - f->data + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += (size_t)r;
  }
  return true;
}

void tsr_file_unmap(tsr_mapped_file_t *f) {
  if (!f) return;
  if (f->data && f->size > 0) munmap((void *)f->data, f->size);
  if (f->has_fd) close(f->fd);
  f->data = NULL;
  f->size = 0;
  f->fd = -1;
  f->has_fd = false;
}
