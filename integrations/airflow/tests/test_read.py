"""The read through a held connection (:class:`overseer_airflow.read.HeldConnection`)
on a SQLite file, with the standard library's driver through SQLAlchemy
(Airflow's environment has it; skipped without). Overseer's
``tests/airflow_health.rs`` runs the same read on Postgres (inside a real
api-server), SQLite and MariaDB against ``overseer serve``."""

from __future__ import annotations

import sqlite3
import tempfile
import unittest
from pathlib import Path

try:
    from sqlalchemy import create_engine
except ImportError:  # pragma: no cover - outside Airflow's environment
    create_engine = None  # type: ignore[assignment]

from overseer_airflow.read import QUERY, HeldConnection

#: Airflow's ``job`` table, as much of it as the read needs, and Overseer's columns.
TABLE = """
CREATE TABLE job (
    id INTEGER PRIMARY KEY, dag_id VARCHAR(250), state VARCHAR(20), job_type VARCHAR(30),
    start_date DATETIME, end_date DATETIME, latest_heartbeat DATETIME,
    executor_class VARCHAR(500), hostname VARCHAR(500), unixname VARCHAR(1000),
    executor_health VARCHAR(20) NOT NULL DEFAULT 'unknown', executor_health_reason TEXT,
    executor_instance VARCHAR(500), executor_health_checked_at DATETIME)
"""
ROW = (
    "INSERT INTO job (state, job_type, latest_heartbeat, executor_class, hostname, executor_health, "
    "executor_instance, executor_health_checked_at) VALUES ('running', 'ExecutorJob', "
    "'2026-11-29 19:48:48.365305', ?, 'sched-1', 'healthy', 'redis://b:6379/0', '2026-11-29 19:48:48')"
)


@unittest.skipIf(create_engine is None, "needs SQLAlchemy (Airflow's environment)")
class Held(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "airflow.db"
        with sqlite3.connect(self.path) as db:
            db.execute(TABLE)
            db.execute(ROW, ("CeleryExecutor",))
        self.engine = create_engine(f"sqlite:///{self.path}")
        self.held = HeldConnection(lambda: self.engine)

    def tearDown(self) -> None:
        self.engine.dispose()
        self.dir.cleanup()

    def write(self, *statements: str) -> None:
        """Another writer (Overseer), through a connection of its own."""
        with sqlite3.connect(self.path) as db:
            for statement in statements:
                db.execute(statement)

    def test_rows_with_aware_utc_times(self) -> None:
        (row,) = self.held.rows()
        self.assertEqual((row.executor_class, row.hostname, row.executor_health), ("CeleryExecutor", "sched-1", "healthy"))
        self.assertEqual(row.latest_heartbeat.isoformat(), "2026-11-29T19:48:48.365305+00:00")
        self.assertIsNone(row.end_date)

    def test_one_connection_held_and_each_read_sees_what_was_written_since(self) -> None:
        self.held.rows()
        first = self.held._connection
        self.write("UPDATE job SET executor_health = 'unhealthy'")
        (row,) = self.held.rows()
        self.assertEqual(row.executor_health, "unhealthy")
        self.assertIs(self.held._connection, first)
        # Autocommit: the read left no transaction open that would hold a writer.
        self.assertFalse(first.dbapi_connection.in_transaction)

    def test_a_lost_connection_is_made_again_within_the_read(self) -> None:
        self.held.rows()
        lost = self.held._connection
        lost.dbapi_connection.close()
        (row,) = self.held.rows()
        self.assertEqual(row.executor_class, "CeleryExecutor")
        self.assertIsNot(self.held._connection, lost)

    def test_a_database_error_is_raised_and_the_connection_kept(self) -> None:
        self.held.rows()
        kept = self.held._connection
        self.write("ALTER TABLE job DROP COLUMN executor_health_checked_at")
        with self.assertRaises(sqlite3.OperationalError) as raised:
            self.held.rows()
        self.assertIn("executor_health_checked_at", str(raised.exception))
        self.assertIs(self.held._connection, kept)

    def test_the_statement_takes_no_parameter(self) -> None:
        self.assertNotIn(":", QUERY.replace("::", ""))


if __name__ == "__main__":
    unittest.main()
