/*
 * project.h - the offload cost model shared by the partitioner (plan.c) and
 * the crossover benchmark (`tessera bench --boards`), so that the policy
 * `auto` places a matmul group on a device exactly where the projection
 * says it pays.
 *
 * Internal header. Three pieces:
 *   - the device time of one matmul (tsr_proj_gemm_cycles): the kernel's
 *     cycle model (driver/kernel_model.h) at the device's read ports;
 *   - the cost of one matmul group on a device as the executor issues it
 *     (tsr_proj_group): one launch, its cycles, and two copies (the
 *     activation rows up, the results down in one read; the ring stays
 *     resident in device memory after the first launch); on a device in
 *     queue mode a doorbell instead of the launch and a third copy (the
 *     descriptors into the queue's slots), each copy at the kernel's host
 *     memory latency where the board has host memory access
 *     (tsr_hal_ring_latency_s, tsr_hal_copy_latency_s);
 *   - a CPU profile (tsr_cpu_profile_t): a fixed roofline of the host's int8
 *     matmuls (weight bytes per second streamed by a GEMV, int8 MACs per
 *     second of a GEMM). The partitioner measures the host kernel on every
 *     shape unless TSR_CPU_PROFILE="GBPS,GMACS" gives it a profile, which
 *     makes its decisions deterministic (tests) and equal to the benchmark's
 *     projection from the same profile.
 * And the per-token model of a whole decoder (tsr_proj_model): every group
 * of every layer placed by that rule, the host's light ops in between, and
 * the launches queued ahead (ap_ctrl_chain) so that a launch's fixed
 * latency overlaps the light ops that precede it.
 */
#ifndef TSR_PROJECT_H
#define TSR_PROJECT_H

#include <stdbool.h>
#include <stdint.h>

#include "driver/hal.h"
#include "driver/kernel_model.h"

typedef struct tsr_cpu_profile {
  double weight_bytes_per_s; /* int8 weight bytes a GEMV (M = 1) streams/s */
  double int8_macs_per_s;    /* int8 multiply-accumulates per s of a GEMM   */
} tsr_cpu_profile_t;

/* Host seconds of an m x n x k int8 matmul under the profile: the slower
 * of streaming the n x k weights and doing the m*n*k MACs. */
double tsr_proj_cpu_matmul_s(const tsr_cpu_profile_t *p, int32_t m, int32_t n, int32_t k);

/* Reads TSR_CPU_PROFILE ("GBPS,GMACS", e.g. "40,400"); false when unset.
 * A malformed value is an INVALID_ARGUMENT naming it. */
tsr_status_t tsr_proj_cpu_profile_env(tsr_cpu_profile_t *out, bool *set);

/* Modeled cycles of one single-descriptor launch of m x n x k on a device
 * of timing `t`, its read ports streaming in parallel (weight row n read by
 * port n % ports). When the kernel model does not model the ports itself
 * (same cycles for 1 and t->ports ports), the ports are modeled here, in
 * this one place, as one port of ports x the per-channel bandwidth. */
uint64_t tsr_proj_gemm_cycles(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k);

/* Cycles of an m x n x k matmul as the executor issues it on a device with
 * these caps: K in pieces where tsr_tile_k_pieces says so, one descriptor
 * each; `ports` true prices the pieces as tsr_proj_gemm_cycles does (the
 * read ports modeled here when the kernel model does not), false with the
 * kernel model alone (what --stats compares with the device's cycles). */
uint64_t tsr_proj_pieces_cycles(const tsr_hal_caps_t *caps, const tsr_km_timing_t *t,
                                uint32_t m, uint32_t n, uint32_t k, bool ports);

/* Cost of a matmul group on one device: `count` members of ns[i] outputs
 * over m rows of k inputs, in one launch. dev_s = launch latency (queue
 * mode: a doorbell) + cycles at the clock; xfer_s = the executor's copies
 * (A up, C down; the ring is resident, or in queue mode copied into the
 * slots) at the copy latency and the link's bandwidth. */
/* Cycles of an m x n x k GEMM_BSR whose 16 x BK tiles (BK as the host
 * picks it, tsr_tile_bsr_bk) are stored at `density`, spread evenly: the
 * kernel model's walk over such a bitmap. */
uint64_t tsr_proj_bsr_cycles(const tsr_km_timing_t *t, uint32_t m, uint32_t n, uint32_t k,
                             double density);
/* dens: NULL, or per member the tile density of a weight stored
 * block-sparse on this device (< 0: stored dense). */
void tsr_proj_group(const tsr_hal_caps_t *caps, const tsr_km_timing_t *t, int32_t m, int32_t k,
                    const int32_t *ns, const double *dens, int count, double *dev_s,
                    double *xfer_s);

/* The shape of a llama-type decoder. */
typedef struct tsr_proj_shape {
  const char *name;
  int32_t dim, hidden, layers, heads, kv_heads, vocab;
} tsr_proj_shape_t;

/* Where the groups of a layer go and what a pass costs. */
typedef struct tsr_proj_result {
  double cpu_s;       /* one pass on the host alone                        */
  double board_s;     /* one pass with the groups that pay on the device,
                         launches queued ahead (ap_ctrl_chain)             */
  double serial_s;    /* the same placement, each launch's latency after
                         the host work before it (no queue)                */
  double all_s;       /* every group on the device (--offload all), queued */
  int dev_groups;     /* groups of one layer on the device (of 4)          */
  bool classifier_on; /* the classifier on the device                      */
  bool on[4];         /* per group of a layer: qkv, o, gate+up, down       */
  int launches;       /* rings per pass: launches, or doorbells (queue mode) */
} tsr_proj_result_t;

/* Projects one pass of `rows` rows (decode: one row per sequence; prefill:
 * every prompt token) through the whole model. `light_s` is the host's
 * light-op time of one pass (norms, RoPE, attention, SwiGLU, residuals,
 * sampling), spread evenly over the four points of a layer where a launch
 * waits for it. A group is placed on the device when dev_s + xfer_s <
 * its host time (plan.c's rule). */
void tsr_proj_model(const tsr_proj_shape_t *s, const tsr_hal_caps_t *caps,
                    const tsr_km_timing_t *t, const tsr_cpu_profile_t *cpu, int32_t rows,
                    double light_s, tsr_proj_result_t *out);

#endif /* TSR_PROJECT_H */
