"""The one read of the ``job`` table per health request, through Airflow's own
engine (its URL, driver, connect arguments and connection events).

One statement, :data:`QUERY`: every running ``ExecutorJob`` row without
``end_date`` (the open rows, live or stale: Overseer's open rows are the running
ones), and the row(s) with the latest heartbeat (so that, when every supervisor
has stopped, the entry can say when). Both halves are found through Airflow's
indexes: the running rows through ``idx_job_state_heartbeat`` (``state,
latest_heartbeat``), however many closed rows past restarts left; the latest
heartbeat as the last entry of ``job_type_heart`` (``job_type, latest_heartbeat``)
for the type. It has no parameter (its one value is a constant), so any driver
runs it as it is.

Inside the api-server the read goes through :class:`HeldConnection`: one
connection, made once from Airflow's engine and kept by the one thread that
reads (see :mod:`overseer_airflow.middleware`), in autocommit. What a pooled
session cost per request, measured on Postgres (psycopg2), was the pool's
pre-ping (``SELECT 1``), ``BEGIN``, the statement parsed and planned, ``COMMIT``,
and SQLAlchemy's ORM session around them: ~2 ms of the api-server's CPU and
~0.7 ms of the database's. Held, a read is one round trip: on Postgres the
statement is prepared once per connection (``PREPARE``; where that cannot
work, behind PgBouncer's transaction pooling, the plain statement is used), and
the rows are read from the driver's cursor.

Times come back as each database and driver gives them (aware on Postgres,
naive UTC on MySQL, text on SQLite, where Airflow writes ``2026-11-29
19:48:48.365305`` and Overseer ``2026-11-29T19:48:48.365305+00:00``): each is
made an aware UTC ``datetime``.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from overseer_airflow.entry import JOB_TYPE, Row

log = logging.getLogger(__name__)

#: The statement. Plain SQL that SQLite, Postgres and MySQL/MariaDB all take;
#: its columns in the order of :class:`Row`'s fields.
QUERY = f"""\
SELECT id, state, executor_class, hostname, end_date, latest_heartbeat,
       executor_health, executor_health_reason, executor_instance,
       executor_health_checked_at
FROM job
WHERE job_type = '{JOB_TYPE}'
  AND ((state = 'running' AND end_date IS NULL)
       OR latest_heartbeat = (SELECT MAX(latest_heartbeat) FROM job WHERE job_type = '{JOB_TYPE}'))"""

#: The name :data:`QUERY` is prepared under on a Postgres connection.
PREPARED = "overseer_executor_rows"


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


def row(values: Sequence[Any]) -> Row:
    """A :class:`Row` from one result row of :data:`QUERY`, in its column order."""
    (id_, state, executor_class, hostname, end_date, heartbeat, health, reason, instance, checked_at) = values
    return Row(
        id=id_,
        state=state,
        executor_class=executor_class,
        hostname=hostname,
        end_date=utc(end_date),
        latest_heartbeat=utc(heartbeat),
        executor_health=health,
        executor_health_reason=reason,
        executor_instance=instance,
        executor_health_checked_at=utc(checked_at),
    )


class HeldConnection:
    """:data:`QUERY` through one connection of the plugin's own, made from
    ``engine`` (Airflow's) when first needed and kept: one round trip per read.

    Not thread-safe: one thread reads (the middleware's). The connection comes
    from a pool of its own, a copy of the engine's (``Pool.recreate``: the same
    driver, connect arguments and events), so it takes none of the connections
    Airflow's pool holds for its requests. It runs in autocommit (a read leaves
    no transaction open). When the database went away since the last read (a
    restart), the read is made once more on a new connection; any other error
    is raised as it came, and the connection kept.
    """

    def __init__(self, engine: Callable[[], Any]) -> None:
        #: Airflow's engine, asked for when the first read is made.
        self._engine = engine
        self._pool: Any = None
        #: The connection (a pool's proxy of the driver's), or ``None``.
        self._connection: Any = None
        #: Whether :data:`PREPARED` exists on it (``None``: not tried yet).
        self._prepared: bool | None = None
        #: The process the pool was made in: a forked child makes its own.
        self._pid = 0

    def rows(self) -> list[Row]:
        if self._pid != os.getpid():
            # The parent's connection is the parent's: leave it, open another.
            self._pool, self._connection, self._pid = None, None, os.getpid()
        held = self._connection is not None
        try:
            return self._read()
        except Exception as e:
            if not self._lost(e):
                raise
            self._discard()
            if not held:
                raise
        return self._read()

    def _read(self) -> list[Row]:
        connection = self._connect()
        if self._prepared is None:
            self._prepared = self._prepare(connection)
        cursor = connection.cursor()
        try:
            if self._prepared:
                try:
                    cursor.execute(f"EXECUTE {PREPARED}")
                    return [row(r) for r in cursor.fetchall()]
                except Exception as e:
                    if self._lost(e):
                        raise
                    # Behind a pooler a statement may reach another server
                    # connection, which never saw the PREPARE.
                    log.info("Overseer: the prepared statement failed (%s): plain statements from now", e)
                    self._prepared = False
                    cursor.close()
                    cursor = connection.cursor()
            cursor.execute(QUERY)
            return [row(r) for r in cursor.fetchall()]
        finally:
            cursor.close()

    def _prepare(self, connection: Any) -> bool | None:
        """Prepares :data:`QUERY` on a Postgres connection: ``True``; ``False``
        on other databases; ``None`` (to try again at the next read) when the
        database refused it (Overseer's columns are missing: the plain
        statement then says so)."""
        if self._engine().dialect.name != "postgresql":
            return False
        cursor = connection.cursor()
        try:
            cursor.execute(f"PREPARE {PREPARED} AS {QUERY}")
            return True
        except Exception as e:
            if self._lost(e):
                raise
            return None
        finally:
            cursor.close()

    def _connect(self) -> Any:
        if self._connection is not None:
            return self._connection
        engine = self._engine()
        if self._pool is None:
            self._pool = engine.pool.recreate()
        connection = self._pool.connect()
        try:
            engine.dialect.set_isolation_level(connection.dbapi_connection, "AUTOCOMMIT")
        except BaseException:
            connection.invalidate()
            raise
        self._connection, self._prepared = connection, None
        return connection

    def _lost(self, error: BaseException) -> bool:
        """Whether ``error`` says the connection is gone (the driver's own test,
        through SQLAlchemy's dialect), or is no database error at all."""
        engine = self._engine()
        if not isinstance(error, engine.dialect.loaded_dbapi.Error):
            return True
        dbapi_connection = getattr(self._connection, "dbapi_connection", None)
        return bool(engine.dialect.is_disconnect(error, dbapi_connection, None))

    def _discard(self) -> None:
        connection, self._connection, self._prepared = self._connection, None, None
        if connection is not None:
            try:
                connection.invalidate()
            except Exception:  # noqa: BLE001 - it is gone either way
                log.debug("Overseer: closing the lost connection failed", exc_info=True)
