#!/usr/bin/env python3
"""The PyTorch reference for trident_bench: the same models, recipes, data and timing, same JSON lines.

    torch_reference.py [--device cpu|cuda] [--models mlp,cnn,mlp-big,resnet] [--batch N] [--big-batch N]
                       [--steps N] [--epochs 4] [--precisions fp32,tf32,bf16,fp16] [--modes eager,compile]
                       [--compile-precisions LIST] [--threads N] [--gemm-sizes ...] [--gemm-precisions fp32,tf32,bf16,fp16]
                       [--no-train] [--no-gemm] [--data DIR|synthetic]
                       [--inference] [--inference-batches 1,1000]

Runs on PyTorch 1.13 (Debian's python3-torch, /usr/bin/python3) and 2.x. Timing mirrors trident_bench:
batch * steps samples resident on the device, one index table per epoch drawn before the clock starts,
per step only indices select the batch; epoch 1 is warm-up (torch.compile compiles there); the loss is
summed on the device and read once per epoch. On CPU, OMP_WAIT_POLICY=PASSIVE is set before torch loads
(unless already set): PyTorch's OpenMP threads otherwise spin and fight OpenBLAS's pthreads for the cores.

Training follows each model's recipe in models/zoo.cpp: mlp, cnn and mlp-big with SGD lr 0.01 momentum 0.5
and NLL on log-softmax (batch 200; mlp-big 512 on GPUs); resnet (tests/torch_models.py, the same layers
as Trident's) with SGD nesterov momentum 0.9, weight decay 5e-4, OneCycleLR (max 0.1) stepped per batch
and cross-entropy on logits (batch 256). Precisions:
    fp32  float32, TF32 off for matmul and cuDNN (PyTorch's own default lets cuDNN use TF32)
    tf32  float32 with TF32 on for matmul and cuDNN
    bf16  torch.autocast(device type, bfloat16), TF32 off
    fp16  torch.autocast(device type, float16) with a GradScaler, TF32 off
Modes: eager, and compile = torch.compile(mode="reduce-overhead") of model + loss (PyTorch 2.x; the
optimizer step stays eager). The optimizer is SGD fused=True where this PyTorch and device have it
(else foreach, PyTorch's CUDA default); cudnn.benchmark is on. A combination this PyTorch or device
cannot run comes out as a row with "skipped" and the reason; one that fails, with "error" (and the
exit status is 1 at the end; the other rows still run).

GEMM (bench "gemm"): torch.matmul(a, b, out=c) with a, b, c of n x n in the precision's type (tf32:
float32 with TF32 on); best of 3 timed batches of about 0.3 s.

Inference (--inference, bench "inference", models mlp, cnn, resnet and mlp-big as trident_bench
times them): float32 inputs in host memory to outputs in host memory, one call timed, model in
eval() mode, once under torch.no_grad() (eager) and once under torch.inference_mode() (the record's
"inference_mode" field); 3 warm-up calls, then calls for about a second (at least 5), median and
fastest.
"""
import argparse
import gc
import gzip
import inspect
import json
import os
import statistics
import struct
import sys
import time
import warnings

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
MODES = ("eager", "channels_last", "compile")
CONV_MODELS = ("cnn", "resnet", "resnet9")  # the models channels_last applies to


