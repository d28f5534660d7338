#!/usr/bin/env python3
"""The ResNet's 12-epoch recipe in PyTorch, once per seed: the test accuracy that Trident's
`trident train --model resnet --seed N` is compared with (bench/accuracy_seeds.sh runs both).

Recipe (issue 10, models/zoo.cpp): batch 256 with the last partial batch kept (235 steps an epoch,
as PyTorch's DataLoader does; Trident's Trainer drops it: 234),
SGD Nesterov momentum 0.9, weight decay 5e-4, OneCycleLR(max_lr 0.1, 30% warm-up, cosine,
div_factor 25, final_div_factor 1e4) stepped every batch, inputs (x/255 - 0.2860) / 0.3530,
no augmentation, cross-entropy on logits, PyTorch's default initialisation. Data resident on the
device, shuffled each epoch with torch.randperm from the seed.

Prints one JSON line per seed: {"framework": "pytorch", "seed", "precision", "test_accuracy",
"test_loss", "seconds"}.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests"))
from torch_models import ResNet  # noqa: E402
from torch_reference import read_idx  # noqa: E402


def load(directory, split, mean=0.2860, std=0.3530):
    prefix = "train" if split == "train" else "t10k"

    def find(stem):
        for name in (stem, stem + ".gz"):
            if os.path.exists(os.path.join(directory, name)):
                return os.path.join(directory, name)
        raise FileNotFoundError(f"{stem}[.gz] not in {directory}")
    x = read_idx(find(f"{prefix}-images-idx3-ubyte")).float().div_(255).sub_(mean).div_(std)
    y = read_idx(find(f"{prefix}-labels-idx1-ubyte")).long()
    return x.unsqueeze(1), y


def run(seed, precision, epochs, data, device):
    torch.manual_seed(seed)
    (xtr, ytr), (xte, yte) = data
    model = ResNet().to(device)
    batch = 256
    steps = (xtr.shape[0] + batch - 1) // batch
    opt = torch.optim.SGD(model.parameters(), lr=0.1 / 25, momentum=0.9, nesterov=True, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * steps)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    start = time.time()
    for _ in range(epochs):
        model.train()
        order = torch.randperm(xtr.shape[0], device=device)
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
    model.eval()
    correct, total_loss = 0, 0.0
    with torch.no_grad():
        for s in range(0, xte.shape[0], 1000):
            logits = model(xte[s:s + 1000]).float()
            total_loss += F.cross_entropy(logits, yte[s:s + 1000], reduction="sum").item()
            correct += (logits.argmax(1) == yte[s:s + 1000]).sum().item()
    torch.cuda.synchronize()
    return {"framework": "pytorch", "seed": seed, "precision": precision,
            "test_accuracy": correct / xte.shape[0], "test_loss": total_loss / xte.shape[0],
            "seconds": round(time.time() - start, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--precisions", default="fp32")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--data", default=os.environ.get("TRIDENT_DATA", "/usr/share/datasets/fashion-mnist"))
    a = p.parse_args()
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    data = [tuple(t.to(device) for t in load(a.data, split)) for split in ("train", "test")]
    for precision in a.precisions.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            print(json.dumps(run(seed, precision, a.epochs, data, device)), flush=True)


if __name__ == "__main__":
    main()
