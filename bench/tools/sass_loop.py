#!/usr/bin/env python3
"""Order of the scheduling-relevant instructions in the kernels of a cuobjdump -sass listing.

    cuobjdump -sass BINARY | python3 bench/tools/sass_loop.py REGEX

For every function whose (mangled) name matches REGEX: its name, then its tensor-core, exponential,
barrier, async-copy and branch instructions in program order, consecutive runs of one opcode
counted. Shows where ptxas placed a loop's exponentials relative to its wgmma issues and waits.
"""
import re
import sys

KEEP = re.compile(r"^(HGMMA|WARPGROUP|MUFU\.EX2|BAR|LDGSTS|DEPBAR|BRA|WARPSYNC|SYNCS|EXIT|LDSM|HMMA)")


def main():
    want = re.compile(sys.argv[1])
    name, runs = None, []

    def flush():
        if name and want.search(name):
            print(f"== {name}")
            for op, n, line in runs:
                print(f"  {n:4d} {op:<28} (first at /*{line}*/)")
            print()

    for text in sys.stdin:
        m = re.match(r"\s*Function : (\S+)", text)
        if m:
            flush()
            name, runs = m.group(1), []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", text)
        if not m or name is None:
            continue
        op = m.group(2)
        if not KEEP.match(op):
            continue
        if runs and runs[-1][0] == op:
            runs[-1][1] += 1
        else:
            runs.append([op, 1, m.group(1)])
    flush()


if __name__ == "__main__":
    main()
