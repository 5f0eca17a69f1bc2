/*
 * tsr_xclbin.h - writing and reading the xclbin container of the tessera
 * kernel.
 *
 * Internal header (driver/xrt, the CLI and the tests use it).
 *
 * An xclbin ("axlf") is the file XRT loads onto a device: a fixed header,
 * a table of section headers, then the sections. The layout below is the
 * on-disk format that XRT declares in its public header <xrt/xclbin.h>
 * (struct axlf, axlf_header, axlf_section_header, mem_topology/mem_data,
 * connectivity/connection, ip_layout/ip_data); it is restated here as byte
 * offsets, little-endian, so that libtessera builds where XRT is absent and
 * the file never depends on the host ABI. tests/unit/test_xclbin.c checks
 * every offset against the system header when that header is installed.
 *
 * What the writer emits for the kernel (all derived from hw/regmap.def, the
 * single source of the kernel interface; nothing is typed twice):
 *   EMBEDDED_METADATA  the kernel XML XRT parses: one kernel, its AXI4-Lite
 *                      control port and AXI4 master port, one <arg> per
 *                      TSR_ARG row (name, id, offset, size, address
 *                      qualifier: PTR -> global/1, SCALAR -> 0), one instance
 *   MEM_TOPOLOGY       one DDR4 bank
 *   IP_LAYOUT          one IP_KERNEL compute unit "KERNEL:KERNEL_1" with its
 *                      control protocol (ap_ctrl_hs or ap_ctrl_chain)
 *   CONNECTIVITY       every pointer argument of the CU -> the bank
 *   BITSTREAM          the given bitstream file, verbatim (optional)
 * The file is deterministic: the same options give the same bytes (the UUID
 * is a hash of the content, the timestamp is an option).
 *
 * The reader validates a file from any source and names what is wrong:
 * "truncated header", "bad magic", "length mismatch", "section table out of
 * range", "section out of range", "overlapping sections", "malformed
 * section", "truncated metadata", "malformed metadata" (status FORMAT, with
 * the file, the section and the byte offset in the message).
 */
#ifndef TSR_XCLBIN_H
#define TSR_XCLBIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera.h"

/* ---- on-disk layout (from <xrt/xclbin.h>, XRT 2.13) -------------------- */
enum {
  TSR_AXLF_MAGIC_BYTES = 8,        /* "xclbin2\0"                          */
  TSR_AXLF_OFF_SIGLEN = 8,         /* int32 m_signature_length (-1: none)  */
  TSR_AXLF_OFF_RESERVED = 12,      /* 28 bytes, 0xFF                       */
  TSR_AXLF_OFF_KEYBLOCK = 40,      /* 256 bytes, 0xFF                      */
  TSR_AXLF_OFF_UNIQUE_ID = 296,    /* uint64 m_uniqueId                    */
  TSR_AXLF_OFF_HEADER = 304,       /* struct axlf_header (152 bytes)       */
  TSR_AXLF_OFF_LENGTH = 304,       /* uint64 m_length: whole file          */
  TSR_AXLF_OFF_TIMESTAMP = 312,    /* uint64 seconds since the epoch       */
  TSR_AXLF_OFF_FROM_TIMESTAMP = 320, /* uint64 m_featureRomTimeStamp       */
  TSR_AXLF_OFF_VER_PATCH = 328,    /* uint16                               */
  TSR_AXLF_OFF_VER_MAJOR = 330,    /* uint8                                */
  TSR_AXLF_OFF_VER_MINOR = 331,    /* uint8                                */
  TSR_AXLF_OFF_MODE = 332,         /* uint16 XCLBIN_MODE                   */
  TSR_AXLF_OFF_ACTION_MASK = 334,  /* uint16                               */
  TSR_AXLF_OFF_ROM_UUID = 336,     /* 16 bytes (platform id / feature id)  */
  TSR_AXLF_OFF_VBNV = 352,         /* 64 bytes, NUL-terminated platform    */
  TSR_AXLF_OFF_UUID = 416,         /* 16 bytes: this xclbin's UUID         */
  TSR_AXLF_OFF_DEBUG_BIN = 432,    /* 16 bytes                             */
  TSR_AXLF_OFF_NUM_SECTIONS = 448, /* uint32                               */
  TSR_AXLF_OFF_SECTIONS = 456,     /* first axlf_section_header            */
  TSR_AXLF_SECTION_HDR_BYTES = 40, /* kind u32 @0, name[16] @4, offset u64
                                      @24, size u64 @32                    */
  TSR_AXLF_MIN_BYTES = 496,        /* sizeof(struct axlf): one section hdr */
  TSR_AXLF_MAX_SECTIONS = 0x10000, /* XCLBIN_MAX_NUM_SECTION               */

