"""The ``executor`` entry's rules (:mod:`overseer_airflow.entry`), time passed in,
without Airflow or a database. Overseer's ``tests/airflow_health.rs`` holds them
to Overseer's own entry, on a real Airflow."""

from __future__ import annotations

import unittest
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from overseer_airflow.entry import Row, executor_entry, unreadable_entry

NOW = datetime(2026, 11, 29, 19, 48, 48, 365305, tzinfo=timezone.utc)
THRESHOLD = timedelta(seconds=30)


def row(id: int = 1, hostname: str = "sched-1", age: float = 1, **columns: object) -> Row:
    """A running row of ``hostname`` that heartbeat ``age`` seconds ago."""
    fields: dict[str, object] = {
        "id": id,
        "state": "running",
        "executor_class": "CeleryExecutor",
        "hostname": hostname,
        "end_date": None,
        "latest_heartbeat": NOW - timedelta(seconds=age),
        "executor_health": "healthy",
        "executor_health_reason": None,
        "executor_instance": "redis://broker:6379/0",
        "executor_health_checked_at": NOW - timedelta(seconds=2),
    }
    fields.update(columns)
    return Row(**fields)  # type: ignore[arg-type]


def entry(*rows: Row) -> dict:
    return executor_entry(rows, THRESHOLD, NOW)


class Entry(unittest.TestCase):
    def test_a_healthy_row_in_overseers_shape(self) -> None:
        self.assertEqual(
            entry(row()),
            {
                "status": "healthy",
                "latest_executor_heartbeat": "2026-11-29T19:48:47.365305+00:00",
                "detailed_status": "healthy",
                "instances": [
                    {
                        "executor": "CeleryExecutor",
                        "instance": "redis://broker:6379/0",
                        "hostname": "sched-1",
                        "latest_executor_heartbeat": "2026-11-29T19:48:47.365305+00:00",
                        "health": "healthy",
                        "reason": None,
                        "checked_at": "2026-11-29T19:48:46.365305+00:00",
                        "since": None,
                        "previous": None,
                        "detail": None,
                    }
                ],
            },
        )

    def test_whole_seconds_have_no_fraction_as_python_writes_them(self) -> None:
        at = datetime(2026, 11, 29, 19, 48, 40, tzinfo=timezone.utc)
        self.assertEqual(entry(row(latest_heartbeat=at))["latest_executor_heartbeat"], "2026-11-29T19:48:40+00:00")

    def test_one_unhealthy_row_makes_it_unhealthy_and_degraded(self) -> None:
        e = entry(row(), row(2, executor_instance="redis://second:6379/0", executor_health="unhealthy",
                             executor_health_reason="broker unreachable: connection refused"))
        self.assertEqual((e["status"], e["detailed_status"]), ("unhealthy", "degraded"))
        self.assertEqual(e["instances"][1]["reason"], "broker unreachable: connection refused")

    def test_every_row_unhealthy_is_down(self) -> None:
        e = entry(row(executor_health="unhealthy"))
        self.assertEqual((e["status"], e["detailed_status"]), ("unhealthy", "down"))
        self.assertEqual(e["instances"][0]["reason"], "")

    def test_unknown_never_counts_as_dead(self) -> None:
        e = entry(row(executor_health="unknown", executor_health_reason="the sqs:// transport has no health check yet"))
        self.assertEqual((e["status"], e["detailed_status"]), ("healthy", "unknown"))
        self.assertEqual(entry(row(executor_health="unknown"))["instances"][0]["reason"], "not checked yet")
        mixed = entry(row(executor_health="unknown"), row(2, hostname="sched-2"))
        self.assertEqual((mixed["status"], mixed["detailed_status"]), ("healthy", "healthy"))

    def test_nothing_checked_yet_is_null_never_healthy(self) -> None:
        fresh = entry(
            row(executor_health="unknown", executor_health_checked_at=None),
            row(2, hostname="sched-2", executor_health="unknown", executor_health_checked_at=None),
        )
        self.assertEqual((fresh["status"], fresh["detailed_status"]), (None, "unknown"))
        one = entry(row(executor_health="unknown", executor_health_checked_at=None), row(2, hostname="sched-2"))
        self.assertEqual((one["status"], one["detailed_status"]), ("healthy", "healthy"))

    def test_a_value_overseer_does_not_write_is_unhealthy_saying_so(self) -> None:
        i = entry(row(executor_health="sick"))["instances"][0]
        self.assertEqual((i["health"], i["reason"]), ("unhealthy", 'job table: executor_health has unexpected value "sick"'))

    def test_instances_by_host_executor_and_instance(self) -> None:
        e = entry(row(1, "b"), row(2, "a", executor_instance="z"), row(3, "a", executor_instance="y"), row(4, None))
        self.assertEqual([(i["hostname"], i["instance"]) for i in e["instances"]], [(None, "redis://broker:6379/0"), ("a", "y"), ("a", "z"), ("b", "redis://broker:6379/0")])

    def test_no_row_says_overseer_is_not_running(self) -> None:
        self.assertEqual(
            entry(),
            {
                "status": "unhealthy",
                "latest_executor_heartbeat": None,
                "detailed_status": "down",
                "instances": [],
                "reason": "Overseer is not running: the job table has no ExecutorJob row",
            },
        )

    def test_rows_past_the_threshold_are_not_live_and_the_reason_names_the_host(self) -> None:
        e = entry(row(age=30), row(2, age=45, executor_instance="other"))
        self.assertEqual((e["status"], e["detailed_status"], e["instances"]), ("unhealthy", "down", []))
        self.assertEqual(e["latest_executor_heartbeat"], "2026-11-29T19:48:18.365305+00:00")
        self.assertEqual(
            e["reason"],
            "Overseer on sched-1 stopped heartbeating: its last heartbeat was at "
            "2026-11-29T19:48:18.365305+00:00 (threshold 30s)",
        )

    def test_a_stopped_host_is_named_beside_a_live_one(self) -> None:
        e = entry(row(), row(2, "sched-2", age=40))
        self.assertEqual((e["status"], [i["hostname"] for i in e["instances"]]), ("healthy", ["sched-1"]))
        self.assertIn("Overseer on sched-2 stopped heartbeating", e["reason"])
        self.assertNotIn("reason", entry(row(), row(2, "sched-2")))

    def test_every_supervisor_stopped_says_where_and_when(self) -> None:
        closed = row(state="success", end_date=NOW - timedelta(seconds=60), age=61)
        older = row(2, "sched-2", state="failed", end_date=NOW - timedelta(seconds=600), age=601)
        e = entry(closed, older)
        self.assertEqual((e["status"], e["detailed_status"], e["instances"]), ("unhealthy", "down", []))
        self.assertEqual(
            e["reason"],
            "Overseer is not running: its last supervisor, on sched-1, stopped at 2026-11-29T19:47:48.365305+00:00",
        )

    def test_a_running_row_is_the_most_recent_even_with_an_older_heartbeat(self) -> None:
        closed = row(2, state="success", end_date=NOW, age=0)
        e = entry(closed, row(age=10))
        self.assertEqual(e["latest_executor_heartbeat"], "2026-11-29T19:48:38.365305+00:00")
        self.assertEqual(e["status"], "healthy")

    def test_an_unreadable_table_is_unknown_saying_why(self) -> None:
        e = unreadable_entry("the job table could not be read: OperationalError: boom")
        self.assertEqual((e["status"], e["detailed_status"], e["instances"]), ("unknown", "unknown", []))


if __name__ == "__main__":
    unittest.main()