def csv(text, allowed=None, what="value"):
    items = [s for s in text.split(",") if s]
    for s in items:
        if allowed and s not in allowed:
            raise argparse.ArgumentTypeError(f"unknown {what} '{s}' (use {', '.join(allowed)})")
    return items


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda if available)")
    p.add_argument("--models", default="mlp,cnn,mlp-big")
    p.add_argument("--batch", type=int, default=0, help="batch (default: the recipe's, 200; resnet 256)")
    p.add_argument("--big-batch", type=int, default=0, help="mlp-big batch (512 on GPU, --batch on CPU)")
    p.add_argument("--steps", type=int, default=0, help="steps per epoch (default by device and model)")
    p.add_argument("--epochs", type=int, default=4, help="epochs in all, the first is warm-up")
    p.add_argument("--precisions", default="fp32", type=lambda s: csv(s, PRECISIONS, "precision"),
                   help="training precisions: fp32,tf32,bf16,fp16 (fp32)")
    p.add_argument("--modes", default="eager", type=lambda s: csv(s, MODES, "mode"),
                   help="eager, channels_last (eager with channels-last weights and activations: "
                        "convolution models only) and/or compile (eager)")
    p.add_argument("--compile", action="store_true", help="the same as --modes compile")
    p.add_argument("--compile-precisions", type=lambda s: csv(s, PRECISIONS, "precision"),
                   help="the precisions of --precisions also trained in compile mode, in this order "
                        "(default: all of --precisions)")
    p.add_argument("--optimizer-impl", choices=["auto", "fused", "foreach", "plain"], default="auto",
                   help="SGD implementation (auto: fused where available, else PyTorch's default)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: all cores)")
    p.add_argument("--gemm-sizes", default="")
    p.add_argument("--gemm-precisions", default="fp32", type=lambda s: csv(s, PRECISIONS, "precision"))
    p.add_argument("--gemm-seconds", type=float, default=0.3, help="length of each timed GEMM batch")
    p.add_argument("--no-train", action="store_true")
    p.add_argument("--no-gemm", action="store_true")
    p.add_argument("--data", default="auto", help="MNIST-format dir, 'synthetic', or auto")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--inference", action="store_true", help="also time inference at --inference-batches")
    p.add_argument("--inference-batches", default="1,1000")
    args = p.parse_args(argv)
    if args.compile:
        args.modes = ["compile"]
    return args


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
        x = F.relu(self.fc1(x.reshape(-1, 320)))
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


# The modules with Trident's state-dict names (tests/torch_models.py), the ResNet among them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch_models  # noqa: E402


class ImageResNet(torch_models.ResNet):
    """tests/torch_models.py's ResNet (models/zoo.cpp's layers) taking rows of 784 pixels as images."""

    def forward(self, x):
        return super().forward(x.view(-1, 1, 28, 28))


def conv_bn_relu(in_channels, out_channels):
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
                         nn.BatchNorm2d(out_channels), nn.ReLU())


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class ResNet9(nn.Module):
    """bench/bench_models.h's ResNet-9 (Page's DAWNBench CIFAR-10 model) on rows of 3x32x32 pixels."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            conv_bn_relu(3, 64),
            conv_bn_relu(64, 128), nn.MaxPool2d(2),
            Residual(nn.Sequential(conv_bn_relu(128, 128), conv_bn_relu(128, 128))),
            conv_bn_relu(128, 256), nn.MaxPool2d(2),
            conv_bn_relu(256, 512), nn.MaxPool2d(2),
            Residual(nn.Sequential(conv_bn_relu(512, 512), conv_bn_relu(512, 512))),
            nn.MaxPool2d(4), nn.Flatten(), nn.Linear(512, 10, bias=False))

    def forward(self, x):
        return self.net(x.view(-1, 3, 32, 32))


MODELS = {"mlp": SeedMLP, "cnn": SeedCNN, "mlp-big": BigMLP, "resnet": ImageResNet, "resnet9": ResNet9}
SAMPLE_NUMEL = {"resnet9": 3 * 32 * 32}  # the others take 28x28 images
INFERENCE_MODELS = dict(torch_models.MODELS, **{"mlp-big": BigMLP})

# models/zoo.cpp's recipes: optimizer, schedule, loss and the byte images' normalisation.
SEED_RECIPE = {"batch": 200, "lr": 0.01, "momentum": 0.5, "nesterov": False, "weight_decay": 0.0,
               "onecycle_max_lr": None, "loss": "nll", "mean": 0.1307, "std": 0.3081}
RECIPES = {"mlp": SEED_RECIPE, "cnn": SEED_RECIPE, "mlp-big": SEED_RECIPE,
           "resnet": {"batch": 256, "lr": 0.1 / 25, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4,
                      "onecycle_max_lr": 0.1, "loss": "cross_entropy", "mean": 0.2860, "std": 0.3530},
           # bench/bench_models.h's (a speed benchmark on random data: a constant rate)
           "resnet9": {"batch": 512, "lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4,
                       "onecycle_max_lr": None, "loss": "cross_entropy", "mean": 0.5, "std": 0.25}}


def read_idx(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_train(directory, mean=0.1307, std=0.3081):
    def find(stem):
        for name in (stem, stem + ".gz"):
            if os.path.exists(os.path.join(directory, name)):
                return os.path.join(directory, name)
        raise FileNotFoundError(f"{stem}[.gz] not in {directory}")
    images = read_idx(find("train-images-idx3-ubyte")).float().div_(255).sub_(mean).div_(std)
    labels = read_idx(find("train-labels-idx1-ubyte")).long()
    return images.reshape(-1, 784), labels


def bench_data(source, count, device, mean=0.1307, std=0.3081, numel=784):
    """count samples of numel values: Fashion-MNIST tiled to that size (as trident_bench does), else (and for
    samples of another size) synthetic noise."""
    images = labels = None
    if source != "synthetic" and numel == 784:
        directory = os.environ.get("TRIDENT_DATA") or "/usr/share/datasets/fashion-mnist"
        directory = directory if source == "auto" else source
        try:
            images, labels = load_train(directory, mean, std)
        except (OSError, ValueError) as e:
            if source != "auto":
                raise
            print(f"torch_reference: {e}; using synthetic data", file=sys.stderr)
    if images is None:
        g = torch.Generator().manual_seed(12345)
        images = torch.rand(count, numel, generator=g) * 3 - 0.4
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
    if model == "resnet9":
        return 50 if device.type == "cuda" else 2
    if device.type == "cuda":
        return 200 if model in ("mlp-big", "resnet") else 500
    return {"mlp": 100, "cnn": 40, "mlp-big": 6, "resnet": 4}[model]


def default_batch(args, device, model):
    """As trident_bench: mlp-big --big-batch, else 512 on GPUs; the others --batch, else the recipe's."""
    batch = args.batch or RECIPES[model]["batch"]
    if model == "mlp-big":
        return args.big_batch or (512 if device.type == "cuda" else batch)
    return batch


