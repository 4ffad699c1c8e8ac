"""The `sonfolio` command."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from sonfolio.config.base import ParamsError
from sonfolio.infer.commands import COMMANDS as INFERENCE_COMMANDS
from sonfolio.infer.commands import add_commands as add_inference_commands
from sonfolio.infer.commands import handle as run_inference_command

log = logging.getLogger(__name__)


def check_params(path: str) -> int:
    """Validate params.yaml without running anything; exit 1 with every problem listed."""
    from sonfolio.config.params import load_params

    try:
        params = load_params(path)
    except ParamsError as err:
        print(err, file=sys.stderr)
        return 1
    sections = ", ".join(type(params).model_fields)
    print(f"{path} is valid ({sections})")
    return 0


def add_machine_commands(sub: argparse._SubParsersAction) -> None:
    """`doctor` and `estimate` (docs/cost.md); their modules import torch only when they run.

    Their handlers (below) read params.yaml here, not in sonfolio.doctor or sonfolio.estimate:
    the estimate stage imports those, and must not import every section's schema."""
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


def doctor(params_path: Path, tracks: list[str], as_json: bool, models: list[Path]) -> int:
    """`sonfolio doctor`: the report on stdout (rich tables, or JSON); logs on stderr."""
    import json

    from rich.console import Console

    from sonfolio.config.params import load_params
    from sonfolio.doctor import MATMUL_SECONDS, diagnose, log_to_stderr, render

    log_to_stderr()
    try:
        params = load_params(params_path)
    except ParamsError as err:
        print(err, file=sys.stderr)
        return 2
    try:
        report = diagnose(params, tracks, MATMUL_SECONDS, models)
    except FileNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        render(report, Console())
    return 0


def estimate(
    params_path: Path,
    tracks: list[str],
    steps: int | None,
    target_steps: int | None,
    as_json: bool,
    write: bool,
) -> int:
    """`sonfolio estimate`: the report on stdout; `write`: also
    ${paths.metrics}/estimate_<track>.json, as the estimate stage writes them."""
    import json

    from rich.console import Console

    from sonfolio.config.params import load_params
    from sonfolio.doctor import log_to_stderr
    from sonfolio.estimate import MissingInput, PriceTableError, render
    from sonfolio.estimate import estimate as measure_and_price
    from sonfolio.io import write_json
    from sonfolio.train.device import DeviceCannotDo

    log_to_stderr()
    for flag, value in (("--steps", steps), ("--target-steps", target_steps)):
        if value is not None and value < 1:
            print(f"sonfolio estimate: {flag} = {value}: give a positive number", file=sys.stderr)
            return 2
    try:
        params = load_params(params_path)
        report = measure_and_price(params, tracks, steps, target_steps)
    except (ParamsError, MissingInput, DeviceCannotDo, PriceTableError) as err:
        print(f"sonfolio estimate: {err}", file=sys.stderr)
        return 2
    if write:  # what the estimate stage writes, one file per track
        for name, figures in report["tracks"].items():
            path = params.paths.metrics / f"estimate_{name}.json"
            write_json(path, {**report, "tracks": {name: figures}})
            log.info("wrote %s", path)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        render(report, Console())
    return 0


def run_machine_command(args: argparse.Namespace) -> int:
    tracks = ["score", "speech"] if args.track == "both" else [args.track]
    if args.command == "doctor":
        return doctor(args.params, tracks, args.json, args.model)
    return estimate(args.params, tracks, args.steps, args.target_steps, args.json, args.out)


def print_preset(name: str) -> int:
    from sonfolio.config.presets import PresetError, exp_run_args

    try:
        print(" ".join(exp_run_args(name)))
    except PresetError as err:
        print(f"sonfolio preset: {err}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sonfolio")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-params", help="validate params.yaml and run nothing")
    check.add_argument("path", nargs="?", default="params.yaml")
    preset = sub.add_parser(
        "preset", help="print a preset's -S overrides: dvc exp run $(sonfolio preset NAME)"
    )
    preset.add_argument("name", help="speech-from-scratch")
    add_inference_commands(sub)  # read, transcribe, serve
    add_machine_commands(sub)  # doctor, estimate
    args = parser.parse_args(argv)
    if args.command == "check-params":
        return check_params(args.path)
    if args.command == "preset":
        return print_preset(args.name)
    if args.command in INFERENCE_COMMANDS:
        return run_inference_command(args)
    if args.command in ("doctor", "estimate"):
        return run_machine_command(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
