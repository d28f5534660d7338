"""What bench/run_bench.py makes of the JSON rows that trident_bench and torch_reference.py print: which
rows are one measurement (key), the best of several rounds, the ratios, the mixed-precision headline
(issue 12) and the printed tables. Plain Python, no torch: bench/test_bench_summary.py checks it on
made-up rows.

A row is measured when it has a score (samples/s for training and inference, GFLOP/s for GEMMs);
rows with "skipped" or "error" have none and are listed with their reason instead.
"""

PRECISION_ORDER = ("fp32", "tf32", "bf16", "fp16")


def score(r):
    """samples/s (training, inference) or GFLOP/s (GEMM); None when the row was not measured."""
    value = r.get("gflops") if r.get("bench") == "gemm" else r.get("samples_per_s")
    return value if isinstance(value, (int, float)) and value > 0 else None


def measured(r):
    return score(r) is not None


def impl_label(r):
    """trident, pytorch, pytorch-compile, pytorch-channels_last, pytorch-inference_mode, pytorch-ddp ..."""
    label = r["impl"]
    if r.get("compile"):
        label += "-compile"
    if r.get("mode") == "channels_last":
        label += "-channels_last"
    if r.get("inference_mode"):
        label += "-inference_mode"
    return label


def key(r):
    """Rows with the same key are the same measurement (from different rounds)."""
    return (impl_label(r), r["bench"], r["device"], r["model"], r.get("batch", 0), r.get("size", 0),
            r.get("n_devices", 1), r.get("precision", "fp32"), r.get("out_dtype", ""))


def keep_best(best, records):
    """Per key, the row with the highest score; an unmeasured row only where nothing was measured."""
    for r in records:
        k = key(r)
        old = best.get(k)
        if old is None or (measured(r) and (not measured(old) or score(r) > score(old))):
            best[k] = r
    return best


def precision_label(r):
    """fp32, tf32, bf16, fp16; GEMMs with a float32 C from 16-bit operands: bf16-f32, fp16-f32."""
    p = r.get("precision", "fp32")
    if r.get("bench") == "gemm" and p in ("bf16", "fp16") and r.get("out_dtype") == "F32":
        return p + "-f32"
    return p


def row_name(r):
    """'trident cuda:0 bf16', 'pytorch compile tf32', 'pytorch eager fp32' (no_grad / inference_mode for
    inference rows)."""
    if r["impl"] == "trident":
        return f"trident {r['device']} {precision_label(r)}"
    if r["bench"] == "gemm":
        return f"torch.matmul {precision_label(r)}"
    mode = r.get("mode") or ("compile" if r.get("compile") else "eager")
    if r["bench"] == "inference":
        mode += " inference_mode" if r.get("inference_mode") else " no_grad"
    return f"{r['impl']} {mode} {precision_label(r)}"


def precision_rank(r):
    p = r.get("precision", "fp32")
    return (PRECISION_ORDER.index(p) if p in PRECISION_ORDER else len(PRECISION_ORDER), precision_label(r))


def trident_devices(records):
    """Trident's devices in the order they first appear (the first is the one the others are measured
    against)."""
    return list(dict.fromkeys(r["device"] for r in records if r["impl"] == "trident"))


def main_gpu(records):
    """The device the headline is about: the first CUDA device Trident ran on, else its first device."""
    devices = trident_devices(records)
    return next((d for d in devices if d.startswith("cuda")), devices[0] if devices else None)


def opencl_device(records):
    return next((d for d in trident_devices(records) if d.startswith("opencl")), None)


# What a row without the field means (rows written before the field existed).
FIELD_DEFAULTS = {"precision": "fp32", "out_dtype": "F32"}


def find(records, **want):
    """The first measured row matching every field in want (precision: fp32 unless given), or None."""
    want.setdefault("precision", "fp32")
    for r in records:
        if measured(r) and all(r.get(k, FIELD_DEFAULTS.get(k)) == v for k, v in want.items()):
            return r
    return None


