#!/usr/bin/env python3
"""Generates the SystemVerilog register definitions from hw/regmap.def.

usage: gen_regs_svh.py hw/regmap.def > hw/rtl/tsr_regs_pkg.svh

regmap.def is the single source of truth of the kernel interface (C expands it
with X-macros in driver/tsr_regmap.h). The output is a list of localparams
meant to be `include'd inside a module body: this is the one form that
Verilator, Yosys and iverilog all accept (packages with pkg::name references
or import pkg::* break at least one of them). Names match the C side.
"""
import re
import sys

ROW = re.compile(r'^\s*(TSR_REG|TSR_ARG|TSR_STAT|TSR_DESC|TSR_CONST|TSR_OP|TSR_HWERR)\s*\((.*)\)\s*$')


def split_args(text):
    """Splits a macro argument list at top-level commas (strings may hold commas)."""
    out, cur, in_str = [], '', False
    for ch in text:
        if ch == '"':
            in_str = not in_str
        if ch == ',' and not in_str:
            out.append(cur.strip())
            cur = ''
        else:
            cur += ch
    out.append(cur.strip())
    return out


def num(s):
    return int(s, 0)


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: gen_regs_svh.py REGMAP.def')
    src = open(sys.argv[1]).read()
    src = re.sub(r'/\*.*?\*/', '', src, flags=re.S)
    lines = []
    for lineno, line in enumerate(src.splitlines(), 1):
        if not line.strip():
            continue
        m = ROW.match(line)
        if not m:
            sys.exit('%s:%d: not a TSR_* row: %s' % (sys.argv[1], lineno, line.strip()))
        kind, args = m.group(1), split_args(m.group(2))
        name = args[0]
        desc = args[-1].strip('"')
        if kind in ('TSR_REG', 'TSR_ARG', 'TSR_STAT'):
            prefix = kind
            off = num(args[1])
            bits = 32 if kind == 'TSR_REG' else num(args[2])
            lines.append("localparam logic [11:0] %s_%s = 12'h%03x;  // %s" %
                         (prefix, name, off, desc))
            if kind != 'TSR_REG':
                lines.append("localparam int %s_%s_BITS = %d;" % (prefix, name, bits))
        elif kind == 'TSR_DESC':
            lines.append("localparam int TSR_DESC_%s = %d;  // byte offset, %s bits: %s" %
                         (name, num(args[1]), args[2], desc))
            lines.append("localparam int TSR_DESC_%s_BITS = %d;" % (name, num(args[2])))
        elif kind == 'TSR_CONST':
            lines.append("localparam int TSR_HW_%s = %d;  // %s" % (name, num(args[1]), desc))
        elif kind == 'TSR_OP':
            lines.append("localparam logic [31:0] TSR_OP_%s = 32'd%d;  // %s" % (name, num(args[1]), desc))
        elif kind == 'TSR_HWERR':
            lines.append("localparam logic [31:0] TSR_HWERR_%s = 32'd%d;  // %s" % (name, num(args[1]), desc))
    print('// tsr_regs_pkg.svh - GENERATED from hw/regmap.def by scripts/gen_regs_svh.py.')
    print('// Do not edit: run `make regmap`. `make regmap-check` fails when this file')
    print('// differs from what the generator produces.')
    print('//')
    print('// `include this inside a module body; names match driver/tsr_regmap.h.')
    print('/* verilator lint_off UNUSEDPARAM */')
    for line in lines:
        print(line)
    print('/* verilator lint_on UNUSEDPARAM */')


if __name__ == '__main__':
    main()