ERRORS = []  # messages of the measurements that failed (the exit status is 1 when there are any)


def emit(**fields):
    base = {"impl": "pytorch", "torch": torch.__version__, "n_devices": 1, "size": 0, "capture": False,
            "ms_per_step": None, "ms_per_step_min": None, "samples_per_s": None, "gflops": None,
            "precision": "fp32"}
    base.update(fields)
    print(json.dumps(base), flush=True)


def failure(e):
    """One line for an error row: the exception's type and message (its first 400 characters)."""
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) <= 400 else text[:400] + "..."


# ---- precision settings ------------------------------------------------------------------------


def set_tf32(enabled):
    """TF32 for float32 matmul and cuDNN convolutions on or off; returns the settings in force.

    Through the allow_tf32 flags, also on PyTorch 2.9+ (which deprecates them for fp32_precision):
    they keep the old and the new state consistent, whereas setting fp32_precision leaves a state in
    which torch.get_float32_matmul_precision(), read by torch.compile's inductor, raises."""
    b = torch.backends
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 2.9+: "Please use the new API settings to control TF32"
        b.cuda.matmul.allow_tf32 = enabled
        b.cudnn.allow_tf32 = enabled
        return {"matmul": "tf32" if b.cuda.matmul.allow_tf32 else "ieee",
                "conv": "tf32" if b.cudnn.allow_tf32 else "ieee"}


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_problem(device, dtype):
    """Why torch.autocast cannot compute in dtype on this device ("" when it can): a small matmul
    under it must come out in dtype (PyTorch 1.13 on CPU warns and runs float32 for float16)."""
    try:
        a = torch.ones(8, 8, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast(device_type=device.type, dtype=dtype):
                out = torch.mm(a, a).dtype
    except Exception as e:  # noqa: BLE001 - any failure means: not here
        return f"torch.autocast({device.type}, {dtype}) fails in torch {torch.__version__}: {failure(e)}"
    if out != dtype:
        return f"torch.autocast({device.type}, {dtype}) computes in {out} in torch {torch.__version__}"
    return ""


def make_grad_scaler(device):
    """fp16's GradScaler for device, or None where this PyTorch has none for it."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        try:
            return torch.amp.GradScaler(device.type)
        except (TypeError, RuntimeError, ValueError):
            pass
    if device.type == "cuda":
        return torch.cuda.amp.GradScaler()
    return None


def compile_problem(device):
    """Why torch.compile cannot run here ("" when it may)."""
    if not hasattr(torch, "compile"):
        return f"torch.compile needs PyTorch 2.x (this is {torch.__version__})"
    return ""


def make_optimizer(params, recipe, impl, device):
    """SGD per the recipe: impl fused, foreach or plain (PyTorch's default: foreach on CUDA)."""
    kwargs = {"lr": recipe["lr"], "momentum": recipe["momentum"], "nesterov": recipe["nesterov"],
              "weight_decay": recipe["weight_decay"]}
    accepted = inspect.signature(torch.optim.SGD.__init__).parameters
    if impl in ("fused", "foreach") and impl not in accepted:
        raise RuntimeError(f"torch {torch.__version__} has no SGD({impl}=True)")
    if impl != "plain":
        kwargs[impl] = True
    return torch.optim.SGD(params, **kwargs), impl


# ---- training ----------------------------------------------------------------------------------


class WithLoss(nn.Module):
    """model + the recipe's loss: what torch.compile compiles, so that the loss fuses in too."""

    def __init__(self, model, loss):
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, x, y):
        out = self.model(x)
        return F.nll_loss(out, y) if self.loss == "nll" else F.cross_entropy(out, y)


def training_skip_reason(device, precision, mode, model_name):
    if mode == "channels_last" and model_name not in CONV_MODELS:
        return "channels-last is a layout of convolution activations (this model has none)"
    if precision == "tf32" and device.type != "cuda":
        return "TF32 is a CUDA setting (on this device it is fp32)"
    if precision in AUTOCAST_DTYPES:
        why = autocast_problem(device, AUTOCAST_DTYPES[precision])
        if why:
            return why
        if precision == "fp16" and make_grad_scaler(device) is None:
            return f"torch {torch.__version__} has no GradScaler for {device.type}"
    if mode == "compile":
        return compile_problem(device)
    return ""


def measure_training(args, device, model_name, batch, precision, mode, optimizer_impl):
    """One training row: the recipe's step in precision and mode, timed as trident_bench times it."""
    steps = args.steps or default_steps(device, model_name)
    recipe = RECIPES[model_name]
    compiled = mode == "compile"
    row = {"bench": "train", "model": model_name, "device": str(device), "device_name": device_name(device),
           "batch": batch, "steps": steps, "capture": compiled, "compile": compiled, "mode": mode,
           "precision": precision}
    skip = training_skip_reason(device, precision, mode, model_name)
    if skip:
        emit(**row, skipped=skip)
        return
    torch.manual_seed(args.seed)
    images, labels = bench_data(args.data, batch * steps, device, recipe["mean"], recipe["std"],
                                SAMPLE_NUMEL.get(model_name, 784))
    tf32 = set_tf32(precision == "tf32")
    model = MODELS[model_name]().to(device).train()
    if mode == "channels_last":  # NHWC weights: the convolutions' outputs follow them
        model = model.to(memory_format=torch.channels_last)
    optimizer, impl = make_optimizer(model.parameters(), recipe, optimizer_impl, device)
    scheduler = None
    if recipe["onecycle_max_lr"]:
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=recipe["onecycle_max_lr"],
                                                        total_steps=args.epochs * steps)
    step_module = WithLoss(model, recipe["loss"])
    forward = torch.compile(step_module, mode="reduce-overhead") if compiled else step_module
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    mark_step = mark_step if compiled and device.type == "cuda" else None
    autocast_dtype = AUTOCAST_DTYPES.get(precision)
    scaler = make_grad_scaler(device) if precision == "fp16" else None
    loss_sum = torch.zeros((), device=device)

    def step(index):
        x = images.index_select(0, index)
        y = labels.index_select(0, index)
        optimizer.zero_grad(set_to_none=True)
        if mark_step:
            mark_step()  # a new iteration for the CUDA-graph trees of reduce-overhead
        if autocast_dtype is None:
            loss = forward(x, y)
        else:
            with torch.autocast(device_type=device.type, dtype=autocast_dtype):
                loss = forward(x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        loss_sum.add_(loss.detach().float())

    times, epoch_losses, warmup_s = [], [], 0.0
    for epoch in range(args.epochs):
        table = torch.randperm(batch * steps, device=device).view(steps, batch)
        loss_sum.zero_()
        sync(device)
        start = time.perf_counter()
        for s in range(steps):
            step(table[s])
        epoch_losses.append(loss_sum.item() / steps)  # the one read-back per epoch, as in the Trainer
        elapsed = time.perf_counter() - start
        if epoch == 0:
            warmup_s = elapsed
        else:
            times.append(elapsed * 1e3 / steps)
    ms = statistics.median(times)
    extra = {"loss_scale": scaler.get_scale()} if scaler is not None else {}
    emit(**row, ms_per_step=ms, ms_per_step_min=min(times), samples_per_s=batch * 1e3 / ms,
         tf32_matmul=tf32["matmul"], tf32_conv=tf32["conv"],
         autocast=str(autocast_dtype).replace("torch.", "") if autocast_dtype else None,
         optimizer_impl=impl, grad_scaler=scaler is not None, train_loss=epoch_losses[-1],
         warmup_s=warmup_s, cudnn_benchmark=bool(torch.backends.cudnn.benchmark), **extra)


def release(device, compiled):
    """Frees what one measurement left: compiled graphs and their CUDA-graph pools, cached blocks."""
    if compiled and hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def fused_sgd_problem(device):
    """Why SGD(fused=True) cannot train here ("" when it can): one step of a tiny model with the
    ResNet recipe's settings, plain and under a GradScaler, tried before any measurement."""
    if "fused" not in inspect.signature(torch.optim.SGD.__init__).parameters:
        return f"torch {torch.__version__} has no fused SGD"
    try:
        layer = nn.Linear(8, 8).to(device)
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.01, momentum=0.9, nesterov=True,
                                    weight_decay=5e-4, fused=True)
        scaler = make_grad_scaler(device)
        for use_scaler in (False, True):
            loss = layer(torch.ones(4, 8, device=device)).square().mean()
            if use_scaler and scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        sync(device)
    except Exception as e:  # noqa: BLE001 - any failure means: use the default SGD
        return failure(e)
    return ""