def pytorch_best(records, bench, model, batch, precision=None):
    """PyTorch's fastest measured row of a model at a batch (any mode; any precision unless given)."""
    rows = [r for r in records if r["impl"] == "pytorch" and r["bench"] == bench and r["model"] == model
            and r.get("batch") == batch and measured(r)
            and (precision is None or r.get("precision", "fp32") == precision)]
    return max(rows, key=score) if rows else None


def ratio_entry(r, other, against=None):
    return {"bench": r["bench"], "model": r["model"], "batch": r.get("batch", 0), "size": r.get("size", 0),
            "device": r["device"], "precision": precision_label(r), "row": row_name(r),
            "against": against or row_name(other), "against_row": row_name(other),
            "ratio": score(r) / score(other)}


def training_ratios(records):
    """Per measured Trident training row: against PyTorch's best (any precision and mode), against each
    PyTorch row of its precision, against Trident fp32 on its device (16-bit and TF32 rows), and against
    the first Trident device in its precision (e.g. OpenCL against CUDA on one GPU). Ratios of samples/s:
    above 1, the row is faster."""
    ratios = []
    train = [r for r in records if r["bench"] == "train"]
    devices = trident_devices(train)
    for r in sorted((r for r in train if r["impl"] == "trident" and measured(r)),
                    key=lambda r: (r["model"], devices.index(r["device"]), precision_rank(r))):
        best = pytorch_best(train, "train", r["model"], r["batch"])
        if best:
            ratios.append(ratio_entry(r, best, "pytorch best"))
        for ref in sorted((t for t in train if t["impl"] == "pytorch" and t["model"] == r["model"]
                           and t["batch"] == r["batch"] and measured(t)
                           and t.get("precision", "fp32") == r.get("precision", "fp32")), key=row_name):
            ratios.append(ratio_entry(r, ref))
        if r.get("precision", "fp32") != "fp32":
            base = find(train, impl="trident", model=r["model"], batch=r["batch"], device=r["device"])
            if base:
                ratios.append(ratio_entry(r, base))
        if devices and r["device"] != devices[0]:
            first = find(train, impl="trident", model=r["model"], batch=r["batch"], device=devices[0],
                         precision=r.get("precision", "fp32"))
            if first:
                ratios.append(ratio_entry(r, first))
    return ratios


def gemm_ratios(records):
    """Per measured Trident GEMM: against torch.matmul of the same size, operand and result types."""
    ratios = []
    gemm = [r for r in records if r["bench"] == "gemm"]
    for r in (r for r in gemm if r["impl"] == "trident" and measured(r)):
        ref = find(gemm, impl="pytorch", model=r["model"], size=r["size"], precision=r.get("precision", "fp32"),
                   out_dtype=r.get("out_dtype", "F32"))
        if ref:
            ratios.append(ratio_entry(r, ref, "pytorch"))
    return ratios


def inference_ratios(records):
    """Per measured Trident inference row: PyTorch's latency over Trident's, per PyTorch variant."""
    ratios = []
    inference = [r for r in records if r["bench"] == "inference"]
    for r in (r for r in inference if r["impl"] == "trident" and measured(r)):
        for ref in inference:
            if ref["impl"] != "trident" and ref["model"] == r["model"] and ref["batch"] == r["batch"] \
                    and measured(ref):
                entry = ratio_entry(r, ref, impl_label(ref))
                entry["ratio"] = ref["ms_per_step"] / r["ms_per_step"]
                ratios.append(entry)
    return ratios


def all_ratios(records):
    return training_ratios(records) + gemm_ratios(records) + inference_ratios(records)


HEADLINE_GEMM_SIZES = (1024, 2048, 4096)


