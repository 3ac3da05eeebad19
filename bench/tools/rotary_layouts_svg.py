#!/usr/bin/env python3
"""Plot of decode time over RoPE-off time by rotary layout, before and after a change, as SVG.

    python3 bench/tools/rotary_layouts_svg.py RESULTS_DIR OUT.svg

RESULTS_DIR is bench/results/2026-11-30-h200-decode-rotary-layouts (on branch results-archive;
or one laid out like it):
call-fq/{rot,fq}_{interleaved,partial}_{1,2}.txt and call-fq2/{rot,fq2}_half_{1,2}.txt plus
call-fq2/fq2_{interleaved,partial}_1.txt, each `bench/medians.py` output. Every bar is the median
over the rounds of (mode time / the same binary's RoPE-off time in that round). Standard library
only (no matplotlib on every machine).
"""
import os
import re
import statistics
import sys

SHAPES = [("B64_L4096_single", "64 x 4096"), ("B1_L32768_single", "1 x 32768"),
          ("B64_L10272_rag", "64 x 10272 RAG")]
LAYOUTS = ["half", "interleaved", "partial"]
MODES = ["local", "raw"]


def read(path):
    times = {}
    for line in open(path):
        m = re.match(r"decode/(\S+)/(\w+)\s+([\d.]+) us", line)
        if m:
            times[(m.group(1), m.group(2))] = float(m.group(3))
    return times


def ratios(files):
    """{(shape, mode): median over files of time / rope_off time}"""
    out = {}
    runs = [read(f) for f in files if os.path.exists(f)]
    for shape, _ in SHAPES:
        for mode in MODES:
            vals = [r[(shape, mode)] / r[(shape, "rope_off")] for r in runs
                    if (shape, mode) in r and (shape, "rope_off") in r]
            if vals:
                out[(shape, mode)] = statistics.median(vals)
    return out


def main():
    root, out_path = sys.argv[1], sys.argv[2]
    fq, fq2 = os.path.join(root, "call-fq"), os.path.join(root, "call-fq2")
    before = {"half": ratios([f"{fq2}/rot_half_{r}.txt" for r in (1, 2)])}
    after = {"half": ratios([f"{fq2}/fq2_half_{r}.txt" for r in (1, 2)])}
    for lay in ("interleaved", "partial"):
        before[lay] = ratios([f"{fq}/rot_{lay}_{r}.txt" for r in (1, 2)])
        after[lay] = ratios([f"{fq2}/fq2_{lay}_1.txt"])

    bar, gap, group_gap = 14, 3, 18
    left, top, plot_h = 70, 40, 260
    y_max = 2.2
    groups = [(s, m) for s in SHAPES for m in MODES]
    width = left + len(groups) * (len(LAYOUTS) * 2 * (bar + gap) + group_gap) + 20
    height = top + plot_h + 90
    colors = {"half": ("#9ecae1", "#3182bd"), "interleaved": ("#fdae6b", "#e6550d"),
              "partial": ("#a1d99b", "#31a354")}
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">Decode time / RoPE-off time on the H200 '
           f'by rotary layout: before (light) and after (dark) 1f919fb</text>']
    def y(v):
        return top + plot_h - v / y_max * plot_h
    for v in (0.0, 0.5, 1.0, 1.5, 2.0):
        svg.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="{"#888" if v == 1.0 else "#ddd"}"/>')
        svg.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    x = left + 10
    for (shape, label), mode in groups:
        x0 = x
        for lay in LAYOUTS:
            for i, src in enumerate((before, after)):
                v = src[lay].get((shape, mode))
                if v is None:
                    x += bar + gap
                    continue
                svg.append(f'<rect x="{x}" y="{y(v):.1f}" width="{bar}" height="{y(0) - y(v):.1f}" '
                           f'fill="{colors[lay][i]}"><title>{label} {mode} {lay} '
                           f'{"before" if i == 0 else "after"}: {v:.3f}</title></rect>')
                x += bar + gap
        svg.append(f'<text x="{(x0 + x) / 2:.1f}" y="{top + plot_h + 16}" '
                   f'text-anchor="middle">{mode}</text>')
        svg.append(f'<text x="{(x0 + x) / 2:.1f}" y="{top + plot_h + 30}" '
                   f'text-anchor="middle">{label}</text>')
        x += group_gap
    lx = left
    for lay in LAYOUTS:
        svg.append(f'<rect x="{lx}" y="{height - 30}" width="12" height="12" fill="{colors[lay][1]}"/>')
        svg.append(f'<text x="{lx + 16}" y="{height - 20}">{lay}</text>')
        lx += 110
    svg.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
