/*
 * tsr_sim.h - the C ABI of the Verilated tessera kernel (libtessera_rtl.so).
 *
 * The RTL (hw/rtl) is compiled by Verilator into a shared library that the
 * `sim` backend (driver/sim) loads with dlopen, so libtessera itself needs
 * neither Verilator nor libstdc++. Each tsr_sim_t owns its own
 * VerilatedContext, model and device memory; several may live in one
 * process. No function throws or aborts: failures return a negative value
 * and write a message into the caller's `err` buffer (may be NULL).
 *
 * Time only advances inside these calls; every register access is a real
 * AXI4-Lite transaction on the model's ports and costs cycles.
 */
#ifndef TSR_SIM_H
#define TSR_SIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_SIM_ABI_VERSION 1

/* Memory channels a configuration can describe (read ports of the kernel). */
#define TSR_SIM_MAX_CH 32

typedef struct tsr_sim tsr_sim_t;

typedef struct tsr_sim_config {
  uint64_t mem_base;          /* device address of the first byte of memory  */
  uint64_t mem_size;          /* bytes of device memory (default 256 MiB)    */
  uint32_t mem_latency;       /* cycles from AR accepted to first R beat     */
  uint32_t mem_bytes_per_cycle; /* read bandwidth of the memory model       */
  uint32_t mem_max_outstanding; /* read bursts in flight the memory accepts */
  const char *wave_path;      /* FST file, or NULL for no waveform           */
  uint64_t wave_start;        /* first cycle to dump                         */
  uint64_t wave_end;          /* last cycle to dump (0 = wave_start + 100k)  */
  int wave_depth;             /* hierarchy depth to trace (0 = all)          */
  const char *coverage_path;  /* coverage .dat written at destroy (coverage build) */
  /* additive to ABI v1: one memory channel per read port of the kernel
   * (tsr_sim_ports); channel 0 is the mem_* fields above and also takes
   * the writes, channel p > 0 has its own bucket and queue with these
   * (0 = the same as channel 0) */
  uint32_t ch_latency[TSR_SIM_MAX_CH];         /* cycles, AR to first R beat */
  uint32_t ch_bytes_per_cycle[TSR_SIM_MAX_CH]; /* read bandwidth           */
} tsr_sim_config_t;

/* Fills defaults (see sim/README.md for the board profile they model). */
void tsr_sim_config_init(tsr_sim_config_t *cfg);

/* ABI version of the loaded library; must equal TSR_SIM_ABI_VERSION. */
int tsr_sim_abi_version(void);

/* Creates and resets a model. Returns 0 or a negative code. */
int tsr_sim_create(const tsr_sim_config_t *cfg, tsr_sim_t **out, char *err, size_t errlen);
void tsr_sim_destroy(tsr_sim_t *sim);

/* Asserts rst_ni for a few cycles. Memory contents are kept. */
void tsr_sim_reset(tsr_sim_t *sim);

/* AXI4-Lite accesses to the control slave. Return 0 or negative on a bus
 * error response or a transaction that never completes. */
int tsr_sim_reg_write(tsr_sim_t *sim, uint32_t offset, uint32_t value);
int tsr_sim_reg_read(tsr_sim_t *sim, uint32_t offset, uint32_t *value);

/* Backdoor access to device memory (no cycles). Negative if the range is
 * outside [mem_base, mem_base + mem_size). */
int tsr_sim_mem_write(tsr_sim_t *sim, uint64_t addr, const void *src, size_t n);
int tsr_sim_mem_read(tsr_sim_t *sim, uint64_t addr, void *dst, size_t n);

/* Runs up to `max_cycles` cycles, stopping early when the kernel raises
 * interrupt/ap_done (if stop_on_done). *ran gets the cycles simulated.
 * Returns 1 if done was seen, 0 if the budget ran out, negative on error
 * (e.g. an assertion in the RTL fired; the message says which). */
int tsr_sim_run(tsr_sim_t *sim, uint64_t max_cycles, int stop_on_done, uint64_t *ran);

/* Cycles since create. */
uint64_t tsr_sim_cycles(const tsr_sim_t *sim);
/* Level of the kernel's interrupt output. */
int tsr_sim_irq(const tsr_sim_t *sim);
/* Array geometry the library was built with. */
void tsr_sim_geometry(const tsr_sim_t *sim, uint32_t *rows, uint32_t *cols);
/* Read ports (memory channels) the library was built with (additive to
 * ABI v1; also in HW_INFO bits 31:24). */
unsigned tsr_sim_ports(const tsr_sim_t *sim);

