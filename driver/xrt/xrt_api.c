/*
 * xrt_api.c - dlopen()s XRT's C API and the shim it runs (see xrt_api.h for
 * what and why).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/dl.h"
#include "base/status.h"
#include "xrt_api.h"

static pthread_mutex_t api_mu = PTHREAD_MUTEX_INITIALIZER;
static tsr_xrt_api_t api;
static bool api_ready;
static void *api_lib;            /* kept loaded for the life of the process (and the
                                    shim, never closed either) */
static char lib_origin[PATH_MAX]; /* directory libxrt_coreutil was loaded from */

/* ---- the one XRT error conversion -------------------------------------- */

tsr_status_t tsr_xrt_status(int err, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (err < 0) err = -err;
  tsr_status_code_t code;
  switch (err) {
    case ENOMEM: code = TSR_STATUS_RESOURCE_EXHAUSTED; break;
    case EINVAL: case EDOM: case ERANGE: code = TSR_STATUS_INVALID_ARGUMENT; break;
    case ENOENT: case ENODEV: case ENXIO: code = TSR_STATUS_NOT_FOUND; break;
    case EPERM: case EACCES: case EBUSY: code = TSR_STATUS_UNAVAILABLE; break;
    case ETIMEDOUT: case ETIME: code = TSR_STATUS_DEADLINE_EXCEEDED; break;
    case ENOSYS: case EOPNOTSUPP: code = TSR_STATUS_UNIMPLEMENTED; break;
    case EIO: code = TSR_STATUS_IO; break;
    default: code = TSR_STATUS_DEVICE; break;
  }
  if (err == 0 || err == 1 /* a bare -1 return */)
    return tsr_make_status(TSR_STATUS_DEVICE, "%s (XRT gave no error code)", msg);
  return tsr_make_status(code, "%s (%s)", msg, strerror(err));
}

/* ---- small file-system helpers ----------------------------------------- */

/* mkdir -p with mode 0700 for the components we create. */
static bool mkdir_p(const char *path) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return false;
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return false;
      *p = '/';
    }
  return mkdir(tmp, 0700) == 0 || errno == EEXIST;
}

/* A directory we own and nobody else can write: safe to put symlinks and
 * files in (matters under a shared /tmp). */
static bool dir_is_private(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
         !(st.st_mode & 022);
}

static tsr_status_t pick_cache_dir(char *out, size_t cap) {
  const char *env = getenv("TSR_XRT_CACHE");
  const char *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  const char *tmpdir = getenv("TMPDIR");
  char cand[4][PATH_MAX];
  int n = 0;
  if (env && *env) snprintf(cand[n++], PATH_MAX, "%s", env);
  if (xdg && *xdg) snprintf(cand[n++], PATH_MAX, "%s/tessera", xdg);
  if (home && *home) snprintf(cand[n++], PATH_MAX, "%s/.cache/tessera", home);
  snprintf(cand[n++], PATH_MAX, "%s/tessera-%ld", tmpdir && *tmpdir ? tmpdir : "/tmp",
           (long)geteuid());
  for (int i = 0; i < n; i++) {
    if (mkdir_p(cand[i]) && dir_is_private(cand[i])) {
      const size_t len = strlen(cand[i]);
      if (len >= cap) continue;
      memcpy(out, cand[i], len + 1);
      return TSR_OK;
    }
    if (i == 0 && env && *env)
      return TSR_ERR(UNAVAILABLE, "xrt: TSR_XRT_CACHE='%s' is not a private directory this "
                     "user can create (mode 0700, owned by uid %ld)", env, (long)geteuid());
  }
  return TSR_ERR(UNAVAILABLE, "xrt: no private cache directory for XRT's environment "
                 "(tried $XDG_CACHE_HOME, $HOME/.cache, $TMPDIR)");
}

/* A Xilinx board bound to the xocl (user function) driver. */
static bool real_board_present(void) {
  DIR *d = opendir("/sys/bus/pci/drivers/xocl");
  if (!d) return false;
  bool found = false;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strchr(e->d_name, ':')) {
      found = true;
      break;
    }
  closedir(d);
  return found;
}

static const char *shim_for_mode(const char *mode) {
  if (!strcmp(mode, "hw")) return "libxrt_core.so.2";
  if (!strcmp(mode, "noop")) return "libxrt_noop.so.2";
  if (!strcmp(mode, "sw_emu")) return "libxrt_swemu.so.2";
  if (!strcmp(mode, "hw_emu")) return "libxrt_hwemu.so.2";
  return NULL;
}

/* ---- loading ------------------------------------------------------------ */

