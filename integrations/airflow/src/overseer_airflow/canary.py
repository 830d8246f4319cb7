"""Overseer's canary DAG, ``overseer_canary``: one trivial task on each queue,
on a schedule, so that work is proven to flow end to end.

A worker that takes tasks but cannot run them (a broken image, a missing
provider, a worker that cannot reach the api-server's execution API) still
heartbeats, consumes its queue and answers the ping; a worker that runs
nothing is found only once real work waits. Overseer reads this DAG's task
instances from Airflow's own tables (never calling into Airflow) and judges
each queue: a canary that no worker starts within ``canary_max_pickup``
(Overseer's setting, default 2 minutes), or that fails, makes its executor
``unhealthy``; this DAG paused, gone or not scheduled makes it ``unknown``.

Airflow does not load DAGs from plugins: put one line in a file of your DAG
folder (or of a DAG bundle), e.g. ``dags/overseer_canary.py``::

    from overseer_airflow.canary import dag  # noqa: F401  (Airflow DAG)

Settings, in Airflow's configuration (``airflow.cfg`` or
``AIRFLOW__OVERSEER__*``):

- ``[overseer] canary_every``: how often, ``30s``, ``5m`` (the default), ``1h``;
- ``[overseer] canary_queues``: the queues, comma-separated (default:
  ``[operators] default_queue``).

Each run is one task per queue (``canary_<queue>``), no retries, one active
run at a time (a canary nobody picks up does not pile up runs behind it), and
a short ``execution_timeout``. It is unpaused at creation.
"""

from __future__ import annotations

import functools
import re
from datetime import timedelta
from typing import Any

DAG_ID = "overseer_canary"

_UNITS = {"s": 1, "m": 60, "h": 3600}


def every(text: str) -> timedelta:
    """``30s``, ``5m``, ``1h``: how often the canary runs."""
    match = re.fullmatch(r"\s*(\d+)\s*([smh])\s*", text)
    if not match or int(match[1]) == 0:
        raise ValueError(
            f"[overseer] canary_every: {text!r} is not a duration such as 30s, 5m or 1h"
        )
    return timedelta(seconds=int(match[1]) * _UNITS[match[2]])


def queues(configured: str, default_queue: str) -> list[str]:
    """The queues a canary runs on: ``configured`` (comma-separated), else the default queue."""
    names = [q.strip() for q in configured.split(",") if q.strip()]
    return names or [default_queue]


@functools.cache
def build() -> Any:
    """The canary DAG, as Airflow's configuration asks for it (built once per process)."""
    import pendulum
    from airflow.configuration import conf
    from airflow.sdk import DAG, task

    period = every(conf.get("overseer", "canary_every", fallback="5m"))
    on = queues(
        conf.get("overseer", "canary_queues", fallback=""),
        conf.get("operators", "default_queue", fallback="default"),
    )
    with DAG(
        dag_id=DAG_ID,
        description="Overseer's canary: one trivial task per queue, proving work flows end to end",
        schedule=period,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=False,
        tags=["overseer"],
        default_args={
            "retries": 0,
            "execution_timeout": min(period, timedelta(minutes=1)),
        },
    ) as canary_dag:
        for queue in on:

            @task(task_id="canary_" + re.sub(r"[^A-Za-z0-9_.-]", "_", queue), queue=queue)
            def canary() -> None:
                """Nothing: that a worker ran it is the point."""

            canary()
    return canary_dag


def __getattr__(name: str) -> Any:
    # ``from overseer_airflow.canary import dag`` builds it: the pure functions
    # above import without Airflow (the plugin's unit tests run without it).
    if name == "dag":
        return build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
