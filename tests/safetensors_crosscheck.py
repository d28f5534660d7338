#!/usr/bin/env python3
"""Hand-run cross-check of Trident's safetensors files against the reference Python `safetensors` package.

  check PATH   read a file Trident wrote (the C++ test writes one when TRIDENT_SAFETENSORS_CROSSCHECK=PATH)
               with safetensors (and numpy / torch when importable) and compare names, shapes and values.
  write PATH   write the same tensors (minus bf16, which numpy lacks) with safetensors.numpy; the C++ test
               reads it back when TRIDENT_SAFETENSORS_FROM_PYTHON=PATH.

Typical run (from the build folder holding the test binary):
  TRIDENT_SAFETENSORS_CROSSCHECK=/tmp/t.safetensors ./tests "safetensors round trip*"
  python3 tests/safetensors_crosscheck.py check /tmp/t.safetensors
  python3 tests/safetensors_crosscheck.py write /tmp/p.safetensors
  TRIDENT_SAFETENSORS_FROM_PYTHON=/tmp/p.safetensors ./tests "safetensors round trip*"
Exit status 0 on success, 1 on a mismatch, 2 if the safetensors package is not installed.
"""
import struct
import sys

# What tests/test_safetensors.cpp crosscheck_file() writes: name -> (dtype, shape, values).
EXPECTED = {
    "layer.weight": ("F32", [2, 3], [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]),
    "half": ("F16", [3], [1.0, -2.5, 0.0]),
    "brain": ("BF16", [1, 2, 1], [1.0, -3.0]),
    "step": ("I32", [], [1234]),
    "mask": ("U8", [4], [0, 1, 254, 255]),
    "empty": ("F32", [0, 3], []),
    "counts": ("I32", [2, 2], [-7, 0, 65536, 2147483647]),
}
METADATA = {"format": "pt", "note": 'quote " backslash \\ newline \n tab \t unicode \u00fc'}
NUMPY_DTYPES = {"F32": "float32", "F16": "float16", "I32": "int32", "U8": "uint8"}


def decode(dtype, data):
    """Raw little-endian bytes -> list of Python numbers, without numpy."""
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % (len(data) // 2), data)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    code, size = {"F32": ("f", 4), "F16": ("e", 2), "I32": ("i", 4), "U8": ("B", 1)}[dtype]
    return list(struct.unpack("<%d%s" % (len(data) // size, code), data))


def check(path):
    import safetensors

    failures = []
    with open(path, "rb") as f:
        blob = f.read()
    found = dict(safetensors.deserialize(blob))  # the Rust reader: validates the whole layout
    if set(found) != set(EXPECTED):
        failures.append("names %s != %s" % (sorted(found), sorted(EXPECTED)))
    for name, (dtype, shape, values) in EXPECTED.items():
        got = found.get(name)
        if got is None:
            continue
        if got["dtype"] != dtype or list(got["shape"]) != shape:
            failures.append("%s: %s %s != %s %s" % (name, got["dtype"], got["shape"], dtype, shape))
        if decode(dtype, bytes(got["data"])) != values:
            failures.append("%s: values %s != %s" % (name, decode(dtype, bytes(got["data"])), values))
    with safetensors.safe_open(path, framework="numpy") as f:
        if f.metadata() != METADATA:
            failures.append("metadata %r != %r" % (f.metadata(), METADATA))
    checked = ["safetensors.deserialize", "safe_open metadata"]
    try:
        import numpy as np
        from safetensors.numpy import load_file
    except ImportError:
        np = None
    if np is not None:
        with safetensors.safe_open(path, framework="numpy") as f:
            for name, (dtype, shape, values) in EXPECTED.items():
                if dtype not in NUMPY_DTYPES:
                    continue
                a = f.get_tensor(name)
                if a.dtype != np.dtype(NUMPY_DTYPES[dtype]) or list(a.shape) != shape or a.ravel().tolist() != values:
                    failures.append("numpy %s: %s %s %s" % (name, a.dtype, a.shape, a.ravel().tolist()))
        checked.append("numpy get_tensor")
    try:
        import torch
        from safetensors.torch import load_file as torch_load
    except ImportError:
        torch = None
    if torch is not None:
        tensors = torch_load(path)
        for name, (dtype, shape, values) in EXPECTED.items():
            t = tensors[name]
            if list(t.shape) != shape or t.float().flatten().tolist() != [float(v) for v in values]:
                failures.append("torch %s: %s %s" % (name, t.shape, t.flatten().tolist()))
        checked.append("torch load_file")
    for line in failures:
        print("MISMATCH", line)
    print("%s: %s (%s; safetensors %s)" % (path, "FAILED" if failures else "OK", ", ".join(checked),
                                           safetensors.__version__))
    return 1 if failures else 0


def write(path):
    import numpy as np
    from safetensors.numpy import save_file

    arrays = {name: np.array(values, dtype=NUMPY_DTYPES[dtype]).reshape(shape)
              for name, (dtype, shape, values) in EXPECTED.items() if dtype in NUMPY_DTYPES}
    save_file(arrays, path, metadata=METADATA)
    print("%s: wrote %d tensors with safetensors.numpy" % (path, len(arrays)))
    return 0


def main(argv):
    if len(argv) != 3 or argv[1] not in ("check", "write"):
        print(__doc__)
        return 2
    try:
        import safetensors  # noqa: F401
    except ImportError:
        print("skipped: the safetensors Python package is not installed (pip install safetensors numpy)")
        return 2
    return check(argv[2]) if argv[1] == "check" else write(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
