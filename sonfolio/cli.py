"""The `sonfolio` command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sonfolio.config import ParamsError, load_params
from sonfolio.infer.commands import COMMANDS as INFERENCE_COMMANDS
from sonfolio.infer.commands import add_commands as add_inference_commands
from sonfolio.infer.commands import handle as run_inference_command


def check_params(path: str) -> int:
    """Validate params.yaml without running anything; exit 1 with every problem listed."""
    try:
        params = load_params(path)
    except ParamsError as err:
        print(err, file=sys.stderr)
        return 1
    sections = ", ".join(type(params).model_fields)
    print(f"{path} is valid ({sections})")
    return 0


def add_machine_commands(sub: argparse._SubParsersAction) -> None:
    """`doctor` and `estimate` (docs/cost.md); their modules import torch only when they run."""
    tracks = {"choices": ("score", "speech", "both"), "default": "both"}
    doctor = sub.add_parser("doctor", help="this machine, and what training would choose")
    doctor.add_argument("--params", default="params.yaml", type=Path)
    doctor.add_argument("--track", **tracks)
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--model",
        action="append",
        type=Path,
        default=[],
        help="an int8 ONNX folder to check on this CPU (repeatable; the tracks' exports always)",
    )
    est = sub.add_parser("estimate", help="time real training steps, price them on cloud GPUs")
    est.add_argument("--params", default="params.yaml", type=Path)
    est.add_argument("--track", **tracks)
    est.add_argument("--steps", type=int, help="timed steps (default: estimate.steps)")
    est.add_argument("--target-steps", type=int, help="steps to price (default: max_steps)")
    est.add_argument("--json", action="store_true", help="machine-readable output")
    est.add_argument(
        "--out", action="store_true", help="also write ${paths.metrics}/estimate_<track>.json"
    )


def run_machine_command(args: argparse.Namespace) -> int:
    tracks = ["score", "speech"] if args.track == "both" else [args.track]
    if args.command == "doctor":
        from sonfolio.doctor import command

        return command(args.params, tracks, args.json, args.model)
    from sonfolio.estimate import command as estimate

    return estimate(args.params, tracks, args.steps, args.target_steps, args.json, args.out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sonfolio")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-params", help="validate params.yaml and run nothing")
    check.add_argument("path", nargs="?", default="params.yaml")
    add_inference_commands(sub)  # read, transcribe, serve
    add_machine_commands(sub)  # doctor, estimate
    args = parser.parse_args(argv)
    if args.command == "check-params":
        return check_params(args.path)
    if args.command in INFERENCE_COMMANDS:
        return run_inference_command(args)
    if args.command in ("doctor", "estimate"):
        return run_machine_command(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
