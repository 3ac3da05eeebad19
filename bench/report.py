#!/usr/bin/env python3
"""Joins our Google Benchmark JSON with the peers' JSON (bench/peers/sdpa_peers.py) measured in the
same run: one table (markdown), one JSON with every ratio, and plots.

    python3 bench/report.py --decode bench_decode.json --peers peers.json --out DIR \
        [--commit SHA] [--date YYYY-MM-DD]
Medians throughout (Google Benchmark's *_median aggregates; the peers' medians).
"""
import argparse
import json
import os
import re


def medians(path):
    """name -> the median aggregate row of a Google Benchmark JSON file."""
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            rows[b["run_name"]] = b
    return data.get("context", {}), rows


def decode_table(ours, peers):
    copy = next(r for r in peers["rows"] if r["kind"] == "copy")["tbps"]
    peer_decode = {(r["batch"], r["context"]): r for r in peers["rows"] if r["kind"] == "decode"}
    shapes = {}
    for name, row in ours.items():
        m = re.match(r"decode/B(\d+)_L(\d+)_(rag|single)/(\w+)", name)
        if not m:
            continue
        key = (int(m[1]), int(m[2]), m[3])
        shapes.setdefault(key, {})[m[4]] = row
    out = []
    for (b, l, layout), modes in sorted(shapes.items()):
        tb = {k: v["TBps"] for k, v in modes.items()}
        us = {k: v["real_time"] for k, v in modes.items()}
        p = peer_decode.get((b, l), {})
        r = {"batch": b, "context": l, "layout": layout, "copy_tbps": copy,
             "ours_tbps": tb, "ours_us": us, "splits": modes.get("local", {}).get("splits"),
             "cudnn_tbps": p.get("cudnn_tbps"), "flash_tbps": p.get("flash_tbps")}
        loc = tb.get("local")
        if loc:
            if r["cudnn_tbps"]:
                r["local_vs_cudnn"] = loc / r["cudnn_tbps"]
            if r["flash_tbps"]:
                r["local_vs_flash"] = loc / r["flash_tbps"]
            r["local_vs_copy"] = loc / copy
            if tb.get("rope_off"):
                r["rope_overhead_local"] = us["local"] / us["rope_off"] - 1.0
                if tb.get("raw"):
                    r["rope_overhead_raw"] = us["raw"] / us["rope_off"] - 1.0
        out.append(r)
    # The raw form's packed rotation and the fp8 pools (where the run has those modes): time over
    # the RoPE-off time of the same element type, fp8 keys per second over bf16's (the same keys,
    # so the inverse ratio of times), and the fp8 bytes' rate over the copy's.
    for r in out:
        us, tb = r["ours_us"], r["ours_tbps"]
        for mode, off in (("raw", "rope_off"), ("raw_packed", "rope_off"),
                          ("local_fp8", "rope_off_fp8"), ("raw_fp8", "rope_off_fp8")):
            if us.get(mode) and us.get(off):
                r[f"{mode}_over_rope_off"] = us[mode] / us[off]
        for mode, bf16 in (("local_fp8", "local"), ("raw_fp8", "raw"), ("rope_off_fp8", "rope_off")):
            if us.get(mode) and us.get(bf16):
                r[f"{mode}_keys_vs_bf16"] = us[bf16] / us[mode]
            if tb.get(mode):
                r[f"{mode}_vs_copy"] = tb[mode] / copy
    # RAG vs a single segment of the same length, same batch.
    for r in out:
        if r["layout"] == "rag":
            single = next((s for s in out if s["layout"] == "single" and s["batch"] == r["batch"]
                           and s["context"] == r["context"]), None)
            if single and "local" in single["ours_us"]:
                r["rag_vs_single_time"] = r["ours_us"]["local"] / single["ours_us"]["local"]
    return out


