#!/usr/bin/env python3
"""Where a kernel's stall samples fall, from Nsight Compute's per-SASS-line source page.

    ncu --import R.ncu-rep --page source --csv --print-source sass > S.csv   (gzip optional)
    python3 bench/tools/ncu_sass_hot.py S.csv[.gz] [--top N] [--block B] [--opcodes LDL,STL]

Prints the totals (stall samples, warp instructions executed), the N lines with the most samples
(index, samples, executions, instruction), and, with --block, the totals of every block of B
consecutive lines with the opcodes that mark it (HGMMA, barriers, async copies, MUFU, EXIT), so
two builds' listings can be lined up by their landmarks (the index is the line's position in
the listing, the order ptxas laid the code out, not the order it runs). --opcodes sums the lines
of each named opcode (for example the local-memory loads and stores of spilled registers): lines,
stall samples and their share, and warp instructions executed.
"""
import argparse
import collections
import csv
import gzip

MARKS = ("HGMMA", "BAR", "SYNCS", "USETMAXREG", "LDGSTS", "EXIT", "MUFU", "WARPSYNC", "HMMA")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    names = rows[head]
    src = names.index("Source")
    samples = names.index("Warp Stall Sampling (All Samples)")
    executed = names.index("Instructions Executed")
    lines = []
    for r in rows[head + 1:]:
        try:
            lines.append((r[src].strip(), int(r[samples]), int(r[executed])))
        except (ValueError, IndexError):
            continue
    return lines


def opcode(src):
    """The opcode of a SASS line without its predicate and modifiers (@P0 LDL.64 ... -> LDL)."""
    words = [w for w in src.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--block", type=int, default=0)
    ap.add_argument("--opcodes", default="", help="comma-separated opcodes to total, e.g. LDL,STL")
    a = ap.parse_args()
    lines = load(a.csv)
    total_s = sum(x[1] for x in lines)
    total_e = sum(x[2] for x in lines)
    print(f"{len(lines)} lines, {total_s} stall samples, {total_e / 1e6:.2f} M warp instructions")
    print(f"\ntop {a.top} lines by samples (index, samples, % of all, executions, instruction):")
    for i in sorted(sorted(range(len(lines)), key=lambda i: -lines[i][1])[:a.top]):
        src, s, e = lines[i]
        print(f"  {i:5d} {s:6d} {100 * s / max(total_s, 1):5.1f}% {e:10d}  {src[:80]}")
    for op in filter(None, a.opcodes.split(",")):
        part = [x for x in lines if opcode(x[0]) == op]
        s = sum(x[1] for x in part)
        print(f"{op}: {len(part)} lines, {s} samples ({100 * s / max(total_s, 1):.1f}%), "
              f"{sum(x[2] for x in part) / 1e6:.3f} M warp instructions")
    if a.block:
        print(f"\nblocks of {a.block} lines (first index, samples, M instructions, landmarks):")
        for b in range(0, len(lines), a.block):
            part = lines[b:b + a.block]
            marks = collections.Counter(x[0].split()[0] for x in part
                                        if any(m in x[0] for m in MARKS))
            print(f"  {b:5d} {sum(x[1] for x in part):6d} {sum(x[2] for x in part) / 1e6:8.2f}  "
                  + " ".join(f"{k}x{v}" for k, v in marks.items()))


if __name__ == "__main__":
    main()
