#!/usr/bin/env python3
"""One command for Trident vs PyTorch on this machine: runs trident_bench and the PyTorch reference in the
same run, prints the ratios, and writes bench/results/<machine>.json (plot it with bench/plot_results.py).

    bench/run_bench.py                          # best device; seed models, mlp-big, GEMM
    bench/run_bench.py --device cuda:0,opencl:0 --compile
    bench/run_bench.py --scaling --devices cuda:all      # Trident 1..N GPUs vs PyTorch DDP

Training is compared in samples/s (Trident / PyTorch, > 1 means Trident is faster), GEMM in % of
torch.matmul's GFLOP/s (cuBLAS on GPUs, OpenBLAS on Debian's CPU build). Weak-scaling efficiency is
samples_s(N) / (N * samples_s(1)). --rounds R alternates the two programs R times and keeps each one's
best, which is what to use on a shared machine.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys

STAT = "median"  # --stat
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


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


def run_json(cmd, env=None):
    """Runs cmd, streams its stderr, returns the JSON objects it printed one per line."""
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    if env is None and "python" in os.path.basename(cmd[0]):
        # PyTorch ships its own CUDA libraries; the LD_LIBRARY_PATH set for trident_bench (oneTBB,
        # CLBlast, /usr/local/cuda) must not shadow them.
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    use_stat(records, STAT)
    if proc.returncode != 0:
        sys.exit(f"run_bench: {cmd[0]} failed with exit code {proc.returncode}")
    return records


def use_stat(records, stat):
    """--stat min: judge training by each run's fastest epoch instead of its median (busy machines)."""
    for r in records:
        r["stat"] = stat
        if stat == "min" and r["bench"] != "gemm" and r.get("ms_per_step_min"):
            r["samples_per_s"] *= r["ms_per_step"] / r["ms_per_step_min"]
            r["ms_per_step"] = r["ms_per_step_min"]
    return records


def key(r):
    impl = r["impl"] + ("-compile" if r.get("compile") else "") + \
        ("-inference_mode" if r.get("inference_mode") else "")
    return (impl, r["bench"], r["device"], r["model"], r["batch"], r["size"], r["n_devices"])


def keep_best(best, records):
    for r in records:
        k = key(r)
        score = r["gflops"] if r["bench"] == "gemm" else r["samples_per_s"]
        old = best.get(k)
        if old is None or score > (old["gflops"] if old["bench"] == "gemm" else old["samples_per_s"]):
            best[k] = r


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return -1.0


def machine_slug(records):
    name = records[0]["device_name"] if records else "unknown"
    name = re.sub(r"\(.*?\)", "", name).replace("NVIDIA", "")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    return f"{slug}-{os.cpu_count()}cpu" if records and records[0]["device"].startswith("cpu") else slug


def common_args(args):
    out = []
    for flag in ("batch", "big_batch", "steps", "epochs"):
        if getattr(args, flag):
            out += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.data:
        out += ["--data", args.data]
    return out


