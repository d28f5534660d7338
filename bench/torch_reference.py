#!/usr/bin/env python3
"""The PyTorch reference for trident_bench: the same seed models, optimizer, data and timing, same JSON lines.

    torch_reference.py [--device cpu|cuda] [--models mlp,cnn,mlp-big] [--batch 200] [--big-batch N]
                       [--steps N] [--epochs 4] [--compile] [--threads N] [--gemm-sizes ...]
                       [--no-train] [--no-gemm] [--data DIR|synthetic]
                       [--inference] [--inference-batches 1,1000]

Runs on PyTorch 1.13 (Debian's python3-torch, /usr/bin/python3) and 2.x. Timing mirrors trident_bench:
batch * steps samples resident on the device, one index table per epoch drawn before the clock starts,
per step only indices select the batch; epoch 1 is warm-up; the loss is summed on the device and read
once per epoch. On CPU, OMP_WAIT_POLICY=PASSIVE is set before torch loads (unless already set): PyTorch's
OpenMP threads otherwise spin and fight OpenBLAS's pthreads for the cores.

Inference (--inference, bench "inference", models mlp, cnn, resnet and mlp-big as trident_bench
times them): float32 inputs in host memory to outputs in host memory, one call timed, model in
eval() mode, once under torch.no_grad() (eager) and once under torch.inference_mode() (the record's
"inference_mode" field); 3 warm-up calls, then calls for about a second (at least 5), median and
fastest.
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda if available)")
    p.add_argument("--models", default="mlp,cnn,mlp-big")
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--big-batch", type=int, default=0, help="mlp-big batch (512 on GPU, --batch on CPU)")
    p.add_argument("--steps", type=int, default=0, help="steps per epoch (default by device and model)")
    p.add_argument("--epochs", type=int, default=4, help="epochs in all, the first is warm-up")
    p.add_argument("--compile", action="store_true", help='torch.compile(mode="reduce-overhead") (2.x)')
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: all cores)")
    p.add_argument("--gemm-sizes", default="")
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--no-gemm", action="store_true")
    p.add_argument("--data", default="auto", help="MNIST-format dir, 'synthetic', or auto")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--inference", action="store_true", help="also time inference at --inference-batches")
    p.add_argument("--inference-batches", default="1,1000")
    return p.parse_args(argv)


if __name__ == "__main__":  # torch_ddp.py imports the models and data from here
    ARGS = parse_args()
    if ARGS.device == "cpu" or (ARGS.device is None and not os.path.exists("/dev/nvidia0")):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede libgomp's start

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class SeedMLP(nn.Module):
    """784-512-10, ReLU, log-softmax (the R blog's MLP)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.view(-1, 784)))), dim=1)


class SeedCNN(nn.Module):
    """PyTorch's MNIST example: conv-pool-relu twice, Dropout2d, fc 320-50-10, dropout, log-softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x.view(-1, 1, 28, 28)), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


class BigMLP(nn.Module):
    """784-4096-4096-4096-10 with ReLU: the compute-bound model."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 4096)
        self.fc2 = nn.Linear(4096, 4096)
        self.fc3 = nn.Linear(4096, 4096)
        self.fc4 = nn.Linear(4096, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.view(-1, 784)))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))
        return F.log_softmax(self.fc4(x), dim=1)


MODELS = {"mlp": SeedMLP, "cnn": SeedCNN, "mlp-big": BigMLP}
# Inference: the modules with Trident's state-dict names (tests/torch_models.py), the ResNet included.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch_models  # noqa: E402
INFERENCE_MODELS = dict(torch_models.MODELS, **{"mlp-big": BigMLP})


