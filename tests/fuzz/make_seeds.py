#!/usr/bin/env python3
"""Writes the small seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/). Standard library only."""
import gzip
import io
import json
import os
import struct
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def npy(descr, shape, data, major=1, fortran=False):
    shape_text = "(" + "".join(f"{d}, " for d in shape).rstrip(" ") + ")" if len(shape) != 1 else f"({shape[0]},)"
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    prefix = 10 if major == 1 else 12
    d += " " * (63 - (prefix + len(d)) % 64) + "\n"
    length = struct.pack("<H" if major == 1 else "<I", len(d))
    return b"\x93NUMPY" + bytes([major, 0]) + length + d.encode() + bytes(data)


def safetensors(tensors, metadata=None):
    header, blobs, offset = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs += data
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + blobs


def npz(arrays, compress):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        for name, data in arrays.items():
            z.writestr(name + ".npy", data)
    return out.getvalue()


# IDX: mode byte (bit 0: gzip inside the target; bits 1-3: item limit), then the file.
images = idx([3, 4, 4], range(48))
labels = idx([3], [1, 0, 9])
put("idx", "images-raw", b"\x00" + images)
put("idx", "images-gzip-by-target", b"\x01" + images)
put("idx", "images-limit-2", b"\x04" + images)
put("idx", "labels", b"\x00" + labels)
put("idx", "images-gz-file", b"\x00" + gzip.compress(images))
put("idx", "four-d", b"\x02" + idx([2, 1, 2, 3], range(12)))

# safetensors: a checkpoint-like file, every dtype, a 0-d tensor, an empty one.
put("safetensors", "checkpoint", safetensors(
    {"fc1.weight": ("F32", [2, 3], struct.pack("<6f", *range(6))), "fc1.bias": ("F32", [2], struct.pack("<2f", 1, 2)),
     "optimizer.momentum": ("F32", [8], bytes(32))},
    {"format": "trident-checkpoint-1", "model": "mlp", "epoch": "1", "global_step": "12", "seed": "1"}))
put("safetensors", "dtypes", safetensors(
    {"a": ("F16", [2], bytes(4)), "b": ("BF16", [1, 1], bytes(2)), "c": ("I32", [], bytes(4)), "d": ("U8", [0, 3], b""),
     "e": ("U8", [3], b"xyz")}))
put("safetensors", "escapes", safetensors({"w\\u00e9\\n\"": ("U8", [1], b"\x07")}, {"k\\t": "v\\u0000"}))

# CLI: arguments separated by NUL.
for name, args in {
    "train": ["train", "--model", "mlp", "--epochs", "2", "--lr", "0.1", "--momentum", "0.9", "--batch", "100"],
    "train-inline": ["train", "--lr=1e-3", "--optimizer=adam", "--weight-decay", "0.0005", "--seed", "7", "--json"],
    "resume": ["train", "--checkpoint", "/tmp/x.safetensors", "--resume", "--sync", "average:4", "--no-capture"],
    "limits": ["eval", "--checkpoint", "c", "--train-limit", "10", "--test-limit", "20", "--data", "d.npz",
               "--devices", "cpu:0,cpu:1", "--allow-nonfinite"],
    "help": ["help", "--help"],
}.items():
    put("cli_options", name, b"\x00".join(a.encode() for a in args))

# npy: mode byte (bit 0: raw deflate inside the target; bits 1-3: row limit), then the file.
put("npy", "u8-images", b"\x00" + npy("|u1", [3, 2, 2], range(12)))
put("npy", "f32", b"\x00" + npy("<f4", [2, 3], struct.pack("<6f", 0, 0.5, 1, 1.5, 2, 2.5)))
put("npy", "i64-labels", b"\x00" + npy("<i8", [3], struct.pack("<3q", 1, 0, 2)))
put("npy", "v2-limit", b"\x04" + npy("|u1", [4, 2], range(8), major=2))
put("npy", "deflated", b"\x01" + npy("<u2", [2, 2], struct.pack("<4H", 1, 2, 3, 4)))
put("npy", "fortran", b"\x00" + npy("<f4", [2, 1], bytes(8), fortran=True))

# npz: mode byte (low nibble: train limit, high nibble: test limit), then the archive.
arrays = {"x_train": npy("|u1", [3, 2, 2], range(12)), "y_train": npy("<i8", [3], struct.pack("<3q", 0, 1, 2)),
          "x_test": npy("|u1", [1, 2, 2], range(4)), "y_test": npy("|u1", [1], [1])}
put("npz", "stored", b"\x00" + npz(arrays, False))
put("npz", "deflated", b"\x21" + npz(arrays, True))
f32 = dict(arrays, x_train=npy("<f4", [3, 1, 2], struct.pack("<6f", *range(6))),
           x_test=npy("<f4", [1, 1, 2], struct.pack("<2f", 1, 2)))
put("npz", "float-nchw", b"\x00" + npz(f32, True))
