#!/usr/bin/env python3
"""Training curves from `trident train --json` logs: test accuracy and train loss per epoch, one line
per log, one panel per model, with the issue's accuracy targets drawn in.

    bench/plot_training.py [LOG.jsonl ...]   (default: bench/results/*train*.jsonl)

Writes bench/results/training_curves.png. Needs matplotlib (Debian: python3-matplotlib).
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = {"mlp": 0.870, "cnn": 0.840}  # 25 epochs, Fashion-MNIST


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def main(paths):
    paths = paths or sorted(glob.glob(os.path.join(HERE, "results", "*train*.jsonl")))
    runs = [(p, load(p)) for p in paths]
    runs = [(p, r) for p, r in runs if r]
    if not runs:
        sys.exit("plot_training: no training logs found")
    models = sorted({r[0]["model"] for _, r in runs})
    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 7), squeeze=False)
    for col, model in enumerate(models):
        acc_ax, loss_ax = axes[0][col], axes[1][col]
        for path, records in runs:
            if records[0]["model"] != model:
                continue
            label = "%s (%s)" % (records[0]["device"], os.path.basename(path).split("_train")[0])
            epochs = [r["epoch"] for r in records]
            acc_ax.plot(epochs, [100 * r["test_accuracy"] for r in records], marker=".", label=label)
            loss_ax.plot(epochs, [r["train_loss"] for r in records], marker=".", label=label)
        if model in TARGETS:
            acc_ax.axhline(100 * TARGETS[model], color="gray", linestyle="--", label="target")
        acc_ax.set_title("%s: test accuracy (%%)" % model)
        loss_ax.set_title("%s: train loss" % model)
        loss_ax.set_xlabel("epoch")
        acc_ax.legend(fontsize=8)
        loss_ax.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(HERE, "results", "training_curves.png")
    fig.savefig(out, dpi=90)
    print("wrote " + os.path.relpath(out))


if __name__ == "__main__":
    main(sys.argv[1:])
