"""The ``executor`` entry in Airflow's own ``GET /api/v2/monitor/health``: a root
middleware (``fastapi_root_middlewares``) on the api-server's app.

A plain ASGI middleware, so that it sees the response as it is sent:

- only ``GET`` of the health route (under any ``[api] base_url`` prefix, found as
  Starlette finds routes: the request path less the app's ``root_path``) is
  touched; every other request passes straight through;
- the entry is the latest read's while that read was asked for less than
  ``[overseer] refresh_interval`` (1 s) ago: such a request costs the splice
  alone, one read serves every request of an interval whatever their rate, and
  no entry is older than the interval (as Overseer's own endpoint serves a
  report rendered once per refresh). A read that failed is not kept;
- else the entry comes from a read of the ``job`` table that starts once Airflow's
  answer is complete (:class:`Reads`): one thread of the plugin's own makes the
  reads, one at a time, through one connection it holds
  (:class:`overseer_airflow.read.HeldConnection`). A request whose answer is
  complete while a read is in flight waits for the read after it, which starts
  when that one ends and serves every request that came meanwhile: there is
  never more than one read per request, and however many requests come and
  however slow the database is,
  the plugin holds one thread and one connection per api-server worker (none
  of the threads Airflow runs its routes in, none of its pool's connections).
  A request waits at most :data:`READ_TIMEOUT`;
- the response is held until its last body chunk (it may stream), and then only
  a ``200`` JSON object is changed: ``"executor": {...}`` is inserted before its
  closing brace, so the entries Airflow wrote stay byte for byte, and
  ``content-length`` is set to the new length (the body is not parsed:
  Airflow's ``JSONResponse`` writes one object, so the check is that it is
  ``{...}`` without an ``"executor"`` key). A gzip-encoded body (Airflow adds
  ``GZipMiddleware`` outside the plugins' middlewares, so it should not be, but
  another middleware may) is decompressed and compressed again; another encoding,
  a body that is not a JSON object, or one that has an ``executor`` key already,
  is sent as it came;
- a failed or slow read gives an entry whose ``status`` is ``unknown`` and whose
  ``reason`` says why; any other failure here sends Airflow's response unchanged.
  Never a 500 of the plugin's making.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import math
import os
import queue
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from overseer_airflow.entry import DEFAULT_THRESHOLD, Row, executor_entry, unreadable_entry

log = logging.getLogger(__name__)

#: Airflow's health route, below the app's root path.
HEALTH_PATH = "/api/v2/monitor/health"
#: How long the read of the ``job`` table may take before the entry says
#: ``unknown``: longer than a healthy database ever needs, shorter than a probe's
#: usual timeout. (The read goes on in its thread until the database answers.)
READ_TIMEOUT = 5.0
#: Airflow's configuration of the executor threshold (seconds), also
#: ``AIRFLOW__OVERSEER__EXECUTOR_HEALTH_CHECK_THRESHOLD``.
SECTION, THRESHOLD_OPTION = "overseer", "executor_health_check_threshold"
#: How long one read's entry serves the requests after it (seconds), also
#: ``AIRFLOW__OVERSEER__REFRESH_INTERVAL``; ``0`` reads for every request.
REFRESH_OPTION = "refresh_interval"
#: Overseer's own ``supervisor.refresh_interval``: its endpoint's report is
#: never older either.
DEFAULT_REFRESH = timedelta(seconds=1)

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]


def configured_threshold(conf: Any) -> timedelta:
    """``[overseer] executor_health_check_threshold`` in seconds, else 30 s: the
    same value as Overseer's ``thresholds.executor``. A value that is not a
    positive number is ignored with a warning naming the option."""
    return _seconds(conf, THRESHOLD_OPTION, DEFAULT_THRESHOLD, zero=False)


def configured_refresh(conf: Any) -> timedelta:
    """``[overseer] refresh_interval`` in seconds, else 1 s; ``0`` reads the
    table for every request. A value that is not a number of seconds, or is
    negative, is ignored with a warning naming the option."""
    return _seconds(conf, REFRESH_OPTION, DEFAULT_REFRESH, zero=True)


def _seconds(conf: Any, option: str, default: timedelta, *, zero: bool) -> timedelta:
    raw = str(conf.get(SECTION, option, fallback="") or "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and (seconds > 0 or (zero and seconds == 0))):
        log.warning(
            "[%s] %s must be a %s number of seconds, not %r: using %gs",
            SECTION,
            option,
            "non-negative" if zero else "positive",
            raw,
            default.total_seconds(),
        )
        return default
    return timedelta(seconds=seconds)


def route_path(scope: Message) -> str:
    """The path routes are matched against: ``path`` less ``root_path``, as
    Starlette's ``get_route_path`` does."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        return path[len(root) :]
    return path


