#!/usr/bin/env python3
"""Merges lazyattn_rag_bench JSON runs into one file, a markdown table and the plots of
docs/reproduction.md: median TTFT and throughput against the arrival rate (one panel per
popularity and KV budget), and the document hit ratio against the cache budget with the analytic
curves.

    python3 bench/rag/plot.py --out DIR --name PREFIX [--hit CACHE_SWEEP.json] RUN.json ...

Each file is one run of lazyattn_rag_bench (its "points") or scripts/rag-gpu's merged sweep (its
"runs"). Points are grouped by popularity, pool (element type, and eviction and running-request
limit where not the defaults), cached documents the budget holds, and run length and warm-up;
a rate measured twice for one mode keeps the later file's point. Runs with a warm-up
(--warmup-requests) plot the throughput after it (throughput_steady_rps) and a third row: the hit
ratio after the warm-up against the ideal cache of the same bytes on the same draws. Needs
matplotlib for the plots (Debian: python3-matplotlib); without it, the JSON and the table are
still written.
"""
import argparse
import json
import os
import sys

MODES = ["lazy", "block-attention", "position-aware", "prefix", "full"]
STYLE = {"lazy": ("tab:blue", "o"), "block-attention": ("tab:red", "s"),
         "position-aware": ("tab:purple", "^"), "prefix": ("tab:orange", "D"),
         "full": ("tab:gray", "v")}


def popularity(run):
    z = run["workload"]["zipf"]
    return f"Zipf {z:g}" if z > 0 else "uniform"


def pool(run):
    """The KV pool's element type and what differs from the defaults (LRU, 16 running requests),
    as the group key and the titles name them (runs from before fp8 pools or eviction policies:
    bf16, LRU)."""
    kv = {"float8_e4m3": "fp8", "float16": "fp16"}.get(run.get("kv_dtype"), "bf16")
    label = f"{kv} pool"
    if run.get("eviction", "lru") != "lru":
        label += ", " + {"segmented_lru": "segmented LRU", "lfu": "LFU"}.get(run["eviction"],
                                                                           run["eviction"])
    if run.get("max_batch", 16) != 16:
        label += f", max batch {run['max_batch']}"
    return label


def load(paths):
    """(popularity, pool, capacity_docs, requests, warm-up) -> mode -> rate -> point, and the
    runs' headers (requests 0 for runs without a warm-up)."""
    groups, headers = {}, []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for run in data["runs"] if "runs" in data else [data]:
            header = {k: v for k, v in run.items() if k != "points"}
            header["file"] = os.path.basename(path)
            headers.append(header)
            # Runs of other lengths or warm-ups are other groups (a warm run's hit ratio and
            # throughput are over the requests after its warm-up).
            warmup = run.get("warmup_requests", 0)
            requests = run["workload"]["requests"] if warmup else 0
            for p in run["points"]:
                key = (popularity(run), pool(run), p["capacity_docs"], requests, warmup)
                groups.setdefault(key, {}).setdefault(p["mode"], {})[p["rate"]] = p
    return groups, headers


def warm(key):
    """Whether the group's runs had a warm-up (then its throughput is the one after it)."""
    return key[4] > 0


def title(key):
    pop, kv, cap, requests, warmup = key
    t = f"{pop}, {kv}, {cap} cached docs"
    if warmup:
        t += f"\n{requests} requests, the first {warmup} a warm-up"
    return t


def fmt_s(x):
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def table(groups):
    """Markdown: per group, TTFT p50 / p90 and throughput by rate and mode, and lazy's ratios."""
    lines = []
    for key, modes in sorted(groups.items()):
        present = [m for m in MODES if m in modes]
        rates = sorted({r for m in present for r in modes[m]})
        lines.append(f"\n**{title(key).replace(chr(10), '; ')}**: median TTFT (p90) and "
                     "throughput in requests/s, by offered rate\n")
        head = "| rate | " + " | ".join(present)
        ratio = "lazy" in present and "block-attention" in present
        if ratio:
            head += " | block-attention / lazy TTFT | lazy / block-attention req/s"
        lines.append(head + " |")
        lines.append("|---" * (len(present) + 1 + 2 * ratio) + "|")
        for r in rates:
            row = [f"{r:g}"]
            for m in present:
                p = modes[m].get(r)
                row.append(f"{fmt_s(p['ttft_p50_s'])} ({fmt_s(p['ttft_p90_s'])}), "
                           f"{p['throughput_rps']:.2f}/s" if p else "")
            if ratio:
                lz, bl = modes["lazy"].get(r), modes["block-attention"].get(r)
                row.append(f"{bl['ttft_p50_s'] / lz['ttft_p50_s']:.2f}x" if lz and bl else "")
                row.append(f"{lz['throughput_rps'] / bl['throughput_rps']:.2f}x"
                           if lz and bl else "")
            lines.append("| " + " | ".join(row) + " |")
        peaks = {m: max(p["throughput_rps"] for p in modes[m].values()) for m in present}
        lines.append("\nHighest throughput measured: " + ", ".join(
            f"{m} {v:.2f} req/s" for m, v in peaks.items()) + ".")
        # Runs with a warm-up (--warmup-requests; only then do the two differ): the throughput
        # after it as well.
        if any(p.get("throughput_steady_rps", p["throughput_rps"]) != p["throughput_rps"]
               for m in present for p in modes[m].values()):
            steady = {m: max(p.get("throughput_steady_rps", p["throughput_rps"])
                             for p in modes[m].values()) for m in present}
            lines.append("Highest throughput after the warm-up: " + ", ".join(
                f"{m} {v:.2f} req/s" for m, v in steady.items()) + ".")
    return "\n".join(lines) + "\n"