/* ---- window watch (additive to ABI v1: look these up with dlsym) --------
 * The memory model flags every access of the kernel that reaches outside a
 * watched window, normally the MEM_BASE/MEM_SIZE the host gives the kernel:
 * a read burst reaching past the window rounded out to whole bus words
 * (reads are full-width beats, so the bus words that hold the window's
 * first and last bytes are the finest reads can be), or a write beat with a
 * strobed byte outside the window itself. Accesses still happen as before
 * (answered DECERR outside the memory); they are only counted. */
typedef struct tsr_sim_stray {
  uint64_t reads;        /* read bursts reaching outside the window       */
  uint64_t writes;       /* write beats with a strobed byte outside it    */
  uint64_t first_addr;   /* burst address (read) or byte address (write)  */
  uint64_t first_cycle;  /* cycle of that first access                    */
  int first_is_write;    /* whether the first was a write                 */
} tsr_sim_stray_t;

/* Watches [base, base + size) (size 0: no window, nothing flagged) and
 * clears the counts. The window may reach past the memory or 2^64. */
int tsr_sim_watch(tsr_sim_t *sim, uint64_t base, uint64_t size);
/* The counts since the last tsr_sim_watch(). */
void tsr_sim_stray(const tsr_sim_t *sim, tsr_sim_stray_t *out);

/* ---- the ABI as a table, for hosts that load the library with dlopen ---- */
typedef struct tsr_sim_api {
  void (*config_init)(tsr_sim_config_t *);
  int (*abi_version)(void);
  int (*create)(const tsr_sim_config_t *, tsr_sim_t **, char *, size_t);
  void (*destroy)(tsr_sim_t *);
  void (*reset)(tsr_sim_t *);
  int (*reg_write)(tsr_sim_t *, uint32_t, uint32_t);
  int (*reg_read)(tsr_sim_t *, uint32_t, uint32_t *);
  int (*mem_write)(tsr_sim_t *, uint64_t, const void *, size_t);
  int (*mem_read)(tsr_sim_t *, uint64_t, void *, size_t);
  int (*run)(tsr_sim_t *, uint64_t, int, uint64_t *);
  uint64_t (*cycles)(const tsr_sim_t *);
  int (*irq)(const tsr_sim_t *);
  void (*geometry)(const tsr_sim_t *, uint32_t *, uint32_t *);
  /* additive to ABI v1: NULL when the library lacks them */
  const char *(*last_error)(const tsr_sim_t *);
  int (*watch)(tsr_sim_t *, uint64_t, uint64_t);
  void (*stray)(const tsr_sim_t *, tsr_sim_stray_t *);
  unsigned (*ports)(const tsr_sim_t *);
} tsr_sim_api_t;

/* Fills *api from a loaded library through `sym` (dlsym, or a wrapper).
 * Returns NULL, or the name of the first entry point of ABI v1 that is
 * missing; the additive ones are left NULL when absent. */
static inline const char *tsr_sim_api_resolve(void *lib, void *(*sym)(void *, const char *),
                                              tsr_sim_api_t *api) {
  struct entry {
    const char *name;
    void **slot;
    int required;
  };
  const struct entry t[] = {
      {"tsr_sim_config_init", (void **)&api->config_init, 1},
      {"tsr_sim_abi_version", (void **)&api->abi_version, 1},
      {"tsr_sim_create", (void **)&api->create, 1},
      {"tsr_sim_destroy", (void **)&api->destroy, 1},
      {"tsr_sim_reset", (void **)&api->reset, 1},
      {"tsr_sim_reg_write", (void **)&api->reg_write, 1},
      {"tsr_sim_reg_read", (void **)&api->reg_read, 1},
      {"tsr_sim_mem_write", (void **)&api->mem_write, 1},
      {"tsr_sim_mem_read", (void **)&api->mem_read, 1},
      {"tsr_sim_run", (void **)&api->run, 1},
      {"tsr_sim_cycles", (void **)&api->cycles, 1},
      {"tsr_sim_irq", (void **)&api->irq, 1},
      {"tsr_sim_geometry", (void **)&api->geometry, 1},
      {"tsr_sim_last_error", (void **)&api->last_error, 0},
      {"tsr_sim_watch", (void **)&api->watch, 0},
      {"tsr_sim_stray", (void **)&api->stray, 0},
      {"tsr_sim_ports", (void **)&api->ports, 0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    *t[i].slot = sym(lib, t[i].name);
    if (!*t[i].slot && t[i].required) return t[i].name;
  }
  return NULL;
}

#ifdef __cplusplus
}
#endif
#endif
