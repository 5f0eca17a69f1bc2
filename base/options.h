/*
 * options.h - "key=value,key=value" option strings, parsed from a table.
 *
 * Internal header. A component (a device backend, the emulated USB board)
 * declares one table of the options it takes: name, type, range, help and
 * where the value goes in a struct of its own. tsr_opts_parse() walks the
 * string once and fills that struct: every number is range-checked, an
 * unknown key gets an error listing the known ones, and messages name the
 * component, the option, the value and the range. The same table prints the
 * component's help (tsr_opts_print), so what `tessera devices` shows is what
 * the parser accepts.
 *
 * Syntax: pieces separated by commas; "key=value", or a bare "key" (value
 * ""). Unsigned integers take a K/M/G suffix (powers of 1024, optionally
 * followed by "B" or "iB") and a 0x prefix.
 */
#ifndef TSR_OPTIONS_H
#define TSR_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera.h"

typedef enum tsr_opt_type {
  TSR_OPT_U64,  /* uint64_t in [umin, umax]                                  */
  TSR_OPT_F64,  /* double in [fmin, fmax]                                    */
  TSR_OPT_BOOL, /* bool: a bare key, or =1/0/true/false/yes/no                */
  TSR_OPT_STR,  /* char[size]: copied; too long is an error                  */
} tsr_opt_type_t;

/* flags */
#define TSR_OPT_NONEMPTY (1u << 0) /* STR: an empty value is an error         */

typedef struct tsr_opt_spec {
  const char *name;
  tsr_opt_type_t type;
  uint64_t umin, umax; /* U64 range, inclusive                              */
  double fmin, fmax;   /* F64 range, inclusive                              */
  const char *help;    /* one line: what it sets, its unit and default      */
  size_t offset;       /* where the value goes in `out` (offsetof)          */
  size_t size;         /* STR: capacity of the char array (with the NUL)    */
  unsigned flags;      /* TSR_OPT_*                                          */
} tsr_opt_spec_t;

/* Table rows, for designated-initializer-free tables:
 *   TSR_OPT_ROW_U64(struct, field, "name", lo, hi, "help") ... */
#define TSR_OPT_ROW_U64(T, f, name, lo, hi, help) \
  {(name), TSR_OPT_U64, (lo), (hi), 0, 0, (help), offsetof(T, f), sizeof(((T *)0)->f), 0}
#define TSR_OPT_ROW_F64(T, f, name, lo, hi, help) \
  {(name), TSR_OPT_F64, 0, 0, (lo), (hi), (help), offsetof(T, f), sizeof(((T *)0)->f), 0}
#define TSR_OPT_ROW_BOOL(T, f, name, help) \
  {(name), TSR_OPT_BOOL, 0, 1, 0, 0, (help), offsetof(T, f), sizeof(((T *)0)->f), 0}
#define TSR_OPT_ROW_STR(T, f, name, flags, help) \
  {(name), TSR_OPT_STR, 0, 0, 0, 0, (help), offsetof(T, f), sizeof(((T *)0)->f), (flags)}

/* Parses `options` (NULL or "" is an empty list) against table[0..n) into
 * `out`; options not given leave their field untouched, so fill `out` with
 * defaults first. `what` names the component in messages ("sim"). Errors:
 * INVALID_ARGUMENT (unknown key, listing the known ones; malformed value),
 * OUT_OF_RANGE (a number outside its range, or a negative one for an
 * unsigned option). Stops at the first error; `out` may then be partly
 * filled. */
tsr_status_t tsr_opts_parse(const char *what, const tsr_opt_spec_t *table, size_t n,
                            const char *options, void *out);

/* Prints one line per option: `indent`, "name=TYPE", the range, the help. */
void tsr_opts_print(FILE *f, const tsr_opt_spec_t *table, size_t n, const char *indent);

/* ---- the pieces, for parsers that are not table-driven -------------------- */

/* Iterates an option string. Start with *cursor = options (NULL or "" is an
 * empty list). Each call copies the next key and value (value "" for a bare
 * "key") and returns true; returns false at the end. A key or value too long
 * for its buffer gives *err (INVALID_ARGUMENT) and false. */
bool tsr_opt_next(const char **cursor, char *key, size_t key_cap, char *val, size_t val_cap,
                  tsr_status_t *err);
/* Parses an unsigned integer value (K/M/G suffixes) into [lo, hi]. Messages
 * name `what` and `key`; a negative number is OUT_OF_RANGE. */
tsr_status_t tsr_opt_u64(const char *what, const char *key, const char *val, uint64_t lo,
                         uint64_t hi, uint64_t *out);
/* Parses a floating-point value into [lo, hi]. */
tsr_status_t tsr_opt_f64(const char *what, const char *key, const char *val, double lo,
                         double hi, double *out);

#endif /* TSR_OPTIONS_H */
