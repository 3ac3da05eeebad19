#!/usr/bin/env python3
"""Prefill time over RoPE-off time per mode and shape, from one Google Benchmark JSON of
lazyattn_bench_prefill, as SVG (standard library only: no matplotlib on every machine).

    python3 bench/tools/prefill_modes_svg.py bench_prefill.json OUT.svg [TITLE]

Each bar is a mode's median time over the median time of the RoPE-off run of the kernel it ran
on (its label: rope_off for the Hopper kernel, rope_off_mma for mma.sync), same run. The dashed
line is 1.10 (issue 25's bound: within 10% of RoPE off).
"""
import json
import sys

SHAPES = ["rag_tail", "encode_4096", "encode_16384", "rag_tail_d64", "encode_4096_d64",
          "encode_16384_d64"]  # the last three at head dim 64, where the run has them
MODES = [("local", "#1f77b4"), ("raw", "#d62728"), ("local_interleaved", "#9ecae1"),
         ("raw_interleaved", "#fc9272"), ("local_partial", "#6baed6"), ("raw_partial", "#fb6a4a"),
         ("raw_mma", "#7f7f7f")]


def medians(path):
    rows = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            name = b["run_name"].split("/")
            rows[(name[1], name[2])] = (b["real_time"], b.get("label", ""))
    return rows


def main():
    rows = medians(sys.argv[1])
    title = sys.argv[3] if len(sys.argv) > 3 else "prefill time / RoPE-off time (same kernel)"
    ratios = {}
    shapes = [sh for sh in SHAPES if any(k[0] == sh for k in rows)]
    for shape in shapes:
        for mode, _ in MODES:
            if (shape, mode) not in rows:
                continue
            t, label = rows[(shape, mode)]
            twin = "rope_off_mma" if label == "mma_sync" else "rope_off"
            if (shape, twin) in rows:
                ratios[(shape, mode)] = t / rows[(shape, twin)][0]
    top = max([1.2] + list(ratios.values())) * 1.08
    W, H, left, bottom, plot_h = max(900, 80 + 150 * len(shapes)), 420, 60, 70, 300
    group_w = (W - left - 20) / len(shapes)
    bar_w = group_w / (len(MODES) + 1.5)
    y = lambda v: H - bottom - v / top * plot_h  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>']
    for v in [0.5 * i for i in range(int(top / 0.5) + 1)]:
        out.append(f'<line x1="{left}" x2="{W - 20}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    out.append(f'<line x1="{left}" x2="{W - 20}" y1="{y(1.1):.1f}" y2="{y(1.1):.1f}" '
               'stroke="black" stroke-dasharray="5,4"/>')
    for g, shape in enumerate(shapes):
        x0 = left + g * group_w + bar_w * 0.75
        for i, (mode, color) in enumerate(MODES):
            v = ratios.get((shape, mode))
            if v is None:
                continue
            x = x0 + i * bar_w
            out.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bar_w * 0.9:.1f}" '
                       f'height="{y(0) - y(v):.1f}" fill="{color}"/>')
            out.append(f'<text x="{x + bar_w * 0.45:.1f}" y="{y(v) - 3:.1f}" '
                       f'text-anchor="middle" font-size="9">{v:.2f}</text>')
        out.append(f'<text x="{left + (g + 0.5) * group_w:.1f}" y="{H - bottom + 16}" '
                   f'text-anchor="middle">{shape}</text>')
    for i, (mode, color) in enumerate(MODES):
        x = left + i * 118
        out.append(f'<rect x="{x}" y="{H - 30}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{x + 14}" y="{H - 21}">{mode}</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