def headline(records, gemm_sizes=None):
    """The figures issue 12 asks for, each {"name", "ratio" (or None), "numerator", "denominator",
    "missing" (what was not measured)}: Trident's bf16 training against PyTorch's best and against its
    own fp32, bf16 GEMM against torch.matmul per n (the sizes Trident's bf16 GEMM rows have, else
    HEADLINE_GEMM_SIZES), OpenCL fp16 against OpenCL fp32."""
    gpu, ocl = main_gpu(records), opencl_device(records)
    if gemm_sizes is None:
        gemm_sizes = sorted({r["size"] for r in records if r["bench"] == "gemm" and r["impl"] == "trident"
                             and r["device"] == gpu and r.get("precision") == "bf16"}) or HEADLINE_GEMM_SIZES
    train = [r for r in records if r["bench"] == "train"]
    out = []

    def trident_row(model, precision, device):
        return find(train, impl="trident", model=model, device=device, precision=precision)

    def add(name, num, den, num_what, den_what):
        entry = {"name": name, "ratio": None, "numerator": row_name(num) if num else None,
                 "denominator": row_name(den) if den else None}
        if num and den:
            entry["ratio"] = score(num) / score(den)
        else:
            entry["missing"] = " and ".join(w for w, row in ((num_what, num), (den_what, den)) if row is None)
        out.append(entry)

    def batch_of(model):
        row = next((r for r in train if r["impl"] == "trident" and r["model"] == model and r["device"] == gpu),
                   None)
        return row["batch"] if row else None

    for model in ("mlp-big", "resnet"):
        batch = batch_of(model)
        bf16, fp32 = trident_row(model, "bf16", gpu), trident_row(model, "fp32", gpu)
        if model == "resnet":
            add(f"{model}: Trident bf16 / Trident fp32", bf16, fp32, f"Trident {gpu} bf16", f"Trident {gpu} fp32")
        add(f"{model}: Trident bf16 / PyTorch's best", bf16, pytorch_best(train, "train", model, batch),
            f"Trident {gpu} bf16", "any PyTorch row")
        add(f"{model}: Trident bf16 / PyTorch's best bf16", bf16,
            pytorch_best(train, "train", model, batch, "bf16"), f"Trident {gpu} bf16", "PyTorch bf16")
        add(f"{model}: Trident fp32 / PyTorch's best fp32", fp32,
            pytorch_best(train, "train", model, batch, "fp32"), f"Trident {gpu} fp32", "PyTorch fp32")
    gemm = [r for r in records if r["bench"] == "gemm"]
    for n in gemm_sizes:
        add(f"GEMM bf16 n={n}: Trident / torch.matmul (TFLOP/s)",
            find(gemm, impl="trident", device=gpu, size=n, precision="bf16", out_dtype="BF16"),
            find(gemm, impl="pytorch", size=n, precision="bf16", out_dtype="BF16"),
            f"Trident {gpu} bf16 n={n}", f"torch.matmul bf16 n={n}")
    # Named also where no OpenCL device ran, so that a GPU run without NVIDIA's OpenCL says so.
    add(f"mlp-big: OpenCL fp16 / OpenCL fp32 ({ocl or 'no OpenCL device ran'})",
        trident_row("mlp-big", "fp16", ocl), trident_row("mlp-big", "fp32", ocl),
        f"Trident {ocl or 'opencl'} fp16", f"Trident {ocl or 'opencl'} fp32")
    return out


# ---- printing ------------------------------------------------------------------------------------


def _fmt(value, width, digits):
    return f"{value:{width}.{digits}f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def _why(r):
    return ("skipped: " + r["skipped"]) if r.get("skipped") else ("ERROR: " + r["error"]) if r.get("error") else ""


def training_table(records):
    lines = []
    train = [r for r in records if r["bench"] == "train"]
    for model in dict.fromkeys(r["model"] for r in train):
        rows = [r for r in train if r["model"] == model]
        batches = sorted({r["batch"] for r in rows})
        lines.append(f"{model} (batch {', '.join(map(str, batches))})")
        order = {d: i for i, d in enumerate(trident_devices(rows))}
        rows.sort(key=lambda r: (r["impl"] != "trident", order.get(r["device"], 0), row_name(r).split()[1]
                                 if r["impl"] != "trident" else "", precision_rank(r)))
        best = {b: pytorch_best(rows, "train", model, b) for b in batches}
        for r in rows:
            name = row_name(r) + (f" (batch {r['batch']})" if len(batches) > 1 else "")
            line = f"  {name:34s} {_fmt(r.get('ms_per_step'), 9, 3)} ms {_fmt(r.get('samples_per_s'), 11, 0)}/s"
            ref = best.get(r["batch"])
            if measured(r) and ref and r["impl"] == "trident":
                line += f"  x{score(r) / score(ref):.2f} of PyTorch's best"
            lines.append(line + ("  " + _why(r) if _why(r) else ""))
    return lines


