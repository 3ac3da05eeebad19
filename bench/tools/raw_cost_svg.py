#!/usr/bin/env python3
"""Plot of raw-form decode's cost, taken apart, as SVG (standard library only).

    python3 bench/tools/raw_cost_svg.py RESULTS_DIR OUT.svg

RESULTS_DIR is bench/results/2026-11-30-h200-decode-raw-study (on branch results-archive; or one
laid out like it):
d-ab-decode.txt (columns final d1 d2 d3: main and three diagnostic builds) and h-ab-decode.txt
(columns final f2), each round a "## decode round" header and lines "decode/SHAPE/MODE t t ...".
Every bar is the median over the rounds of (time / main's RoPE-off time in that round).
"""
import re
import statistics
import sys


def rounds(path):
    """[{(shape, mode): [t per column]}] per round, and the column names."""
    out, cols = [], []
    for line in open(path):
        h = re.match(r"## decode round \d+: shape (.*) \(us\)", line)
        if h:
            cols = h.group(1).split()
            out.append({})
            continue
        m = re.match(r"decode/(\S+)/(\w+)\s+(.*)", line)
        if m and out:
            out[-1][(m.group(1), m.group(2))] = [float(x) for x in m.group(3).split()]
    return out, cols


def ratio(rs, cols, shape, mode, col):
    i = cols.index(col)
    return statistics.median(r[(shape, mode)][i] / r[(shape, "rope_off")][0] for r in rs)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d, dcols = rounds(f"{sys.argv[1]}/d-ab-decode.txt")
    h, hcols = rounds(f"{sys.argv[1]}/h-ab-decode.txt")
    shape = "B64_L4096_single"
    bars = [
        ("local form (main)", ratio(d, dcols, shape, "local", "final")),
        ("raw build, no rotation work (d3)", ratio(d, dcols, shape, "raw", "d3")),
        ("+ key rotation (d2)", ratio(d, dcols, shape, "raw", "d2")),
        ("+ query per tile instead (d1)", ratio(d, dcols, shape, "raw", "d1")),
        ("raw form, main", ratio(d, dcols, shape, "raw", "final")),
        ("raw form, affc149", ratio(h, hcols, shape, "raw", "f2")),
        ("1 x 10272 RAG: raw, main", ratio(h, hcols, "B1_L10272_rag", "raw", "final")),
        ("1 x 10272 RAG: raw, affc149", ratio(h, hcols, "B1_L10272_rag", "raw", "f2")),
        ("1 x 10272 RAG: local (main)", ratio(h, hcols, "B1_L10272_rag", "local", "final")),
    ]
    width, left, row, top = 760, 250, 26, 40
    scale = (width - left - 60) / 0.5  # 1.0 .. 1.5 of RoPE off across the plot
    height = top + row * len(bars) + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
           'Decode time / RoPE-off time, H200 (64 x 4096 unless named; median of rounds)</text>']
    for t in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5):
        x = left + (t - 1.0) * scale
        svg.append(f'<line x1="{x:.1f}" y1="{top - 5}" x2="{x:.1f}" y2="{height - 30}" stroke="#ddd"/>')
        svg.append(f'<text x="{x:.1f}" y="{height - 15}" text-anchor="middle">{t:.1f}</text>')
    for i, (name, v) in enumerate(bars):
        y = top + i * row
        w = max(1.0, (v - 1.0) * scale)
        color = "#4a7ab5" if "main" in name or "affc149" in name else "#b5a04a"
        svg.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{name}</text>')
        svg.append(f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{color}"/>')
        svg.append(f'<text x="{left + w + 5:.1f}" y="{y + 15}">{v:.3f}</text>')
    svg.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