  TSR_MEM_DATA_BYTES = 40,   /* type u8 @0, used u8 @1, size_kb u64 @8,
                                base u64 @16, tag[16] @24                   */
  TSR_MEM_TOPO_HDR_BYTES = 8, /* int32 m_count, padding                    */
  TSR_CONNECTION_BYTES = 12, /* arg_index, ip_layout_index, mem_data_index */
  TSR_CONNECTIVITY_HDR_BYTES = 4,
  TSR_IP_DATA_BYTES = 80,    /* type u32 @0, properties u32 @4, base u64 @8,
                                name[64] @16                                */
  TSR_IP_LAYOUT_HDR_BYTES = 8,
};

/* Section kinds (enum axlf_section_kind) the project uses or names. */
enum {
  TSR_AXLF_BITSTREAM = 0,
  TSR_AXLF_CLEARING_BITSTREAM = 1,
  TSR_AXLF_EMBEDDED_METADATA = 2,
  TSR_AXLF_MEM_TOPOLOGY = 6,
  TSR_AXLF_CONNECTIVITY = 7,
  TSR_AXLF_IP_LAYOUT = 8,
  TSR_AXLF_DEBUG_IP_LAYOUT = 9,
  TSR_AXLF_CLOCK_FREQ_TOPOLOGY = 11,
  TSR_AXLF_BUILD_METADATA = 14,
  TSR_AXLF_KEYVALUE_METADATA = 15,
  TSR_AXLF_PARTITION_METADATA = 20,
  TSR_AXLF_GROUP_TOPOLOGY = 26,
  TSR_AXLF_GROUP_CONNECTIVITY = 27,
};

/* enum MEM_TYPE, enum IP_TYPE, enum IP_CONTROL and the ip_data property
 * bits of <xrt/xclbin.h>. */
enum {
  TSR_MEM_DDR4 = 1,
  TSR_IP_KERNEL = 1,
  TSR_IP_INT_ENABLE_MASK = 0x0001,
  TSR_IP_INTERRUPT_ID_MASK = 0x00FE,
  TSR_IP_CONTROL_MASK = 0xFF00,
  TSR_IP_CONTROL_SHIFT = 8,
};

/* Control protocol of the compute unit (enum IP_CONTROL). */
typedef enum tsr_xclbin_ctrl {
  TSR_XCLBIN_CTRL_HS = 0,    /* ap_ctrl_hs: one run at a time             */
  TSR_XCLBIN_CTRL_CHAIN = 1, /* ap_ctrl_chain: next start before done     */
  TSR_XCLBIN_CTRL_NONE = 2,
} tsr_xclbin_ctrl_t;

/* Name of a section kind ("MEM_TOPOLOGY", ...); "UNKNOWN" otherwise. */
const char *tsr_xclbin_kind_name(uint32_t kind);
/* "ap_ctrl_hs", "ap_ctrl_chain", ... */
const char *tsr_xclbin_ctrl_name(uint32_t ctrl);

/* ---- writer ------------------------------------------------------------ */

#define TSR_XCLBIN_KERNEL_NAME "tsr_kernel"

typedef struct tsr_xclbin_write_opts {
  tsr_xclbin_ctrl_t ctrl;     /* HS (default) or CHAIN                    */
  const char *kernel_name;    /* NULL = TSR_XCLBIN_KERNEL_NAME; borrowed  */
  const char *platform_vbnv;  /* NULL = "xilinx:tessera:generic:1.0"      */
  const char *bitstream_path; /* optional: becomes the BITSTREAM section  */
  uint64_t timestamp;         /* header m_timeStamp (0 = unset)           */
  uint64_t cu_base;           /* CU control base address (default 0x1800000) */
  uint64_t mem_base;          /* bank base address (default 0x4000000000) */
  uint64_t mem_size;          /* bank size in bytes (default 16 GiB)      */
  uint32_t clock_mhz;         /* kernel clock in the metadata (default 300) */
} tsr_xclbin_write_opts_t;

void tsr_xclbin_write_opts_init(tsr_xclbin_write_opts_t *opts);

/* Builds the xclbin in memory. On success *out_data (malloc'ed, owned by the
 * caller, free()) holds *out_size bytes. `opts` borrowed, NULL = defaults. */
tsr_status_t tsr_xclbin_build(const tsr_xclbin_write_opts_t *opts, uint8_t **out_data,
                              size_t *out_size);
/* Builds and writes it to `path` (replaced atomically via a temporary file
 * in the same directory). */
tsr_status_t tsr_xclbin_write_file(const tsr_xclbin_write_opts_t *opts, const char *path);

/* ---- reader ------------------------------------------------------------ */

typedef struct tsr_xclbin_section {
  uint32_t kind;
  char name[17];
  uint64_t offset, size;
} tsr_xclbin_section_t;

typedef struct tsr_xclbin_mem {
  uint8_t type, used;
  uint64_t size_kb, base;
  char tag[17];
} tsr_xclbin_mem_t;

