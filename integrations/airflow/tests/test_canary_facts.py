"""The canary's facts for the card (:mod:`overseer_airflow.canary_facts`): the
statement against real tables (a SQLite file, and a schema of its own on the
loopback Postgres), and the JSON the card's app serves
(:func:`overseer_airflow.card.card_app`), with Airflow's own check of the user
where Airflow is installed.

Needs SQLAlchemy (Airflow's environment has it; skipped without), FastAPI and
httpx for the app. The Postgres case needs a server at
``OVERSEER_TEST_POSTGRES_URL`` (default ``postgresql+psycopg2://postgres@127.0.0.1:5432/postgres``,
Airflow's driver):
without one it is skipped, saying so, and fails when ``CI`` is set. Overseer's
``tests/airflow_home_card.rs`` reads the same rows from a real Airflow's
Postgres through the api-server, in Chromium.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import tempfile
import unittest
import uuid
from datetime import datetime, timezone
from pathlib import Path

try:
    from sqlalchemy import create_engine, text
except ImportError:  # pragma: no cover - outside Airflow's environment
    create_engine = None  # type: ignore[assignment]

from overseer_airflow import canary_facts
from overseer_airflow.canary_facts import QUERY, facts, read_tasks

HAS_APP = all(importlib.util.find_spec(m) for m in ("fastapi", "httpx"))
HAS_AIRFLOW = importlib.util.find_spec("airflow") is not None
POSTGRES_URL = os.environ.get("OVERSEER_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")

#: Airflow's ``dag_run`` and ``task_instance``, the columns the statement reads
#: (``{ts}``: the time type, as Airflow's ``UtcDateTime`` is on each database).
TABLES = """
CREATE TABLE dag_run (id INTEGER PRIMARY KEY, dag_id VARCHAR(250) NOT NULL,
    run_id VARCHAR(250) NOT NULL, logical_date {ts});
CREATE TABLE task_instance (task_id VARCHAR(250) NOT NULL, dag_id VARCHAR(250) NOT NULL,
    run_id VARCHAR(250) NOT NULL, map_index INTEGER NOT NULL DEFAULT -1, state VARCHAR(20),
    queue VARCHAR(256), queued_dttm {ts}, start_date {ts}, end_date {ts},
    PRIMARY KEY (dag_id, task_id, run_id, map_index));
