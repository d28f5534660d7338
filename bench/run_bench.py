#!/usr/bin/env python3
"""One command for Trident vs PyTorch on this machine: runs trident_bench and the PyTorch reference in the
same run, prints the tables and ratios, writes bench/results/<machine>.json and plots it (bench/plot_results.py).

    bench/run_bench.py                          # every device kind found: GPUs (CUDA + OpenCL) or the CPU
    bench/run_bench.py --device cuda:0,opencl:1 --deadline-s 540
    bench/run_bench.py --only gemm --gemm-sizes 2048,4096,8192
    bench/run_bench.py --scaling --devices cuda:all      # Trident 1..N GPUs vs PyTorch DDP

What runs, by default, in this order (each part can be narrowed with the options below):
  GEMM       C = A B, n x n, through Device::gemm (CUDA: fp32, tf32, bf16, bf16 with float32 C, fp16; OpenCL:
             fp32, fp16) and torch.matmul (fp32, tf32, bf16, fp16); n = 1024, 2048, 4096 on GPUs, 256..2048 on CPUs.
  training   mlp-big (784-4096x3-10, batch 512 on GPUs), resnet (256), mlp and cnn (200) in each precision:
             Trident fp32, tf32, bf16, fp16 on CUDA (fp32 and fp16 on OpenCL, resnet not there); PyTorch fp32,
             tf32, bf16 autocast, fp16 autocast with a GradScaler, eager, and for mlp-big and resnet also
             torch.compile(mode="reduce-overhead") in bf16, fp16 and tf32 (PyTorch 2.x).
             On a CPU: all four models, fp32 (add --precisions fp32,bf16,fp16), PyTorch eager.
  inference  mlp, cnn, resnet at batch 1 and 1000: Trident's Predictor, PyTorch no_grad and inference_mode.
Only when asked (--models resnet9 --precision-models resnet9 --compile-models resnet9): ResNet-9 on 3x32x32 at
batch 512, a network the zoo does not have (bench/bench_models.h; PyTorch's twin in torch_reference.py).
Devices: with no --device, cuda:0 and the first OpenCL GPU where there are GPUs, else the CPU.

Training is compared in samples/s (Trident / PyTorch, > 1 means Trident is faster), GEMM in TFLOP/s,
inference in latency (PyTorch / Trident). The last lines printed are the mixed-precision figures of
issue 12 (Trident bf16 against PyTorch's best and against Trident fp32, bf16 GEMM against torch.matmul,
OpenCL fp16 against fp32). A row that could not run (a precision a device or this PyTorch lacks, a
failure) is kept with its reason; the exit status is 1 if anything failed. The results file is rewritten
after every part, so a run cut short keeps what it measured; --deadline-s stops starting new parts (and
ends a running one) at that many seconds. --rounds R alternates the programs R times and keeps each
one's best, which is what to use on a shared machine.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_summary as summary  # noqa: E402

STAT = "median"  # --stat
# Issue 12's models first: a run cut short by --deadline-s keeps them.
PRECISION_MODELS = "mlp-big,resnet,mlp,cnn"
COMPILE_MODELS = "mlp-big,resnet"  # torch.compile costs about a minute per model and precision


def find_bench(explicit):
    candidates = [explicit] if explicit else [
        os.path.join(ROOT, d, "bench", "trident_bench") for d in ("build", "build-bench", "build-release")]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    sys.exit("run_bench: trident_bench not found (tried %s); build it first, e.g.\n"
             "  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build" % ", ".join(candidates))


def find_python(explicit):
    """An interpreter that imports torch: Debian's is /usr/bin/python3, a venv's may not have it."""
    for py in ([explicit] if explicit else [sys.executable, "/usr/bin/python3", "python3"]):
        if py and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    sys.exit("run_bench: no python with torch found (try --python /usr/bin/python3)")


class Deadline:
    """--deadline-s: seconds from the start after which no part starts and a running one is ended."""

    def __init__(self, seconds):
        self.start = time.monotonic()
        self.end = self.start + seconds if seconds else None

    def remaining(self):
        return None if self.end is None else self.end - time.monotonic()

    def passed(self):
        return self.end is not None and time.monotonic() >= self.end

    def elapsed(self):
        return time.monotonic() - self.start


def run_json(cmd, deadline=None, env=None):
    """Runs cmd (its stderr goes to ours), returns (JSON objects it printed one per line, exit status);
    at the deadline it and its children are ended (status -9), keeping the lines printed so far."""
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    if env is None and "python" in os.path.basename(cmd[0]):
        # PyTorch ships its own CUDA libraries; the LD_LIBRARY_PATH set for trident_bench (oneTBB,
        # CLBlast, /usr/local/cuda) must not shadow them.
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    remaining = deadline.remaining() if deadline else None
    if remaining is not None and remaining <= 0:
        return [], -9
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    timer = None
    if remaining is not None:  # its own process group: torch.compile's workers end with it
        timer = threading.Timer(remaining, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
    records = []
    for line in proc.stdout:
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                print(f"run_bench: not JSON, ignored: {line.strip()[:200]}", file=sys.stderr)
    proc.wait()
    if timer:
        timer.cancel()
    if proc.returncode != 0:
        print(f"run_bench: {os.path.basename(cmd[0])} ended with status {proc.returncode}", file=sys.stderr)
    return use_stat(records, STAT), proc.returncode


def use_stat(records, stat):
    """--stat min: judge training by each run's fastest epoch instead of its median (busy machines)."""
    for r in records:
        r["stat"] = stat
        if stat == "min" and r.get("bench") != "gemm" and r.get("ms_per_step_min") and r.get("samples_per_s"):
            r["samples_per_s"] *= r["ms_per_step"] / r["ms_per_step_min"]
            r["ms_per_step"] = r["ms_per_step_min"]
    return records


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return -1.0


