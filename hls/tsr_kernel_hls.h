/*
 * tsr_kernel_hls.h - the tessera kernel for Vitis HLS.
 *
 * The same launch as the RTL (hw/) and the OpenCL kernel (kernels/): walk
 * N_DESC descriptors of 64 bytes from RING, check each like the functional
 * model (driver/kernel_model.h: the same checks in the same order and the
 * same TSR_HWERR_* codes) and run the accepted GEMMs,
 * C[m][n] = sum_k A[m][k] * W[n][k], int8 x int8 -> int32, exactly.
 *
 * Arguments. The four AXI4-Lite registers come first and in the order of
 * hw/regmap.def; the Vitis kernel flow places scalar arguments from 0x10,
 * each taking its 32-bit words plus one reserved word, which gives exactly
 * MEM_BASE 0x10, MEM_SIZE 0x1C, RING 0x28, N_DESC 0x34 (the C simulation
 * checks this against regmap.def). MEM_BASE is a 64-bit scalar rather than
 * an m_axi pointer: descriptors hold device addresses, and HLS cannot do
 * arithmetic on the value of a pointer argument. Device memory is reached
 * through one m_axi port, gmem, that addresses device addresses directly
 * (offset=off: element i is device address i).
 *
 * Results are output registers: STATUS, ERR_INDEX, DESC_DONE and the
 * BYTES_RD, BYTES_WR and MACS counters (BYTES_RD counts the bytes this
 * dataflow reads; it is not the RTL's figure). HLS gives each output a
 * data word and an ap_vld word, so their offsets come from the exported
 * driver header, not from regmap.def's RTL status block (see README.md).
 *
 * Plain fixed-width C types only: the code builds with g++ for C
 * simulation (the pragmas are ignored there) and with Vitis HLS.
 */
#ifndef TSR_KERNEL_HLS_H
#define TSR_KERNEL_HLS_H

#include <stdint.h>

/* The MAC array: ROWS x COLS int32 accumulators, like the RTL's default
 * 16 x 16 build; K is streamed in chunks of KC bytes per operand row. */
#define TSR_HLS_ROWS 16
#define TSR_HLS_COLS 16
#define TSR_HLS_KC 256

/* Bytes of device memory behind gmem, [0, PHYS): an access beyond it is
 * what the interconnect answers with DECERR, reported as AXI_ERROR. A card
 * build sets its bank size; the C simulation sets its test memory. */
/* Read ports (memory channels) of this build: the W_NCH it accepts. One
 * m_axi bundle here, so 1. */
#ifndef TSR_HLS_PORTS
#define TSR_HLS_PORTS 1
#endif
#ifndef TSR_HLS_PHYS_BYTES
#define TSR_HLS_PHYS_BYTES (16ull << 30)
#endif

/* What the kernel reports after ap_done (its output registers). */
typedef struct tsr_hls_status {
  uint32_t status;    /* TSR_HWERR_* of the first failure, 0 = ok        */
  uint32_t err_index; /* failing descriptor (0 when ok)                  */
  uint32_t desc_done; /* descriptors completed                           */
  uint64_t bytes_rd;  /* bytes read through gmem                         */
  uint64_t bytes_wr;  /* bytes written through gmem (4*M*N per GEMM)     */
  uint64_t macs;      /* M*N*K per completed GEMM                        */
} tsr_hls_status_t;

/* The top function. gmem: device memory, element i at device address i
 * (in C simulation, a host array of TSR_HLS_PHYS_BYTES bytes). */
extern "C" void tsr_kernel(uint64_t mem_base, uint64_t mem_size, uint64_t ring, uint32_t n_desc,
                           uint8_t *gmem, uint32_t &status, uint32_t &err_index,
                           uint32_t &desc_done, uint64_t &bytes_rd, uint64_t &bytes_wr,
                           uint64_t &macs);

#endif /* TSR_KERNEL_HLS_H */
