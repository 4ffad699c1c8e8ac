"""The Prefect flow runs the DVC DAG stage by stage; a served deployment runs on schedule."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest
from project_repo import TARGET, tool_env

from flows.pipeline import pipeline, pipeline_stages

pytestmark = pytest.mark.slow


def test_stage_order_comes_from_the_dvc_graph(project):
    assert pipeline_stages(project, [TARGET]) == ["check_params", "data@score", "tokenizer@score"]
    assert pipeline_stages(project, ["data@score"]) == ["check_params", "data@score"]
    with pytest.raises(ValueError, match="unknown stage"):
        pipeline_stages(project, ["no_such_stage"])


def test_flow_runs_each_stage_as_a_task_under_the_harness(project):
    from prefect.testing.utilities import prefect_test_harness

    # The harness starts a Prefect API server in a subprocess (import, SQLite migrations) and
    # polls its /health; its own default gives up after 30 s, which a machine busy with other
    # CPU-bound work can exceed. A longer limit costs nothing when the server is quick: the
    # harness goes on as soon as /health answers.
    with prefect_test_harness(server_startup_timeout=180):
        state = pipeline(repo=str(project), stages=[TARGET], return_state=True)
    assert state.is_completed(), state.message
    assert state.result() == ["check_params", "data@score", "tokenizer@score"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def prefect_server(tmp_path):
    port = free_port()
    env = {
        **tool_env(),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "prefect",
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{port}/api"

    def healthy() -> bool:
        try:
            return httpx.get(f"{api}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, 90, "the Prefect server")
        yield api, {**env, "PREFECT_API_URL": api}
    finally:
        server.terminate()
        server.wait(30)


def test_served_deployment_has_its_schedule_and_a_triggered_run_completes(project, prefect_server):
    api, env = prefect_server
    serve = subprocess.Popen(
        [sys.executable, "-m", "flows.pipeline", "serve", "--cron", "0 3 * * *", TARGET],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deployments = wait_for(
            lambda: httpx.post(f"{api}/deployments/filter", json={}).json(), 60, "the deployment"
        )
        dep = deployments[0]
        assert dep["name"] == "sonfolio"
        crons = [s["schedule"]["cron"] for s in dep["schedules"]]
        assert crons == ["0 3 * * *"]

        def create():
            created = httpx.post(f"{api}/deployments/{dep['id']}/create_flow_run", json={})
            if created.status_code == 503:  # its SQLite busy on a loaded machine: Prefect's
                return None  # own client retries a 503 as well
            assert created.status_code == 201, created.text
            return created.json()

        run = wait_for(create, 60, "the server to create a flow run")

        def finished():
            state = httpx.get(f"{api}/flow_runs/{run['id']}").json()["state"]
            return state if state["type"] in ("COMPLETED", "FAILED", "CRASHED") else None

        state = wait_for(finished, 180, "the triggered flow run")
        assert state["type"] == "COMPLETED", state
        tasks = httpx.post(
            f"{api}/task_runs/filter", json={"flow_runs": {"id": {"any_": [run["id"]]}}}
        ).json()
        assert {t["name"] for t in tasks} >= {f"dvc repro {s}" for s in ("data@score", TARGET)}
    finally:
        serve.terminate()
        serve.wait(30)