def machine_slug(name, on_cpu):
    name = re.sub(r"\(.*?\)", "", name or "unknown").replace("NVIDIA", "")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    return f"{slug}-{os.cpu_count()}cpu" if on_cpu else slug


def csv_list(text):
    return [s for s in (text or "").split(",") if s]


# ---- devices and the plan ------------------------------------------------------------------------


def list_devices(bench):
    """trident_bench --list-devices: [{"id", "name", "type", "backend"}], [] from an older binary."""
    proc = subprocess.run([bench, "--list-devices"], capture_output=True, text=True)
    if proc.returncode != 0:
        return []
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def choose_devices(explicit, found):
    """--device's list, else cuda:0 and the first OpenCL GPU where there are GPUs, else the CPU."""
    if explicit:
        return csv_list(explicit)
    gpus = [d for d in found if d["type"] == "gpu"]
    chosen = [next((d["id"] for d in gpus if d["backend"] == "cuda"), None),
              next((d["id"] for d in gpus if d["backend"] == "opencl"), None)]
    chosen = [d for d in chosen if d]
    if chosen:
        return chosen
    return [next((d["id"] for d in found if d["backend"] == "cpu"), None) or "cpu"]


def is_gpu(device, found):
    info = next((d for d in found if d["id"] == device), None)
    if info:
        return info["type"] == "gpu"
    return device.startswith("cuda") or device == "opencl"


def common_args(args):
    out = []
    for flag in ("batch", "big_batch", "steps", "epochs"):
        if getattr(args, flag):
            out += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.data:
        out += ["--data", args.data]
    return out


