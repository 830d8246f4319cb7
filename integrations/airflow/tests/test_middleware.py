"""The root middleware (:mod:`overseer_airflow.middleware`) on a small FastAPI
app standing in for Airflow's, its rows given instead of read. Needs Starlette,
FastAPI and httpx (Airflow's environment has them); skipped without them.
Overseer's ``tests/airflow_health.rs`` runs the middleware in a real Airflow."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
import unittest
from datetime import datetime, timedelta, timezone

try:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.middleware.gzip import GZipMiddleware
    from starlette.testclient import TestClient
except ImportError:  # pragma: no cover - outside Airflow's environment
    FastAPI = None  # type: ignore[assignment,misc]

from overseer_airflow import middleware
from overseer_airflow.entry import Row
from overseer_airflow.middleware import ExecutorHealthMiddleware, Reads, add_entry, redact

#: Airflow's own answer, as its endpoint writes it.
AIRFLOW = {
    "metadatabase": {"status": "healthy"},
    "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": "2026-11-29T19:48:48.365305+00:00"},
    "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
    "dag_processor": {"status": None, "latest_dag_processor_heartbeat": None},
}


THRESHOLD = timedelta(seconds=30)


def healthy_row() -> Row:
    now = datetime.now(timezone.utc)
    return Row(1, "running", "CeleryExecutor", "sched-1", None, now, "healthy", None, "redis://b:6379/0", now)


def app(
    read_rows,
    *,
    root_path: str = "",
    gzip_inside: bool = False,
    pad: int = 0,
    refresh: timedelta = timedelta(seconds=1),
) -> FastAPI:
    """Airflow's order: the plugin's middleware inside GZip (``gzip_inside``: the
    other way round). ``pad`` makes Airflow's answer big enough to be compressed;
    ``refresh`` is ``[overseer] refresh_interval`` (its default)."""
    api = FastAPI(root_path=root_path)
    body = dict(AIRFLOW, **({"padding": "x" * pad} if pad else {}))

    @api.get("/api/v2/monitor/health")
    def health():
        return body

    @api.get("/api/v2/other")
    def other():
        return {"a": 1}

    @api.get("/api/v2/monitor/health-stream")
    def stream():
        return StreamingResponse(iter([b'{"a":', b"1}"]), media_type="application/json")

    if gzip_inside:
        api.add_middleware(GZipMiddleware, minimum_size=10)
        api.add_middleware(ExecutorHealthMiddleware, read_rows=read_rows, threshold=THRESHOLD, refresh=refresh)
    else:
        api.add_middleware(ExecutorHealthMiddleware, read_rows=read_rows, threshold=THRESHOLD, refresh=refresh)
        api.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=5)
    return api


@unittest.skipIf(FastAPI is None, "needs FastAPI, Starlette and httpx (Airflow's environment)")
class Middleware(unittest.TestCase):
    def test_the_entry_is_added_and_airflows_entries_stay_byte_for_byte(self) -> None:
        response = TestClient(app(lambda: [healthy_row()])).get("/api/v2/monitor/health")
        self.assertEqual(response.status_code, 200)
        airflow = JSONResponse(AIRFLOW).body
        self.assertTrue(response.content.startswith(airflow[:-1] + b',"executor":{'), response.content)
        self.assertEqual(int(response.headers["content-length"]), len(response.content))
        executor = response.json()["executor"]
        self.assertEqual((executor["status"], executor["instances"][0]["hostname"]), ("healthy", "sched-1"))
        self.assertEqual(list(response.json()), [*AIRFLOW, "executor"])

    def test_under_a_base_url_prefix(self) -> None:
        client = TestClient(app(lambda: [healthy_row()], root_path="/airflow"))
        self.assertIn("executor", client.get("/airflow/api/v2/monitor/health").json())
        self.assertIn("executor", client.get("/api/v2/monitor/health").json())

    def test_gzip_on_either_side(self) -> None:
        for gzip_inside in (False, True):
            client = TestClient(app(lambda: [healthy_row()], gzip_inside=gzip_inside, pad=4000))
            response = client.get("/api/v2/monitor/health", headers={"accept-encoding": "gzip"})
            self.assertEqual(response.headers.get("content-encoding"), "gzip", gzip_inside)
            self.assertEqual(response.json()["executor"]["status"], "healthy", gzip_inside)
            self.assertEqual(response.json()["padding"], "x" * 4000)

    def test_a_gzipped_body_gets_the_entry_inside(self) -> None:
        plain = json.dumps(AIRFLOW).encode()
        self.assertEqual(
            json.loads(add_entry(plain, {"status": "healthy"}) or b"")["executor"],
            {"status": "healthy"},
        )
        self.assertEqual(add_entry(b"{}", {"s": 1}), b'{"executor":{"s":1}}')
        self.assertEqual(add_entry(b'{"a":1}\n', {"s": 1}), b'{"a":1,"executor":{"s":1}}\n')
        self.assertIsNone(add_entry(b'{"executor":{}}', {"s": 1}))
        self.assertIsNone(add_entry(b"[1]", {"s": 1}))
        self.assertIsNone(add_entry(b"not json", {"s": 1}))
        self.assertEqual(add_entry(b" { } ", {"s": 1}), b' { "executor":{"s":1}} ')
        self.assertIsNone(add_entry(gzip.compress(plain), {"s": 1}))

    def test_other_routes_and_methods_pass_untouched_without_a_read(self) -> None:
        reads = []
        client = TestClient(app(lambda: reads.append(1) or []))
        self.assertEqual(client.get("/api/v2/other").json(), {"a": 1})
        self.assertEqual(client.get("/api/v2/monitor/health-stream").content, b'{"a":1}')
        self.assertEqual(client.post("/api/v2/monitor/health").status_code, 405)
        self.assertEqual(reads, [])

    def test_a_streamed_body_is_held_to_its_end(self) -> None:
        api = FastAPI()

        @api.get("/api/v2/monitor/health")
        def health():
            return StreamingResponse(iter([b'{"metadatabase":', b'{"status":"healthy"}}']), media_type="application/json")

        api.add_middleware(ExecutorHealthMiddleware, read_rows=lambda: [], threshold=THRESHOLD, refresh=timedelta(0))
        response = TestClient(api).get("/api/v2/monitor/health")
        self.assertTrue(response.content.startswith(b'{"metadatabase":{"status":"healthy"},"executor":{'))
        self.assertEqual(response.json()["executor"]["reason"], "Overseer is not running: the job table has no ExecutorJob row")

    def test_a_database_error_is_an_unknown_entry_without_credentials_never_a_500(self) -> None:
        class OperationalError(Exception):
            pass

        def fails() -> list[Row]:
            raise OperationalError('could not connect to postgresql://airflow:s3cret@db:5432/airflow\npassword=s3cret')

        response = TestClient(app(fails)).get("/api/v2/monitor/health")
        self.assertEqual(response.status_code, 200)
        self.assertNotIn(b"s3cret", response.content)
        body = response.json()
        self.assertEqual({k: body[k] for k in AIRFLOW}, AIRFLOW)
        self.assertEqual((body["executor"]["status"], body["executor"]["detailed_status"]), ("unknown", "unknown"))
        self.assertEqual(
            body["executor"]["reason"],
            "the job table could not be read: OperationalError: could not connect to "
            "postgresql://airflow:***@db:5432/airflow",
        )

    def test_before_overseers_migration_the_entry_says_so_and_it_is_logged_once(self) -> None:
        class ProgrammingError(Exception):
            pass

        # As each database says a column is missing.
        for said in [
            'column job.executor_health does not exist\nLINE 1: SELECT job.id, ...',
            "no such column: job.executor_instance",
            "(1054, \"Unknown column 'job.executor_health_reason' in 'field list'\")",
        ]:

            def fails(said: str = said) -> list[Row]:
                raise ProgrammingError(said)

            client = TestClient(app(fails, refresh=timedelta(0)))
            with self.assertLogs("overseer_airflow.middleware", level="INFO") as logs:
                for _ in range(5):
                    body = client.get("/api/v2/monitor/health").json()
            self.assertEqual(body["executor"]["status"], "unknown")
            self.assertTrue(
                body["executor"]["reason"].startswith("Overseer's migration has not run on this database: "),
                body["executor"]["reason"],
            )
            self.assertIn("run `overseer migrate`", body["executor"]["reason"])
            self.assertEqual(len(logs.records), 1, [r.getMessage() for r in logs.records])

    def test_a_read_slower_than_the_timeout_is_unknown(self) -> None:
        original = middleware.READ_TIMEOUT
        middleware.READ_TIMEOUT = 0.05
        try:
            body = TestClient(app(lambda: time.sleep(0.5) or [])).get("/api/v2/monitor/health").json()
        finally:
            middleware.READ_TIMEOUT = original
        self.assertEqual(body["executor"]["reason"], "the job table did not answer within 0.05s")

    def test_redaction(self) -> None:
        self.assertEqual(redact("x redis://:pw@h:6379/0 y"), "x redis://:***@h:6379/0 y")
        self.assertEqual(redact("host=db password=pw user=a"), "host=db password=*** user=a")
        self.assertEqual(redact("redis://h:6379/0"), "redis://h:6379/0")


def unhealthy_row() -> Row:
    now = datetime.now(timezone.utc)
    return Row(1, "running", "CeleryExecutor", "sched-1", None, now, "unhealthy", "broker down", "redis://b:6379/0", now)


@unittest.skipIf(FastAPI is None, "needs FastAPI, Starlette and httpx (Airflow's environment)")
class Refresh(unittest.TestCase):
    """One read serves the requests of one refresh interval; none is served an
    entry older than that."""

    def test_one_read_serves_every_request_within_the_refresh(self) -> None:
        reads: list[int] = []
        client = TestClient(app(lambda: reads.append(1) or [healthy_row()], refresh=timedelta(seconds=60)))
        bodies = [client.get("/api/v2/monitor/health").content for _ in range(20)]
        self.assertEqual(len(reads), 1, "one read for 20 requests within the refresh")
        self.assertEqual(len(set(bodies)), 1)
        self.assertEqual(json.loads(bodies[0])["executor"]["status"], "healthy")

    def test_an_entry_is_never_older_than_the_refresh(self) -> None:
        rows = [healthy_row()]
        reads: list[int] = []

        def read() -> list[Row]:
            reads.append(1)
            return list(rows)

        client = TestClient(app(read, refresh=timedelta(seconds=0.2)))
        self.assertEqual(client.get("/api/v2/monitor/health").json()["executor"]["status"], "healthy")
        rows[:] = [unhealthy_row()]
        time.sleep(0.25)
        executor = client.get("/api/v2/monitor/health").json()["executor"]
        self.assertEqual((executor["status"], executor["instances"][0]["reason"]), ("unhealthy", "broker down"))
        self.assertEqual(len(reads), 2)

    def test_a_failed_read_is_not_kept(self) -> None:
        calls: list[int] = []

        def read() -> list[Row]:
            calls.append(1)
            if len(calls) == 1:
                raise OSError("database down")
            return [healthy_row()]

        client = TestClient(app(read, refresh=timedelta(seconds=60)))
        first = client.get("/api/v2/monitor/health").json()["executor"]
        self.assertEqual(first["status"], "unknown")
        self.assertEqual(client.get("/api/v2/monitor/health").json()["executor"]["status"], "healthy")
        self.assertEqual(client.get("/api/v2/monitor/health").json()["executor"]["status"], "healthy")
        self.assertEqual(len(calls), 2, "the failure read again, the success kept")

    def test_a_zero_refresh_reads_for_every_request(self) -> None:
        reads: list[int] = []
        client = TestClient(app(lambda: reads.append(1) or [healthy_row()], refresh=timedelta(0)))
        for _ in range(3):
            client.get("/api/v2/monitor/health")
        self.assertEqual(len(reads), 3)


class ReadsInFlight(unittest.TestCase):
    """One read at a time in the plugin's thread; those who ask meanwhile share the next."""

    def test_who_asks_during_a_read_shares_the_read_after_it(self) -> None:
        release = threading.Event()
        started: list[float] = []

        def read() -> list[Row]:
            started.append(time.monotonic())
            release.wait(5)
            return [healthy_row()]

        async def scenario() -> tuple[list[list[Row]], list[float]]:
            reads = Reads(read)
            first = asyncio.ensure_future(reads.rows())
            while not started:
                await asyncio.sleep(0.001)
            asked = time.monotonic()
            later = [asyncio.ensure_future(reads.rows()) for _ in range(5)]
            release.set()
            return await asyncio.gather(first, *later), [asked]

        answers, (asked,) = asyncio.run(scenario())
        self.assertEqual(len(started), 2, "one read for the first request, one for the five after it")
        self.assertGreater(started[1], asked, "the shared read began after they asked")
        self.assertTrue(all(len(a) == 1 for a in answers))

    def test_an_error_goes_to_every_waiter_and_the_next_read_is_made_anew(self) -> None:
        calls = []

        def read() -> list[Row]:
            calls.append(1)
            if len(calls) == 1:
                raise OSError("database down")
            return []

        async def scenario() -> list[object]:
            reads = Reads(read)
            try:
                await reads.rows()
            except OSError as e:
                first: object = e
            return [first, await reads.rows()]

        first, second = asyncio.run(scenario())
        self.assertIsInstance(first, OSError)
        self.assertEqual(second, [])

    def test_a_new_event_loop_starts_clean(self) -> None:
        reads = Reads(lambda: [])

        async def once() -> list[Row]:
            return await reads.rows()

        self.assertEqual(asyncio.run(once()), [])
        self.assertEqual(asyncio.run(once()), [])


