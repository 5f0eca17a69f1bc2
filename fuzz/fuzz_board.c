/* fuzz_board.c - board profile files (fmodel:board=FILE): tsr_board_parse
 * on the bytes as they are (not NUL-terminated); a profile that parses must
 * hold what the parser promises (channels, ports, array within its DSP
 * slices, positive rates), and its figures go into caps as a backend puts
 * them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/board.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tsr_board_t b;
  tsr_status_t s = tsr_board_parse((const char *)data, size, "fuzz.board", &b);
  if (s) {
    if (!tsr_status_message(s)[0]) abort(); /* an error always says why */
    tsr_status_free(s);
    return 0;
  }
  if (!b.mem_channels || !b.ports || b.ports > b.mem_channels || !b.array_rows ||
      !b.array_cols || !(b.clock_hz > 0) || !(b.channel_bytes_per_s > 0) ||
      !(b.link_bytes_per_s > 0) || b.link_latency_s < 0 || b.launch_latency_s < 0 ||
      !b.name[0] || !b.title[0]) {
    fprintf(stderr, "fuzz_board: a profile parsed with an invalid field\n");
    abort();
  }
  if (b.dsp_slices &&
      (uint64_t)b.array_rows * b.array_cols >
          (uint64_t)b.dsp_slices * (b.macs_per_dsp ? b.macs_per_dsp : 1))
    abort();
  tsr_hal_caps_t caps;
  memset(&caps, 0, sizeof caps);
  tsr_board_apply_caps(&b, &caps);
  if (!(caps.mem_bytes_per_cycle > 0) || caps.mem_ports != b.ports) abort();
  return 0;
}
