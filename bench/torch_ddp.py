#!/usr/bin/env python3
"""PyTorch DDP weak-scaling reference (NCCL, one process per GPU via mp.spawn, no torchrun): JSON lines.

    torch_ddp.py [--gpus 1,2] [--model mlp-big] [--batch 512] [--steps 200] [--epochs 4]

For every GPU count in --gpus, trains the model with a fixed batch per GPU (weak scaling) on data resident
on each GPU (each rank gathers its own slice of the epoch's global index table) and prints, from rank 0, one
line with the global samples/s, in the fields trident_bench uses (bench "scaling"). The epoch time is the
slowest rank's. Epoch 1 is warm-up; the median of the others is reported.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, args, queue):
    import torch_reference as ref
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts them)
    batch, steps = args.batch, args.steps
    images, labels = ref.bench_data(args.data, batch * world * steps, device)
    model = ref.MODELS[args.model]().to(device).train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.5)
    loss_sum = torch.zeros((), device=device)
    times = []
    for epoch in range(args.epochs):
        g = torch.Generator(device=device).manual_seed(args.seed + epoch)
        order = torch.randperm(batch * world * steps, device=device, generator=g)
        table = order.view(steps, world, batch)[:, rank]  # this rank's slice of every global batch
        loss_sum.zero_()
        torch.cuda.synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        for s in range(steps):
            index = table[s]
            optimizer.zero_grad(set_to_none=True)
            loss = F.nll_loss(ddp(images.index_select(0, index)), labels.index_select(0, index))
            loss.backward()
            optimizer.step()
            loss_sum.add_(loss.detach())
        loss_sum.item()
        elapsed = torch.tensor([time.perf_counter() - start], device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if epoch > 0:
            times.append(elapsed.item() * 1e3 / steps)
    if rank == 0:
        ms = statistics.median(times)
        queue.put({"impl": "pytorch-ddp", "torch": torch.__version__, "bench": "scaling", "model": args.model,
                   "device": ",".join(f"cuda:{i}" for i in range(world)),
                   "device_name": torch.cuda.get_device_name(device), "batch": batch, "n_devices": world,
                   "size": 0, "steps": steps, "capture": False, "ms_per_step": ms, "ms_per_step_min": min(times),
                   "samples_per_s": batch * world * 1e3 / ms, "gflops": None})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", default="", help="GPU counts to run, e.g. 1,2,4 (default: 1..all)")
    p.add_argument("--model", default="mlp-big", choices=["mlp", "cnn", "mlp-big"])
    p.add_argument("--batch", type=int, default=512, help="batch per GPU")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--data", default="auto")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    available = torch.cuda.device_count()
    counts = [int(c) for c in args.gpus.split(",") if c] or list(range(1, available + 1))
    if not counts or max(counts) > available:
        sys.exit(f"torch_ddp: asked for {counts} GPUs, {available} present")
    ctx = mp.get_context("spawn")
    for world in counts:
        queue = ctx.SimpleQueue()
        mp.spawn(worker, args=(world, free_port(), args, queue), nprocs=world, join=True)
        print(json.dumps(queue.get()), flush=True)


if __name__ == "__main__":
    main()