class Threshold(unittest.TestCase):
    def test_seconds_from_the_option_else_30(self) -> None:
        class Conf:
            def __init__(self, value: object) -> None:
                self.value = value

            def get(self, section: str, key: str, fallback: object = None) -> object:
                assert (section, key) == ("overseer", "executor_health_check_threshold")
                return self.value if self.value is not None else fallback

        self.assertEqual(middleware.configured_threshold(Conf("12.5")), timedelta(seconds=12.5))
        self.assertEqual(middleware.configured_threshold(Conf(None)), timedelta(seconds=30))
        for bad in ("soon", "0", "-3", "nan"):
            with self.assertLogs(middleware.log, "WARNING") as logs:
                self.assertEqual(middleware.configured_threshold(Conf(bad)), timedelta(seconds=30))
            self.assertIn("executor_health_check_threshold", logs.output[0])

    def test_refresh_seconds_from_the_option_else_1_and_0_reads_each_time(self) -> None:
        class Conf:
            def __init__(self, value: object) -> None:
                self.value = value

            def get(self, section: str, key: str, fallback: object = None) -> object:
                assert (section, key) == ("overseer", "refresh_interval")
                return self.value if self.value is not None else fallback

        self.assertEqual(middleware.configured_refresh(Conf("2.5")), timedelta(seconds=2.5))
        self.assertEqual(middleware.configured_refresh(Conf("0")), timedelta(0))
        self.assertEqual(middleware.configured_refresh(Conf(None)), timedelta(seconds=1))
        for bad in ("often", "-1", "inf"):
            with self.assertLogs(middleware.log, "WARNING") as logs:
                self.assertEqual(middleware.configured_refresh(Conf(bad)), timedelta(seconds=1))
            self.assertIn("refresh_interval", logs.output[0])


if __name__ == "__main__":
    unittest.main()
