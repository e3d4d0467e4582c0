"""Time to accuracy with THC in a plain torchrun script: the public hook API and nothing of the testbed.

    torchrun --nproc-per-node 4 examples/train_tta.py --model convnet --target 0.97            # THC, 4 bits
    torchrun --nproc-per-node 4 examples/train_tta.py --model convnet --target 0.97 --hook fp32
    torchrun --nproc-per-node 4 examples/train_tta.py --model transformer --target 3.6 --bits 8

It trains one of ina.workloads' models (a residual convnet on digits, a transformer language model on
the Python reference's text) with its optimiser and schedule, registers ``thc_hook`` on DDP (or nothing,
for DDP's fp32 allreduce), evaluates on rank 0 every ``--eval-every`` steps and prints the wall time at
which the test accuracy (the language model: the test loss) first met ``--target``. gloo by default;
``--backend nccl`` on GPUs (the models are small: this is about the hook, not the accelerator).
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ina import THCState, thc_hook
from ina.demo_training import batches_of
from ina.workloads import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("convnet", "transformer"), default="convnet")
    parser.add_argument("--hook", choices=("thc", "fp32"), default="thc")
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=64, help="global batch, split over the ranks")
    parser.add_argument("--lr", type=float, help="default: 0.1 (convnet), 0.003 (transformer)")
    parser.add_argument("--target", type=float, help="test accuracy (convnet) or test loss (transformer) to reach")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dist.init_process_group(args.backend)
    rank, workers = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    workload = build(args.model, 0, args.seed)
    model = DistributedDataParallel(workload.model)
    if args.hook == "thc":
        # 8-bit sums while workers * granularity fits a byte; THC's default granularity for the bits otherwise
        model.register_comm_hook(THCState(bits=args.bits, granularity=min(2 * (2**args.bits - 1), 255), start_iter=5, seed=args.seed), thc_hook)
    lr = args.lr or {"convnet": 0.1, "transformer": 0.003}[args.model]
    optimizer, schedule = workload.optimizer(model.parameters(), lr, args.steps)
    batches = batches_of(workload.train_size, args.batch, torch.Generator().manual_seed(args.seed))
    share = args.batch // workers
    lower_is_better = workload.metric == "test_loss"
    reached = None
    began = time.monotonic()
    for step in range(args.steps):
        batch = next(batches)[rank * share : (rank + 1) * share]
        loss = workload.train_step(model, optimizer, schedule, batch)
        if rank == 0 and ((step + 1) % args.eval_every == 0 or step + 1 == args.steps):
            wall = time.monotonic() - began
            value = workload.evaluate(workload.model)
            met = args.target is not None and (value <= args.target if lower_is_better else value >= args.target)
            if met and reached is None:
                reached = wall
            print(f"step {step + 1}: {wall:.1f} s, train loss {loss.item():.3f}, {workload.metric} {value:.4f}", flush=True)
    if rank == 0:
        outcome = "not reached" if reached is None else f"{reached:.1f} s"
        print(f"{args.model}, {args.hook}{args.bits if args.hook == 'thc' else ''}, {workers} ranks: time to target {outcome}; "
              f"training took {time.monotonic() - began:.1f} s")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
