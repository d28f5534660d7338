#!/usr/bin/env python3
"""Summarises bench/accuracy_seeds.sh's JSON lines: per framework, backend and precision the test
accuracy of each seed, its mean and sample standard deviation, as a Markdown table; with --plot
PNG, the runs as points beside the 93.0% target. Usage: accuracy_summary.py RESULTS.jsonl [--plot F]
"""
import argparse
import json
import statistics
import sys


def groups(path):
    runs = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
                key = (r["framework"], r.get("backend", "cuda"), r["precision"])
                runs.setdefault(key, []).append((int(r["seed"]), 100.0 * float(r["test_accuracy"])))
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"accuracy_summary: {path}:{number}: not a result line ({e})")
    if not runs:
        sys.exit(f"accuracy_summary: {path} holds no result")
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results")
    p.add_argument("--plot", default="")
    p.add_argument("--target", type=float, default=93.0)
    a = p.parse_args()
    runs = groups(a.results)
    print("| run | seeds | accuracy per seed | mean | sd |")
    print("| --- | --- | --- | --- | --- |")
    for (framework, backend, precision), values in sorted(runs.items()):
        values.sort()
        accs = [v for _, v in values]
        sd = statistics.stdev(accs) if len(accs) > 1 else float("nan")
        print(f"| {framework} {backend} {precision} | {len(accs)} | "
              f"{' '.join(f'{v:.2f}' for v in accs)} | {statistics.mean(accs):.2f}% | {sd:.2f} |")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        keys = sorted(runs)
        fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(keys), 3.6))
        for i, key in enumerate(keys):
            accs = [v for _, v in runs[key]]
            ax.scatter([i] * len(accs), accs, alpha=0.7, color="tab:orange" if key[0] == "pytorch" else "tab:blue")
            ax.plot([i - 0.25, i + 0.25], [statistics.mean(accs)] * 2, color="black")
        ax.axhline(a.target, color="gray", linestyle="--", linewidth=1, label=f"target {a.target}%")
        ax.set_xticks(range(len(keys)), [f"{f}\n{b} {p}" for f, b, p in keys], fontsize=8)
        ax.set_ylabel("test accuracy after 12 epochs (%)")
        ax.set_title("ResNet, Fashion-MNIST: one point a seed, bar = mean", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)


if __name__ == "__main__":
    main()
