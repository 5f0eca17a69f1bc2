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
  /* The mapping keeps its own reference to the file. */
  close(fd);
  if (p == MAP_FAILED)
    return TSR_ERR(IO, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size,
                   strerror(e));
  out->data = p;
  out->size = (size_t)st.st_size;
  return TSR_OK;
}

void tsr_file_unmap(tsr_mapped_file_t *f) {
  if (!f) return;
  if (f->data && f->size > 0) munmap((void *)f->data, f->size);
  f->data = NULL;
  f->size = 0;
}