def peer_ratios(r, tf, us, mode, label, rope_off):
    """r[label_vs_flash], r[label_vs_cudnn] and r[rope_overhead_label] of benchmark mode `mode`
    (its RoPE-off twin: `rope_off`), where the figures exist."""
    if mode not in tf:
        return
    for peer in ("flash", "cudnn"):
        if r[f"{peer}_tflops"]:
            r[f"{label}_vs_{peer}"] = tf[mode] / r[f"{peer}_tflops"]
    if rope_off in us:
        r[f"rope_overhead_{label}"] = us[mode] / us[rope_off] - 1.0


def prefill_table(ours, peers):
    peer = {r["name"]: r for r in peers["rows"] if r["kind"] == "prefill"}
    shapes = {}
    for name, row in ours.items():
        m = re.match(r"prefill/(\w+)/(\w+)", name)
        if m:
            shapes.setdefault(m[1], {})[m[2]] = row
    out = []
    for shape, modes in shapes.items():
        tf = {k: v["TFLOPs"] for k, v in modes.items()}
        us = {k: v["real_time"] for k, v in modes.items()}
        p = peer.get(shape, {})
        r = {"shape": shape, "ours_tflops": tf, "ours_us": us,
             "flash_tflops": p.get("flash_tflops"), "cudnn_tflops": p.get("cudnn_tflops")}
        peer_ratios(r, tf, us, "local", "local", "rope_off")
        # Each mode's RoPE-off twin is the RoPE-off run of the kernel it ran on (the label): the
        # raw form ran on the mma.sync kernel until 35b9678.
        r["kernel"] = {k: v.get("label", "") for k, v in modes.items()}
        raw_twin = "rope_off_mma" if r["kernel"].get("raw") == "mma_sync" else "rope_off"
        peer_ratios(r, tf, us, "raw", "raw", raw_twin)
        # The other rotary layouts (their RoPE-off run is rope_off: without RoPE the layout
        # does not matter), both forms.
        for mode in ("local_interleaved", "raw_interleaved", "local_partial", "raw_partial"):
            peer_ratios(r, tf, us, mode, mode, "rope_off")
        # The mma.sync kernel forced (local / rope_off are what PrefillKernel::kAuto picks).
        peer_ratios(r, tf, us, "local_mma", "mma", "rope_off_mma")
        peer_ratios(r, tf, us, "raw_mma", "raw_mma", "rope_off_mma")
        out.append(r)
    return out