class Plan:
    """What runs where: per part, trident_bench's arguments for each device and torch_reference's."""

    def __init__(self, args, devices, found, torch_device):
        self.args, self.devices, self.found = args, devices, found
        self.gpu = any(is_gpu(d, found) for d in devices)
        self.torch_gpu = torch_device.startswith("cuda")
        self.torch_device = torch_device
        self.precision_models = set(csv_list(args.precision_models))
        self.compile_models = set(csv_list(args.compile_models))

    def precisions(self, device, model):
        if model not in self.precision_models:
            return ["fp32"]
        if device.startswith("opencl"):
            return csv_list(self.args.opencl_precisions)
        gpu = is_gpu(device, self.found)
        return csv_list(self.args.precisions) or (["fp32", "tf32", "bf16", "fp16"] if gpu else ["fp32"])

    def torch_precisions(self, model):
        if model not in self.precision_models:
            return ["fp32"]
        return csv_list(self.args.torch_precisions) or (
            ["fp32", "tf32", "bf16", "fp16"] if self.torch_gpu else ["fp32"])

    def torch_modes(self, model):
        modes = csv_list(self.args.torch_modes)
        if not modes:
            modes = ["eager", "compile"] if self.torch_gpu and model in self.compile_models else ["eager"]
            if model in ("resnet", "resnet9"):  # PyTorch at its best on a convolution-bound model: NHWC too
                modes.insert(1, "channels_last")
        if self.args.compile and "compile" not in modes:
            modes.append("compile")
        return modes

    def torch_compile_precisions(self, model):
        """The precisions compiled too: the fastest candidates (strict float32 compiled loses to its TF32 form on
        tensor-core GPUs), unless --torch-compile-precisions says otherwise."""
        chosen = self.torch_precisions(model)
        wanted = csv_list(self.args.torch_compile_precisions) or ["bf16", "fp16", "tf32"]  # likeliest best first
        return [p for p in wanted if p in chosen] or chosen

    def gemm_types(self, device):
        if self.args.gemm_types:
            return csv_list(self.args.gemm_types)
        if device.startswith("opencl"):
            return ["fp32", "fp16"]
        return ["fp32", "tf32", "bf16", "bf16-f32", "fp16"] if is_gpu(device, self.found) else ["fp32"]

    def gemm_sizes(self):
        return csv_list(self.args.gemm_sizes) or (
            ["1024", "2048", "4096"] if self.gpu else ["256", "512", "1024", "2048"])

    def parts(self):
        """[(name, [(device, trident_bench arguments)], torch_reference arguments or None)]."""
        a, out = self.args, []
        common = common_args(a)
        if "gemm" in a.only:  # first: a minute at most, and half of issue 12's figures
            sizes = ",".join(self.gemm_sizes())
            trident = [(d, ["--gemm", "--gemm-sizes", sizes, "--gemm-types", ",".join(self.gemm_types(d)),
                            "--gemm-ms", str(a.gemm_ms)]) for d in self.devices]
            torch_types = csv_list(a.torch_gemm_precisions) or (
                ["fp32", "tf32", "bf16", "fp16"] if self.torch_gpu else ["fp32"])
            torch = ["--no-train", "--gemm-sizes", sizes, "--gemm-precisions", ",".join(torch_types),
                     "--gemm-seconds", str(a.gemm_ms / 1000)]
            out.append(("gemm", trident, torch))
        if "train" in a.only:
            models = csv_list(a.models) or PRECISION_MODELS.split(",")
            # One part per model PyTorch compiles (slow: a deadline ends one part, not all), then one per
            # kind of the rest (fewer process starts), each group trained in the same precisions.
            compiled = [m for m in models if m in self.compile_models and self.torch_gpu]
            groups = [[m] for m in compiled]
            for kind in (True, False):
                rest = [m for m in models if m not in compiled and (m in self.precision_models) == kind]
                groups += [rest] if rest else []
            for group in groups:
                m = group[0]
                names = ",".join(group)
                trident = [(d, ["--models", ",".join(x for x in group if not d.startswith("opencl")
                                                     or x in csv_list(a.opencl_models)),
                                "--no-gemm", "--precision", ",".join(self.precisions(d, m))] + common)
                           for d in self.devices
                           if not d.startswith("opencl") or set(group) & set(csv_list(a.opencl_models))]
                torch = ["--models", names, "--no-gemm", "--precisions", ",".join(self.torch_precisions(m)),
                         "--modes", ",".join(self.torch_modes(m))] + common
                if "compile" in self.torch_modes(m):
                    torch += ["--compile-precisions", ",".join(self.torch_compile_precisions(m))]
                out.append((f"train {names}", trident, torch))
        if "inference" in a.only and a.inference_models:
            unit = ["--models", a.inference_models, "--no-train", "--no-gemm", "--inference",
                    "--inference-batches", a.inference_batches]
            modes = ["eager"] + (["compile"] if a.compile else [])
            out.append(("inference", [(d, unit) for d in self.devices], unit + ["--modes", ",".join(modes)]))
        if a.no_torch:
            out = [(name, trident, None) for name, trident, _ in out]
        return out


# ---- running ---------------------------------------------------------------------------------------


