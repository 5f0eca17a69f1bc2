/*
 * bench_proc.c - child processes of `tessera bench` (see bench_cli.h): the
 * peer, and `tessera run` as a whole process for its wall time and peak
 * memory.
 *
 * The child's end is awaited on a pidfd with poll(), so the wall time ends
 * when the child does (no polling granularity) and a timeout can kill it;
 * kernels without pidfd_open fall back to 1 ms polls. An exec failure is
 * reported through a close-on-exec pipe, so "not found" is told apart from
 * a program that ran and exited with 127.
 */
#include "bench_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reads all of fd from its start into a new NUL-terminated buffer. */
static char *read_all(int fd, size_t *out_len) {
  *out_len = 0;
  if (lseek(fd, 0, SEEK_SET) < 0) return NULL;
  size_t cap = 4096, len = 0;
  char *p = malloc(cap);
  if (!p) return NULL;
  for (;;) {
    if (len + 1 == cap) {
      char *q = realloc(p, cap * 2);
      if (!q) {
        free(p);
        return NULL;
      }
      p = q, cap *= 2;
    }
    ssize_t n = read(fd, p + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  p[len] = '\0';
  *out_len = len;
  return p;
}

/* The last non-empty line of text, printable ASCII only, into out. */
static void last_line(const char *text, size_t len, char *out, size_t cap) {
  out[0] = '\0';
  if (!text || !cap) return;
  size_t end = len;
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' '))
    end--;
  size_t start = end;
  while (start > 0 && text[start - 1] != '\n') start--;
  size_t o = 0;
  for (size_t i = start; i < end && o + 1 < cap; i++) {
    unsigned char ch = (unsigned char)text[i];
    out[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
  }
  out[o] = '\0';
}

static int temp_fd(void) {
  char name[] = "/tmp/tessera-bench.XXXXXX";
  int fd = mkstemp(name);
  if (fd >= 0) unlink(name);
  return fd;
}

bool cli_child_run(char *const argv[], const char *cwd, bool search_path, bool capture_out,
                   double timeout_s, cli_child_t *c, char *why, size_t cap) {
  memset(c, 0, sizeof *c);
  why[0] = '\0';
  const char *prog = argv[0];
  if (!search_path || strchr(prog, '/')) {
    struct stat st;
    if (stat(prog, &st) != 0) {
      snprintf(why, cap, "cannot run it: %s", strerror(errno));
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      snprintf(why, cap, "cannot run it: not a regular file");
      return false;
    }
    if (access(prog, X_OK) != 0) {
      snprintf(why, cap, "cannot run it: not executable (%s)", strerror(errno));
      return false;
    }
  }
  int out_fd = capture_out ? temp_fd() : open("/dev/null", O_WRONLY | O_CLOEXEC);
  int err_fd = temp_fd();
  int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int ep[2] = {-1, -1};
  if (out_fd < 0 || err_fd < 0 || null_in < 0 || pipe2(ep, O_CLOEXEC) != 0) {
    snprintf(why, cap, "cannot run it: %s", strerror(errno));
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    if (null_in >= 0) close(null_in);
    return false;
  }
  fflush(NULL);
  const double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, cap, "cannot run it: fork: %s", strerror(errno));
    close(out_fd), close(err_fd), close(null_in), close(ep[0]), close(ep[1]);
    return false;
  }
  if (pid == 0) {
    /* the child: only async-signal-safe calls until exec */
    int e = 0;
    if (dup2(null_in, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) e = errno;
    if (!e && cwd && chdir(cwd) != 0) e = errno;
    if (!e) {
      if (search_path) execvp(prog, argv);
      else execv(prog, argv);
      e = errno;
    }
    ssize_t w = write(ep[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  close(ep[1]);
  close(null_in);
  int exec_errno = 0;
  ssize_t n;
  do n = read(ep[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  close(ep[0]);

  /* Wait for its end, or the timeout. */
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  for (;;) {
    pid_t r = wait4(pid, &status, WNOHANG, &ru);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    double left = timeout_s - (now_s() - t0);
    if (left <= 0) {
      kill(pid, SIGKILL);
      while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
      c->timed_out = true;
      break;
    }
    if (pidfd >= 0) {
      struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
      int ms = left > 1000 ? 1000000 : (int)(left * 1000) + 1;
      (void)poll(&pfd, 1, ms);
    } else {
      struct timespec d = {0, 1000000};
      nanosleep(&d, NULL);
    }
  }
  c->wall_s = now_s() - t0;
  if (pidfd >= 0) close(pidfd);
  size_t elen = 0;
  char *err = read_all(err_fd, &elen);
  last_line(err, elen, c->err_tail, sizeof c->err_tail);
  free(err);
  close(err_fd);
  if (capture_out) c->out = read_all(out_fd, &c->out_len);
  close(out_fd);
  if (n == (ssize_t)sizeof exec_errno) {
    snprintf(why, cap, "cannot run it: %s", strerror(exec_errno));
    cli_child_free(c);
    return false;
  }
  c->started = true;
  c->max_rss_kib = ru.ru_maxrss;
  if (!c->timed_out) {
    if (WIFSIGNALED(status)) c->term_signal = WTERMSIG(status);
    else if (WIFEXITED(status)) c->exit_code = WEXITSTATUS(status);
  }
  return true;
}

bool cli_child_failed(const cli_child_t *c, char *why, size_t cap) {
  if (c->timed_out) {
    snprintf(why, cap, "did not finish within %.0f s (killed)", c->wall_s);
    return true;
  }
  if (c->term_signal) {
    const char *abbrev = sigabbrev_np(c->term_signal);
    snprintf(why, cap, "died on signal %d (SIG%s, %s)%s%s", c->term_signal,
             abbrev ? abbrev : "?", strsignal(c->term_signal), c->err_tail[0] ? ": " : "",
             c->err_tail);
    return true;
  }
  if (c->exit_code) {
    snprintf(why, cap, "exited with status %d%s%s", c->exit_code, c->err_tail[0] ? ": " : "",
             c->err_tail);
    return true;
  }
  return false;
}

void cli_child_free(cli_child_t *c) {
  free(c->out);
  c->out = NULL;
  c->out_len = 0;
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", f);
    else if (*p < 0x20 || *p >= 0x7f) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}
