/* cmd_xclbin.c - `tessera xclbin`: writes the kernel's xclbin from the
 * register map (hw/regmap.def), or validates and describes an xclbin file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "driver/xrt/tsr_xclbin.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessera xclbin --write OUT [--bitstream FILE] [--mode hs|chain]\n"
          "                      [--kernel NAME] [--platform VBNV]\n"
          "       tessera xclbin --info FILE\n"
          "\n"
          "--write builds the xclbin of the tessera kernel: EMBEDDED_METADATA (kernel\n"
          "XML: arguments, offsets, sizes, address qualifiers, ports, all from\n"
          "hw/regmap.def), MEM_TOPOLOGY, IP_LAYOUT, CONNECTIVITY and, with --bitstream,\n"
          "a BITSTREAM section holding that file. The file is what the xrt backend loads\n"
          "(XRT's noop shim runs the host flow with it; a board needs the bitstream of\n"
          "a real build for its platform).\n"
          "--info validates FILE (header, section table, section bounds and overlaps,\n"
          "metadata) and prints the header, sections, memory banks, compute units,\n"
          "connectivity, kernels and their arguments. A malformed file is an error that\n"
          "names the problem and its byte offset.\n"
          "\n"
          "  --write OUT          output path\n"
          "  --bitstream FILE     bitstream to embed (optional)\n"
          "  --mode hs|chain      compute-unit control protocol (default hs)\n"
          "  --kernel NAME        kernel name (default " TSR_XCLBIN_KERNEL_NAME ")\n"
          "  --platform VBNV      platform name in the header\n"
          "  --info FILE          describe FILE\n"
          "  -h, --help           this text\n"
          "\n"
          "The header timestamp is $SOURCE_DATE_EPOCH when set (reproducible builds),\n"
          "else the current time.\n");
}

int tsr_cmd_xclbin(int argc, char **argv) {
  const char *cmd = argv[0];
  const char *out = NULL, *info = NULL;
  tsr_xclbin_write_opts_t o;
  tsr_xclbin_write_opts_init(&o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--write")) {
      if (!(out = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--info")) {
      if (!(info = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--bitstream")) {
      if (!(o.bitstream_path = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--kernel")) {
      if (!(o.kernel_name = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--platform")) {
      if (!(o.platform_vbnv = cli_value(cmd, argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--mode")) {
      const char *m = cli_value(cmd, argc, argv, &i);
      if (!m) return 2;
      if (!strcmp(m, "hs")) {
        o.ctrl = TSR_XCLBIN_CTRL_HS;
      } else if (!strcmp(m, "chain")) {
        o.ctrl = TSR_XCLBIN_CTRL_CHAIN;
      } else {
        fprintf(stderr, "tessera %s: --mode: '%s' is not hs or chain\n", cmd, m);
        return 2;
      }
    } else {
      fprintf(stderr, "tessera %s: unknown option '%s'\n", cmd, a);
      usage(stderr);
      return 2;
    }
  }
  if (!!out == !!info) {
    fprintf(stderr, "tessera %s: give exactly one of --write OUT and --info FILE\n", cmd);
    usage(stderr);
    return 2;
  }
  if (info) {
    tsr_xclbin_info_t *xi = NULL;
    tsr_status_t s = tsr_xclbin_read_file(info, &xi);
    if (s) return cli_fail(cmd, s);
    printf("file        %s\n", info);
    tsr_xclbin_print(xi, stdout);
    const tsr_xclbin_kernel_t *k = tsr_xclbin_find_kernel(xi, NULL);
    if (k) {
      s = tsr_xclbin_check_regmap(k);
      printf("regmap      %s%s\n", s ? "differs: " : "matches hw/regmap.def",
             s ? tsr_status_message(s) : "");
      tsr_status_free(s);
    }
    tsr_xclbin_info_free(xi);
    return 0;
  }
  const char *sde = getenv("SOURCE_DATE_EPOCH");
  o.timestamp = sde && *sde ? strtoull(sde, NULL, 10) : (uint64_t)time(NULL);
  tsr_status_t s = tsr_xclbin_write_file(&o, out);
  if (s) return cli_fail(cmd, s);
  printf("wrote %s (kernel %s, %s%s%s)\n", out, o.kernel_name, tsr_xclbin_ctrl_name(o.ctrl),
         o.bitstream_path ? ", bitstream " : "", o.bitstream_path ? o.bitstream_path : "");
  return 0;
}