def prefill_markdown(rows, meta):
    lines = [f"Prefill, {meta['device']}, commit {meta['commit']}, {meta['date']}; medians; "
             "TFLOP/s = 4 q kv d heads / time (halved for the causal square).", "",
             "Head dim 128 (Llama-3-8B's attention), shapes ending _d64 at head dim 64 (Llama-3.2-1B's), "
             "_d256 at head dim 256 (Gemma's head dim, the same head counts). "
             "Kernels as PrefillKernel::kAuto picks them (" +
             ", ".join(sorted({f"{m} {k}" for r in rows for m, k in r.get("kernel", {}).items()
                               if m in ("local", "raw", "rope_off")})) +
             "; each RoPE overhead against the RoPE-off run of the same kernel).", "",
             "| shape | local | raw | RoPE off | flash | cuDNN | local / flash | local / cuDNN | "
             "RoPE overhead local / raw |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tf = r["ours_tflops"]
        lines.append(f"| {r['shape']} | {fmt(tf.get('local'), '{:.0f}')} | {fmt(tf.get('raw'), '{:.0f}')} | "
                     f"{fmt(tf.get('rope_off'), '{:.0f}')} | {fmt(r['flash_tflops'], '{:.0f}')} | "
                     f"{fmt(r['cudnn_tflops'], '{:.0f}')} | {fmt(r.get('local_vs_flash'))}x | "
                     f"{fmt(r.get('local_vs_cudnn'))}x | {fmt(r.get('rope_overhead_local'), '{:+.1%}')} / "
                     f"{fmt(r.get('rope_overhead_raw'), '{:+.1%}')} |")
    if any("local_interleaved" in r["ours_tflops"] for r in rows):
        lines += ["", "Other rotary layouts (interleaved pairs; half the dims rotary, rotate-half), "
                  "both forms, same run; RoPE overhead against rope_off:", "",
                  "| shape | mode | TFLOP/s | / flash | / cuDNN | RoPE overhead |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            for mode in ("raw", "local_interleaved", "raw_interleaved", "local_partial",
                         "raw_partial"):
                if mode not in r["ours_tflops"]:
                    continue
                over = r.get("rope_overhead_raw") if mode == "raw" else r.get(
                    "rope_overhead_" + mode)
                lines.append(f"| {r['shape']} | {mode} | {fmt(r['ours_tflops'][mode], '{:.0f}')} | "
                             f"{fmt(r.get(mode + '_vs_flash'))}x | {fmt(r.get(mode + '_vs_cudnn'))}x | "
                             f"{fmt(over, '{:+.1%}')} |")
    lines += variant_table(rows, "The mma.sync kernel forced (PrefillKernel::kMmaSync), same run:",
                           "local_mma", "rope_off_mma", "mma")
    lines += variant_table(rows, "The mma.sync kernel's raw form (raw_mma), same run:",
                           "raw_mma", "rope_off_mma", "raw_mma", "raw")
    return "\n".join(lines) + "\n"


def variant_table(rows, title, mode, rope_off, label, column="local"):
    """A prefill kernel variant's rows (benchmark modes `mode` and `rope_off`, ratios under
    `label` from peer_ratios), or nothing where no row has it."""
    if not any(mode in r["ours_tflops"] for r in rows):
        return []
    lines = ["", title, "", f"| shape | {column} | RoPE off | {column} / flash | {column} / cuDNN | "
             "RoPE overhead |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        tf = r["ours_tflops"]
        lines.append(f"| {r['shape']} | {fmt(tf.get(mode), '{:.0f}')} | {fmt(tf.get(rope_off), '{:.0f}')} | "
                     f"{fmt(r.get(label + '_vs_flash'))}x | {fmt(r.get(label + '_vs_cudnn'))}x | "
                     f"{fmt(r.get('rope_overhead_' + label), '{:+.1%}')} |")
    return lines


def fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)


def markdown(rows, meta):
    lines = [f"Decode, {meta['device']}, commit {meta['commit']}, {meta['date']}; medians; "
             f"TB/s = bytes of K and V read / time; copy = {rows[0]['copy_tbps']:.2f} TB/s "
             "(read + write of an 8 GB device copy, same run).", "",
             "| batch x context | layout | splits | local | raw | RoPE off | cuDNN | flash | "
             "local / cuDNN | local / copy | RoPE overhead local / raw | RAG / single time |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tb = r["ours_tbps"]
        lines.append(
            f"| {r['batch']} x {r['context']} | {r['layout']} | {fmt(r['splits'], '{:.0f}')} | "
            f"{fmt(tb.get('local'))} | {fmt(tb.get('raw'))} | {fmt(tb.get('rope_off'))} | "
            f"{fmt(r['cudnn_tbps'])} | {fmt(r['flash_tbps'])} | {fmt(r.get('local_vs_cudnn'))}x | "
            f"{fmt(r.get('local_vs_copy'), '{:.1%}')} | "
            f"{fmt(r.get('rope_overhead_local'), '{:+.1%}')} / "
            f"{fmt(r.get('rope_overhead_raw'), '{:+.1%}')} | "
            f"{fmt(r.get('rag_vs_single_time'), '{:.3f}')} |")
    if any("reencode" in r["ours_tbps"] for r in rows):
        lines.append("")
        lines.append("Block-Attention re-encode (copy every document re-rotated into private pages), "
                     "TB/s of bytes moved (read + write):")
        lines.append("")
        lines.append("| batch x context | layout | re-encode TB/s | re-encode us | decode (local) us |")
        lines.append("|---|---|---|---|---|")
    for r in rows:
        if "reencode" in r["ours_tbps"]:
            lines.append(f"| {r['batch']} x {r['context']} | {r['layout']} | "
                         f"{fmt(r['ours_tbps']['reencode'])} | {fmt(r['ours_us']['reencode'], '{:.1f}')}"
                         f" | {fmt(r['ours_us'].get('local'), '{:.1f}')} |")
    variants = variants_markdown(rows)
    if variants:
        lines += [""] + variants
    return "\n".join(lines) + "\n"


# The benchmark modes of the variants table and plot (the packed rotation and the fp8 pools).
VARIANT_MODES = ("raw_packed", "local_fp8", "raw_fp8", "rope_off_fp8")


def has_variants(rows):
    return any(m in r["ours_us"] for r in rows for m in VARIANT_MODES)


def variants_markdown(rows):
    """The table of the raw form's packed rotation and the fp8 modes, if the run has them."""
    if not has_variants(rows):
        return []
    lines = ["Raw-form rotation and fp8 (e4m3) pools, microseconds (medians); time over the RoPE-off "
             "time of the same element type; fp8 keys per second over bf16's (same keys); fp8 TB/s "
             "(fp8 bytes) over the copy's:", "",
             "| batch x context | layout | raw | raw_packed | RoPE off | fp8 local | fp8 raw | "
             "fp8 RoPE off | raw / off | raw_packed / off | fp8 raw / fp8 off | "
             "fp8 local keys/s / bf16 | fp8 raw keys/s / bf16 raw | fp8 local / copy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        us = r["ours_us"]
        cell = lambda m: fmt(us.get(m), "{:.1f}")  # noqa: E731
        lines.append(
            f"| {r['batch']} x {r['context']} | {r['layout']} | {cell('raw')} | "
            f"{cell('raw_packed')} | {cell('rope_off')} | {cell('local_fp8')} | {cell('raw_fp8')} | "
            f"{cell('rope_off_fp8')} | {fmt(r.get('raw_over_rope_off'), '{:.3f}')} | "
            f"{fmt(r.get('raw_packed_over_rope_off'), '{:.3f}')} | "
            f"{fmt(r.get('raw_fp8_over_rope_off'), '{:.3f}')} | "
            f"{fmt(r.get('local_fp8_keys_vs_bf16'))}x | {fmt(r.get('raw_fp8_keys_vs_bf16'))}x | "
            f"{fmt(r.get('local_fp8_vs_copy'), '{:.1%}')} |")
    return lines


def shape_label(r):
    """A decode row's shape as the plots' x labels give it."""
    return f"{r['batch']}x{r['context']}" + (" rag" if r["layout"] == "rag" else "")


def bars(path, labels, series, ylabel, title, ceiling=None, figsize=(10, 4.5)):
    """One grouped bar chart: series is [(name, [value per label])], ceiling a dashed line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=figsize)
    w = 0.8 / len(series)
    for i, (name, vals) in enumerate(series):
        ax.bar([x + (i - (len(series) - 1) / 2) * w for x in range(len(labels))], vals, w,
               label=name)
    if ceiling is not None:
        ax.axhline(ceiling, color="k", ls="--", lw=1, label="device copy")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot(rows, path, meta):
    rows = [r for r in rows if r["layout"] == "single" or r["batch"] > 1]
    labels = [shape_label(r) for r in rows]
    series = [("ours local", [r["ours_tbps"].get("local") or 0 for r in rows]),
              ("ours raw", [r["ours_tbps"].get("raw") or 0 for r in rows]),
              ("ours RoPE off", [r["ours_tbps"].get("rope_off") or 0 for r in rows]),
              ("cuDNN (no RoPE)", [r["cudnn_tbps"] or 0 for r in rows]),
              ("flash (no RoPE)", [r["flash_tbps"] or 0 for r in rows])]
    bars(path, labels, series, "TB/s (K+V bytes / time)",
         f"Decode on {meta['device']}, Llama-3-8B heads, bf16, page 16 ({meta['date']})",
         ceiling=rows[0]["copy_tbps"])


def plot_variants(rows, path, meta):
    """Each raw / packed / fp8 mode's time over the bf16 RoPE-off time of its shape."""
    modes = [m for m in ("local", "raw") + VARIANT_MODES if any(m in r["ours_us"] for r in rows)]
    rows = [r for r in rows if r["ours_us"].get("rope_off")]
    labels = [shape_label(r) for r in rows]
    series = [(m, [(r["ours_us"].get(m) or 0) / r["ours_us"]["rope_off"] for r in rows])
              for m in modes]
    bars(path, labels, series, "time / bf16 RoPE-off time",
         f"Decode by storage form and element type, {meta['device']} ({meta['date']})")


def plot_prefill(rows, path, meta):
    series = [("ours local", [r["ours_tflops"].get("local") or 0 for r in rows]),
              ("ours raw", [r["ours_tflops"].get("raw") or 0 for r in rows]),
              ("ours RoPE off", [r["ours_tflops"].get("rope_off") or 0 for r in rows]),
              ("flash (no RoPE)", [r["flash_tflops"] or 0 for r in rows]),
              ("cuDNN (no RoPE)", [r["cudnn_tflops"] or 0 for r in rows])]
    if any("local_mma" in r["ours_tflops"] for r in rows):
        series.insert(1, ("ours local, mma.sync", [r["ours_tflops"].get("local_mma") or 0
                                                    for r in rows]))
    bars(path, [r["shape"].replace("_d64", "\nd64").replace("_d256", "\nd256") for r in rows],
         series, "TFLOP/s",
         f"Prefill on {meta['device']}, 32 query / 8 KV heads, head dim 128 (d64: 64, d256: 256), bf16, "
         f"page 16 ({meta['date']})", figsize=(max(8, 1.9 * len(rows)), 4.5))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--decode", help="decode benchmark JSON (left out or missing: prefill only)")
    ap.add_argument("--prefill")
    ap.add_argument("--peers", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default=os.environ.get("LAZYATTN_COMMIT", "unknown"))
    ap.add_argument("--date", default=os.environ.get("LAZYATTN_DATE", "unknown"))
    a = ap.parse_args()
    ctx, ours = ({}, {})
    if a.decode and os.path.exists(a.decode):
        ctx, ours = medians(a.decode)
    with open(a.peers) as f:
        peers = json.load(f)
    meta = {"device": peers.get("device", "unknown"), "commit": a.commit, "date": a.date,
            "torch": peers.get("torch"), "cudnn": peers.get("cudnn"),
            "benchmark_context": ctx}
    rows = decode_table(ours, peers) if ours else []
    prefill_rows = []
    if a.prefill and os.path.exists(a.prefill):
        ctx_p, ours_p = medians(a.prefill)
        meta["benchmark_context"] = meta["benchmark_context"] or ctx_p
        prefill_rows = prefill_table(ours_p, peers)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "decode_report.json"), "w") as f:
        json.dump({"meta": meta, "decode": rows, "prefill": prefill_rows, "peers": peers}, f,
                  indent=1)
    md = markdown(rows, meta) if rows else ""
    if prefill_rows:
        md += ("\n" if md else "") + prefill_markdown(prefill_rows, meta)
    with open(os.path.join(a.out, "decode_report.md"), "w") as f:
        f.write(md)
    print(md)
    try:
        if rows:
            plot(rows, os.path.join(a.out, "decode.png"), meta)
            if has_variants(rows):
                plot_variants(rows, os.path.join(a.out, "decode_variants.png"), meta)
        if prefill_rows:
            plot_prefill(prefill_rows, os.path.join(a.out, "prefill.png"), meta)
    except ImportError as e:
        print(f"no plot: {e}")


if __name__ == "__main__":
    main()