def gemm_table(records):
    """One line per implementation and type, one column per n: TFLOP/s, and for Trident the percentage
    of torch.matmul with the same operand and result types."""
    gemm = [r for r in records if r["bench"] == "gemm"]
    if not gemm:
        return []
    devices = trident_devices(gemm)
    names = list(dict.fromkeys(row_name(r) for r in sorted(
        gemm, key=lambda r: (r["impl"] != "trident", devices.index(r["device"]) if r["impl"] == "trident" else 0,
                             precision_rank(r)))))
    sizes = sorted({r["size"] for r in gemm})
    lines = [f"  {'':30s}" + "".join(f"{n:>16d}" for n in sizes)]
    for name in names:
        cells = []
        for n in sizes:
            r = next((r for r in gemm if r["size"] == n and row_name(r) == name), None)
            if r is None or not measured(r):
                cells.append(f"{'-':>16s}")
                continue
            ref = find(gemm, impl="pytorch", size=n, precision=r.get("precision", "fp32"),
                       out_dtype=r.get("out_dtype", "F32")) if r["impl"] == "trident" else None
            pct = f" ({100 * score(r) / score(ref):3.0f}%)" if ref else ""
            cells.append(f"{score(r) / 1e3:.3g}{pct}".rjust(16))
        lines.append(f"  {name:30s}" + "".join(cells))
    return lines


def inference_table(records):
    lines = []
    inference = [r for r in records if r["bench"] == "inference"]
    for model in dict.fromkeys(r["model"] for r in inference):
        for batch in sorted({r["batch"] for r in inference if r["model"] == model}):
            for r in (r for r in inference if r["model"] == model and r["batch"] == batch):
                lines.append(f"{model:8s} batch {batch:4d}  {row_name(r):34s} {_fmt(r.get('ms_per_step'), 9, 3)} ms"
                             + (" captured" if r["impl"] == "trident" and r.get("capture") else "")
                             + ("  " + _why(r) if _why(r) else ""))
    return lines


def headline_lines(entries):
    lines = []
    for e in entries:
        if e["ratio"] is None:
            lines.append(f"  {e['name']:52s}      -   (not measured: {e['missing']})")
        else:
            lines.append(f"  {e['name']:52s} x{e['ratio']:6.2f}   ({e['numerator']} / {e['denominator']})")
    return lines


def summary_text(records, entries, load_average=None, notes=()):
    """Everything run_bench prints at the end; notes (parts cut short or failed) just before the headline,
    which comes last (a log's tail shows it)."""
    load = f"  load average {load_average:.2f}" if load_average is not None else ""
    out = ["", f"== training: ms/step, samples/s (ratio: samples/s over PyTorch's best){load}"]
    out += training_table(records)
    if any(r["bench"] == "inference" for r in records):
        out += ["", "== inference, host inputs to host outputs (ms per call)"] + inference_table(records)
    if any(r["bench"] == "gemm" for r in records):
        out += ["", "== GEMM C[n,n] = A B: TFLOP/s at each n (Trident: % of torch.matmul of the same types)"]
        out += gemm_table(records)
    problems = [r for r in records if _why(r)]
    if problems:
        out += ["", f"== not measured: {len(problems)} rows (reasons above; errors: "
                    f"{sum(1 for r in problems if r.get('error'))})"]
    if notes:
        out += ["", "== incomplete run: a figure below may lack rows (e.g. PyTorch's compiled ones)"]
        out += ["  " + n for n in notes]
    out += ["", "== mixed precision (issue 12): ratio of samples/s (GEMM: of TFLOP/s); above 1: Trident faster"]
    out += headline_lines(entries)
    return "\n".join(out)
