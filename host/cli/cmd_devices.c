/*
 * cmd_devices.c - `tessera devices`: the host ("cpu") and every device
 * backend compiled in, whether it opens here, why not, what it offers, and
 * the options it takes (from the backend's option table: type, range, help),
 * then the built-in board profiles (driver/boards) that board= selects.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "compute/qgemm.h"
#include "driver/board.h"
#include "driver/hal.h"

static const char *CMD = "devices";

static void print_options(const tsr_hal_vtable_t *vt) {
  if (!vt->n_options) return;
  printf("        options (%s:key=value,...):\n", vt->name);
  tsr_opts_print(stdout, vt->options, vt->n_options, "          ");
}

int tsr_cmd_devices(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: tessera devices\n\n"
             "Lists the host (cpu) and the device backends (in preference order), tries\n"
             "to open each and prints its capabilities or the reason it is unavailable,\n"
             "then the options each backend takes (--device NAME:key=value,...) and the\n"
             "built-in board profiles (fmodel:board=NAME, sim:board=NAME).\n");
      return 0;
    }
    fprintf(stderr, "tessera %s: unknown option '%s'\n", CMD, argv[i]);
    return 2;
  }
  printf("%-7s available: the host (int8 kernel %s; not a HAL device)\n", "cpu",
         tsr_isa_name(tsr_isa_detect()));
  size_t n = 0;
  const tsr_hal_vtable_t *const *vts = tsr_hal_backends(&n);
  for (size_t i = 0; i < n; i++) {
    tsr_hal_device_t *dev = NULL;
    tsr_status_t s = tsr_hal_open(vts[i]->name, &dev);
    if (s) {
      printf("%-7s unavailable: %s: %s\n", vts[i]->name,
             tsr_status_code_name(tsr_status_code(s)), tsr_status_message(s));
      tsr_status_free(s);
      print_options(vts[i]);
      continue;
    }
    tsr_hal_caps_t c;
    dev->vt->query_caps(dev, &c);
    printf("%-7s available: %s\n", vts[i]->name, c.name);
    printf("        array %ux%u int8 MACs, max dim %u, clock %.0f MHz (stated), "
           "peak %.1f GMAC/s\n",
           c.array_rows, c.array_cols, c.max_dim, c.clock_hz / 1e6,
           c.clock_hz * c.array_rows * c.array_cols / 1e9);
    printf("        memory %" PRIu64 " MiB, %.0f B/cycle (%.1f GB/s); link %.1f GB/s, "
           "%.0f us per transfer, %.0f us per launch\n",
           c.mem_size >> 20, c.mem_bytes_per_cycle, c.mem_bytes_per_cycle * c.clock_hz / 1e9,
           c.link_bytes_per_s / 1e9, c.link_latency_s * 1e6, c.launch_latency_s * 1e6);
    if (c.flags & (TSR_HAL_CAP_QUEUE | TSR_HAL_CAP_HOST_MEM))
      printf("        %s%.1f us per doorbell%s%s%.1f us to host memory%s\n",
             (c.flags & TSR_HAL_CAP_QUEUE) ? "queue mode: " : "",
             (c.flags & TSR_HAL_CAP_QUEUE) ? c.doorbell_latency_s * 1e6 : 0.0,
             (c.flags & TSR_HAL_CAP_QUEUE) ? "" : " (no queue mode)",
             (c.flags & TSR_HAL_CAP_HOST_MEM) ? "; staging in host memory, " : "; ",
             (c.flags & TSR_HAL_CAP_HOST_MEM) ? c.host_mem_latency_s * 1e6 : 0.0,
             (c.flags & TSR_HAL_CAP_HOST_MEM) ? " per copy" : " (none: DMA copies)");
    if (c.board[0])
      printf("        board %s, %u read port(s) of %.0f B/cycle\n", c.board,
             c.mem_ports ? c.mem_ports : 1, c.mem_bytes_per_cycle);
    else
      printf("        board: none (the backend's own figures; board=NAME picks a profile)\n");
    tsr_hal_close(dev);
    print_options(vts[i]);
  }
  printf("boards (board=NAME, or board=FILE.board; driver/README.md cites their sources):\n");
  for (size_t i = 0; i < tsr_board_builtin_count(); i++) {
    tsr_board_t b;
    tsr_status_t s = tsr_board_load(tsr_board_builtin_name(i), &b);
    if (s) {
      printf("  %-12s invalid: %s\n", tsr_board_builtin_name(i), tsr_status_message(s));
      tsr_status_free(s);
      continue;
    }
    printf("  %-12s %s: %ux%u MACs at %.0f MHz; %u x %.2f GB/s %s (%u port%s); %s %.2f GB/s "
           "+ %.0f us per transfer, %.0f us per launch",
           b.name, b.title, b.array_rows, b.array_cols, b.clock_hz / 1e6, b.mem_channels,
           b.channel_bytes_per_s / 1e9, b.memory[0] ? b.memory : "memory", b.ports,
           b.ports == 1 ? "" : "s", b.link[0] ? b.link : "link", b.link_bytes_per_s / 1e9,
           b.link_latency_s * 1e6, b.launch_latency_s * 1e6);
    if (b.doorbell_latency_s > 0) printf(", %.1f us per doorbell", b.doorbell_latency_s * 1e6);
    if (b.host_mem_latency_s > 0)
      printf(", host memory access %.1f us", b.host_mem_latency_s * 1e6);
    printf("\n");
  }
  return 0;
}
