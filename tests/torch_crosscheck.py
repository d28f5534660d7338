#!/usr/bin/env python3
"""Weights between Trident and PyTorch, both ways, for the MLP, the CNN and the ResNet (ctest
torch_crosscheck; the modules are in tests/torch_models.py).

    torch_crosscheck.py --trident build/trident --work DIR [--device cpu:0] [--samples 500]
                        [--models mlp,cnn,resnet] [--data /usr/share/datasets/fashion-mnist]

Trident -> PyTorch: a short `trident train` (5 steps), `trident export-weights`, then
    model.load_state_dict(weights, strict=True)              (the export)
    model.load_state_dict(checkpoint, strict=False)          (the training checkpoint: its only
                                                               unexpected keys are "optimizer.*")
and the outputs of `trident predict --outputs` on the first test samples against PyTorch's in
float64 from the same weights: NMSE <= 1e-10 (the ResNet on 200 samples: PyTorch's double
convolutions are slow), identical argmax; `trident eval`'s accuracy equals PyTorch's on the same
samples.
PyTorch -> Trident: PyTorch-initialised weights, then the same after a few training steps (batch
norm's running statistics no longer 0 and 1: BN in eval mode from the same weights and buffers),
and a float16 copy, each loaded by `trident predict --model` / `trident eval --model` (weights
without metadata, as PyTorch writes them): the same checks.

safetensors files are written and read here directly (the format is an 8-byte header length, a
JSON header, the raw tensors), so the test needs only Debian's python3-torch and numpy, not the
`safetensors` package from PyPI. Exit 0: passed; 1: a check failed; 77: skipped (no torch, no data).
"""
import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # python3-torch is in scripts/install_deps.sh; a machine without it skips
    print(f"SKIP: {e} (apt-get install python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import LOG_PROBABILITIES, MODELS, NORMALISATION  # noqa: E402

TO_NUMPY = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "U8": np.uint8}
FROM_TORCH = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
FAILURES = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message, flush=True)
    if not ok:
        FAILURES.append(message)


# ---- safetensors, written and read directly -----------------------------------------------------

