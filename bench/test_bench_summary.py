#!/usr/bin/env python3
"""Checks of the benchmark's bookkeeping (ctest bench_scripts, about 20 s on 2 idle cores):

  - bench_summary.py on made-up rows: each issue-12 ratio comes from the rows it names (decoys of another
    batch, precision, result type or mode are faster, so picking one of them changes the figure), best-of
    rounds, the ratio lists, old rows without a precision counting as fp32, a run cut short named;
  - run_bench.py's default plan on a GPU machine and on a CPU (parts, order, precisions, compile);
  - plot_results.py's PNGs, where matplotlib is installed;
  - accuracy_summary.py's table of a seed study (mean and sd per run, a bad line named);
  - torch_reference.py's rows per mode and precision on the CPU, where a python has torch;
  - with --bench PATH, trident_bench itself: --precision rows carry the precision trained (and what the
    device staged), --gemm-types rows their operand and result types (by default --precision's), a bad
    name is a usage error; and run_bench.py --no-torch end to end on the CPU: one results file,
    complete, with the records, ratios and headline, and a partial file never left behind.

    bench/test_bench_summary.py [--bench build/bench/trident_bench] [--work DIR]
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_summary as summary  # noqa: E402

BENCH = None  # --bench
WORK = None   # --work


def train(impl, model, samples_per_s, precision="fp32", device="cuda:0", batch=512, mode=None, **extra):
    r = {"impl": impl, "bench": "train", "model": model, "device": device if impl == "trident" else "cuda",
         "batch": batch, "size": 0, "n_devices": 1, "precision": precision,
         "samples_per_s": samples_per_s, "ms_per_step": batch * 1e3 / samples_per_s if samples_per_s else None}
    if impl == "pytorch":
        r.update(mode=mode or "eager", compile=mode == "compile")
    r.update(extra)
    return r


def gemm(impl, n, gflops, precision="fp32", out_dtype="F32", device="cuda:0"):
    return {"impl": impl, "bench": "gemm", "model": "sgemm" if precision in ("fp32", "tf32") else "gemm",
            "device": device if impl == "trident" else "cuda", "batch": 0, "size": n, "n_devices": 1,
            "precision": precision, "out_dtype": out_dtype, "gflops": gflops,
            "ms_per_step": 2.0 * n ** 3 / gflops / 1e6 if gflops else None}


def h100_like_rows():
    """Rows as one GPU run writes them, with decoys next to every row a figure should use."""
    return [
        train("trident", "mlp-big", 1000), train("trident", "mlp-big", 2000, "tf32"),
        train("trident", "mlp-big", 3000, "bf16"), train("trident", "mlp-big", 3100, "fp16"),
        train("trident", "mlp-big", 600, device="opencl:1"), train("trident", "mlp-big", 900, "fp16", "opencl:1"),
        train("pytorch", "mlp-big", 800), train("pytorch", "mlp-big", 900, mode="compile"),
        train("pytorch", "mlp-big", 1500, "tf32"), train("pytorch", "mlp-big", 2000, "bf16"),
        train("pytorch", "mlp-big", 2500, "bf16", mode="compile"),
        train("pytorch", "mlp-big", None, "tf32", mode="compile", error="RuntimeError: boom"),
        train("pytorch", "mlp-big", 99999, "bf16", batch=200),  # another batch: never PyTorch's best at 512
        train("trident", "resnet", 100, batch=256), train("trident", "resnet", 250, "bf16", batch=256),
        train("trident", "resnet", None, "fp16", batch=256, skipped="cuda:0 holds no F16 tensors"),
        train("pytorch", "resnet", 120, batch=256), train("pytorch", "resnet", 180, "bf16", batch=256),
        train("pytorch", "resnet", 200, "bf16", batch=256, mode="compile"),
        gemm("trident", 2048, 500e3, "bf16", "BF16"), gemm("trident", 2048, 450e3, "bf16", "F32"),
        gemm("trident", 2048, 50e3), gemm("pytorch", 2048, 600e3, "bf16", "BF16"),
        gemm("pytorch", 2048, 700e3, "fp16", "F16"), gemm("pytorch", 2048, 52e3),
        gemm("trident", 4096, 610e3, "bf16", "BF16"),  # no torch.matmul row at 4096: missing
        gemm("trident", 8192, 620e3, "bf16", "BF16"), gemm("pytorch", 8192, 640e3, "bf16", "BF16"),
    ]


class Headline(unittest.TestCase):
    def setUp(self):
        self.entries = {e["name"]: e for e in summary.headline(h100_like_rows())}

    def ratio(self, name):
        self.assertIn(name, self.entries)
        return self.entries[name]["ratio"]

    def test_mlp_big_against_pytorch(self):
        self.assertAlmostEqual(self.ratio("mlp-big: Trident bf16 / PyTorch's best"), 3000 / 2500)
        self.assertEqual(self.entries["mlp-big: Trident bf16 / PyTorch's best"]["denominator"],
                         "pytorch compile bf16")
        self.assertAlmostEqual(self.ratio("mlp-big: Trident bf16 / PyTorch's best bf16"), 3000 / 2500)
        self.assertAlmostEqual(self.ratio("mlp-big: Trident fp32 / PyTorch's best fp32"), 1000 / 900)

    def test_resnet(self):
        self.assertAlmostEqual(self.ratio("resnet: Trident bf16 / Trident fp32"), 2.5)
        self.assertAlmostEqual(self.ratio("resnet: Trident bf16 / PyTorch's best"), 250 / 200)
        self.assertAlmostEqual(self.ratio("resnet: Trident fp32 / PyTorch's best fp32"), 100 / 120)

    def test_gemm_same_types_only(self):
        self.assertAlmostEqual(self.ratio("GEMM bf16 n=2048: Trident / torch.matmul (TFLOP/s)"), 500 / 600)
        self.assertAlmostEqual(self.ratio("GEMM bf16 n=8192: Trident / torch.matmul (TFLOP/s)"), 620 / 640)
        missing = self.entries["GEMM bf16 n=4096: Trident / torch.matmul (TFLOP/s)"]
        self.assertIsNone(missing["ratio"])
        self.assertIn("torch.matmul bf16 n=4096", missing["missing"])

    def test_opencl_fp16_against_fp32(self):
        self.assertAlmostEqual(self.ratio("mlp-big: OpenCL fp16 / OpenCL fp32 (opencl:1)"), 1.5)

    def test_opencl_figure_without_opencl_says_so(self):
        rows = [r for r in h100_like_rows() if not r["device"].startswith("opencl")]
        entry = next(e for e in summary.headline(rows) if e["name"].startswith("mlp-big: OpenCL fp16"))
        self.assertIsNone(entry["ratio"])
        self.assertIn("no OpenCL device ran", entry["name"])

    def test_missing_rows_are_named(self):
        rows = [r for r in h100_like_rows() if not (r["model"] == "resnet" and r["precision"] == "bf16"
                                                    and r["impl"] == "trident")]
        entry = next(e for e in summary.headline(rows) if e["name"] == "resnet: Trident bf16 / Trident fp32")
        self.assertIsNone(entry["ratio"])
        self.assertEqual(entry["missing"], "Trident cuda:0 bf16")

    def test_gemm_sizes_default_to_issue_12s(self):
        rows = [r for r in h100_like_rows() if r["bench"] != "gemm"]
        names = [e["name"] for e in summary.headline(rows) if e["name"].startswith("GEMM")]
        self.assertEqual(names, [f"GEMM bf16 n={n}: Trident / torch.matmul (TFLOP/s)" for n in (1024, 2048, 4096)])
        self.assertTrue(all(e["ratio"] is None for e in summary.headline(rows) if e["name"].startswith("GEMM")))

    def test_headline_is_printed_last(self):
        rows = h100_like_rows()
        text = summary.summary_text(rows, summary.headline(rows))
        tail = text.splitlines()[-len(self.entries):]
        self.assertTrue(all(line.strip().startswith(tuple(self.entries)) for line in tail), tail)
        self.assertIn("ERROR: RuntimeError: boom", text)
        self.assertIn("skipped: cuda:0 holds no F16 tensors", text)


class Ratios(unittest.TestCase):
    def test_training_ratio_kinds(self):
        ratios = summary.training_ratios(h100_like_rows())
        mine = {(r["device"], r["precision"], r["against"]): r["ratio"] for r in ratios if r["model"] == "mlp-big"}
        self.assertAlmostEqual(mine[("cuda:0", "fp16", "trident cuda:0 fp32")], 3.1)
        self.assertAlmostEqual(mine[("opencl:1", "fp16", "trident cuda:0 fp16")], 900 / 3100)
        self.assertAlmostEqual(mine[("opencl:1", "fp16", "trident opencl:1 fp32")], 1.5)
        self.assertAlmostEqual(mine[("cuda:0", "tf32", "pytorch eager tf32")], 2000 / 1500)
        self.assertAlmostEqual(mine[("cuda:0", "fp32", "pytorch best")], 1000 / 2500)
        # The failed PyTorch row is no reference; the unmeasured Trident row has no ratio.
        self.assertNotIn(("cuda:0", "tf32", "pytorch compile tf32"), mine)
        self.assertFalse([r for r in ratios if r["model"] == "resnet" and r["precision"] == "fp16"])

    def test_gemm_ratios_match_result_type(self):
        ratios = {(r["size"], r["precision"]): r["ratio"] for r in summary.gemm_ratios(h100_like_rows())}
        self.assertAlmostEqual(ratios[(2048, "bf16")], 500 / 600)
        self.assertAlmostEqual(ratios[(2048, "fp32")], 50 / 52)
        self.assertNotIn((2048, "bf16-f32"), ratios)  # torch.matmul has no float32 C from bf16 here

    def test_rows_without_precision_are_fp32(self):
        old = [dict(train("trident", "mlp", 5000, batch=200)), dict(train("pytorch", "mlp", 500, batch=200))]
        for r in old:
            del r["precision"]
        ratios = summary.training_ratios(old)
        self.assertEqual([(r["against"], round(r["ratio"], 6)) for r in ratios],
                         [("pytorch best", 10.0), ("pytorch eager fp32", 10.0)])

    def test_keep_best(self):
        best = {}
        summary.keep_best(best, [train("trident", "mlp", None, error="x")])
        summary.keep_best(best, [train("trident", "mlp", 100)])
        summary.keep_best(best, [train("trident", "mlp", 90), train("trident", "mlp", None, skipped="y")])
        self.assertEqual([r["samples_per_s"] for r in best.values()], [100])
        summary.keep_best(best, [train("trident", "mlp", 120), train("trident", "mlp", 50, "bf16")])
        self.assertEqual(sorted(r["samples_per_s"] for r in best.values()), [50, 120])


class RunBenchPlan(unittest.TestCase):
    """run_bench.py's default plan on an H100 with NVIDIA's OpenCL, and on a CPU (no programs run)."""

    GPU = [{"id": "cpu:0", "name": "EPYC", "type": "cpu", "backend": "cpu"},
           {"id": "cuda:0", "name": "NVIDIA H100", "type": "gpu", "backend": "cuda"},
           {"id": "opencl:1", "name": "NVIDIA H100", "type": "gpu", "backend": "opencl"}]

    def parts(self, argv, found, torch_device):
        import run_bench
        args = run_bench.parse_args(argv)
        devices = run_bench.choose_devices(args.device, found)
        return devices, {name: (dict(trident), torch) for name, trident, torch in
                         run_bench.Plan(args, devices, found, torch_device).parts()}

    @staticmethod
    def value(argv, flag):
        return argv[argv.index(flag) + 1]

    def test_gpu_defaults(self):
        devices, parts = self.parts([], self.GPU, "cuda")
        self.assertEqual(devices, ["cuda:0", "opencl:1"])
        self.assertEqual(list(parts), ["gemm", "train mlp-big", "train resnet", "train mlp,cnn", "inference"])
        trident, torch = parts["gemm"]
        self.assertEqual(self.value(trident["cuda:0"], "--gemm-sizes"), "1024,2048,4096")
        self.assertIn("bf16", self.value(trident["cuda:0"], "--gemm-types").split(","))
        self.assertEqual(self.value(trident["opencl:1"], "--gemm-types"), "fp32,fp16")
        self.assertEqual(self.value(torch, "--gemm-precisions"), "fp32,tf32,bf16,fp16")
        trident, torch = parts["train mlp-big"]
        self.assertEqual(self.value(trident["cuda:0"], "--precision"), "fp32,tf32,bf16,fp16")
        self.assertEqual(self.value(trident["opencl:1"], "--precision"), "fp32,fp16")
        self.assertEqual(self.value(torch, "--precisions"), "fp32,tf32,bf16,fp16")
        self.assertEqual(self.value(torch, "--modes"), "eager,compile")
        self.assertEqual(self.value(torch, "--compile-precisions"), "bf16,fp16,tf32")
        trident, torch = parts["train resnet"]
        self.assertEqual(list(trident), ["cuda:0"])  # not on OpenCL by default
        trident, torch = parts["train mlp,cnn"]
        self.assertEqual(self.value(trident["cuda:0"], "--precision"), "fp32,tf32,bf16,fp16")
        self.assertEqual(self.value(torch, "--modes"), "eager")
        self.assertNotIn("--compile-precisions", torch)

    def test_cpu_defaults(self):
        devices, parts = self.parts([], self.GPU[:1], "cpu")
        self.assertEqual(devices, ["cpu:0"])
        self.assertEqual(list(parts), ["gemm", "train mlp-big,resnet,mlp,cnn", "inference"])
        trident, torch = parts["train mlp-big,resnet,mlp,cnn"]
        self.assertEqual(self.value(trident["cpu:0"], "--precision"), "fp32")
        self.assertEqual((self.value(torch, "--precisions"), self.value(torch, "--modes")), ("fp32", "eager"))

    def test_compile_precisions_override(self):
        _, parts = self.parts(["--only", "train", "--models", "resnet", "--torch-compile-precisions", "fp32,bf16"],
                              self.GPU, "cuda")
        self.assertEqual(self.value(parts["train resnet"][1], "--compile-precisions"), "fp32,bf16")


class Plots(unittest.TestCase):
    def test_every_plot_of_a_gpu_run(self):
        try:
            import plot_results
        except ImportError as e:
            self.skipTest(f"no matplotlib ({e})")
        work = tempfile.mkdtemp(dir=WORK)
        try:
            rows = h100_like_rows()
            path = os.path.join(work, "gpu.json")
            with open(path, "w") as f:
                json.dump({"machine": "gpu", "single": {"records": rows, "ratios": summary.all_ratios(rows)}}, f)
            written = plot_results.main([path])
            self.assertEqual(sorted(os.path.basename(p) for p in written),
                             ["gpu_gemm.png", "gpu_issue12.png", "gpu_precision.png", "gpu_ratios.png"])
            self.assertTrue(all(os.path.getsize(p) > 1000 for p in written))
        finally:
            shutil.rmtree(work, ignore_errors=True)


def python_with_torch():
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return None


class TorchReference(unittest.TestCase):
    """bench/torch_reference.py on the CPU with tiny counts (where a python has torch, 1.13 or 2.x)."""

    def test_rows_per_mode_and_precision(self):
        py = python_with_torch()
        if not py:
            self.skipTest("no python with torch")
        proc = run([py, os.path.join(HERE, "torch_reference.py"), "--device", "cpu", "--models", "mlp",
                    "--data", "synthetic", "--steps", "2", "--epochs", "2", "--batch", "8", "--threads", "1",
                    "--precisions", "fp32,tf32,bf16", "--modes", "eager,compile", "--compile-precisions", "bf16,fp32",
                    "--gemm-sizes", "16", "--gemm-precisions", "fp32,bf16", "--gemm-seconds", "0.005"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = rows_of(proc)
        train = [(r["mode"], r["precision"]) for r in rows if r["bench"] == "train"]
        self.assertEqual(train, [("eager", "fp32"), ("eager", "tf32"), ("eager", "bf16"),
                                 ("compile", "bf16"), ("compile", "fp32")])  # --compile-precisions' order
        by = {(r["mode"], r["precision"]): r for r in rows if r["bench"] == "train"}
        self.assertGreater(by[("eager", "fp32")]["samples_per_s"], 0)
        self.assertEqual(by[("eager", "fp32")]["tf32_matmul"], "ieee")
        self.assertIn("CUDA", by[("eager", "tf32")]["skipped"])  # TF32 is no CPU setting
        if by[("eager", "bf16")].get("skipped") is None:
            self.assertEqual(by[("eager", "bf16")]["autocast"], "bfloat16")
        compiled = by[("compile", "fp32")]
        self.assertTrue(compiled.get("skipped") or compiled["samples_per_s"] > 0)
        gemm = [(r["precision"], r["out_dtype"]) for r in rows if r["bench"] == "gemm"]
        self.assertEqual(gemm, [("fp32", "F32"), ("bf16", "BF16")])

    def test_bench_model_resnet9(self):
        """The bench's own ResNet-9 (3x32x32 samples), channels-last too, with a finite loss."""
        py = python_with_torch()
        if not py:
            self.skipTest("no python with torch")
        proc = run([py, os.path.join(HERE, "torch_reference.py"), "--device", "cpu", "--models", "resnet9",
                    "--data", "synthetic", "--steps", "1", "--epochs", "2", "--batch", "2", "--threads", "1",
                    "--modes", "eager,channels_last", "--no-gemm"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = [r for r in rows_of(proc) if r["bench"] == "train"]
        self.assertEqual([(r["model"], r["mode"]) for r in rows], [("resnet9", "eager"), ("resnet9", "channels_last")])
        for r in rows:
            self.assertGreater(r["samples_per_s"], 0)
            self.assertTrue(math.isfinite(r["train_loss"]), r)


class AccuracySummary(unittest.TestCase):
    """accuracy_summary.py: the seed study's table (bench/accuracy_seeds.sh), and bad lines named."""

    def run_summary(self, lines):
        fd, path = tempfile.mkstemp(suffix=".jsonl")
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        try:
            return subprocess.run([sys.executable, os.path.join(HERE, "accuracy_summary.py"), path],
                                  capture_output=True, text=True, timeout=60), path
        finally:
            os.unlink(path)

    def test_mean_and_sd_per_run(self):
        row = '{"framework": "%s", "backend": "cuda", "precision": "%s", "seed": %d, "test_accuracy": %s}'
        proc, _ = self.run_summary([row % ("trident", "fp32", 2, "0.9310"), row % ("trident", "fp32", 1, "0.9290"),
                                    row % ("trident", "bf16", 1, "0.9330"), row % ("pytorch", "fp32", 1, "0.9300")])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("| trident cuda fp32 | 2 | 92.90 93.10 | 93.00% | 0.14 |", proc.stdout)  # by seed
        self.assertIn("| trident cuda bf16 | 1 | 93.30 | 93.30% | nan |", proc.stdout)
        self.assertIn("| pytorch cuda fp32 | 1 | 93.00 | 93.00% |", proc.stdout)

    def test_bad_line_is_named(self):
        proc, path = self.run_summary(['{"framework": "trident", "precision": "fp32", "seed": 1, "test_accuracy": 0.9}',
                                       '{"framework": "trident", "seed": 2}'])
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(path + ":2: not a result line", proc.stderr)


class IncompleteRun(unittest.TestCase):
    def test_cut_parts_are_named_before_the_headline(self):
        import run_bench
        notes = run_bench.incomplete_notes(
            [{"part": "gemm", "round": 1, "seconds": 30}, {"part": "inference", "round": 1, "skipped": "deadline"}],
            [{"part": "train resnet", "program": "torch_reference.py", "status": -9},
             {"part": "train mlp-big", "program": "trident_bench", "device": "opencl:1", "status": 1}])
        self.assertEqual(notes, [
            "part 'inference' (round 1) not run: deadline",
            "part 'train resnet': torch_reference.py ended at the deadline; its later rows are missing",
            "part 'train mlp-big': trident_bench on opencl:1 exited with status 1"])
        rows = h100_like_rows()
        lines = summary.summary_text(rows, summary.headline(rows), notes=notes).splitlines()
        self.assertLess(lines.index("  " + notes[1]), lines.index(next(l for l in lines if "mixed precision" in l)))
        self.assertNotIn("incomplete run", summary.summary_text(rows, summary.headline(rows)))


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def rows_of(proc):
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


class TridentBench(unittest.TestCase):
    def setUp(self):
        # Read here, not in a class decorator: __main__ sets it from --bench after the classes exist.
        self.bench = os.environ.get("TRIDENT_BENCH_UNDER_TEST")
        if not self.bench:
            self.skipTest("needs --bench PATH")
        self.tiny = ["--device", "cpu:0", "--data", "synthetic", "--steps", "2", "--epochs", "2", "--batch", "8"]

    def test_precision_rows(self):
        proc = run([self.bench, *self.tiny, "--models", "mlp", "--no-gemm", "--precision", "fp32,bf16,fp16"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = rows_of(proc)
        self.assertEqual([r["precision"] for r in rows], ["fp32", "bf16", "fp16"])
        for r in rows:
            self.assertEqual((r["bench"], r["model"], r["device"], r["batch"]), ("train", "mlp", "cpu:0", 8))
            self.assertGreater(r["samples_per_s"], 0)
        self.assertEqual(rows[0]["staged"], [])  # float32 stages nothing
        families = {"gemm", "elementwise", "channel", "conv2d", "pool", "batchnorm", "head", "gather"}
        for r in rows[1:]:  # what this CPU backend stages through float32 (it changes as kernels land)
            self.assertLessEqual(set(r["staged"]), families, r["staged"])
        self.assertIsNone(rows[1]["loss_scale"])
        self.assertGreater(rows[2]["loss_scale"], 0)  # fp16 scales its loss

    def test_gemm_types(self):
        proc = run([self.bench, "--device", "cpu:0", "--gemm", "--gemm-sizes", "48", "--gemm-ms", "5",
                    "--gemm-types", "fp32,tf32,bf16,bf16-f32,fp16"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = rows_of(proc)
        self.assertEqual([(r["model"], r["precision"], r["out_dtype"]) for r in rows],
                         [("sgemm", "fp32", "F32"), ("sgemm", "tf32", "F32"), ("gemm", "bf16", "BF16"),
                          ("gemm", "bf16", "F32"), ("gemm", "fp16", "F16")])
        self.assertTrue(all(r["size"] == 48 and r["gflops"] > 0 and r["device"] == "cpu:0" for r in rows))

    def test_gemm_types_follow_precision(self):
        proc = run([self.bench, "--device", "cpu:0", "--gemm", "--gemm-sizes", "32", "--gemm-ms", "5",
                    "--precision", "tf32,fp16"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual([(r["precision"], r["out_dtype"]) for r in rows_of(proc)], [("tf32", "F32"), ("fp16", "F16")])

    def test_bad_names_are_usage_errors(self):
        for args, word in ((["--precision", "fp8"], "fp8"), (["--gemm-types", "bf16-f16"], "bf16-f16"),
                           (["--gemm-types", "fp32-f32"], "fp32-f32")):
            proc = run([self.bench, "--device", "cpu:0", *args])
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(word, proc.stderr)
            self.assertFalse(proc.stdout.strip())

    def test_bench_model_resnet9(self):
        """bench_models.h's ResNet-9 trains on 3x32x32 samples; an unknown name lists it."""
        proc = run([self.bench, "--device", "cpu:0", "--data", "synthetic", "--steps", "1", "--epochs", "2",
                    "--batch", "2", "--models", "resnet9", "--no-gemm"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = rows_of(proc)
        self.assertEqual([(r["model"], r["batch"], r["precision"]) for r in rows], [("resnet9", 2, "fp32")])
        self.assertGreater(rows[0]["samples_per_s"], 0)
        self.assertTrue(math.isfinite(rows[0]["train_loss"]), rows[0])
        proc = run([self.bench, "--device", "cpu:0", "--models", "resnet10"])
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("resnet9", proc.stderr)

    def test_list_devices(self):
        rows = rows_of(run([self.bench, "--list-devices"]))
        self.assertIn("cpu:0", [r["id"] for r in rows])
        self.assertTrue(all(set(r) >= {"id", "name", "type", "backend"} for r in rows))

    def test_run_bench_end_to_end(self):
        work = tempfile.mkdtemp(dir=WORK)
        try:
            proc = run([sys.executable, os.path.join(HERE, "run_bench.py"), "--bench", self.bench, "--no-torch",
                        "--no-plot", "--device", "cpu:0", "--results-dir", work, "--machine", "check",
                        "--models", "mlp", "--precision-models", "mlp", "--precisions", "fp32,bf16",
                        "--data", "synthetic", "--steps", "2", "--epochs", "2", "--batch", "8",
                        "--gemm-sizes", "32", "--gemm-types", "fp32,bf16", "--gemm-ms", "5",
                        "--inference-models", "mlp", "--inference-batches", "2"])
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(sorted(os.listdir(work)), ["check.json"])  # no .tmp left
            with open(os.path.join(work, "check.json")) as f:
                single = json.load(f)["single"]
            self.assertTrue(single["complete"])
            kinds = sorted((r["bench"], r["precision"]) for r in single["records"])
            self.assertEqual(kinds, [("gemm", "bf16"), ("gemm", "fp32"), ("inference", "fp32"),
                                     ("train", "bf16"), ("train", "fp32")])
            self.assertEqual([p["part"] for p in single["parts"]], ["gemm", "train mlp", "inference"])
            self.assertTrue(single["headline"])
            self.assertIn("== mixed precision (issue 12)", proc.stdout)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", help="trident_bench to check as well")
    parser.add_argument("--work", help="directory for temporary results")
    args, rest = parser.parse_known_args()
    if args.bench:
        os.environ["TRIDENT_BENCH_UNDER_TEST"] = os.path.abspath(args.bench)
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        WORK = args.work
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