"""
#: The canary's runs, oldest first: run_0 falls outside the three read; one
#: triggered by hand without a logical date is no scheduled run.
RUNS = [
    (1, "overseer_canary", "run_0", "2026-12-02 09:55:00"),
    (2, "overseer_canary", "run_1", "2026-12-02 10:00:00"),
    (3, "overseer_canary", "run_2", "2026-12-02 10:05:00"),
    (4, "overseer_canary", "run_3", "2026-12-02 10:10:00"),
    (5, "overseer_canary", "manual", None),
    (6, "etl", "run_3", "2026-12-02 10:10:00"),
]
#: ``(task_id, dag_id, run_id, state, queue, queued, started, ended)``.
TASKS = [
    # default: picked up in 1.25 s and succeeded in run_2; run_3 waits in queued.
    ("canary_default", "overseer_canary", "run_1", "success", "default",
     "2026-12-02 10:00:00", "2026-12-02 10:00:03", "2026-12-02 10:00:04"),
    ("canary_default", "overseer_canary", "run_2", "success", "default",
     "2026-12-02 10:05:00", "2026-12-02 10:05:01.250000", "2026-12-02 10:05:02.500000"),
    ("canary_default", "overseer_canary", "run_3", "queued", "default",
     "2026-12-02 10:10:00", None, None),
    # gpu: its last success is in run_0, not read; run_3 failed after a pickup of 2 s.
    ("canary_gpu", "overseer_canary", "run_0", "success", "gpu",
     "2026-12-02 09:55:00", "2026-12-02 09:55:01", "2026-12-02 09:55:02"),
    ("canary_gpu", "overseer_canary", "run_2", "failed", "gpu",
     "2026-12-02 10:05:00", None, "2026-12-02 10:06:00"),
    ("canary_gpu", "overseer_canary", "run_3", "failed", "gpu",
     "2026-12-02 10:10:00", "2026-12-02 10:10:02", "2026-12-02 10:10:03"),
    # Neither the manual run nor another DAG's task is the canary's read.
    ("canary_default", "overseer_canary", "manual", "queued", "default",
     "2026-12-02 10:11:00", None, None),
    ("canary_default", "etl", "run_3", "queued", "default", "2026-12-02 09:00:00", None, None),
]
#: When the read is made: the queued canary has waited 40 s.
NOW = datetime(2026, 12, 2, 10, 10, 40, tzinfo=timezone.utc)
#: What the card receives then.
EXPECTED = {
    "dag_id": "overseer_canary",
    "runs_read": 3,
    "read_at": "2026-12-02T10:10:40+00:00",
    "every_seconds": 300.0,
    "silent_seconds": None,
    "queues": [
        {
            "queue": "default",
            "task_id": "canary_default",
            "run_id": "run_3",
            "state": "queued",
            "pickup_seconds": 1.25,
            "picked_up_at": "2026-12-02T10:05:01.250000+00:00",
            "last_success": "2026-12-02T10:05:02.500000+00:00",
            "waiting_since": "2026-12-02T10:10:00+00:00",
            "waiting_seconds": 40.0,
        },
        {
            "queue": "gpu",
            "task_id": "canary_gpu",
            "run_id": "run_3",
            "state": "failed",
            "pickup_seconds": 2.0,
            "picked_up_at": "2026-12-02T10:10:02+00:00",
            "last_success": None,
            "waiting_since": None,
            "waiting_seconds": None,
        },
    ],
}


def fill(execute, ts: str, placeholder: str = "?") -> None:
    """Airflow's two tables and the rows above, through ``execute(sql, params)``."""
    for statement in TABLES.format(ts=ts).split(";"):
        if statement.strip():
            execute(statement, ())
    marks = ", ".join([placeholder] * 4)
    for run in RUNS:
        execute(f"INSERT INTO dag_run (id, dag_id, run_id, logical_date) VALUES ({marks})", run)
    marks = ", ".join([placeholder] * 8)
    for task in TASKS:
        execute(
            "INSERT INTO task_instance (task_id, dag_id, run_id, state, queue, queued_dttm, "
            f"start_date, end_date) VALUES ({marks})",
            task,
        )