def training_rows(args, device, model_name, batch, optimizer_impl):
    """Every mode x precision of one model; a failure becomes an error row and the rest go on."""
    for mode in args.modes:
        precisions = args.precisions
        if mode == "compile" and args.compile_precisions is not None:  # in their order: a deadline ends the last
            precisions = [p for p in args.compile_precisions if p in args.precisions]
        for precision in precisions:
            try:
                measure_training(args, device, model_name, batch, precision, mode, optimizer_impl)
            except Exception as e:  # noqa: BLE001 - recorded, and the next combination runs
                message = failure(e)
                print(f"torch_reference: {model_name} {precision} {mode}: {message}", file=sys.stderr)
                ERRORS.append(message)
                emit(bench="train", model=model_name, device=str(device), device_name=device_name(device),
                     batch=batch, steps=args.steps or default_steps(device, model_name),
                     capture=mode == "compile", compile=mode == "compile", mode=mode, precision=precision,
                     error=message)
            release(device, mode == "compile")
    set_tf32(False)


# ---- inference and GEMM ------------------------------------------------------------------------


def measure_inference(args, device, model_name, batch, inference_mode, compiled):
    torch.manual_seed(args.seed)
    model = INFERENCE_MODELS[model_name]().to(device).eval()
    forward = torch.compile(model, mode="reduce-overhead") if compiled else model
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
         steps=len(times), capture=compiled, ms_per_step=ms, ms_per_step_min=min(times),
         samples_per_s=batch * 1e3 / ms, compile=compiled, mode="compile" if compiled else "eager",
         inference_mode=inference_mode)