static tsr_status_t load_symbols(void *lib, const char *path) {
  const tsr_dl_sym_t syms[] = {
#define SYM(field, name) {#name, (void **)&api.field}
      SYM(deviceOpen, xrtDeviceOpen),
      SYM(deviceClose, xrtDeviceClose),
      SYM(deviceLoadXclbinFile, xrtDeviceLoadXclbinFile),
      SYM(deviceGetXclbinUUID, xrtDeviceGetXclbinUUID),
      SYM(boAlloc, xrtBOAlloc),
      SYM(boSubAlloc, xrtBOSubAlloc),
      SYM(boFree, xrtBOFree),
      SYM(boAddress, xrtBOAddress),
      SYM(boSync, xrtBOSync),
      SYM(boWrite, xrtBOWrite),
      SYM(boRead, xrtBORead),
      SYM(plKernelOpen, xrtPLKernelOpen),
      SYM(plKernelOpenExclusive, xrtPLKernelOpenExclusive),
      SYM(kernelClose, xrtKernelClose),
      SYM(kernelArgGroupId, xrtKernelArgGroupId),
      SYM(kernelArgOffset, xrtKernelArgOffset),
      SYM(kernelReadRegister, xrtKernelReadRegister),
      SYM(runOpen, xrtRunOpen),
      SYM(runSetArg, xrtRunSetArg),
      SYM(runStart, xrtRunStart),
      SYM(runWait, xrtRunWait),
      SYM(runWaitFor, xrtRunWaitFor),
      SYM(runState, xrtRunState),
      SYM(runClose, xrtRunClose),
      SYM(xclbinAllocFilename, xrtXclbinAllocFilename),
      SYM(xclbinFreeHandle, xrtXclbinFreeHandle),
      SYM(xclbinGetNumKernels, xrtXclbinGetNumKernels),
      SYM(xclbinGetNumKernelComputeUnits, xrtXclbinGetNumKernelComputeUnits),
      SYM(xclbinGetUUID, xrtXclbinGetUUID),
#undef SYM
  };
  return tsr_dl_resolve("xrt", lib, path, syms, sizeof syms / sizeof syms[0],
                        "XRT older than 2.13?");
}

/* Loads libxrt_coreutil and its symbols (once per process). */
static tsr_status_t load_library(void) {
  const char *lib_name = getenv("TSR_XRT_LIB");
  if (!lib_name || !*lib_name) lib_name = "libxrt_coreutil.so.2";
  if (!api_lib) {
    /* Loading libxrt_coreutil runs only static constructors; nothing in XRT
     * that can abort runs before the first device call below. */
    void *lib = NULL;
    const char *paths[1] = {lib_name};
    TSR_RETURN_IF(tsr_dl_open("xrt", paths, 1, RTLD_NOW | RTLD_LOCAL,
                              "install XRT, e.g. Debian's libxrt1, or point TSR_XRT_LIB at "
                              "libxrt_coreutil.so.2", &lib, NULL));
    tsr_status_t s = load_symbols(lib, lib_name);
    if (s) {
      dlclose(lib);
      return s;
    }
    api_lib = lib;
  }
  char origin[PATH_MAX] = "";
  if (dlinfo(api_lib, RTLD_DI_ORIGIN, origin) != 0 || !origin[0])
    return TSR_ERR(UNAVAILABLE, "xrt: cannot find the directory %s was loaded from",
                   lib_name);
  const char *base = strrchr(lib_name, '/') ? strrchr(lib_name, '/') + 1 : lib_name;
  if (strlen(origin) + 1 + strlen(base) >= sizeof api.lib_path ||
      strlen(origin) >= sizeof lib_origin)
    return TSR_ERR(UNAVAILABLE, "xrt: the path of %s is longer than %zu bytes", lib_name,
                   sizeof api.lib_path - 1);
  memcpy(lib_origin, origin, strlen(origin) + 1);
  memcpy(api.lib_path, origin, strlen(origin));
  api.lib_path[strlen(origin)] = '/';
  memcpy(api.lib_path + strlen(origin) + 1, base, strlen(base) + 1);
  return TSR_OK;
}

/* The shim this open asks for: XRT's noop shim only when asked for by name
 * (`shim`); otherwise the user's XCL_EMULATION_MODE (sw_emu, hw_emu) or
 * the hardware shim. */