def save_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            data = t.view(torch.int16).numpy().tobytes()
        else:
            data = t.numpy().tobytes()
        header[name] = {"dtype": FROM_TORCH[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_safetensors(path):
    """name -> torch tensor (BF16 widened to float32), and the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + length:]
    tensors = {}
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        if entry["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, TO_NUMPY[entry["dtype"]])
        tensors[name] = torch.from_numpy(a.copy().reshape(entry["shape"]))
    return tensors, metadata


# ---- data and the CLI ---------------------------------------------------------------------------

def read_idx(directory, stem, limit):
    for name in (stem, stem + ".gz"):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                raw = f.read()
            ndim = raw[3]
            dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
            a = np.frombuffer(raw[4 + 4 * ndim:], np.uint8).reshape(dims)
            return a[:limit]
    raise FileNotFoundError(os.path.join(directory, stem))


def normalised(images, model):
    """float32 model inputs [N, 1, 28, 28], computed as Trident's gather does: (x/255 - mean)/std."""
    mean, std = NORMALISATION[model]
    x = images.astype(np.float32) * np.float32(1.0 / 255.0) - np.float32(mean)
    return (x * np.float32(1.0 / np.float32(std))).reshape(-1, 1, 28, 28)


class Cli:
    def __init__(self, trident, device, work):
        self.trident, self.device, self.work = trident, device, work
        # Only the device's backend opens (no OpenCL context for a CPU run).
        self.env = dict(os.environ)
        self.env.setdefault("TRIDENT_BACKEND", device.split(":")[0])

    def run(self, *args):
        cmd = [self.trident] + [str(a) for a in args]
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
        return p.stdout

    def outputs(self, weights, inputs_npy, model=None):
        out = os.path.join(self.work, "outputs.npy")
        extra = ["--model", model] if model else []
        self.run("predict", "--checkpoint", weights, "--device", self.device, "--outputs", out,
                 "--top", "1", *extra, inputs_npy)
        return np.load(out).astype(np.float64)

    def accuracy(self, weights, data, samples, model=None):
        extra = ["--model", model] if model else []
        line = self.run("eval", "--checkpoint", weights, "--device", self.device, "--data", data,
                        "--test-limit", samples, "--json", *extra)
        return json.loads(line)["test_accuracy"]


# Samples compared against float64 PyTorch (its CPU convolutions in double are slow): all of them
# but for the ResNet; the argmax and the accuracy are compared on every sample in float32.
FLOAT64_SAMPLES = {"resnet": 200}


def compare(what, trident_out, model, x, labels, trident_accuracy=None, name=""):
    """Trident's outputs against PyTorch float64 from the same weights; argmax and accuracy
    against PyTorch float32."""
    n64 = min(len(x), FLOAT64_SAMPLES.get(name, len(x)))
    with torch.no_grad():
        reference = model.double()(torch.from_numpy(x[:n64]).double()).numpy()
        fp32 = model.float()(torch.from_numpy(x)).numpy()
    mine = trident_out[:n64]
    nmse = float(((mine - reference) ** 2).sum() / (reference ** 2).sum())
    check(nmse <= 1e-10, f"{what}: outputs NMSE {nmse:.2e} against PyTorch float64 on {n64} samples "
          f"(<= 1e-10)")
    same64 = int((mine.argmax(1) == reference.argmax(1)).sum())
    same = int((trident_out.argmax(1) == fp32.argmax(1)).sum())
    check(same64 == n64 and same == len(x),
          f"{what}: argmax identical on {same64} of {n64} samples (float64), {same} of {len(x)} (float32)")
    if trident_accuracy is not None:
        torch_correct = int((fp32.argmax(1) == labels).sum())
        trident_correct = round(trident_accuracy * len(x))
        check(trident_correct == torch_correct,
              f"{what}: test accuracy {trident_correct}/{len(x)} in Trident, {torch_correct}/{len(x)} "
              f"in PyTorch")


def trident_to_torch(cli, name, data, x, labels, samples, inputs_npy):
    work = cli.work
    checkpoint = os.path.join(work, f"{name}_run.safetensors")
    weights = os.path.join(work, f"{name}_weights.safetensors")
    cli.run("train", "--model", name, "--epochs", 1, "--batch", 100, "--train-limit", 500,
            "--test-limit", samples, "--data", data, "--devices", cli.device, "--checkpoint", checkpoint)
    cli.run("export-weights", "--checkpoint", checkpoint, "--output", weights)
    state, metadata = load_safetensors(weights)
    model = MODELS[name]().eval()
    check(list(state) == list(model.state_dict()),
          f"{name} Trident -> PyTorch: the file's names and order are the module's state_dict()'s")
    try:
        model.load_state_dict(state, strict=True)
        check(True, f"{name} Trident -> PyTorch: load_state_dict(export, strict=True)")
    except RuntimeError as e:
        check(False, f"{name} Trident -> PyTorch: load_state_dict(export, strict=True): {e}")
        return
    check(metadata.get("model") == name, f"{name}: the export's metadata names the model")
    # The training checkpoint itself: strict=False gives exactly the same weights.
    full, _ = load_safetensors(checkpoint)
    other = MODELS[name]()
    result = other.load_state_dict(full, strict=False)
    check(not result.missing_keys and result.unexpected_keys
          and all(k.startswith("optimizer.") for k in result.unexpected_keys),
          f"{name}: checkpoint with strict=False: missing {result.missing_keys}, unexpected "
          f"{result.unexpected_keys}")
    check(all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), model.state_dict().values())),
          f"{name}: the checkpoint's weights are exactly the export's")
    compare(f"{name} Trident -> PyTorch", cli.outputs(weights, inputs_npy), model, x, labels,
            cli.accuracy(weights, data, samples), name)


