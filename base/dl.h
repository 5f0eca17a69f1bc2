/*
 * dl.h - loading a vendor library at run time: the first of a list of
 * candidates, then a table of symbols.
 *
 * Internal header, for the backends that dlopen what they drive (the RTL
 * model, the OpenCL ICD loader, libusb, XRT), so that libtessera builds and
 * runs where those are absent. Failures are UNAVAILABLE with a message
 * naming the library (every path tried, with the loader's reason) or the
 * missing symbol.
 */
#ifndef TSR_DL_H
#define TSR_DL_H

#include <stddef.h>

#include "tessera.h"

/* One symbol to resolve into *slot. */
typedef struct tsr_dl_sym {
  const char *name;
  void **slot;
} tsr_dl_sym_t;

/* dlopen()s paths[0..n) in order with `flags` (RTLD_*) and returns the
 * first that loads in *out (and its index in *which, may be NULL). On
 * failure: UNAVAILABLE "WHAT: cannot load PATH: REASON" (one candidate) or
 * "WHAT: cannot load LIB: tried PATH (REASON); ..." (several; LIB is the
 * file name of the first), followed by " (HINT)" when `hint` is given. */
tsr_status_t tsr_dl_open(const char *what, const char *const *paths, size_t n, int flags,
                         const char *hint, void **out, size_t *which);

/* Resolves syms[0..n) from `lib` (loaded from `lib_path`, for messages).
 * UNAVAILABLE "WHAT: LIB_PATH lacks symbol SYM (HINT)" for the first
 * symbol missing; slots already filled stay filled. */
tsr_status_t tsr_dl_resolve(const char *what, void *lib, const char *lib_path,
                            const tsr_dl_sym_t *syms, size_t n, const char *hint);

#endif /* TSR_DL_H */