@unittest.skipIf(create_engine is None, "needs SQLAlchemy (Airflow's environment)")
class OnSqlite(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "airflow.db"
        self.engine = create_engine(f"sqlite:///{self.path}")

    def tearDown(self) -> None:
        self.engine.dispose()
        self.dir.cleanup()

    def fill(self) -> None:
        # Airflow writes SQLite's times as text, `2026-12-02 10:05:01.250000`.
        with sqlite3.connect(self.path) as db:
            fill(db.execute, "DATETIME")

    def read(self) -> list[canary_facts.Task]:
        with self.engine.connect() as connection:
            return read_tasks(connection)

    def test_each_queue_its_latest_state_pickup_success_and_wait(self) -> None:
        self.fill()
        self.assertEqual(facts(self.read(), NOW), EXPECTED)

    def test_a_canary_that_stopped_running_says_for_how_long(self) -> None:
        # The latest run at 10:10, every 5 minutes: at 10:24:59 two runs are
        # late but not three periods; at 10:25 the canary is silent.
        self.fill()
        tasks = self.read()
        almost = datetime(2026, 12, 2, 10, 24, 59, tzinfo=timezone.utc)
        self.assertIsNone(facts(tasks, almost)["silent_seconds"])
        silent = facts(tasks, datetime(2026, 12, 2, 10, 25, tzinfo=timezone.utc))
        self.assertEqual((silent["every_seconds"], silent["silent_seconds"]), (300.0, 900.0))

    def test_no_canary_no_queues(self) -> None:
        with sqlite3.connect(self.path) as db:
            for statement in TABLES.format(ts="DATETIME").split(";"):
                db.execute(statement)
        self.assertEqual(facts(self.read(), NOW)["queues"], [])

    def test_the_statement_takes_no_parameter(self) -> None:
        self.assertNotIn(":", QUERY.replace("::", ""))


def postgres_or_skip(test: unittest.TestCase) -> str:
    """The loopback Postgres' URL; skipped (failed under ``CI``) when it does not answer."""
    try:
        import psycopg2  # noqa: F401 - Airflow's Postgres driver

        engine = create_engine(POSTGRES_URL)
        with engine.connect():
            pass
        engine.dispose()
    except Exception as e:  # noqa: BLE001 - any reason it cannot be reached
        first = (str(e).strip().splitlines() or [""])[0]
        why = f"Postgres at {POSTGRES_URL} (OVERSEER_TEST_POSTGRES_URL): {type(e).__name__}: {first}"
        if os.environ.get("CI"):
            test.fail(f"unavailable under CI: {why}")
        print(f"SKIPPED: {why}")
        test.skipTest(why)
    return POSTGRES_URL


@unittest.skipIf(create_engine is None, "needs SQLAlchemy (Airflow's environment)")
class OnPostgres(unittest.TestCase):
    """The times as Airflow stores them there (``TIMESTAMP WITH TIME ZONE``),
    in a schema of the test's own, dropped after."""

    def test_each_queue_its_latest_state_pickup_success_and_wait(self) -> None:
        url = postgres_or_skip(self)
        schema = f"overseer_canary_{uuid.uuid4().hex[:12]}"
        engine = create_engine(url, connect_args={"options": f"-c search_path={schema}"})
        try:
            with engine.begin() as connection:
                connection.execute(text(f"CREATE SCHEMA {schema}"))
                raw = connection.connection.cursor()
                # Times written as UTC whatever the server's zone.
                raw.execute("SET TIME ZONE 'UTC'")
                fill(raw.execute, "TIMESTAMP WITH TIME ZONE", "%s")
            with engine.connect() as connection:
                # Read in another zone: aware times come back as UTC all the same.
                connection.execute(text("SET TIME ZONE 'Asia/Kolkata'"))
                self.assertEqual(facts(read_tasks(connection), NOW), EXPECTED)
        finally:
            with engine.begin() as connection:
                connection.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            engine.dispose()


@unittest.skipIf(create_engine is None, "needs SQLAlchemy (Airflow's environment)")
@unittest.skipUnless(HAS_APP, "needs FastAPI and httpx (Airflow's environment)")
class TheRoute(unittest.TestCase):
    """``GET /overseer-card/canary`` on the card's app, mounted as Airflow mounts it."""

    def client(self, read, access=lambda: None):
        """The card's app on a root app; ``access`` stands for Airflow's check
        (``None``: Airflow's own)."""
        from fastapi import FastAPI
        from fastapi.testclient import TestClient

        from overseer_airflow import card

        if not card.bundle_path().is_file():
            self.skipTest("the card's bundle is not built here: `npm ci && npm run build`")
        root = FastAPI()
        root.mount(card.URL_PREFIX, card.card_app(read=read, access=access))
        return TestClient(root)

    def test_the_facts_as_json_never_cached(self) -> None:
        # No rows: the canary is not installed.
        answer = self.client(lambda: []).get("/overseer-card/canary")
        self.assertEqual(answer.status_code, 200, answer.text)
        self.assertEqual(answer.headers["cache-control"], "no-store")
        body = answer.json()
        self.assertEqual((body["dag_id"], body["runs_read"], body["queues"]), ("overseer_canary", 3, []))
        datetime.fromisoformat(body["read_at"])

    def test_a_database_error_is_a_503_in_one_line_without_credentials(self) -> None:
        def fails() -> list:
            raise RuntimeError("could not connect to postgresql://airflow:s3cret@db:5432/airflow\nDETAIL: more")

        answer = self.client(fails).get("/overseer-card/canary")
        self.assertEqual(answer.status_code, 503)
        self.assertEqual(
            answer.json(),
            {
                "detail": "the canary's task instances could not be read: RuntimeError: could not "
                "connect to postgresql://airflow:***@db:5432/airflow"
            },
        )

    @unittest.skipUnless(HAS_AIRFLOW, "needs Airflow (its auth dependencies)")
    def test_airflow_asks_for_a_user(self) -> None:
        answer = self.client(lambda: [], access=None).get("/overseer-card/canary")
        # Neither an Authorization header nor Airflow's `_token` cookie.
        self.assertEqual(answer.status_code, 401, answer.text)


if __name__ == "__main__":
    unittest.main()
