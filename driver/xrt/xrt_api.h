/*
 * xrt_api.h - XRT's C API and its shim, loaded at run time.
 *
 * Internal to driver/xrt (and the tests). libtessera does not link XRT: it
 * dlopen()s libxrt_coreutil.so.2 (only that library: linking libxrt_core as
 * well forces XRT's hardware shim), so the library builds and runs where
 * XRT is absent and the xrt backend then reports UNAVAILABLE.
 *
 * XRT reads its configuration from the environment, and XRT 2.13 ends the
 * process with an uncaught C++ exception from its shim loader when
 * XILINX_XRT is unset or does not hold lib/libxrt_{core,noop,...}.so.2
 * (Debian installs them in the multiarch directory, not under
 * $XILINX_XRT/lib). Setting XILINX_XRT or XCL_EMULATION_MODE with setenv()
 * is not an answer in a library whose threads (and the application's) may
 * read the environment at the same time. Instead tsr_xrt_api_get() loads
 * the shim itself, with dlopen (RTLD_NOW | RTLD_GLOBAL, as XRT does): the
 * shim's constructor registers it with libxrt_coreutil, and XRT only runs
 * its own loader when no shim is registered (xrt_core::instance() in
 * core/common/system.cpp), so it never reads XILINX_XRT for the shim and
 * cannot throw there; a shim that does not load is a dlopen error, turned
 * into UNAVAILABLE. The environment is read, never written:
 *   XILINX_XRT          when set, the shim is taken from $XILINX_XRT/lib (and
 *                       must be there); else from libxrt_coreutil's directory;
 *   XCL_EMULATION_MODE  sw_emu / hw_emu select XRT's emulation shims (they
 *                       need Vitis: without XILINX_VITIS they would exit()
 *                       or hang, so they are refused); "noop" is refused
 *                       unless the noop shim is asked for by name;
 *   XRT_INI_PATH        read by XRT itself (logging; none is written here).
 * Without a board bound to the xocl driver the hardware shim is not loaded
 * at all (UNAVAILABLE). XRT runs one shim per process (a second one would
 * throw from its constructor): once one is loaded, asking for another is
 * UNAVAILABLE. An application that loads an XRT shim itself must not use
 * this backend. CACHE (where the backend writes its generated xclbins) is
 * $TSR_XRT_CACHE, else $XDG_CACHE_HOME/tessera, else $HOME/.cache/tessera,
 * else $TMPDIR/tessera-UID.
 *
 * Environment read here:
 *   TSR_XRT_LIB        file name or path of libxrt_coreutil (default
 *                      "libxrt_coreutil.so.2")
 *   TSR_XRT_CACHE      cache directory (above)
 *
 * The noop shim (TSR_XRT_SHIM_NOOP) runs the host flow — device open,
 * xclbin load, buffers, kernel open, runs — but its kernel computes nothing
 * and refuses register access: results read back are whatever the host
 * wrote. The backend says so in its name and callers must not trust them.
 */
#ifndef TSR_XRT_API_H
#define TSR_XRT_API_H

#include <stddef.h>
#include <stdint.h>

#include "tessera.h"

/* XRT's handles are void *; these names only document which is which. */
typedef void *tsr_xrt_device_h;
typedef void *tsr_xrt_bo_h;
typedef void *tsr_xrt_kernel_h;
typedef void *tsr_xrt_run_h;
typedef void *tsr_xrt_xclbin_h;

/* enum ert_cmd_state (xrt/ert.h). */
enum {
  TSR_ERT_NEW = 1,
  TSR_ERT_QUEUED = 2,
  TSR_ERT_RUNNING = 3,
  TSR_ERT_COMPLETED = 4,
  TSR_ERT_ERROR = 5,
  TSR_ERT_ABORT = 6,
  TSR_ERT_SUBMITTED = 7,
  TSR_ERT_TIMEOUT = 8,
  TSR_ERT_NORESPONSE = 9,
};
/* enum xclBOSyncDirection (xrt.h). */
enum { TSR_XRT_SYNC_TO_DEVICE = 0, TSR_XRT_SYNC_FROM_DEVICE = 1 };

