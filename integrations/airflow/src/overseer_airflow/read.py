"""The one read of the ``job`` table per health request, through any SQLAlchemy
session or connection (Airflow's own session inside the api-server).

One statement: every running ``ExecutorJob`` row without ``end_date`` (the open
rows, live or stale: Overseer's open rows are the running ones), and the row(s)
with the latest heartbeat (so that, when every supervisor has stopped, the entry
can say when). Both halves are found through Airflow's indexes: the running rows
through ``idx_job_state_heartbeat`` (``state, latest_heartbeat``), however many
closed rows past restarts left; the latest heartbeat as the last entry of
``job_type_heart`` (``job_type, latest_heartbeat``) for the type.

Times come back as each database and driver gives them (aware on Postgres,
naive UTC on MySQL, text on SQLite, where Airflow writes ``2026-11-29
19:48:48.365305`` and Overseer ``2026-11-29T19:48:48.365305+00:00``): each is
made an aware UTC ``datetime``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from overseer_airflow.entry import JOB_TYPE, Row

#: The statement, bound with ``:job_type``. Plain SQL that SQLite, Postgres and
#: MySQL/MariaDB all take.
QUERY = """\
SELECT id, state, executor_class, hostname, end_date, latest_heartbeat,
       executor_health, executor_health_reason, executor_instance,
       executor_health_checked_at
FROM job
WHERE job_type = :job_type
  AND ((state = 'running' AND end_date IS NULL)
       OR latest_heartbeat = (SELECT MAX(latest_heartbeat) FROM job WHERE job_type = :job_type))"""


def utc(value: Any) -> datetime | None:
    """A stored time as an aware UTC ``datetime`` (naive ones are UTC, as Airflow
    stores them)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.strip())
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def executor_rows(session: Any) -> list[Row]:
    """The ``ExecutorJob`` rows the entry is built from, by :data:`QUERY`.

    ``session`` is a SQLAlchemy ``Session`` or ``Connection``; errors are the
    database's, raised as they come.
    """
    from sqlalchemy import text

    result = session.execute(text(QUERY), {"job_type": JOB_TYPE})
    return [
        Row(
            id=r.id,
            state=r.state,
            executor_class=r.executor_class,
            hostname=r.hostname,
            end_date=utc(r.end_date),
            latest_heartbeat=utc(r.latest_heartbeat),
            executor_health=r.executor_health,
            executor_health_reason=r.executor_health_reason,
            executor_instance=r.executor_instance,
            executor_health_checked_at=utc(r.executor_health_checked_at),
        )
        for r in result
    ]