class Results:
    """bench/results/<machine>.json, rewritten whole (atomically) after every part."""

    def __init__(self, args, machine, section):
        os.makedirs(args.results_dir, exist_ok=True)
        self.path = os.path.join(args.results_dir, machine + ".json")
        self.result = {}
        if os.path.exists(self.path):
            try:
                with open(self.path) as f:
                    self.result = json.load(f)
            except ValueError as e:
                sys.exit(f"run_bench: {self.path} is not valid JSON ({e}); move it away or pass --machine")
        self.result.update({"machine": machine, "cpu_count": os.cpu_count()})
        self.section = section
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    def write(self, **fields):
        self.result[self.section] = dict({"date": self.started, "command": sys.argv}, **fields)
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.result, f, indent=1)
        os.replace(self.path + ".tmp", self.path)


def torch_version(python):
    if python is None:  # --no-torch
        return None
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True).stdout.strip()


def incomplete_notes(parts_done, failures):
    """What a run cut short lacks: parts not started, programs ended at the deadline (status -9) or failed."""
    notes = [f"part '{p['part']}' (round {p['round']}) not run: deadline" for p in parts_done if p.get("skipped")]
    for f in failures:
        where = f" on {f['device']}" if f.get("device") else ""
        if f["status"] == -9:
            notes.append(f"part '{f['part']}': {f['program']}{where} ended at the deadline; its later rows are missing")
        else:
            notes.append(f"part '{f['part']}': {f['program']}{where} exited with status {f['status']}")
    return notes


def single_device(args, bench, python, deadline):
    """Per part, Trident (each device) then PyTorch, back to back, so that a shared machine's load drifts
    as little as possible between the two sides of one ratio."""
    found = list_devices(bench)
    devices = choose_devices(args.device, found)
    torch_device = args.torch_device
    if torch_device is None and python is None:  # --no-torch
        torch_device = "none"
    if torch_device is None:  # PyTorch runs where Trident ran: CPU against CPU, GPUs against CUDA
        has_cuda = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available())"],
                                  capture_output=True, text=True).stdout.strip() == "True"
        torch_device = "cuda" if has_cuda and any(is_gpu(d, found) for d in devices) else "cpu"
    plan = Plan(args, devices, found, torch_device)
    first = next((d for d in found if d["id"] == devices[0]), None)
    machine = args.machine or machine_slug(first["name"] if first else devices[0], not plan.gpu)
    results = Results(args, machine, "single")
    results.result["torch"] = torch_version(python)
    print(f"run_bench: Trident on {', '.join(devices)}; PyTorch {results.result['torch']} on {torch_device}; "
          f"results in {results.path}", file=sys.stderr)
    best, parts_done, failures = {}, [], []
    load = load_average()

    def save(complete):
        records = list(best.values())
        results.write(load_average_at_start=load, devices=devices, torch_device=torch_device, complete=complete,
                      elapsed_s=round(deadline.elapsed(), 1), parts=parts_done, failures=failures,
                      records=records, ratios=summary.all_ratios(records), headline=summary.headline(records))
        return records

    for rnd in range(args.rounds):
        for name, trident_runs, torch_args in plan.parts():
            if deadline.passed():
                parts_done.append({"part": name, "round": rnd + 1, "skipped": "deadline"})
                continue
            start = time.monotonic()
            trident_rows = []
            for device, bench_args in trident_runs:
                rows, status = run_json([bench, "--device", device] + bench_args, deadline)
                trident_rows += rows
                if status != 0:
                    failures.append({"part": name, "program": "trident_bench", "device": device, "status": status})
            summary.keep_best(best, trident_rows)
            if torch_args is not None:
                # The batch Trident chose for mlp-big (512 on GPUs) is PyTorch's too, also where PyTorch
                # runs on a CPU; the other models take their recipe's batch on both sides.
                batch = next((r["batch"] for r in trident_rows if r.get("model") == "mlp-big"), None)
                if batch and not args.big_batch:
                    torch_args = torch_args + ["--big-batch", str(batch)]
                rows, status = run_json([python, os.path.join(HERE, "torch_reference.py"), "--device",
                                         torch_device] + torch_args, deadline)
                summary.keep_best(best, rows)
                if status != 0:
                    failures.append({"part": name, "program": "torch_reference.py", "status": status})
            parts_done.append({"part": name, "round": rnd + 1, "seconds": round(time.monotonic() - start, 1)})
            save(False)
    records = save(True)
    print(summary.summary_text(records, summary.headline(records), load_average(),
                               incomplete_notes(parts_done, failures)))
    errors = [r for r in records if r.get("error")]
    return results.path, bool(failures or errors)


