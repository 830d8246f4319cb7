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
                "reason": "the job table could not be read: OperationalError: boom",
            },
        )


if __name__ == "__main__":
    unittest.main()
