"""The Prefect flow: run the DVC pipeline stage by stage, one Prefect task per stage.

DVC owns the DAG and the cache: each task runs `dvc repro --single-item <stage>` in a
subprocess and streams its log into Prefect, so a stage whose inputs did not change is skipped
by DVC, not by Prefect. The stages and their order are read from dvc.yaml's graph, so there is
no second list to keep in step. DVC holds one lock per repository, so stages run one at a time.

    python -m flows.pipeline run                      # the whole DAG, once
    python -m flows.pipeline run score_tokenizer      # a stage and what it needs
    python -m flows.pipeline serve --cron "0 3 * * *" # a deployment on a schedule
    python -m flows.pipeline serve --cron "0 3 * * *" score_tokenizer   # ... of some stages
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
from prefect import flow, get_run_logger, task


def pipeline_stages(repo: Path, targets: list[str] | None = None) -> list[str]:
    """dvc.yaml's stages in dependency order; with targets, only those and their ancestors."""
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    with Repo(str(repo)) as dvc_repo:
        graph = dvc_repo.index.graph  # edges point from a stage to the stages it depends on
        stages = {s.name: s for s in graph.nodes if isinstance(s, PipelineStage)}
        unknown = sorted(set(targets or []) - set(stages))
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; dvc.yaml has {sorted(stages)}")
        order = [s for s in reversed(list(nx.topological_sort(graph))) if s in stages.values()]
        if targets:
            wanted = set()
            for name in targets:
                wanted |= {stages[name], *nx.descendants(graph, stages[name])}
            order = [s for s in order if s in wanted]
        return [s.name for s in order]


@task(name="dvc repro")
def repro_stage(stage: str, repo: str, force: bool = False) -> None:
    """Run one stage through DVC (skipped by DVC when nothing it depends on changed)."""
    logger = get_run_logger()
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", stage]
    if force:
        cmd.append("--force")
    logger.info("$ %s", " ".join(cmd[1:]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip():
                logger.info(line.rstrip())
    if proc.returncode != 0:
        raise RuntimeError(f"`dvc repro {stage}` failed with exit code {proc.returncode}")


@flow(name="sonfolio", log_prints=True)
def pipeline(repo: str = ".", stages: list[str] | None = None, force: bool = False) -> list[str]:
    """Reproduce the DVC pipeline (or `stages` and what they need) in `repo`."""
    repo = str(Path(repo).resolve())
    order = pipeline_stages(Path(repo), stages)
    get_run_logger().info("stages in order: %s", ", ".join(order))
    for stage in order:
        repro_stage.with_options(task_run_name=f"dvc repro {stage}")(stage, repo, force)
    return order


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m flows.pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run the pipeline once")
    run_p.add_argument("stages", nargs="*", help="stages to run (default: all)")
    run_p.add_argument("--force", action="store_true", help="rerun even when nothing changed")
    serve_p = sub.add_parser("serve", help="serve a deployment that Prefect schedules and runs")
    serve_p.add_argument("--name", default="sonfolio")
    serve_p.add_argument("--cron", default=None, help='e.g. "0 3 * * *" (every day at 03:00)')
    serve_p.add_argument("stages", nargs="*", help="stages each run reproduces (default: all)")
    args = parser.parse_args(argv)
    if args.command == "run":
        pipeline(repo=".", stages=args.stages or None, force=args.force)
    else:
        parameters = {"repo": str(Path.cwd()), "stages": args.stages or None}
        pipeline.serve(name=args.name, cron=args.cron, parameters=parameters)


if __name__ == "__main__":
    main()
