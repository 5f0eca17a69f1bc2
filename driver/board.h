/*
 * board.h - board profiles: what a card around the kernel provides (memory
 * channels and their bandwidth, kernel clock, the MAC array its DSP slices
 * fit, the host link and the fixed costs of a transfer and a launch).
 *
 * Internal header. A profile is a text file of "key = value" lines (the files of
 * driver/boards; the format and every key are in driver/README.md). The
 * profiles in driver/boards/ are built into the library (board_data.c), so a
 * device spec names one ("fmodel:board=u280"); a value containing '/' or
 * ending in ".board" is read from that file instead. The fmodel and sim
 * backends put a board's figures into their caps and their timing; the cost
 * model, the partitioner, `tessera devices`, `plan` and `bench` see the
 * board through the caps (tsr_hal_caps_t.board, .mem_ports).
 */
#ifndef TSR_BOARD_H
#define TSR_BOARD_H

#include <stddef.h>
#include <stdint.h>

#include "driver/hal.h"

typedef struct tsr_board {
  char name[32];            /* "u280": what board= takes                    */
  char title[96];           /* "AMD Alveo U280"                            */
  char memory[64];          /* kind of device memory, e.g. "HBM2"           */
  char link[64];            /* host link, e.g. "PCIe Gen3 x16"              */
  char origin[160];         /* "built-in" or the file it was read from      */
  uint32_t mem_channels;    /* independent memory channels (>= 1)          */
  double channel_bytes_per_s; /* read bandwidth of ONE channel             */
  uint64_t mem_size;        /* device memory bytes the model offers         */
  uint32_t mem_latency;     /* cycles from read request to first data       */
  double clock_hz;          /* kernel clock                                 */
  uint32_t dsp_slices;      /* DSP slices of the device                     */
  uint32_t macs_per_dsp;    /* int8 MACs per DSP slice the array assumes    */
  uint32_t array_rows;      /* MAC array rows (M direction)                 */
  uint32_t array_cols;      /* MAC array columns (N direction)              */
  uint32_t ports;           /* AXI read masters of the kernel, each on its
                               own channel (1 <= ports <= mem_channels)     */
  double link_bytes_per_s;  /* host<->device bandwidth                      */
  double link_latency_s;    /* fixed cost per host<->device transfer        */
  double launch_latency_s;  /* fixed cost per kernel launch                 */
  double doorbell_latency_s; /* queue mode: one doorbell (0: not driven so) */
  double host_mem_latency_s; /* the kernel's latency to host memory over the
                               link (0: no host memory access)             */
} tsr_board_t;

/* Parses a profile. `origin` names the text in messages ("u280.board").
 * FORMAT errors name the origin, the line and the key: a line without '=',
 * an unknown key, a key given twice, a bad number or one outside its range,
 * zero channels, more ports than channels, an array bigger than its DSP
 * slices hold; a required key missing names the key. */
tsr_status_t tsr_board_parse(const char *text, size_t len, const char *origin,
                             tsr_board_t *out);

/* Loads a built-in board by name, or a file when `name` contains '/' or
 * ends in ".board". NOT_FOUND lists the built-in names. */
tsr_status_t tsr_board_load(const char *name, tsr_board_t *out);

/* The built-in profiles: their count, and the name and text of the i-th
 * (in the order of the table in board_data.c). */
size_t tsr_board_builtin_count(void);
const char *tsr_board_builtin_name(size_t i);

/* Per-channel bandwidth in bytes per kernel cycle. */
static inline double tsr_board_bytes_per_cycle(const tsr_board_t *b) {
  return b->channel_bytes_per_s / b->clock_hz;
}

/* Writes the board's figures into caps: board, array, clock, memory
 * channels (mem_ports) and per-channel bytes per cycle, link and launch
 * costs, the doorbell's cost, host memory access (TSR_HAL_CAP_HOST_MEM and
 * its latency). mem_size is left to the backend (what it really allocates),
 * and so is TSR_HAL_CAP_QUEUE (a backend that runs queue mode sets it). */
void tsr_board_apply_caps(const tsr_board_t *b, tsr_hal_caps_t *caps);

#endif /* TSR_BOARD_H */
