"""``ina demo``: THC against fp32 allreduce on one machine, no root, no hardware.

Local worker processes (gloo over localhost) train the same model on scikit-learn's digits
from the same seed twice, once with plain fp32 allreduce and once with the THC hook, then
report both test accuracies and what each worker sent per step. With ``--transport switch``
or ``ps`` a software switch and PS run in this process on loopback, and a third run sends
THC values through them: its bytes are the UDP payloads each worker put on the wire.
"""
import argparse
import contextlib
import math
import sys

from ina.transport import TRANSPORTS

QUICK_STEPS = 60


def register(subcommands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subcommands.add_parser(
        "demo",
        help="train on digits with fp32 allreduce and with THC, compare accuracy and traffic",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument("--workers", type=_positive, default=4, help="local worker processes (default 4)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=_positive, default=10, help="passes over the data (default 10)")
    length.add_argument("--steps", type=_positive, help="training steps (instead of --epochs)")
    length.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps: a smoke test for CI")
    parser.add_argument("--bits", type=_positive, default=4, help="THC bits per coordinate (default 4)")
    parser.add_argument(
        "--granularity", type=_positive, help="THC granularity (default 2 * (2**bits - 1), at most 255)"
    )
    parser.add_argument(
        "--transport", choices=sorted(TRANSPORTS), default="collective",
        help="how THC values are summed; switch and ps also run collective, for comparison (default collective)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the data split, init and rotation")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a stuck run is stopped")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ina.compression import THCConfig
    from ina.demo_training import BATCH, Digits, Run, THCOptions, train_worker
    from ina.launch import LocalAggregators, WorkerError, run_workers

    granularity = args.granularity or min(2 * (2**args.bits - 1), 255)
    try:
        if BATCH % args.workers:
            raise ValueError(f"--workers must divide the global batch of {BATCH}")
        THCConfig(bits=args.bits, granularity=granularity).check_workers(args.workers)
    except ValueError as error:
        print(f"ina demo: {error}", file=sys.stderr)
        return 2
    data = Digits.load(args.seed)
    steps = QUICK_STEPS if args.quick else args.steps or args.epochs * math.ceil(len(data.x_train) / BATCH)
    warm_up = min(10, steps // 10)
    def thc_run(transport: str, options: dict[str, str]) -> Run:
        thc = THCOptions(args.bits, granularity, warm_up, transport, options)
        return Run(label=f"THC {args.bits}-bit ({transport})", steps=steps, seed=args.seed, data=data, thc=thc)

    print(f"ina demo: {args.workers} workers, {steps} steps of {BATCH} digits, gloo on localhost")
    with contextlib.ExitStack() as servers:
        runs = [Run(label="fp32 allreduce", steps=steps, seed=args.seed, data=data, thc=None), thc_run("collective", {})]
        if args.transport != "collective":
            local = servers.enter_context(LocalAggregators())
            options = local.options(args.transport)
            where = ", ".join(f"{name} at udp://{options[name]}" for name in ("switch", "ps") if name in options)
            print(f"ina demo: a software {where} in this process")
            runs.append(thc_run(args.transport, options))
        try:
            outcomes = [run_workers(train_worker, args.workers, r, timeout=args.timeout) for r in runs]
        except WorkerError as error:
            print(f"ina demo: {error}", file=sys.stderr)
            return 1
    baseline = outcomes[0][0].bytes_per_step
    print(f"{'':28}{'test accuracy':>15}{'bytes/worker/step':>20}")
    for r, outcome in zip(runs, outcomes):
        sent = round(sum(o.bytes_per_step for o in outcome) / len(outcome))  # resends differ between workers
        ratio = f"  ({baseline / sent:.1f}x less)" if sent < baseline else ""
        print(f"{r.label:28}{outcome[0].accuracy:>14.1%}{sent:>20,}{ratio}")
    if args.transport != "collective":
        print(f"({args.transport}: UDP payload bytes, 20-byte headers, the norm's MAX chunk and resends included)")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value