GEMM_DTYPES = {"fp32": (torch.float32, "F32"), "tf32": (torch.float32, "F32"),
               "bf16": (torch.bfloat16, "BF16"), "fp16": (torch.float16, "F16")}


def measure_gemm(args, device, n, precision):
    dtype, dtype_name = GEMM_DTYPES[precision]
    row = {"bench": "gemm", "model": "sgemm" if dtype == torch.float32 else "gemm", "device": str(device),
           "device_name": device_name(device), "batch": 0, "size": n, "precision": precision,
           "out_dtype": dtype_name}
    if precision == "tf32" and device.type != "cuda":
        emit(**row, skipped="TF32 is a CUDA setting (on this device it is fp32)")
        return
    try:  # a type this PyTorch cannot multiply here (float16 on CPU in 1.13) is a skip, not a failure
        torch.matmul(torch.ones(4, 4, dtype=dtype, device=device), torch.ones(4, 4, dtype=dtype, device=device))
    except RuntimeError as e:
        emit(**row, skipped=f"torch {torch.__version__} cannot multiply {dtype} on {device.type}: {failure(e)}")
        return
    tf32 = set_tf32(precision == "tf32")
    g = torch.Generator().manual_seed(n)
    a = (torch.rand(n, n, generator=g) * 2 - 1).to(device=device, dtype=dtype)
    b = a.clone()
    c = torch.empty(n, n, device=device, dtype=dtype)

    def run(reps):
        sync(device)
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=c)
        sync(device)
        return time.perf_counter() - start

    run(2)
    reps = max(1, int(args.gemm_seconds / max(run(1), 1e-6)))
    best = min(run(reps) / reps for _ in range(3))
    set_tf32(False)
    emit(**row, steps=reps, ms_per_step=best * 1e3, gflops=2.0 * n ** 3 / best / 1e9,
         tf32_matmul=tf32["matmul"])


