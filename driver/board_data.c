/*
 * board_data.c - the profiles of driver/boards/ built into the library, so
 * that `board=u280` works from any directory right after `make`. The files
 * are included verbatim by the assembler (.incbin, paths from the project
 * root, where the build runs); the Makefile makes this object depend on
 * them.
 */
#include <stddef.h>

#include "driver/board.h"

#define TSR_BOARD_BLOB(sym, file)                                                 \
  __asm__(".section .rodata\n"                                                  \
          ".globl " #sym "\n.hidden " #sym "\n" #sym ":\n"                     \
          ".incbin \"" file "\"\n"                                              \
          ".globl " #sym "_end\n.hidden " #sym "_end\n" #sym "_end:\n"         \
          ".byte 0\n.previous\n");                                              \
  extern const char sym[], sym##_end[]

TSR_BOARD_BLOB(tsr_board_text_u280, "driver/boards/u280.board");
TSR_BOARD_BLOB(tsr_board_text_u250, "driver/boards/u250.board");
TSR_BOARD_BLOB(tsr_board_text_ddr4, "driver/boards/pcie-ddr4.board");
TSR_BOARD_BLOB(tsr_board_text_usb3, "driver/boards/usb3-artix7.board");

typedef struct builtin {
  const char *name;
  const char *text, *end;
} builtin_t;

/* In the order `bench --boards all` runs them. */
static const builtin_t builtins[] = {
    {"pcie-ddr4", tsr_board_text_ddr4, tsr_board_text_ddr4_end},
    {"u250", tsr_board_text_u250, tsr_board_text_u250_end},
    {"u280", tsr_board_text_u280, tsr_board_text_u280_end},
    {"usb3-artix7", tsr_board_text_usb3, tsr_board_text_usb3_end},
};

size_t tsr_board_builtin_count(void) { return sizeof builtins / sizeof builtins[0]; }

const char *tsr_board_builtin_name(size_t i) {
  return i < tsr_board_builtin_count() ? builtins[i].name : NULL;
}

/* For board.c: the text of built-in i and its length. */
const char *tsr_board_builtin_text(size_t i, size_t *len);
const char *tsr_board_builtin_text(size_t i, size_t *len) {
  if (i >= tsr_board_builtin_count()) return NULL;
  *len = (size_t)(builtins[i].end - builtins[i].text);
  return builtins[i].text;
}
