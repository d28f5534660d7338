#!/usr/bin/env python3
"""PNG plots of bench/results/<machine>.json files written by run_bench.py.

    bench/plot_results.py [bench/results/h100.json ...]   (default: every results/*.json)

Beside each results file:
  <machine>_ratios.png     Trident / PyTorch: training (samples/s against PyTorch's best), GEMM (TFLOP/s
                           against torch.matmul of the same types), inference (PyTorch latency / Trident's)
  <machine>_precision.png  training ms/step per model x precision x implementation (Trident per device,
                           PyTorch eager and torch.compile)
  <machine>_gemm.png       GEMM TFLOP/s against n, per implementation and type
  <machine>_issue12.png    the mixed-precision figures (run_bench's "headline", recomputed from the records),
                           one bar each; a figure not measured is named with an empty bar
  <machine>_scaling.png    when the file has a scaling run: samples/s and efficiency against GPU count
Needs matplotlib (Debian: python3-matplotlib).
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_summary as summary  # noqa: E402

COLORS = {"train": "tab:blue", "gemm": "tab:orange", "inference": "tab:green"}


def title(result):
    records = result.get("single", {}).get("records", [])
    names = sorted({r["device_name"] for r in records if r.get("device_name")})
    return f"{result.get('machine', '?')}: {', '.join(names)} (torch {result.get('torch', '?')})"


def chosen_ratios(ratios):
    """One bar per Trident row: training against PyTorch's best, GEMM against torch.matmul, inference
    against PyTorch no_grad. Files from before the precision rows (no "row" field): every ratio."""
    if not any("row" in r for r in ratios):
        return ratios
    return [r for r in ratios if (r["bench"] == "train" and r["against"] == "pytorch best")
            or r["bench"] == "gemm" or (r["bench"] == "inference" and r["against"] == "pytorch")]


def ratio_label(r):
    if r["bench"] == "train":
        return f"{r['model']}\n{r['device']}\n{r.get('precision', 'fp32')}" + \
            ("" if "row" in r else f"\nvs {r['against']}")
    if r["bench"] == "inference":
        return f"{r['model']}\nb{r['batch']}\n{r['device']}"
    return f"{r['size']}\n{r['device']}\n{r.get('precision', 'fp32')}"


def plot_ratios(result, out_path):
    ratios = chosen_ratios(result.get("single", {}).get("ratios", []))
    groups = [(bench, [r for r in ratios if r["bench"] == bench]) for bench in ("train", "gemm", "inference")]
    groups = [(bench, rows) for bench, rows in groups if rows]
    if not groups:
        return False
    width = max(6, 0.6 * max(len(rows) for _, rows in groups) + 2)
    fig, axes = plt.subplots(len(groups), 1, figsize=(width, 3.6 * len(groups)), squeeze=False)
    ylabels = {"train": "training samples/s\nTrident / PyTorch's best", "gemm": "TFLOP/s\nTrident / torch.matmul",
               "inference": "latency\nPyTorch / Trident"}
    for ax, (bench, rows) in zip(axes[:, 0], groups):
        values = [r["ratio"] for r in rows]
        bars = ax.bar(range(len(values)), values, color=COLORS[bench])
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        for bar, r in zip(bars, rows):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{r['ratio']:.2f}", ha="center",
                    va="bottom", fontsize=7)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels([ratio_label(r) for r in rows], fontsize=6)
        ax.set_ylabel(ylabels[bench], fontsize=8)
    axes[0, 0].set_title(title(result), fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return True


def implementation(r):
    """The bar a training row belongs to: 'trident cuda:0', 'pytorch eager', 'pytorch compile'."""
    if r["impl"] == "trident":
        return f"trident {r['device']}"
    return f"{r['impl']} {r.get('mode') or ('compile' if r.get('compile') else 'eager')}"


def plot_precision(result, out_path):
    rows = [r for r in result.get("single", {}).get("records", []) if r["bench"] == "train" and summary.measured(r)]
    if not rows:
        return False
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models) + 1, 4.4), squeeze=False)
    impls = list(dict.fromkeys(implementation(r) for r in sorted(rows, key=lambda r: r["impl"] != "trident")))
    colors = dict(zip(impls, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3))
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r["model"] == model]
        precisions = [p for p in summary.PRECISION_ORDER if any(r.get("precision", "fp32") == p for r in mine)]
        present = [i for i in impls if any(implementation(r) == i for r in mine)]
        width = 0.8 / max(1, len(present))
        for j, impl in enumerate(present):
            xs, ys = [], []
            for i, p in enumerate(precisions):
                r = next((r for r in mine if implementation(r) == impl and r.get("precision", "fp32") == p), None)
                if r:
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(r["ms_per_step"])
            bars = ax.bar(xs, ys, width, label=impl, color=colors[impl])
            for bar, y in zip(bars, ys):
                ax.text(bar.get_x() + bar.get_width() / 2, y, f"{y:.3g}", ha="center", va="bottom", fontsize=6,
                        rotation=90)
        ax.set_xticks(range(len(precisions)))
        ax.set_xticklabels(precisions)
        batch = ", ".join(str(b) for b in sorted({r["batch"] for r in mine}))
        ax.set_title(f"{model} (batch {batch})", fontsize=9)
        ax.set_ylabel("ms per training step (lower is better)", fontsize=8)
        ax.margins(y=0.15)
        ax.legend(fontsize=6)
    fig.suptitle(title(result), fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return True


def plot_gemm(result, out_path):
    rows = [r for r in result.get("single", {}).get("records", []) if r["bench"] == "gemm" and summary.measured(r)]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    lines = list(dict.fromkeys(summary.row_name(r) for r in sorted(
        rows, key=lambda r: (r["impl"] != "trident", r["device"], summary.precision_rank(r)))))
    for name in lines:
        mine = sorted((r for r in rows if summary.row_name(r) == name), key=lambda r: r["size"])
        style = "-" if mine[0]["impl"] == "trident" else "--"
        ax.plot([r["size"] for r in mine], [r["gflops"] / 1e3 for r in mine], style, marker="o", label=name)
    ax.set_xscale("log", base=2)
    sizes = sorted({r["size"] for r in rows})
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(n) for n in sizes])
    ax.set(xlabel="n (C[n,n] = A[n,n] B[n,n])", ylabel="TFLOP/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title(result), fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return True


def plot_scaling(result, out_path):
    records = [r for r in result.get("scaling", {}).get("records", []) if summary.measured(r)]
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


def plot_headline(result, out_path):
    """The issue-12 figures as horizontal bars (ratio; 1 = parity), recomputed from the records so that an
    older file gets them too; drawn only when at least one was measured."""
    records = result.get("single", {}).get("records", [])
    entries = summary.headline(records) if records else []
    if not any(e["ratio"] is not None for e in entries):
        return False
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(entries) + 1.4))
    ys = range(len(entries))[::-1]
    values = [e["ratio"] or 0 for e in entries]
    ax.barh(list(ys), values, color=["tab:purple" if e["ratio"] else "lightgrey" for e in entries])
    for y, e in zip(ys, entries):
        text = f" x{e['ratio']:.2f}" if e["ratio"] is not None else " not measured"
        ax.text(e["ratio"] or 0, y, text, va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([e["name"] for e in entries], fontsize=7)
    ax.set_xlabel("ratio (samples/s; GEMM TFLOP/s): above 1, the numerator is faster", fontsize=8)
    ax.margins(x=0.15)
    ax.set_title(title(result), fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return True


PLOTS = (("_ratios.png", plot_ratios), ("_precision.png", plot_precision), ("_gemm.png", plot_gemm),
         ("_issue12.png", plot_headline), ("_scaling.png", plot_scaling))


def main(paths):
    paths = paths or sorted(glob.glob(os.path.join(HERE, "results", "*.json")))
    if not paths:
        sys.exit("plot_results: no results files (run bench/run_bench.py first)")
    written = []
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        stem = os.path.splitext(path)[0]
        for suffix, plot in PLOTS:
            if plot(result, stem + suffix):
                print(f"wrote {stem + suffix}")
                written.append(stem + suffix)
    return written


if __name__ == "__main__":
    main(sys.argv[1:])