def single_device(args, bench, python):
    """Each model, then GEMM, is one unit; per unit Trident and PyTorch run back to back, so that a
    shared machine's load drifts as little as possible between the two sides of one ratio."""
    devices = [d for d in (args.device or "").split(",") if d] or [None]
    torch_device = args.torch_device
    units = [["--models", m, "--no-gemm"] for m in (args.models or "mlp,cnn,mlp-big").split(",") if m]
    if not args.no_gemm:
        units.append(["--no-train"] + (["--gemm-sizes", args.gemm_sizes] if args.gemm_sizes else []))
    if not args.no_inference:  # Trident's Predictor against PyTorch no_grad and inference_mode
        units += [["--models", m, "--no-train", "--no-gemm", "--inference", "--inference-batches",
                   args.inference_batches] for m in args.inference_models.split(",") if m]
    best = {}
    for rnd in range(args.rounds):
        for unit in units:
            trident = []
            for d in devices:
                trident += run_json([bench] + (["--device", d] if d else []) + common_args(args) + unit)
                # What the first device chose (mlp-big's batch, GEMM sizes) the others and PyTorch use too.
                if "--inference" in unit:
                    pass
                elif "--no-train" in unit and not args.gemm_sizes:
                    unit = unit + ["--gemm-sizes", ",".join(str(r["size"]) for r in trident)]
                elif "--no-train" not in unit and not args.big_batch and trident:
                    unit = unit + ["--big-batch", str(trident[0]["batch"])]
            keep_best(best, trident)
            if torch_device is None:  # PyTorch runs where Trident ran: CPU against CPU, GPUs against CUDA
                has_cuda = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available())"],
                                          capture_output=True, text=True).stdout.strip() == "True"
                on_cpu = all(r["device"].startswith("cpu") for r in trident)
                torch_device = "cuda" if has_cuda and not on_cpu else "cpu"
            base = [python, os.path.join(HERE, "torch_reference.py"), "--device", torch_device]
            keep_best(best, run_json(base + common_args(args) + unit))
            if args.compile and ("--no-train" not in unit or "--inference" in unit):
                keep_best(best, run_json(base + common_args(args) + unit + ["--compile"]))
    records = list(best.values())
    trident_devices = sorted({r["device"] for r in records if r["impl"] == "trident"})
    torch_impls = sorted({key(r)[0] for r in records if r["impl"] != "trident"})
    ratios = []

    print(f"\n== training (samples/s; ratio = Trident / PyTorch)  load average {load_average():.2f}")
    train = [r for r in records if r["bench"] == "train"]
    models = list(dict.fromkeys(r["model"] for r in train))
    for model in models:
        rows = [r for r in train if r["model"] == model]
        refs = {key(r)[0]: r for r in rows if r["impl"] != "trident"}
        for r in [r for r in rows if r["impl"] == "trident"]:
            line = (f"{model:8s} batch {r['batch']:4d}  {r['device']:9s} {r['ms_per_step']:9.3f} ms "
                    f"{r['samples_per_s']:11.0f}/s")
            for impl in torch_impls:
                ref = refs.get(impl)
                if ref:
                    ratio = r["samples_per_s"] / ref["samples_per_s"]
                    ratios.append({"bench": "train", "model": model, "device": r["device"], "against": impl,
                                   "batch": r["batch"], "ratio": ratio})
                    line += f" | {impl} {ref['ms_per_step']:9.3f} ms {ref['samples_per_s']:11.0f}/s  x{ratio:.2f}"
            first = next(t for t in rows if t["impl"] == "trident")
            if r is not first:  # e.g. opencl:0 against cuda:0 on the same GPU
                ratio = r["samples_per_s"] / first["samples_per_s"]
                ratios.append({"bench": "train", "model": model, "device": r["device"],
                               "against": "trident " + first["device"], "batch": r["batch"], "ratio": ratio})
                line += f" | {100 * ratio:.0f}% of {first['device']}"
            print(line)
    inference = [r for r in records if r["bench"] == "inference"]
    if inference:
        print("\n== inference, host inputs to host outputs (ms per call, samples/s; "
              "ratio = PyTorch ms / Trident ms)")
    for model in list(dict.fromkeys(r["model"] for r in inference)):
        for batch in sorted({r["batch"] for r in inference if r["model"] == model}):
            rows = [r for r in inference if r["model"] == model and r["batch"] == batch]
            refs = {key(r)[0]: r for r in rows if r["impl"] != "trident"}
            for r in [r for r in rows if r["impl"] == "trident"]:
                line = (f"{model:8s} batch {batch:4d}  {r['device']:9s} {r['ms_per_step']:9.3f} ms "
                        f"{r['samples_per_s']:11.0f}/s" + (" captured" if r.get("capture") else ""))
                for impl, ref in sorted(refs.items()):
                    ratio = ref["ms_per_step"] / r["ms_per_step"]
                    ratios.append({"bench": "inference", "model": model, "device": r["device"],
                                   "against": impl, "batch": batch, "ratio": ratio})
                    line += f" | {impl} {ref['ms_per_step']:9.3f} ms x{ratio:.2f}"
                print(line)
    gemm = [r for r in records if r["bench"] == "gemm"]
    if gemm:
        print("\n== GEMM C[n,n] = A B (GFLOP/s; % of torch.matmul)")
    for n in sorted({r["size"] for r in gemm}):
        ref = next((r for r in gemm if r["size"] == n and r["impl"] == "pytorch"), None)
        line = f"n={n:5d}"
        for d in trident_devices:
            r = next((r for r in gemm if r["size"] == n and r["device"] == d), None)
            if r:
                line += f"  {d} {r['gflops']:9.1f}"
                if ref:
                    pct = 100 * r["gflops"] / ref["gflops"]
                    ratios.append({"bench": "gemm", "size": n, "device": d, "against": "pytorch",
                                   "ratio": pct / 100})
                    line += f" ({pct:5.1f}%)"
        print(line + (f"  | torch.matmul {ref['gflops']:9.1f}" if ref else ""))
    return records, ratios


