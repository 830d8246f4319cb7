"""The ``executor`` entry of the health JSON, from ``ExecutorJob`` rows: pure rules,
the time passed in, no Airflow or database import.

The same rules as Overseer's own entry (``crates/core/src/report/rules.rs`` in
Overseer's repository), both held to one table of cases, ``tests/entry_cases.json``
beside this package (read by ``tests/test_entry.py`` here and by Overseer's
``crates/core/tests/entry_cases.rs``), and on a real Airflow by Overseer's
``tests/airflow_health.rs``:

==========================  ====================================================
field                       rule
==========================  ====================================================
``status``                  ``healthy`` when at least one live row exists and
                            none says ``unhealthy`` (``unknown`` never counts as
                            dead); ``null`` while no live row has been checked
                            yet (right after a start); else ``unhealthy``
``latest_executor_heartbeat``  the *most recent* row's heartbeat, alive or not
                            (Airflow's rule: running rows first, then the latest
                            heartbeat)
``detailed_status``         ``unknown`` when there are live rows and none has a
                            verdict; else ``healthy`` (all fine), ``degraded``
                            (some), ``down`` (none, or no live row)
``instances``               the live rows (``state = 'running'``, no
                            ``end_date``, heartbeat younger than the threshold),
                            by host, executor and instance; when the entry's
                            JSON would pass 16 KB (hundreds of executors),
                            those ``unhealthy``, then ``unknown``, are kept
                            first and the rest left out
``instances_left_out``      how many live rows were left out (0 but with
                            hundreds of executors)
``instances[].team_name``   the team of a team's executor (``team_a`` of
                            ``team_a=CeleryExecutor``), else ``null``
``instances[].health``      ``executor_health``; a value Overseer does not write
                            is ``unhealthy``, saying so
``instances[].reason``      ``unhealthy``: the row's reason (``""`` if none);
                            ``unknown``: the row's reason, else
                            ``not checked yet``; ``healthy``: the row's reason
==========================  ====================================================

Where they differ, on purpose, because Airflow's endpoint answers while Overseer
does not run:

- the entry is always there (Overseer leaves it out when its last supervisor
  closed its rows): with no live row it is ``unhealthy``/``down``;
- it has a ``reason`` of its own, only when something is to be said of Overseer
  itself: no ``ExecutorJob`` row at all, every supervisor stopped, a host whose
  rows stopped heartbeating, or the table could not be read (then ``status`` and
  ``detailed_status`` are ``unknown``);
- ``since``, ``previous`` and ``detail`` are always ``null``: they come from
  Overseer's history table and its own checks, not from the ``job`` table (one
  query per request reads only that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

#: Airflow's job type of Overseer's rows.
JOB_TYPE = "ExecutorJob"
#: ``job.state`` of a row whose supervisor lives.
RUNNING = "running"
#: The verdicts ``job.executor_health`` holds.
HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
#: Overseer's reason for an ``unknown`` row without one.
NOT_CHECKED_YET = "not checked yet"
#: The threshold when ``[overseer] executor_health_check_threshold`` is not set:
#: Overseer's own default (30 s, as Airflow's other components).
DEFAULT_THRESHOLD = timedelta(seconds=30)
#: Hosts named in the entry's ``reason`` at most, the most recent first.
MAX_HOSTS_NAMED = 5
#: The most bytes the entry's JSON takes (Overseer's ``ENTRY_BUDGET``).
ENTRY_BUDGET = 16 * 1024


@dataclass(frozen=True)
class Row:
    """One ``ExecutorJob`` row, its times aware and in UTC."""

    id: int
    state: str | None
    executor_class: str | None
    hostname: str | None
    end_date: datetime | None
    latest_heartbeat: datetime | None
    executor_health: str | None
    executor_health_reason: str | None
    executor_instance: str | None
    executor_health_checked_at: datetime | None


def timestamp(at: datetime | None) -> str | None:
    """A time as Airflow's JSON carries it: ``isoformat()`` of an aware UTC time
    (``2026-11-29T19:48:48.365305+00:00``, no fraction when it is zero)."""
    return None if at is None else at.astimezone(timezone.utc).isoformat()


def is_alive(row: Row, threshold: timedelta, now: datetime) -> bool:
    """Airflow's liveness test: running, and a heartbeat younger than ``threshold``."""
    return (
        row.state == RUNNING
        and row.latest_heartbeat is not None
        and now - row.latest_heartbeat < threshold
    )


def most_recent(rows: Iterable[Row]) -> Row | None:
    """Airflow's *most recent job* (``Job.most_recent_job``): running rows first,
    then the latest heartbeat first."""
    oldest = datetime.min.replace(tzinfo=timezone.utc)
    return min(
        rows,
        key=lambda r: (r.state != RUNNING, -(r.latest_heartbeat or oldest).timestamp()),
        default=None,
    )


def verdict(row: Row) -> tuple[str, str | None]:
    """The row's ``health`` and ``reason``, as Overseer reads its columns."""
    health, reason = row.executor_health, row.executor_health_reason
    if health == HEALTHY:
        return HEALTHY, reason
    if health == UNHEALTHY:
        return UNHEALTHY, reason or ""
    if health == UNKNOWN:
        return UNKNOWN, reason if reason is not None else NOT_CHECKED_YET
    shown = json.dumps(health if health is not None else "", ensure_ascii=False)
    return UNHEALTHY, f"job table: executor_health has unexpected value {shown}"


def team_of(executor: str | None) -> str | None:
    """The team of an executor named as Overseer names a team's
    (``team_a=CeleryExecutor``), as upstream's ``team_name``; else ``None``."""
    if executor is None or "=" not in executor:
        return None
    return executor.split("=", 1)[0] or None


