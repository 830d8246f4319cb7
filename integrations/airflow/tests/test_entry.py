"""The ``executor`` entry's rules (:mod:`overseer_airflow.entry`), time passed in,
without Airflow or a database: every case of ``entry_cases.json``, the table of
cases Overseer's own entry is held to as well (``crates/core/tests/entry_cases.rs``
in Overseer's repository), so that the two sets of rules cannot drift apart."""

from __future__ import annotations

import json
import unittest
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from overseer_airflow.entry import Row, executor_entry, unreadable_entry

CASES = json.loads(Path(__file__).with_name("entry_cases.json").read_text(encoding="utf-8"))
NOW = datetime.fromisoformat(CASES["now"])
THRESHOLD = timedelta(seconds=CASES["threshold_seconds"])


def ago(seconds: float | None) -> datetime | None:
    return None if seconds is None else NOW - timedelta(seconds=seconds)


def row(columns: dict[str, Any]) -> Row:
    """A case's row: the table's defaults with its own columns over them."""
    c = {**CASES["row_defaults"], **columns}
    return Row(
        id=c["id"],
        state=c["state"],
        executor_class=c["executor_class"],
        hostname=c["hostname"],
        end_date=ago(c["end_age"]),
        latest_heartbeat=ago(c["age"]),
        executor_health=c["executor_health"],
        executor_health_reason=c["executor_health_reason"],
        executor_instance=c["executor_instance"],
        executor_health_checked_at=ago(c["checked_age"]),
    )


class Entry(unittest.TestCase):
    def test_every_case_of_the_shared_table(self) -> None:
        self.assertGreater(len(CASES["cases"]), 10)
        for case in CASES["cases"]:
            with self.subTest(case["name"]):
                expected = case["plugin_entry"] if case["entry"] is None else dict(case["entry"])
                if "plugin_reason" in case:
                    expected["reason"] = case["plugin_reason"]
                got = executor_entry([row(r) for r in case["rows"]], THRESHOLD, NOW)
                self.assertEqual(got, expected)

    def test_an_unreadable_table_is_unknown_saying_why(self) -> None:
        e = unreadable_entry("the job table could not be read: OperationalError: boom")
        self.assertEqual(
            e,
            {
                "status": "unknown",
                "latest_executor_heartbeat": None,
                "detailed_status": "unknown",
                "instances": [],
                "instances_left_out": 0,
                "reason": "the job table could not be read: OperationalError: boom",
            },
        )

    def test_hundreds_of_executors_stay_within_16_kb_keeping_those_at_fault(self) -> None:
        # 400 live rows, every 40th unhealthy and every 40th unknown: about 120 KB whole.
        health = {0: "unhealthy", 20: "unknown"}
        rows = [
            row(
                {
                    "id": i,
                    "hostname": f"host-{i:03}",
                    "executor_health": health.get(i % 40, "healthy"),
                    "executor_health_reason": "not answering" if i % 40 == 0 else None,
                }
            )
            for i in range(400)
        ]
        entry = executor_entry(rows, THRESHOLD, NOW)
        size = len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode())
        self.assertLessEqual(size, 16 * 1024)
        shown = entry["instances"]
        self.assertEqual(len(shown) + entry["instances_left_out"], 400)
        self.assertGreater(entry["instances_left_out"], 0)
        at_fault = [i["hostname"] for i in shown if i["health"] != "healthy"]
        self.assertEqual(len(at_fault), 20, "every row at fault is kept")
        hosts = [i["hostname"] for i in shown]
        self.assertEqual(hosts, sorted(hosts), "those shown keep their order")
        # The verdict is the whole fleet's, not the part shown.
        self.assertEqual(entry["status"], "unhealthy")
        self.assertEqual(entry["detailed_status"], "degraded")


if __name__ == "__main__":
    unittest.main()