def scaling(args, bench, python):
    devices = args.devices or "cuda:all"
    model = (args.models or "mlp-big").split(",")[0]
    batch = args.batch or 512
    extra = ["--batch", str(batch)] + (["--steps", str(args.steps)] if args.steps else []) + \
            (["--epochs", str(args.epochs)] if args.epochs else [])
    best = {}
    for rnd in range(args.rounds):
        trident = run_json([bench, "--devices", devices, "--models", model] + extra)
        keep_best(best, trident)
        if all(r["device"].startswith("cuda") for r in trident) and not args.no_ddp:
            counts = ",".join(str(n) for n in sorted({r["n_devices"] for r in trident}))
            keep_best(best, run_json([python, os.path.join(HERE, "torch_ddp.py"), "--gpus", counts, "--model",
                                      model] + extra))
    records = sorted(best.values(), key=lambda r: (r["impl"], r["n_devices"]))
    ratios = []
    print(f"\n== weak scaling, {model}, batch {batch} per device (efficiency = S(N) / (N S(1)))")
    by_impl = {}
    for r in records:
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
    return records, ratios


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", help="Trident device(s), comma-separated (default: the best)")
    p.add_argument("--torch-device", help="cpu or cuda (default: where Trident ran)")
    p.add_argument("--models", help="mlp,cnn,mlp-big (default all; --scaling: mlp-big)")
    p.add_argument("--batch", type=int, help="batch (per device with --scaling)")
    p.add_argument("--big-batch", type=int, help="mlp-big batch (512 on GPUs, --batch on CPUs)")
    p.add_argument("--steps", type=int, help="steps per epoch (default by device and model)")
    p.add_argument("--epochs", type=int, help="epochs, the first is warm-up (4)")
    p.add_argument("--gemm-sizes", help="square GEMM sizes, e.g. 256,1024,4096")
    p.add_argument("--no-gemm", action="store_true")
    p.add_argument("--no-inference", action="store_true", help="skip the inference rows")
    p.add_argument("--inference-models", default="mlp,cnn,resnet")
    p.add_argument("--inference-batches", default="1,1000")
    p.add_argument("--data", help="MNIST-format dir or 'synthetic' (default: Fashion-MNIST if present)")
    p.add_argument("--compile", action="store_true", help="also PyTorch with torch.compile (2.x)")
    p.add_argument("--rounds", type=int, default=1, help="alternate the programs R times, keep the best")
    p.add_argument("--stat", choices=["median", "min"], default="median",
                   help="per run, the median epoch or the fastest one (min: for a busy machine)")
    p.add_argument("--scaling", action="store_true", help="weak scaling: Trident 1..N devices vs DDP")
    p.add_argument("--devices", help="--scaling device list (default cuda:all)")
    p.add_argument("--no-ddp", action="store_true", help="--scaling without PyTorch DDP")
    p.add_argument("--bench", help="path of trident_bench (default: build*/bench/trident_bench)")
    p.add_argument("--python", help="python with torch (default: this one, else /usr/bin/python3)")
    p.add_argument("--machine", help="results file name (default: from the device name)")
    p.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    args = p.parse_args()
    global STAT
    STAT = args.stat

    bench, python = find_bench(args.bench), find_python(args.python)
    load = load_average()
    if load > 0.5:
        print(f"run_bench: load average {load:.2f}: other work is running, numbers will be noisy",
              file=sys.stderr)
    records, ratios = (scaling if args.scaling else single_device)(args, bench, python)
    torch_version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    machine = args.machine or machine_slug([r for r in records if r["impl"] == "trident"])
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, machine + ".json")
    result = {}
    if os.path.exists(path):
        with open(path) as f:
            result = json.load(f)
    section = "scaling" if args.scaling else "single"
    result.update({"machine": machine, "torch": torch_version, "cpu_count": os.cpu_count()})
    result[section] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "load_average_at_start": load, "command": sys.argv, "records": records,
                       "ratios": ratios}
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