def redact(text: str) -> str:
    """``text`` with the password of any URL in it, and any ``password=`` of a
    connection string, replaced by ``***``."""

    def url(match: re.Match[str]) -> str:
        token = match.group(0)
        try:
            parts = urlsplit(token)
            if parts.password is None:
                return token
        except ValueError:
            return token
        host = parts.netloc.rsplit("@", 1)[1]
        return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()

    text = re.sub(r"[A-Za-z][A-Za-z0-9+.-]*://\S+", url, text)
    return re.sub(r"(?i)(password\s*=\s*)\S+", r"\1***", text)


def describe(error: BaseException) -> str:
    """A database error in one line, without credentials: the driver's own error
    (SQLAlchemy wraps it as ``orig``) and its first line."""
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {redact(lines[0]) if lines else ''}".rstrip(": ")


#: The columns Overseer's migration adds to Airflow's ``job`` table.
OVERSEER_COLUMNS = (
    "executor_health_checked_at",
    "executor_health_reason",
    "executor_instance",
    "executor_health",
)


def unreadable_because(error: BaseException) -> str:
    """Why the ``job`` table could not be read, in one line: the migration
    that has not run, when the database says one of Overseer's columns is
    missing (Postgres ``column job.executor_health does not exist``, SQLite
    ``no such column``, MySQL ``Unknown column``), else the error itself."""
    why = describe(error)
    lower = why.lower()
    missing = ("does not exist", "no such column", "unknown column")
    column = next((c for c in OVERSEER_COLUMNS if c in lower), None)
    if column and any(m in lower for m in missing):
        return (
            f"Overseer's migration has not run on this database: the job table has no {column} "
            "column (run `overseer migrate`, or start `overseer serve`, on Airflow's database)"
        )
    return f"the job table could not be read: {why}"


