"""The canary's latest facts, per queue, for the home page card: read from
Airflow's ``task_instance`` table, never judged here.

Overseer judges the canary (``crates/core/src/canary.rs`` in its repository)
and its verdict reaches the card through the ``executor`` entry's reasons;
this module only says what the rows say, for each queue the canary ran on:

- ``state``: the latest canary's state (``null`` before the scheduler gave it one);
- ``pickup_seconds``: from ``queued_dttm`` to ``start_date`` of the latest
  canary a worker started (with ``picked_up_at``, that start);
- ``last_success``: when the latest successful canary ended;
- ``waiting_since`` and ``waiting_seconds``: a canary in ``queued`` that no
  worker has started, the oldest such, and how long it has waited at the read.

And for the DAG: ``every_seconds``, its period (the step between its two
latest runs, as Overseer measures it), and ``silent_seconds``, the age of its
latest run once that is three periods or more (two runs missed: the scheduler
is not making them), else ``null``: the card shows that age as a fault, never
a green "last success" by silence.

One statement, :data:`QUERY`, the one Overseer reads the canary with: the task
instances of the canary's latest :data:`RUNS_READ` scheduled runs, the runs
found by the backward scan of Airflow's unique ``(dag_id, logical_date)`` index
(in a derived table: MySQL takes ``LIMIT`` only there), their task instances by
``ti_dag_run``; so the card and Overseer's dashboard speak of the same runs,
and the read costs the same however long the canary's history grows. Plain SQL
without parameters that SQLite, Postgres and MySQL/MariaDB all take; times come
back as each driver gives them and are made aware UTC (:func:`read.utc`).

No rows (the canary DAG never ran, or is not installed): no queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

from overseer_airflow.canary import DAG_ID
from overseer_airflow.entry import timestamp
from overseer_airflow.read import utc

#: How many of the canary's latest scheduled runs are read: Overseer's
#: ``canary::RUNS_READ``.
RUNS_READ = 3

#: The statement; its columns in the order of :class:`Task`'s fields.
QUERY = f"""\
SELECT ti.queue, ti.task_id, ti.run_id, dr.logical_date, ti.state,
       ti.queued_dttm, ti.start_date, ti.end_date
FROM task_instance ti
JOIN (SELECT run_id, logical_date FROM dag_run
      WHERE dag_id = '{DAG_ID}' AND logical_date IS NOT NULL
      ORDER BY logical_date DESC LIMIT {RUNS_READ}) dr ON dr.run_id = ti.run_id
WHERE ti.dag_id = '{DAG_ID}'"""


@dataclass(frozen=True)
class Task:
    """One canary task instance of the runs read, its times aware and in UTC."""

    queue: str
    task_id: str
    run_id: str
    logical_date: datetime | None
    state: str | None
    queued: datetime | None
    started: datetime | None
    ended: datetime | None


def task(values: Sequence[Any]) -> Task:
    """A :class:`Task` from one result row of :data:`QUERY`, in its column order."""
    (queue, task_id, run_id, logical_date, state, queued, started, ended) = values
    return Task(
        queue=queue or "",
        task_id=task_id,
        run_id=run_id,
        logical_date=utc(logical_date),
        state=state,
        queued=utc(queued),
        started=utc(started),
        ended=utc(ended),
    )


def _seconds(start: datetime, end: datetime) -> float:
    """From ``start`` to ``end`` in seconds, to the millisecond, never negative."""
    return round(max((end - start).total_seconds(), 0.0), 3)


def on_queue(queue: str, newest_first: list[Task], now: datetime) -> dict[str, Any]:
    """The facts of one queue, from its canaries of the runs read, the newest first."""
    latest = newest_first[0]
    picked = next((t for t in newest_first if t.queued and t.started), None)
    succeeded = next((t for t in newest_first if t.state == "success" and t.ended), None)
    waiting = [t for t in newest_first if t.state == "queued" and t.started is None and t.queued]
    oldest = min(waiting, key=lambda t: t.queued) if waiting else None
    return {
        "queue": queue,
        "task_id": latest.task_id,
        "run_id": latest.run_id,
        "state": latest.state,
        "pickup_seconds": _seconds(picked.queued, picked.started) if picked else None,
        "picked_up_at": timestamp(picked.started) if picked else None,
        "last_success": timestamp(succeeded.ended) if succeeded else None,
        "waiting_since": timestamp(oldest.queued) if oldest else None,
        "waiting_seconds": _seconds(oldest.queued, now) if oldest else None,
    }


def facts(tasks: Iterable[Task], now: datetime) -> dict[str, Any]:
    """The card's JSON: the facts of each queue (by name) at the read, ``now``."""
    by_queue: dict[str, list[Task]] = {}
    oldest = datetime.min.replace(tzinfo=now.tzinfo)
    for t in sorted(tasks, key=lambda t: t.logical_date or oldest, reverse=True):
        by_queue.setdefault(t.queue, []).append(t)
    every, silent = silence(tasks_dates(by_queue), now)
    return {
        "dag_id": DAG_ID,
        "runs_read": RUNS_READ,
        "read_at": timestamp(now),
        "every_seconds": every,
        "silent_seconds": silent,
        "queues": [on_queue(q, by_queue[q], now) for q in sorted(by_queue)],
    }


def tasks_dates(by_queue: dict[str, list[Task]]) -> list[datetime]:
    """The runs' logical dates, newest first, each once."""
    dates = {t.logical_date for tasks in by_queue.values() for t in tasks if t.logical_date}
    return sorted(dates, reverse=True)


def silence(newest_first: list[datetime], now: datetime) -> tuple[float | None, float | None]:
    """The canary's period (the step between its two latest runs) and, when its
    latest run is three periods old or more, that age: Overseer's own rule
    (``Canary::silent``). Fewer than two runs: neither is known."""
    if len(newest_first) < 2 or newest_first[0] <= newest_first[1]:
        return None, None
    every = _seconds(newest_first[1], newest_first[0])
    age = _seconds(newest_first[0], now)
    return every, (age if age >= 3 * every else None)


def read_tasks(session: Any) -> list[Task]:
    """The canary's task instances through ``session`` (Airflow's SQLAlchemy
    session, or any connection that executes a ``text()`` statement)."""
    from sqlalchemy import text

    return [task(r) for r in session.execute(text(QUERY)).all()]
