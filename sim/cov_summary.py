#!/usr/bin/env python3
"""Summarizes a Verilator coverage.dat: line and toggle coverage per module.

usage: cov_summary.py coverage.dat
Each point is a line 'C '<key/value pairs separated by \\x01/\\x02>' count'.
The 'page' field says the kind (v_line/..., v_toggle/..., v_branch/...);
'h' names the hierarchy, from which the module instance is taken.
"""
import collections
import re
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: cov_summary.py coverage.dat')
    tot = collections.Counter()
    hit = collections.Counter()
    per = collections.defaultdict(lambda: [0, 0])
    pat = re.compile(r"^C '(.*)' (\d+)\s*$")
    for line in open(sys.argv[1], encoding='latin-1'):
        m = pat.match(line)
        if not m:
            continue
        fields = {}
        for kv in m.group(1).split('\x01'):
            if '\x02' in kv:
                k, v = kv.split('\x02', 1)
                fields[k] = v
        page = fields.get('page', '')
        kind = page.split('/')[0].replace('v_', '')
        if kind in ('branch', 'expr'):
            kind = 'line'  # Verilator counts if/case arms as line coverage
        count = int(m.group(2))
        mod = page.split('/')[1] if '/' in page else '?'
        tot[kind] += 1
        hit[kind] += count > 0
        key = (mod, kind)
        per[key][0] += 1
        per[key][1] += count > 0
    for kind in sorted(tot):
        print('coverage %-6s %6d / %6d points hit  %5.1f%%' %
              (kind, hit[kind], tot[kind], 100.0 * hit[kind] / max(1, tot[kind])))
    print('per module:')
    for (mod, kind), (t, h) in sorted(per.items()):
        print('  %-16s %-6s %6d / %6d  %5.1f%%' % (mod, kind, h, t, 100.0 * h / max(1, t)))


if __name__ == '__main__':
    main()
