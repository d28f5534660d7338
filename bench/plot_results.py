#!/usr/bin/env python3
"""PNG plots of bench/results/<machine>.json files written by run_bench.py: a bar chart of the
Trident / PyTorch ratios and, when the file has a scaling run, samples/s and efficiency against GPU count.

    bench/plot_results.py [bench/results/h100.json ...]   (default: every results/*.json)

Writes <machine>_ratios.png and <machine>_scaling.png beside each results file. Needs matplotlib
(Debian: python3-matplotlib).
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def plot_ratios(result, out_path):
    ratios = result.get("single", {}).get("ratios", [])
    if not ratios:
        return False
    labels, values, colors = [], [], []
    for r in ratios:
        if r["bench"] == "train":
            labels.append(f"{r['model']}\n{r['device']}\nvs {r['against']}")
            colors.append("tab:blue")
        elif r["bench"] == "inference":
            labels.append(f"infer {r['model']}\nbatch {r['batch']}\n{r['device']}\nvs {r['against']}")
            colors.append("tab:green")
        else:
            labels.append(f"GEMM {r['size']}\n{r['device']}")
            colors.append("tab:orange")
        values.append(r["ratio"])
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(values) + 2), 4.5))
    bars = ax.bar(range(len(values)), values, color=colors)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    for bar, v in zip(bars, values):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{v:.2f}", ha="center", va="bottom",
                fontsize=8)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("Trident / PyTorch (training samples/s; inference\nPyTorch / Trident latency; GEMM GFLOP/s)")
    names = sorted({r["device_name"] for r in result["single"]["records"]})
    ax.set_title(f"{result['machine']}: {', '.join(names)} (torch {result.get('torch', '?')})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return True


def plot_scaling(result, out_path):
    records = result.get("scaling", {}).get("records", [])
    if not records:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    counts = sorted({r["n_devices"] for r in records})
    for impl, marker in (("trident", "o"), ("pytorch-ddp", "s")):
        rows = sorted((r for r in records if r["impl"] == impl), key=lambda r: r["n_devices"])
        if not rows:
            continue
        n = [r["n_devices"] for r in rows]
        left.plot(n, [r["samples_per_s"] / 1e3 for r in rows], marker=marker, label=impl)
        base = next((r["samples_per_s"] for r in rows if r["n_devices"] == 1), None)
        if base:
            eff = [100 * r["samples_per_s"] / (r["n_devices"] * base) for r in rows]
            right.plot(n, eff, marker=marker, label=impl)
            for x, y in zip(n, eff):
                right.annotate(f"{y:.1f}%", (x, y), textcoords="offset points", xytext=(0, 6), ha="center",
                               fontsize=8)
            if impl == "trident":
                left.plot(counts, [base * c / 1e3 for c in counts], color="gray", linestyle=":",
                          label="ideal (Trident)")
    r0 = records[0]
    left.set(xlabel="devices", ylabel="thousand samples/s", xticks=counts,
             title=f"{r0['model']}, batch {r0['batch']} per device")
    right.set(xlabel="devices", ylabel="weak-scaling efficiency %", xticks=counts, ylim=(0, 105),
              title="S(N) / (N S(1))")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['machine']}: {r0['device_name']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return True


def main(paths):
    paths = paths or sorted(glob.glob(os.path.join(HERE, "results", "*.json")))
    if not paths:
        sys.exit("plot_results: no results files (run bench/run_bench.py first)")
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        stem = os.path.splitext(path)[0]
        for suffix, plot in (("_ratios.png", plot_ratios), ("_scaling.png", plot_scaling)):
            if plot(result, stem + suffix):
                print(f"wrote {stem + suffix}")


if __name__ == "__main__":
    main(sys.argv[1:])
