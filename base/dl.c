/* dl.c - dlopen from a list of candidates, dlsym from a table. */
#include "base/dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"

tsr_status_t tsr_dl_open(const char *what, const char *const *paths, size_t n, int flags,
                         const char *hint, void **out, size_t *which) {
  *out = NULL;
  if (which) *which = 0;
  char tried[2048] = "", why0[512] = "";
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    dlerror();
    void *h = dlopen(paths[i], flags);
    if (h) {
      *out = h;
      if (which) *which = i;
      return TSR_OK;
    }
    const char *why = dlerror();
    if (!why) why = "not loadable";
    if (i == 0) snprintf(why0, sizeof why0, "%s", why);
    if (used < sizeof tried)
      used += (size_t)snprintf(tried + used, sizeof tried - used, "%s%s (%s)", used ? "; " : "",
                               paths[i], why);
  }
  const char *h1 = hint ? " (" : "", *h2 = hint ? ")" : "";
  if (n == 0)
    return TSR_ERR(UNAVAILABLE, "%s: no library to load%s%s%s", what, h1, hint ? hint : "", h2);
  if (n == 1)
    return TSR_ERR(UNAVAILABLE, "%s: cannot load %s: %s%s%s%s", what, paths[0], why0, h1,
                   hint ? hint : "", h2);
  const char *file = strrchr(paths[0], '/') ? strrchr(paths[0], '/') + 1 : paths[0];
  return TSR_ERR(UNAVAILABLE, "%s: cannot load %s: tried %s%s%s%s", what, file, tried, h1,
                 hint ? hint : "", h2);
}

tsr_status_t tsr_dl_resolve(const char *what, void *lib, const char *lib_path,
                            const tsr_dl_sym_t *syms, size_t n, const char *hint) {
  for (size_t i = 0; i < n; i++) {
    dlerror();
    void *p = dlsym(lib, syms[i].name);
    *syms[i].slot = p;
    if (!p)
      return TSR_ERR(UNAVAILABLE, "%s: %s lacks symbol %s%s%s%s", what, lib_path, syms[i].name,
                     hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
  }
  return TSR_OK;
}