def scaling(args, bench, python, deadline):
    devices = args.devices or "cuda:all"
    model = (csv_list(args.models) or ["mlp-big"])[0]
    batch = args.batch or 512
    extra = ["--batch", str(batch)] + (["--steps", str(args.steps)] if args.steps else []) + \
            (["--epochs", str(args.epochs)] if args.epochs else [])
    best, failed = {}, False
    for rnd in range(args.rounds):
        trident, status = run_json([bench, "--devices", devices, "--models", model] + extra, deadline)
        failed |= status != 0
        summary.keep_best(best, trident)
        if trident and all(r["device"].startswith("cuda") for r in trident) and python:
            counts = ",".join(str(n) for n in sorted({r["n_devices"] for r in trident}))
            rows, status = run_json([python, os.path.join(HERE, "torch_ddp.py"), "--gpus", counts, "--model",
                                     model] + extra, deadline)
            failed |= status != 0
            summary.keep_best(best, rows)
    records = sorted(best.values(), key=lambda r: (r["impl"], r["n_devices"]))
    ratios = []
    print(f"\n== weak scaling, {model}, batch {batch} per device (efficiency = S(N) / (N S(1)))")
    by_impl = {}
    for r in records:
        if summary.measured(r):
            by_impl.setdefault(r["impl"], {})[r["n_devices"]] = r
    for n in sorted({r["n_devices"] for r in records}):
        line = f"N={n}"
        for impl, rows in by_impl.items():
            if n in rows and 1 in rows:
                eff = rows[n]["samples_per_s"] / (n * rows[1]["samples_per_s"])
                rows[n]["efficiency"] = eff
                line += f"  {impl} {rows[n]['samples_per_s']:11.0f}/s eff {100 * eff:5.1f}%"
        if "trident" in by_impl and "pytorch-ddp" in by_impl and n in by_impl["trident"] \
                and n in by_impl["pytorch-ddp"]:
            ratio = by_impl["trident"][n]["samples_per_s"] / by_impl["pytorch-ddp"][n]["samples_per_s"]
            ratios.append({"bench": "scaling", "model": model, "n_devices": n, "against": "pytorch-ddp",
                           "ratio": ratio})
            line += f"  Trident/DDP x{ratio:.2f}"
        print(line)
    machine = args.machine or machine_slug(records[0]["device_name"] if records else "unknown", False)
    results = Results(args, machine, "scaling")
    results.result["torch"] = torch_version(python)
    results.write(load_average_at_start=load_average(), records=records, ratios=ratios)
    return results.path, failed


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", help="Trident device(s), comma-separated (default: see above)")
    p.add_argument("--torch-device", help="cpu or cuda (default: cuda where Trident ran on a GPU)")
    p.add_argument("--only", default="train,gemm,inference", type=lambda s: set(csv_list(s)),
                   help="parts to run: train, gemm, inference (comma-separated; default all)")
    p.add_argument("--models", help=f"models to train (default {PRECISION_MODELS}; --scaling: mlp-big)")
    p.add_argument("--precision-models", default=PRECISION_MODELS,
                   help="models trained in every precision (the others: fp32 only)")
    p.add_argument("--precisions", help="Trident's precisions on CUDA and CPU (GPU: fp32,tf32,bf16,fp16; CPU: fp32)")
    p.add_argument("--opencl-precisions", default="fp32,fp16", help="Trident's precisions on OpenCL")
    p.add_argument("--opencl-models", default="mlp,cnn,mlp-big", help="models trained on OpenCL devices")
    p.add_argument("--torch-precisions", help="PyTorch's precisions (CUDA: fp32,tf32,bf16,fp16; CPU: fp32)")
    p.add_argument("--torch-modes", help="eager,channels_last,compile (default: eager and compile on CUDA for --compile-models, else eager; channels_last too for resnet)")
    p.add_argument("--compile-models", default=COMPILE_MODELS,
                   help="models PyTorch also trains under torch.compile(mode='reduce-overhead') on CUDA")
    p.add_argument("--torch-compile-precisions",
                   help="precisions compiled too, in this order (default bf16,fp16,tf32: a compile takes about a minute)")
    p.add_argument("--compile", action="store_true", help="torch.compile for every model and inference too")
    p.add_argument("--batch", type=int, help="batch (per device with --scaling; default: each recipe's)")
    p.add_argument("--big-batch", type=int, help="mlp-big batch (512 on GPUs, --batch on CPUs)")
    p.add_argument("--steps", type=int, help="steps per epoch (default by device and model)")
    p.add_argument("--epochs", type=int, help="epochs, the first is warm-up (4)")
    p.add_argument("--gemm-sizes", help="square GEMM sizes (GPU: 1024,2048,4096,8192; CPU: 256,512,1024,2048)")
    p.add_argument("--gemm-types", help="Trident GEMM types (CUDA: fp32,tf32,bf16,bf16-f32,fp16; OpenCL: "
                                        "fp32,fp16; CPU: fp32)")
    p.add_argument("--torch-gemm-precisions", help="torch.matmul types (CUDA: fp32,tf32,bf16,fp16; CPU: fp32)")
    p.add_argument("--gemm-ms", type=int, default=200, help="milliseconds per timed GEMM batch (best of 3)")
    p.add_argument("--no-gemm", action="store_true", help="skip the GEMM part")
    p.add_argument("--no-train", action="store_true", help="skip the training part")
    p.add_argument("--no-inference", action="store_true", help="skip the inference part")
    p.add_argument("--no-torch", action="store_true", help="Trident only")
    p.add_argument("--inference-models", default="mlp,cnn,resnet")
    p.add_argument("--inference-batches", default="1,1000")
    p.add_argument("--data", help="MNIST-format dir or 'synthetic' (default: Fashion-MNIST if present)")
    p.add_argument("--rounds", type=int, default=1, help="alternate the programs R times, keep the best")
    p.add_argument("--stat", choices=["median", "min"], default="median",
                   help="per run, the median epoch or the fastest one (min: for a busy machine)")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="start nothing after this many seconds and end what runs then (0: no limit)")
    p.add_argument("--scaling", action="store_true", help="weak scaling: Trident 1..N devices vs DDP")
    p.add_argument("--devices", help="--scaling device list (default cuda:all)")
    p.add_argument("--no-ddp", action="store_true", help="--scaling without PyTorch DDP")
    p.add_argument("--bench", help="path of trident_bench (default: build*/bench/trident_bench)")
    p.add_argument("--python", help="python with torch (default: this one, else /usr/bin/python3)")
    p.add_argument("--machine", help="results file name (default: from the device name)")
    p.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNGs (bench/plot_results.py)")
    args = p.parse_args(argv)
    unknown = args.only - {"train", "gemm", "inference"}
    if unknown:
        p.error(f"--only: unknown part(s) {', '.join(sorted(unknown))} (use train, gemm, inference)")
    for flag, part in (("no_train", "train"), ("no_gemm", "gemm"), ("no_inference", "inference")):
        if getattr(args, flag):
            args.only.discard(part)
    return args


def plot(path):
    """The PNGs beside the results file; a machine without matplotlib says how to draw them elsewhere."""
    try:
        import plot_results
    except ImportError as e:
        print(f"run_bench: no plots ({e}); run bench/plot_results.py {path} where matplotlib is installed",
              file=sys.stderr)
        return
    plot_results.main([path])


def main():
    args = parse_args()
    global STAT
    STAT = args.stat
    # --no-torch needs no torch (CI runs it): no interpreter is looked for.
    no_torch = args.no_torch or (args.scaling and args.no_ddp)
    bench, python = find_bench(args.bench), None if no_torch else find_python(args.python)
    load = load_average()
    if load > 0.5:
        print(f"run_bench: load average {load:.2f}: other work is running, numbers will be noisy",
              file=sys.stderr)
    deadline = Deadline(args.deadline_s)
    path, failed = (scaling if args.scaling else single_device)(args, bench, python, deadline)
    print(f"\nwrote {path} ({deadline.elapsed():.0f} s)")
    if not args.no_plot:
        plot(path)
    if failed:
        print("run_bench: some measurements failed (the rows with \"error\", and \"failures\" in the results file)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
