"""The `sonfolio` command."""

from __future__ import annotations

import argparse
import sys

from sonfolio.config import ParamsError, load_params


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sonfolio")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check-params", help="validate params.yaml and run nothing")
    check.add_argument("path", nargs="?", default="params.yaml")
    args = parser.parse_args(argv)
    if args.command == "check-params":
        return check_params(args.path)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