def guarded(what, device, fn, *fn_args):
    """Runs one measurement; a failure becomes an error row and the next measurement runs."""
    try:
        fn(*fn_args)
    except Exception as e:  # noqa: BLE001
        message = failure(e)
        print(f"torch_reference: {what}: {message}", file=sys.stderr)
        ERRORS.append(message)
        return message
    finally:
        release(device, False)
    return ""


def main(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        torch.set_num_threads(args.threads or os.cpu_count())
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels
    set_tf32(False)
    print(f"torch_reference: torch {torch.__version__} on {device} ({device_name(device)}), "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}", file=sys.stderr)
    models = [m for m in args.models.split(",") if m]
    for model in models:
        if model not in MODELS:
            sys.exit(f"torch_reference: unknown model '{model}' (use {', '.join(MODELS)})")
    if not args.no_train and models:
        impl = args.optimizer_impl
        if impl == "auto":  # fused where it works here, else PyTorch's default
            why = fused_sgd_problem(device) if device.type == "cuda" else "not on CPU"
            impl = "plain" if why else "fused"
            if why:
                print(f"torch_reference: SGD without fused=True ({why})", file=sys.stderr)
        for model in models:
            training_rows(args, device, model, default_batch(args, device, model), impl)
    if args.inference:
        for mode in (m for m in args.modes if m != "channels_last"):  # inference: eager and compile
            for model in models:
                for batch in [int(b) for b in args.inference_batches.split(",") if b]:
                    for inference_mode in (False, True):
                        row = {"bench": "inference", "model": model, "device": str(device),
                               "device_name": device_name(device), "batch": batch, "steps": 0,
                               "compile": mode == "compile", "mode": mode, "inference_mode": inference_mode}
                        skip = compile_problem(device) if mode == "compile" else ""
                        why = skip or guarded(f"inference {model} batch {batch} {mode}", device, measure_inference,
                                              args, device, model, batch, inference_mode, mode == "compile")
                        if why:
                            emit(**row, **({"skipped": why} if skip else {"error": why}))
                        if mode == "compile":
                            release(device, True)
    if not args.no_gemm:
        sizes = [int(s) for s in args.gemm_sizes.split(",") if s] or (
            [256, 512, 1024, 2048, 4096, 8192] if device.type == "cuda" else [256, 512, 1024, 2048])
        for precision in args.gemm_precisions:
            for n in sizes:
                why = guarded(f"GEMM {precision} n={n}", device, measure_gemm, args, device, n, precision)
                if why:
                    emit(bench="gemm", model="sgemm" if GEMM_DTYPES[precision][0] == torch.float32 else "gemm",
                         device=str(device), device_name=device_name(device), batch=0,
                         size=n, precision=precision, out_dtype=GEMM_DTYPES[precision][1], error=why)
    return 1 if ERRORS else 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
