#!/usr/bin/env python3
"""RoPE overhead per round from scripts/ab-bench tables (ab.txt): for each build column and shape,
MODE / rope_off - 1 in every round (MODE: local, or --mode raw), printed as a table and
optionally plotted.

  python3 bench/tools/ab_overhead.py [--mode M] [--plot OUT.png] [--title T] LABEL=AB.txt[:COLUMN] ...

LABEL names the series (e.g. the call), COLUMN the build column of that file (default: the
first). Rows `<bench>/<shape>/MODE` and `<bench>/<shape>/rope_off` of one round pair up.
"""
import argparse
import re
import statistics
import sys


def read_rounds(path, column, mode="local"):
    """[{shape: (MODE, rope_off)}] per round, for the build column `column` (or the first)."""
    rounds, names, cur = [], None, None
    for line in open(path):
        m = re.match(r"## \S+ round \d+: shape (.*) \(us\)", line)
        if m:
            names = m.group(1).split()
            cur = {}
            rounds.append(cur)
            continue
        parts = line.split()
        if cur is None or len(parts) < 2:
            continue
        col = names.index(column) if column else 0
        if col + 1 >= len(parts):
            continue
        bench, _, name = parts[0].rpartition("/")
        if name in (mode, "rope_off"):
            cur.setdefault(bench, {})[name] = float(parts[col + 1])
    return [{s: (v[mode], v["rope_off"]) for s, v in r.items() if len(v) == 2} for r in rounds]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("series", nargs="+")
    ap.add_argument("--mode", default="local", help="the RoPE mode against rope_off (local, raw)")
    ap.add_argument("--plot")
    ap.add_argument("--title", default="RoPE overhead per round (local / RoPE off - 1)")
    ap.add_argument("--target", type=float, help="a horizontal line at this overhead, in %%")
    a = ap.parse_args()
    data = {}  # shape -> [(label, overhead %)]
    for spec in a.series:
        label, _, rest = spec.partition("=")
        path, _, column = rest.partition(":")
        for r in read_rounds(path, column or None, a.mode):
            for shape, (loc, off) in r.items():
                data.setdefault(shape, []).append((label, 100.0 * (loc / off - 1.0)))
    if not data:
        sys.exit(f"ab_overhead: no {a.mode} / rope_off pairs found")
    print("| shape | rounds | median | min | max | per round |")
    print("|---|---|---|---|---|---|")
    for shape, vals in data.items():
        v = [x for _, x in vals]
        per = ", ".join(f"{x:+.1f}" for x in v)
        print(f"| {shape} | {len(v)} | {statistics.median(v):+.1f}% | {min(v):+.1f}% | "
              f"{max(v):+.1f}% | {per} |")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        shapes = list(data)
        labels = sorted({l for vals in data.values() for l, _ in vals},
                        key=lambda l: [s.partition("=")[0] for s in a.series].index(l))
        fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(shapes), 3.6))
        for li, label in enumerate(labels):
            xs, ys = [], []
            for si, shape in enumerate(shapes):
                for l, y in data[shape]:
                    if l == label:
                        xs.append(si + (li - (len(labels) - 1) / 2) * 0.12)
                        ys.append(y)
            dots = ax.scatter(xs, ys, label=label, s=18)
            for si, shape in enumerate(shapes):  # this series' median at each shape
                v = [y for l, y in data[shape] if l == label]
                if v:
                    x0 = si + (li - (len(labels) - 1) / 2) * 0.12
                    ax.hlines(statistics.median(v), x0 - 0.1, x0 + 0.1,
                              colors=dots.get_facecolor()[0], linewidth=2)
        if a.target is not None:
            ax.axhline(a.target, color="red", linestyle="--", linewidth=1, label=f"target {a.target:g}%")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([s.split("/")[-1] for s in shapes], rotation=20, fontsize=8)
        ax.set_ylabel("overhead (%)")
        ax.set_title(a.title, fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)


if __name__ == "__main__":
    main()