def plot_rates(groups, out_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted(groups)
    rows = 3 if any(warm(k) for k in keys) else 2
    fig, axes = plt.subplots(rows, len(keys), figsize=(4.6 * len(keys), 3.75 * rows),
                             squeeze=False)
    for col, key in enumerate(keys):
        after = warm(key)
        thr = "throughput_steady_rps" if after else "throughput_rps"
        for m in MODES:
            pts = groups[key].get(m)
            if not pts:
                continue
            rates = sorted(pts)
            color, marker = STYLE[m]
            axes[0][col].plot(rates, [pts[r]["ttft_p50_s"] for r in rates], marker=marker,
                              color=color, label=m)
            axes[1][col].plot(rates, [pts[r].get(thr, pts[r]["throughput_rps"]) for r in rates],
                              marker=marker, color=color, label=m)
            if rows == 3:
                axes[2][col].plot(rates, [pts[r]["hit_ratio"] for r in rates], marker=marker,
                                  color=color, label=m)
        top = max(r for m in groups[key].values() for r in m)
        axes[1][col].plot([0, top], [0, top], color="black", lw=0.6, ls=":", label="offered")
        axes[0][col].set_yscale("log")
        axes[0][col].set_title(title(key), fontsize=10)
        axes[0][col].set_ylabel("median TTFT (s)")
        axes[1][col].set_ylabel("throughput after the warm-up (requests/s)" if after
                                else "throughput (requests/s)")
        if rows == 3:
            # The ideal cache of the same bytes on the same draws (the top documents by count).
            ideal = [p["top_c_hit_ratio_same_draws"] for m in groups[key].values()
                     for p in m.values() if "top_c_hit_ratio_same_draws" in p]
            if ideal:
                axes[2][col].axhline(max(ideal), color="black", lw=0.8, ls="--",
                                     label="ideal, same bytes and draws")
            axes[2][col].set_ylabel("document hit ratio" + (" after the warm-up" if after else ""))
            axes[2][col].legend(fontsize=8)
        for row in range(rows):
            axes[row][col].set_xlabel("arrival rate (requests/s)")
            axes[row][col].grid(alpha=0.3)
        axes[0][col].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def plot_hit(path, out_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(path) as f:
        run = json.load(f)
    by_mode = {}
    for p in run["points"]:
        by_mode.setdefault(p["mode"], []).append(p)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    analytic = sorted({(p["capacity_docs"], p["analytic_hit_ratio_position_free"],
                        p["analytic_hit_ratio_position_aware"],
                        p["che_lru_hit_ratio_position_free"],
                        p["che_lru_hit_ratio_position_aware"]) for p in run["points"]})
    caps = [a[0] for a in analytic]
    for i, ls, free, aware in ((1, "--", "H(C,s)/H(N,s)", "H(C/D,s)/H(N,s)"),
                               (3, ":", "LRU (Che)", "LRU (Che)")):
        ax.plot(caps, [a[i] for a in analytic], ls=ls, color=STYLE["lazy"][0],
                label=f"{free}: position-free")
        ax.plot(caps, [a[i + 1] for a in analytic], ls=ls, color=STYLE["position-aware"][0],
                label=f"{aware}: position-aware")
    for m, pts in by_mode.items():
        pts.sort(key=lambda p: p["capacity_docs"])
        color, marker = STYLE[m]
        ax.plot([p["capacity_docs"] for p in pts], [p["hit_ratio"] for p in pts], marker=marker,
                color=color, label=f"{m} (measured, cold start)")
    ax.set_xscale("log")
    ax.set_xlabel("KV budget (cached documents)")
    ax.set_ylabel("document hit ratio")
    ax.set_title(f"hit ratio vs budget: {popularity(run)}, {run['workload']['requests']} requests")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--hit", help="a cache-budget sweep (run_cpu.sh's cache run) to plot")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    groups, headers = load(a.runs)
    merged = {"runs": headers, "groups": [
        {"popularity": key[0], "pool": key[1], "capacity_docs": key[2], "requests": key[3],
         "warmup_requests": key[4],
         "points": [p for m in MODES for _, p in sorted(groups[key].get(m, {}).items())]}
        for key in sorted(groups)]}
    with open(os.path.join(a.out, f"{a.name}.json"), "w") as f:
        json.dump(merged, f, indent=1)
    with open(os.path.join(a.out, f"{a.name}.md"), "w") as f:
        f.write(table(groups))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot.py: no matplotlib: table and JSON only", file=sys.stderr)
        return
    plot_rates(groups, os.path.join(a.out, f"{a.name}-rates.png"))
    if a.hit:
        plot_hit(a.hit, os.path.join(a.out, f"{a.name}-hit.png"))


if __name__ == "__main__":
    main()