def read_idx(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_train(directory):
    def find(stem):
        for name in (stem, stem + ".gz"):
            if os.path.exists(os.path.join(directory, name)):
                return os.path.join(directory, name)
        raise FileNotFoundError(f"{stem}[.gz] not in {directory}")
    images = read_idx(find("train-images-idx3-ubyte")).float().div_(255).sub_(0.1307).div_(0.3081)
    labels = read_idx(find("train-labels-idx1-ubyte")).long()
    return images.reshape(-1, 784), labels


def bench_data(source, count, device):
    """count samples: Fashion-MNIST tiled to that size (as trident_bench does), else synthetic noise."""
    images = labels = None
    if source != "synthetic":
        directory = os.environ.get("TRIDENT_DATA") or "/usr/share/datasets/fashion-mnist"
        directory = directory if source == "auto" else source
        try:
            images, labels = load_train(directory)
        except (OSError, ValueError) as e:
            if source != "auto":
                raise
            print(f"torch_reference: {e}; using synthetic data", file=sys.stderr)
    if images is None:
        g = torch.Generator().manual_seed(12345)
        images = torch.rand(count, 784, generator=g) * 3 - 0.4
        labels = torch.randint(0, 10, (count,), generator=g)
    reps = (count + images.shape[0] - 1) // images.shape[0]
    images = images.repeat(reps, 1)[:count].contiguous()
    labels = labels.repeat(reps)[:count].contiguous()
    return images.to(device), labels.to(device)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "cpu"
    return f"{model} ({torch.get_num_threads()} threads)"


def default_steps(device, model):
    if device.type == "cuda":
        return 200 if model == "mlp-big" else 500
    return {"mlp": 100, "cnn": 40, "mlp-big": 6}[model]


def emit(**fields):
    base = {"impl": "pytorch", "torch": torch.__version__, "n_devices": 1, "size": 0, "capture": False,
            "ms_per_step": None, "ms_per_step_min": None, "samples_per_s": None, "gflops": None}
    base.update(fields)
    print(json.dumps(base), flush=True)


def measure_training(args, device, model_name, batch):
    steps = args.steps or default_steps(device, model_name)
    torch.manual_seed(args.seed)
    images, labels = bench_data(args.data, batch * steps, device)
    model = MODELS[model_name]().to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    forward = torch.compile(model, mode="reduce-overhead") if args.compile else model
    loss_sum = torch.zeros((), device=device)

    def step(index):
        x = images.index_select(0, index)
        y = labels.index_select(0, index)
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(forward(x), y)
        loss.backward()
        optimizer.step()
        loss_sum.add_(loss.detach())

    times = []
    for epoch in range(args.epochs):
        table = torch.randperm(batch * steps, device=device).view(steps, batch)
        loss_sum.zero_()
        sync(device)
        start = time.perf_counter()
        for s in range(steps):
            step(table[s])
        loss_sum.item()  # the one read-back per epoch, as in the Trainer
        if epoch > 0:
            times.append((time.perf_counter() - start) * 1e3 / steps)
    ms = statistics.median(times)
    emit(bench="train", model=model_name, device=str(device), device_name=device_name(device), batch=batch,
         steps=steps, capture=args.compile, ms_per_step=ms, ms_per_step_min=min(times),
         samples_per_s=batch * 1e3 / ms, compile=args.compile)


def measure_inference(args, device, model_name, batch, inference_mode):
    torch.manual_seed(args.seed)
    model = INFERENCE_MODELS[model_name]().to(device).eval()
    forward = torch.compile(model, mode="reduce-overhead") if args.compile else model
    x = torch.rand(batch, 1, 28, 28) * 2 - 1  # host memory, as Trident's Predictor takes it
    context = torch.inference_mode if inference_mode else torch.no_grad

    def call():
        with context():
            return forward(x.to(device)).cpu()  # the copy back waits for the device

    for _ in range(3):
        call()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < 1.0 and len(times) < 2000):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    emit(bench="inference", model=model_name, device=str(device), device_name=device_name(device), batch=batch,
         steps=len(times), capture=args.compile, ms_per_step=ms, ms_per_step_min=min(times),
         samples_per_s=batch * 1e3 / ms, compile=args.compile, inference_mode=inference_mode)


def measure_gemm(device, n):
    g = torch.Generator().manual_seed(n)
    a = (torch.rand(n, n, generator=g) * 2 - 1).to(device)
    b = a.clone()
    c = torch.empty(n, n, device=device)

    def run(reps):
        sync(device)
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=c)
        sync(device)
        return time.perf_counter() - start

    run(2)
    reps = max(1, int(0.3 / max(run(1), 1e-6)))
    best = min(run(reps) / reps for _ in range(3))
    emit(bench="gemm", model="sgemm", device=str(device), device_name=device_name(device), batch=0, size=n,
         steps=reps, ms_per_step=best * 1e3, gflops=2.0 * n ** 3 / best / 1e9,
         tf32=bool(device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32))


def main(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        torch.set_num_threads(args.threads or os.cpu_count())
    print(f"torch_reference: torch {torch.__version__} on {device} ({device_name(device)}), "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}", file=sys.stderr)
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_reference: --compile needs PyTorch 2.x (this is {torch.__version__})")
    if not args.no_train:
        for model in filter(None, args.models.split(",")):
            batch = args.batch
            if model == "mlp-big":
                batch = args.big_batch or (512 if device.type == "cuda" else args.batch)
            measure_training(args, device, model, batch)
    if args.inference:
        for model in filter(None, args.models.split(",")):
            for batch in [int(b) for b in args.inference_batches.split(",") if b]:
                for inference_mode in (False, True):
                    measure_inference(args, device, model, batch, inference_mode)
    if not args.no_gemm:
        sizes = [int(s) for s in args.gemm_sizes.split(",") if s] or (
            [256, 512, 1024, 2048, 4096, 8192] if device.type == "cuda" else [256, 512, 1024, 2048])
        for n in sizes:
            measure_gemm(device, n)


if __name__ == "__main__":
    main(ARGS)