def encode(entry: dict[str, Any]) -> bytes:
    """The entry as JSON, as Starlette's ``JSONResponse`` writes JSON."""
    return json.dumps(entry, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def add_entry(body: bytes, entry: dict[str, Any]) -> bytes | None:
    """``body`` (a JSON object, as Airflow's ``JSONResponse`` writes one) with
    ``"executor": entry`` spliced in as its last key (see :func:`splice`)."""
    return splice(body, encode(entry))


def splice(body: bytes, encoded: bytes) -> bytes | None:
    """``body`` (a JSON object, as Airflow's ``JSONResponse`` writes one) with
    ``"executor":`` and the ``encoded`` entry spliced in as its last key, the
    rest byte for byte; ``None`` when it is not ``{...}`` or has an
    ``"executor"`` key already (a later Airflow's: the text ``"executor"``
    anywhere leaves the body as it was). The body is not parsed: the entry is
    added in front of its closing brace."""
    head = body.rstrip()
    start = len(body) - len(body.lstrip())
    if not (head.endswith(b"}") and body[start : start + 1] == b"{") or b'"executor"' in body:
        return None
    empty = not head[start + 1 : -1].strip()
    comma = b"" if empty else b","
    return head[:-1] + comma + b'"executor":' + encoded + b"}" + body[len(head) :]


class Reads:
    """The reads of the ``job`` table of one api-server worker (see the module
    doc): at most one in flight, made by a daemon thread of its own (a read
    stuck on a dead database never holds up the process's exit), and at most
    one waiting after it, shared by every request that came meanwhile.

    Used from the event loop only; ``read`` runs in the thread.
    """

    def __init__(self, read: Callable[[], list[Row]]) -> None:
        self._read = read
        #: The read in flight and the one after it: futures of the loop below.
        self._running: asyncio.Future[list[Row]] | None = None
        self._next: asyncio.Future[list[Row]] | None = None
        #: The loop those futures belong to (a test may run several in turn).
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The reading thread's work: ``(loop, future)`` pairs.
        self._work: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[list[Row]]]] | None = None
        #: The process the thread was started in (a forked child starts its own).
        self._pid = 0

    def rows(self) -> asyncio.Future[list[Row]]:
        """The rows of a read starting now, or of the one after the read in
        flight: a future to await (shielded: one waiter's timeout cancels
        nobody else's read)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._running, self._next, self._loop = None, None, loop
        if self._running is None:
            future = self._start(loop.create_future())
        else:
            if self._next is None:
                self._next = loop.create_future()
            future = self._next
        return asyncio.shield(future)

    def _start(self, future: asyncio.Future[list[Row]]) -> asyncio.Future[list[Row]]:
        self._running = future
        # Nobody may be waiting by the time it ends: its error is then dropped.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._thread().put((asyncio.get_running_loop(), future))
        return future

    def _thread(self) -> queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[list[Row]]]]:
        if self._work is None or self._pid != os.getpid():
            self._work, self._pid = queue.SimpleQueue(), os.getpid()
            threading.Thread(target=self._serve, args=(self._work,), name="overseer-job-read", daemon=True).start()
        return self._work

    def _serve(self, work: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[list[Row]]]]) -> None:
        while True:
            loop, future = work.get()
            try:
                rows, error = self._read(), None
            except BaseException as e:  # noqa: BLE001 - handed to the waiting requests
                rows, error = None, e
            try:
                loop.call_soon_threadsafe(self._done, future, rows, error)
            except RuntimeError:  # the loop is closed: nobody waits
                pass

    def _done(self, future: asyncio.Future[list[Row]], rows: list[Row] | None, error: BaseException | None) -> None:
        if not future.done():
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(rows or [])
        if future is not self._running:
            return
        self._running, following, self._next = None, self._next, None
        if following is not None:
            self._start(following)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    return next((v for k, v in headers if k.lower() == name), b"")


class ExecutorHealthMiddleware:
    """Adds the ``executor`` entry to Airflow's health JSON (see the module doc).

    ``read_rows`` (tests) replaces the read through the held connection;
    ``threshold`` replaces ``[overseer] executor_health_check_threshold``, and
    ``refresh`` ``[overseer] refresh_interval``.
    """

    def __init__(
        self,
        app: Callable[..., Awaitable[None]],
        read_rows: Callable[[], list[Row]] | None = None,
        threshold: timedelta | None = None,
        refresh: timedelta | None = None,
    ) -> None:
        self.app = app
        self.reads = Reads(read_rows or airflow_rows())
        if threshold is None or refresh is None:
            from airflow.configuration import conf

            threshold = threshold if threshold is not None else configured_threshold(conf)
            refresh = refresh if refresh is not None else configured_refresh(conf)
        #: Read once: Airflow's configuration does not change while it runs.
        self.threshold = threshold
        self.refresh = refresh.total_seconds()
        #: The latest entry read, encoded, and when it was asked for (the
        #: ``time.monotonic()`` before its read began): it serves the requests
        #: whose answers are complete within ``refresh`` of that.
        self._latest: tuple[float, bytes] | None = None
        #: Why the latest read failed, once warned: the same failure again is
        #: not logged again (a probe asks every few seconds), a new one is.
        self._warned: str | None = None

    async def __call__(self, scope: Message, receive: Any, send: Send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "GET"
            or route_path(scope) != HEALTH_PATH
        ):
            await self.app(scope, receive, send)
            return
        reply = Reply(send, self.encoded_entry)
        await self.app(scope, receive, reply.send)
        await reply.close()

    async def encoded_entry(self) -> bytes:
        """The entry as JSON: the latest read's while it is younger than
        ``refresh`` (the request then costs the splice alone), else from a read
        of the ``job`` table made now. An entry saying the table could not be
        read is never kept: the next request reads again."""
        asked = time.monotonic()
        latest = self._latest
        if latest is not None and asked - latest[0] < self.refresh:
            return latest[1]
        entry, read = await self._read()
        encoded = encode(entry)
        if read and self.refresh > 0:
            # A request that asked later may have stored a younger one meanwhile.
            if self._latest is None or self._latest[0] < asked:
                self._latest = (asked, encoded)
        return encoded

    async def entry(self) -> dict[str, Any]:
        """The entry, from one read of the ``job`` table made now."""
        return (await self._read())[0]

    async def _read(self) -> tuple[dict[str, Any], bool]:
        """The entry from a read made now, and whether the table was read."""
        try:
            rows = await asyncio.wait_for(self.reads.rows(), READ_TIMEOUT)
        except asyncio.TimeoutError:
            return self._unreadable(f"the job table did not answer within {READ_TIMEOUT:g}s"), False
        except Exception as e:  # noqa: BLE001 - any database error is an unknown entry
            return self._unreadable(unreadable_because(e)), False
        if self._warned is not None:
            log.info("Overseer: the job table is read again")
            self._warned = None
        return executor_entry(rows, self.threshold, datetime.now(timezone.utc)), True

    def _unreadable(self, why: str) -> dict[str, Any]:
        """The entry saying ``why``; warned once for as long as it lasts."""
        if why != self._warned:
            log.warning("Overseer: %s", why)
            self._warned = why
        else:
            log.debug("Overseer: %s", why)
        return unreadable_entry(why)


class Reply:
    """Airflow's reply to one health request, held until its last chunk, then
    sent with the entry (see the module doc)."""

    def __init__(self, send: Send, entry: Callable[[], Awaitable[bytes]]) -> None:
        self._send, self._entry = send, entry
        #: ``http.response.start``, held; ``None`` once passed on.
        self._start: Message | None = None
        self._chunks: list[bytes] = []
        #: Set when the response is not one to change: everything passes on.
        self._through = False

    async def send(self, message: Message) -> None:
        kind = message.get("type")
        if self._through:
            await self._send(message)
        elif kind == "http.response.start":
            headers = list(message.get("headers", []))
            json_body = _header(headers, b"content-type").startswith(b"application/json")
            encoding = _header(headers, b"content-encoding").strip().lower()
            if message.get("status") == 200 and json_body and encoding in (b"", b"gzip"):
                self._start = message
            else:
                self._through = True
                await self._send(message)
        elif kind == "http.response.body" and self._start is not None:
            self._chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                await self._finish()
        else:
            await self._send(message)

    async def close(self) -> None:
        """Sends what is held when the app ended without its last chunk."""
        if self._start is not None:
            await self._finish()

    async def _finish(self) -> None:
        start, body = self._start, b"".join(self._chunks)
        assert start is not None
        self._start, self._chunks, self._through = None, [], True
        headers = list(start.get("headers", []))
        try:
            changed = await self._changed(body, _header(headers, b"content-encoding").strip().lower())
        except Exception:  # noqa: BLE001 - Airflow's answer goes out whatever happens here
            log.exception("Overseer: the executor entry could not be added")
            changed = None
        if changed is not None:
            body = changed
            headers = [
                (k, v)
                for k, v in headers
                if k.lower() not in (b"content-length", b"transfer-encoding")
            ]
            headers.append((b"content-length", str(len(body)).encode()))
        await self._send({**start, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    async def _changed(self, body: bytes, encoding: bytes) -> bytes | None:
        plain = gzip.decompress(body) if encoding == b"gzip" else body
        changed = splice(plain, await self._entry())
        if changed is None:
            return None
        return gzip.compress(changed, compresslevel=5) if encoding == b"gzip" else changed


def airflow_rows() -> Callable[[], list[Row]]:
    """The read of the rows through Airflow's own engine, on a connection held
    for the reading thread."""
    from overseer_airflow.read import HeldConnection

    def engine() -> Any:
        from airflow import settings

        return settings.engine

    return HeldConnection(engine).rows