def instance(row: Row) -> dict[str, Any]:
    """One live row, keyed as Overseer's ``instances[]``."""
    health, reason = verdict(row)
    return {
        "executor": row.executor_class,
        "instance": row.executor_instance,
        "hostname": row.hostname,
        "team_name": team_of(row.executor_class),
        "latest_executor_heartbeat": timestamp(row.latest_heartbeat),
        "health": health,
        "reason": reason,
        "checked_at": timestamp(row.executor_health_checked_at),
        "since": None,
        "previous": None,
        "detail": None,
    }


def _seconds(threshold: timedelta) -> str:
    seconds = threshold.total_seconds()
    return f"{seconds:g}s"


def _sort_key(i: dict[str, Any]) -> tuple:
    # None before any text, as Rust orders Option<String>.
    return tuple((v is not None, v or "") for v in (i["hostname"], i["executor"], i["instance"]))


def executor_entry(rows: Iterable[Row], threshold: timedelta, now: datetime) -> dict[str, Any]:
    """The ``executor`` entry from the ``ExecutorJob`` rows read at ``now``.

    ``rows`` must hold every running row without ``end_date`` and at least the
    row with the latest heartbeat (what :mod:`overseer_airflow.read` selects).
    """
    rows = list(rows)
    latest = most_recent(rows)
    live = [r for r in rows if r.end_date is None and is_alive(r, threshold, now)]
    instances = sorted((instance(r) for r in live), key=_sort_key)
    fine = sum(1 for i in instances if i["health"] != UNHEALTHY)
    judged = any(i["health"] != UNKNOWN for i in instances)
    if instances and not judged:
        detailed = UNKNOWN
    elif fine == 0:
        detailed = "down"
    elif fine == len(instances):
        detailed = HEALTHY
    else:
        detailed = "degraded"
    # Nothing has answered yet: not healthy, not dead either (Airflow's null).
    checked = any(r.executor_health_checked_at is not None for r in live)
    status: str | None = HEALTHY if instances and fine == len(instances) else UNHEALTHY
    if instances and not checked:
        status = None
    entry: dict[str, Any] = {
        "status": status,
        "latest_executor_heartbeat": timestamp(latest.latest_heartbeat if latest else None),
        "detailed_status": detailed,
        "instances": instances,
        "instances_left_out": 0,
    }
    reason = overseer_reason(rows, live, latest, threshold)
    if reason:
        entry["reason"] = reason
    return bounded(entry)


def json_size(value: Any) -> int:
    """The bytes of ``value``'s JSON as the middleware writes it."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def bounded(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` within :data:`ENTRY_BUDGET`: when its instances are too many,
    those ``unhealthy`` are kept first, then ``unknown``, then ``healthy`` (each
    kept one in its place), as Overseer bounds its own entry."""
    if json_size(entry) <= ENTRY_BUDGET:
        return entry
    instances = entry["instances"]
    fixed = json_size({**entry, "instances": [], "instances_left_out": len(instances)})
    rank = {UNHEALTHY: 0, UNKNOWN: 1}
    order = sorted(range(len(instances)), key=lambda i: rank.get(instances[i]["health"], 2))
    room = ENTRY_BUDGET - fixed
    kept = set()
    for i in order:
        # Its JSON and the comma before it.
        needs = json_size(instances[i]) + 1
        if needs <= room:
            room -= needs
            kept.add(i)
    return {
        **entry,
        "instances": [x for i, x in enumerate(instances) if i in kept],
        "instances_left_out": len(instances) - len(kept),
    }


def overseer_reason(
    rows: list[Row], live: list[Row], latest: Row | None, threshold: timedelta
) -> str | None:
    """What is to be said of Overseer itself, or ``None``: no row at all, every
    supervisor stopped, or hosts whose open rows stopped heartbeating."""
    if latest is None:
        return f"Overseer is not running: the job table has no {JOB_TYPE} row"
    if latest.state != RUNNING and latest.end_date is not None:
        return (
            f"Overseer is not running: its last supervisor, on {latest.hostname}, "
            f"stopped at {timestamp(latest.end_date)}"
        )
    live_hosts = {r.hostname for r in live}
    oldest = datetime.min.replace(tzinfo=timezone.utc)
    # Per host without a live row: the last heartbeat of its open rows.
    stale: dict[str | None, datetime] = {}
    for r in rows:
        if r.state == RUNNING and r.end_date is None and r.hostname not in live_hosts:
            stale[r.hostname] = max(stale.get(r.hostname, oldest), r.latest_heartbeat or oldest)
    if not stale:
        return None
    hosts = sorted(stale.items(), key=lambda h: (-h[1].timestamp(), h[0] or ""))
    said = [
        f"Overseer on {host} stopped heartbeating: its last heartbeat was at {timestamp(at) if at > oldest else None} "
        f"(threshold {_seconds(threshold)})"
        for host, at in hosts[:MAX_HOSTS_NAMED]
    ]
    if len(hosts) > MAX_HOSTS_NAMED:
        said.append(f"and {len(hosts) - MAX_HOSTS_NAMED} more host(s)")
    return "; ".join(said)


def unreadable_entry(why: str) -> dict[str, Any]:
    """The entry when the ``job`` table could not be read: nothing is known."""
    return {
        "status": UNKNOWN,
        "latest_executor_heartbeat": None,
        "detailed_status": UNKNOWN,
        "instances": [],
        "instances_left_out": 0,
        "reason": why,
    }