static tsr_status_t pick_mode(tsr_xrt_shim_t shim, char *mode, size_t cap) {
  const char *user_mode = getenv("XCL_EMULATION_MODE");
  if (shim == TSR_XRT_SHIM_NOOP) {
    if (user_mode && *user_mode && strcmp(user_mode, "noop"))
      return TSR_ERR(UNAVAILABLE, "xrt: shim=noop, but XCL_EMULATION_MODE=%s selects another "
                     "shim (unset it)", user_mode);
    snprintf(mode, cap, "noop");
    return TSR_OK;
  }
  if (!user_mode || !*user_mode) {
    snprintf(mode, cap, "hw");
    return TSR_OK;
  }
  if (!shim_for_mode(user_mode))
    return TSR_ERR(UNAVAILABLE, "xrt: XCL_EMULATION_MODE='%s' is not one of sw_emu, hw_emu "
                   "(unset it for hardware)", user_mode);
  if (!strcmp(user_mode, "noop"))
    return TSR_ERR(UNAVAILABLE, "xrt: XCL_EMULATION_MODE=noop selects XRT's noop shim, a test "
                   "harness that computes nothing: it opens only as xrt:shim=noop");
  /* The emulation shims start Vitis simulators: without Vitis they call
   * exit() or hang instead of failing. */
  const char *vitis = getenv("XILINX_VITIS");
  struct stat vst;
  if (!vitis || !*vitis || stat(vitis, &vst) != 0 || !S_ISDIR(vst.st_mode))
    return TSR_ERR(UNAVAILABLE, "xrt: XCL_EMULATION_MODE=%s needs Vitis (XILINX_VITIS is "
                   "%s); unset XCL_EMULATION_MODE", user_mode,
                   vitis && *vitis ? "not a directory" : "unset");
  snprintf(mode, cap, "%s", user_mode);
  return TSR_OK;
}

/* Loads the shim for api.mode ourselves, so that XRT never runs its own
 * shim loader (see xrt_api.h): nothing is written to the environment. */
static tsr_status_t prepare(void) {
  const char *shim = shim_for_mode(api.mode);
  const char *user_xrt = getenv("XILINX_XRT");
  char path[PATH_MAX];
  if (user_xrt && *user_xrt) {
    if (snprintf(path, sizeof path, "%s/lib/%s", user_xrt, shim) >= (int)sizeof path)
      return TSR_ERR(UNAVAILABLE, "xrt: XILINX_XRT='%.100s...' is too long", user_xrt);
    if (access(path, R_OK) != 0)
      return TSR_ERR(UNAVAILABLE, "xrt: XILINX_XRT='%s' has no lib/%s; point it at an XRT "
                     "installation, or unset it to use the shims next to %s", user_xrt, shim,
                     api.lib_path);
  } else {
    if (snprintf(path, sizeof path, "%s/%s", lib_origin, shim) >= (int)sizeof path)
      return TSR_ERR(UNAVAILABLE, "xrt: the path of the XRT shim %s is longer than %zu bytes",
                     shim, sizeof path - 1);
    if (access(path, R_OK) != 0)
      return TSR_ERR(UNAVAILABLE, "xrt: the XRT shim %s for mode '%s' is not installed next "
                     "to %s", shim, api.mode, api.lib_path);
  }
  /* Hardware: only a board bound to xocl; XRT's noop shim is never a
   * stand-in for one. Nothing of XRT's runs without a board. */
  if (!strcmp(api.mode, "hw") && !real_board_present())
    return TSR_ERR(UNAVAILABLE, "xrt: no Xilinx board is bound to the xocl driver "
                   "(/sys/bus/pci/drivers/xocl is empty or absent); XRT's noop shim, a test "
                   "harness that computes nothing, opens only as xrt:shim=noop");
  TSR_RETURN_IF(pick_cache_dir(api.cache_dir, sizeof api.cache_dir));
  if (strlen(path) >= sizeof api.shim_path)
    return TSR_ERR(UNAVAILABLE, "xrt: the path of the XRT shim %s is longer than %zu bytes",
                   shim, sizeof api.shim_path - 1);
  /* As XRT's loader would: global, so the shim's symbols are XRT's. Its
   * constructor registers the shim with libxrt_coreutil. */
  dlerror();
  if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
    const char *e = dlerror();
    return TSR_ERR(UNAVAILABLE, "xrt: cannot load the XRT shim %s: %s", path, e ? e : "?");
  }
  memcpy(api.shim_path, path, strlen(path) + 1);
  return TSR_OK;
}

tsr_status_t tsr_xrt_api_get(tsr_xrt_shim_t shim, const tsr_xrt_api_t **out) {
  *out = NULL;
  pthread_mutex_lock(&api_mu);
  char mode[sizeof api.mode];
  tsr_status_t s = load_library();
  if (!s) s = pick_mode(shim, mode, sizeof mode);
  if (!s && api_ready && strcmp(mode, api.mode))
    s = TSR_ERR(UNAVAILABLE, "xrt: XRT runs its %s shim in this process and holds one shim per "
                "process: the %s shim cannot be opened too", api.mode, mode);
  if (!s && !api_ready) {
    snprintf(api.mode, sizeof api.mode, "%s", mode);
    s = prepare();
    if (!s) api_ready = true;
    else api.mode[0] = '\0';
  }
  pthread_mutex_unlock(&api_mu);
  if (s) return s;
  *out = &api;
  return TSR_OK;
}
