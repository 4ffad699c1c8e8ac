"""The Prefect flow: run the DVC pipeline stage by stage, one Prefect task per stage.

DVC owns the DAG and the cache: each task runs `dvc repro --single-item <stage>` in a
subprocess and streams its log into Prefect, so a stage whose inputs did not change is skipped
by DVC, not by Prefect. The stages and their order are read from dvc.yaml's graph, so there is
no second list to keep in step. DVC holds one lock per repository, so stages run one at a time.

    python -m flows.pipeline run                      # the whole DAG, once
    python -m flows.pipeline run tokenizer@score      # a stage and what it needs
    python -m flows.pipeline serve --cron "0 3 * * *" # a deployment on a schedule
    python -m flows.pipeline serve --cron "0 3 * * *" tokenizer@score   # ... of some stages
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import yaml
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact


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


@task(name="publish results")
def publish_results(repo: str) -> list[str]:
    """The run report's tables as markdown artifacts and a link to the report, so the Prefect
    UI shows each run's results; returns the artifact keys.

    The tables come from ${paths.report}/assets/summary.json, written by the report stage with
    the page (sonfolio.report.page); no report yet: one artifact that says how to make it.
    """
    logger = get_run_logger()
    params = yaml.safe_load((Path(repo) / "params.yaml").read_text(encoding="utf-8"))
    report = Path(repo) / params["paths"]["report"]
    summary_path = report / "assets" / "summary.json"
    if not summary_path.is_file():
        logger.info("no report in %s: run the report stage (`dvc repro report`)", report)
        create_markdown_artifact(
            key="sonfolio-report",
            markdown=f"No report in `{report}` yet: run `dvc repro report`.",
            description="Sonfolio run report",
        )
        return ["sonfolio-report"]
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    keys = []
    for part, markdown in summary["markdown"].items():
        keys.append(f"sonfolio-{part}")
        create_markdown_artifact(
            key=keys[-1],
            markdown=f"# Sonfolio: {part}\n\n{markdown}",
            description=f"{part} results of the report made {summary['made']}",
        )
    keys.append("sonfolio-report")
    create_link_artifact(
        key=keys[-1],
        link=(report / "index.html").resolve().as_uri(),
        link_text="Sonfolio run report (tables, plots, samples)",
        description=f"made {summary['made']}; not yet produced: {summary['missing'] or 'none'}",
    )
    return keys


@flow(name="sonfolio", log_prints=True)
def pipeline(repo: str = ".", stages: list[str] | None = None, force: bool = False) -> list[str]:
    """Reproduce the DVC pipeline (or `stages` and what they need) in `repo`."""
    repo = str(Path(repo).resolve())
    order = pipeline_stages(Path(repo), stages)
    get_run_logger().info("stages in order: %s", ", ".join(order))
    for stage in order:
        repro_stage.with_options(task_run_name=f"dvc repro {stage}")(stage, repo, force)
    publish_results(repo)  # the results, in the Prefect UI
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