def torch_to_trident(cli, name, data, x, labels, samples, inputs_npy, train_x, train_y):
    work = cli.work
    torch.manual_seed(7)
    model = MODELS[name]().eval()
    initial = os.path.join(work, f"{name}_torch_init.safetensors")
    save_safetensors(initial, model.state_dict())  # as safetensors.torch.save_file writes it
    compare(f"{name} PyTorch-initialised -> Trident", cli.outputs(initial, inputs_npy, name), model, x,
            labels, name=name)
    # A few training steps: weights, and batch norm's running statistics, move.
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    log_probs = LOG_PROBABILITIES[name]
    for step in range(8):
        xb = torch.from_numpy(train_x[step * 64:(step + 1) * 64])
        yb = torch.from_numpy(train_y[step * 64:(step + 1) * 64].astype(np.int64))
        optimizer.zero_grad()
        out = model(xb)
        loss = torch.nn.functional.nll_loss(out, yb) if log_probs else torch.nn.functional.cross_entropy(out, yb)
        loss.backward()
        optimizer.step()
    model.eval()
    if name == "resnet":
        var = model.layer2.shortcut[1].running_var
        check(not torch.allclose(var, torch.ones_like(var)),
              "resnet: batch norm statistics moved in PyTorch training (BN eval from real buffers)")
    trained = os.path.join(work, f"{name}_torch_trained.safetensors")
    save_safetensors(trained, model.state_dict())
    compare(f"{name} PyTorch-trained -> Trident", cli.outputs(trained, inputs_npy, name), model, x, labels,
            cli.accuracy(trained, data, samples, name), name)
    # float16 weights are converted on load: compare with the module holding the same f16 values.
    half = {k: (v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
    half_path = os.path.join(work, f"{name}_torch_f16.safetensors")
    save_safetensors(half_path, half)
    rounded = MODELS[name]().eval()
    rounded.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in half.items()})
    compare(f"{name} PyTorch float16 -> Trident", cli.outputs(half_path, inputs_npy, name), rounded, x, labels,
            name=name)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trident", required=True, help="the trident CLI binary")
    p.add_argument("--work", required=True, help="scratch directory")
    p.add_argument("--device", default="cpu:0")
    p.add_argument("--samples", type=int, default=500, help="test samples compared")
    p.add_argument("--models", default="mlp,cnn,resnet")
    p.add_argument("--data", default=os.environ.get("TRIDENT_DATA") or "/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    del here
    if not os.path.isdir(args.data):
        print(f"SKIP: no data set at {args.data} (apt-get install dataset-fashion-mnist)")
        return 77
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.manual_seed(1)
    test_images = read_idx(args.data, "t10k-images-idx3-ubyte", args.samples)
    labels = read_idx(args.data, "t10k-labels-idx1-ubyte", args.samples).astype(np.int64)
    train_images = read_idx(args.data, "train-images-idx3-ubyte", 512)
    train_labels = read_idx(args.data, "train-labels-idx1-ubyte", 512)
    cli = Cli(args.trident, args.device, args.work)
    start = time.time()
    for name in [m for m in args.models.split(",") if m]:
        t0 = time.time()
        x = normalised(test_images, name)
        inputs_npy = os.path.join(args.work, f"{name}_inputs.npy")
        np.save(inputs_npy, x)  # float32 model inputs: predict takes them as they are
        trident_to_torch(cli, name, args.data, x, labels, args.samples, inputs_npy)
        torch_to_trident(cli, name, args.data, x, labels, args.samples, inputs_npy,
                         normalised(train_images, name), train_labels)
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)
    print(f"torch_crosscheck: {time.time() - start:.1f} s, torch {torch.__version__}")
    if FAILURES:
        print(f"{len(FAILURES)} failed:\n  " + "\n  ".join(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