typedef struct tsr_xclbin_ip {
  uint32_t type, properties;
  uint64_t base;
  char name[65];
} tsr_xclbin_ip_t;

typedef struct tsr_xclbin_conn {
  int32_t arg_index, ip_index, mem_index;
} tsr_xclbin_conn_t;

/* One <arg> of a kernel in EMBEDDED_METADATA. */
typedef struct tsr_xclbin_arg {
  char name[48];
  char type[48];
  char port[48];
  int32_t id;           /* -1 when absent */
  uint32_t addr_qual;   /* 0 scalar, 1 global (pointer), ... */
  uint64_t offset, size, host_offset, host_size;
} tsr_xclbin_arg_t;

typedef struct tsr_xclbin_port {
  char name[48];
  char mode[16]; /* "slave" / "master" */
  uint64_t range;
  uint32_t data_width;
} tsr_xclbin_port_t;

enum { TSR_XCLBIN_MAX_ARGS = 64, TSR_XCLBIN_MAX_PORTS = 16, TSR_XCLBIN_MAX_INST = 16,
       TSR_XCLBIN_MAX_KERNELS = 16 };

typedef struct tsr_xclbin_kernel {
  char name[64];
  char protocol[32]; /* hwControlProtocol, "" if absent */
  size_t n_args, n_ports, n_inst;
  tsr_xclbin_arg_t args[TSR_XCLBIN_MAX_ARGS];
  tsr_xclbin_port_t ports[TSR_XCLBIN_MAX_PORTS];
  char inst[TSR_XCLBIN_MAX_INST][64];
  uint64_t inst_base[TSR_XCLBIN_MAX_INST];
} tsr_xclbin_kernel_t;

/* Everything the reader extracted; owned by the caller
 * (tsr_xclbin_info_free). */
typedef struct tsr_xclbin_info {
  uint64_t length, timestamp, unique_id;
  uint8_t ver_major, ver_minor;
  uint16_t ver_patch, mode;
  char vbnv[65];
  uint8_t uuid[16];
  size_t n_sections;
  tsr_xclbin_section_t *sections; /* (n_sections) */
  size_t n_mem, n_ip, n_conn, n_kernels;
  tsr_xclbin_mem_t *mem;          /* (n_mem)  from MEM_TOPOLOGY           */
  tsr_xclbin_ip_t *ip;            /* (n_ip)   from IP_LAYOUT              */
  tsr_xclbin_conn_t *conn;        /* (n_conn) from CONNECTIVITY           */
  tsr_xclbin_kernel_t *kernels;   /* (n_kernels) from EMBEDDED_METADATA   */
  uint64_t bitstream_bytes;       /* size of the BITSTREAM section, 0 = none */
} tsr_xclbin_info_t;

/* Validates and parses `size` bytes (borrowed). `what` names the source in
 * messages (a file name). On success the caller owns *out. */
tsr_status_t tsr_xclbin_parse(const uint8_t *data, size_t size, const char *what,
                              tsr_xclbin_info_t **out);
/* Reads and parses a file. */
tsr_status_t tsr_xclbin_read_file(const char *path, tsr_xclbin_info_t **out);
void tsr_xclbin_info_free(tsr_xclbin_info_t *info);

/* Kernel by name, or the only kernel when `name` is NULL; NULL if none. */
const tsr_xclbin_kernel_t *tsr_xclbin_find_kernel(const tsr_xclbin_info_t *info,
                                                  const char *name);
/* Control protocol of the first CU of `kernel` from IP_LAYOUT (falls back
 * to the XML hwControlProtocol); TSR_XCLBIN_CTRL_HS if neither says. */
tsr_xclbin_ctrl_t tsr_xclbin_kernel_ctrl(const tsr_xclbin_info_t *info,
                                         const tsr_xclbin_kernel_t *kernel);

/* Checks that `kernel` declares exactly the arguments of hw/regmap.def, in
 * order, with the same offsets, sizes and kinds. FORMAT naming the first
 * argument that differs. */
tsr_status_t tsr_xclbin_check_regmap(const tsr_xclbin_kernel_t *kernel);

/* Prints header, sections, memory banks, IPs, connectivity, kernels and
 * their arguments. */
void tsr_xclbin_print(const tsr_xclbin_info_t *info, FILE *f);

/* ---- the kernel arguments of hw/regmap.def, as a table ---------------- */

typedef struct tsr_regmap_arg {
  const char *name;   /* lower-case TSR_ARG name: "mem_base", ...         */
  uint32_t offset;    /* control-register offset                          */
  uint32_t bytes;     /* 8 for 64-bit, 4 for 32-bit                       */
  bool is_ptr;        /* PTR (device address) vs SCALAR                   */
  const char *desc;
} tsr_regmap_arg_t;

/* The TSR_ARG rows in declaration order (static storage). */
const tsr_regmap_arg_t *tsr_regmap_args(size_t *count);

#endif /* TSR_XCLBIN_H */