typedef struct tsr_xrt_api {
  /* xrt_device.h */
  tsr_xrt_device_h (*deviceOpen)(unsigned int index);
  int (*deviceClose)(tsr_xrt_device_h);
  int (*deviceLoadXclbinFile)(tsr_xrt_device_h, const char *path);
  int (*deviceGetXclbinUUID)(tsr_xrt_device_h, unsigned char out[16]);
  /* xrt_bo.h */
  tsr_xrt_bo_h (*boAlloc)(tsr_xrt_device_h, size_t size, uint64_t flags, uint32_t grp);
  tsr_xrt_bo_h (*boSubAlloc)(tsr_xrt_bo_h parent, size_t size, size_t offset);
  int (*boFree)(tsr_xrt_bo_h);
  uint64_t (*boAddress)(tsr_xrt_bo_h);
  int (*boSync)(tsr_xrt_bo_h, int dir, size_t size, size_t offset);
  int (*boWrite)(tsr_xrt_bo_h, const void *src, size_t size, size_t seek);
  int (*boRead)(tsr_xrt_bo_h, void *dst, size_t size, size_t skip);
  /* xrt_kernel.h */
  tsr_xrt_kernel_h (*plKernelOpen)(tsr_xrt_device_h, const unsigned char uuid[16],
                                   const char *name);
  tsr_xrt_kernel_h (*plKernelOpenExclusive)(tsr_xrt_device_h, const unsigned char uuid[16],
                                            const char *name);
  int (*kernelClose)(tsr_xrt_kernel_h);
  int (*kernelArgGroupId)(tsr_xrt_kernel_h, int argno);
  uint32_t (*kernelArgOffset)(tsr_xrt_kernel_h, int argno);
  int (*kernelReadRegister)(tsr_xrt_kernel_h, uint32_t offset, uint32_t *out);
  tsr_xrt_run_h (*runOpen)(tsr_xrt_kernel_h);
  int (*runSetArg)(tsr_xrt_run_h, int index, ...);
  int (*runStart)(tsr_xrt_run_h);
  int (*runWait)(tsr_xrt_run_h);                      /* enum ert_cmd_state */
  int (*runWaitFor)(tsr_xrt_run_h, unsigned int ms);  /* enum ert_cmd_state */
  int (*runState)(tsr_xrt_run_h);                     /* enum ert_cmd_state */
  int (*runClose)(tsr_xrt_run_h);
  /* experimental/xrt_xclbin.h */
  tsr_xrt_xclbin_h (*xclbinAllocFilename)(const char *path);
  int (*xclbinFreeHandle)(tsr_xrt_xclbin_h);
  size_t (*xclbinGetNumKernels)(tsr_xrt_xclbin_h);
  size_t (*xclbinGetNumKernelComputeUnits)(tsr_xrt_xclbin_h);
  int (*xclbinGetUUID)(tsr_xrt_xclbin_h, unsigned char out[16]);

  /* What was prepared (static storage). */
  char mode[16];        /* "hw", "noop", "sw_emu" or "hw_emu"              */
  char lib_path[512];   /* libxrt_coreutil that was loaded                 */
  char shim_path[512];  /* the shim that was loaded                        */
  char cache_dir[512];  /* private directory (xclbins are written here)    */
} tsr_xrt_api_t;

/* Which XRT shim an open asks for. */
typedef enum tsr_xrt_shim {
  TSR_XRT_SHIM_BOARD, /* a board: the hardware shim (a board bound to xocl),
                         or the emulation XCL_EMULATION_MODE names (sw_emu,
                         hw_emu, with Vitis)                               */
  TSR_XRT_SHIM_NOOP,  /* XRT's noop shim: a test harness that computes
                         nothing; only when asked for by name             */
} tsr_xrt_shim_t;

/* Loads XRT and prepares the shim `shim` asks for (once per process; a
 * failure is retried on the next call). XRT runs one shim per process: a
 * later call asking for another is UNAVAILABLE. *out is static storage,
 * valid for the life of the process (XRT is never unloaded: it keeps
 * threads and exit handlers). UNAVAILABLE with the reason when XRT cannot
 * be used safely, or there is no board (TSR_XRT_SHIM_BOARD without a board
 * bound to xocl and without XCL_EMULATION_MODE). */
tsr_status_t tsr_xrt_api_get(tsr_xrt_shim_t shim, const tsr_xrt_api_t **out);

/* The one conversion of an XRT error into a status: `err` is what the call
 * returned (a positive or negative errno value) or errno after a NULL
 * handle (0 when XRT left errno unset). */
tsr_status_t tsr_xrt_status(int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif /* TSR_XRT_API_H */
