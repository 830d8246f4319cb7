"""The card on Airflow's home page: a React app (``react_apps``, ``destination:
"dashboard"``) and the small app that serves its bundle and the canary's facts
(``fastapi_apps``).

The bundle, ``static/overseer-card.js``, is built by ``npm run build`` from
``ui/`` in the plugin's source (``vite.config.js``) and shipped inside the
package. Airflow 3.3's UI imports it from ``bundle_url``, resolved against the
page's base (so under any ``[api] base_url`` prefix), and renders the component
it leaves in ``globalThis.AirflowPlugin`` with Airflow's own React. The card
then reads Airflow's ``/api/v2/monitor/health`` on the same origin every 5 s.

The app mounted at :data:`URL_PREFIX` (a FastAPI app, so that it takes
Airflow's own auth dependencies) has two routes:

- ``overseer-card.js``: the bundle, one file, no directory listing; public, as
  Airflow's own UI assets are (it holds no data);
- ``canary``: the canary's latest facts per queue, as JSON
  (:mod:`overseer_airflow.canary_facts`), which the card reads beside the
  health endpoint. It needs what Airflow's own task instance routes need: a
  user (Airflow's ``get_user``: the ``Authorization: Bearer`` header, else the
  ``_token`` cookie the UI's login sets on ``[api] base_url``'s path, which the
  card's same-origin read sends) allowed to read the task instances of the
  canary DAG (``requires_access_dag``, the DAG's team included). Without one,
  Airflow's ``401``/``403``. Unlike the health endpoint it is not for probes,
  and the task instances of a DAG are what Airflow's auth manager guards.

The canary route reads through Airflow's own session (its engine and pool), as
Airflow's UI routes do, in FastAPI's thread pool: it serves open home pages,
one read per page every 5 s, not probes, so the health entry's held connection
and shared reads (:mod:`overseer_airflow.middleware`) would cost a connection
held per api-server worker for nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from importlib.resources import files
from typing import Any, Callable

from overseer_airflow import __version__, canary_facts
from overseer_airflow.canary import DAG_ID
from overseer_airflow.middleware import describe

log = logging.getLogger(__name__)

#: The React app's name: the key Airflow's UI files the component under.
NAME = "Overseer executor health"
#: Where the bundle's app is mounted on the api-server (not one of Airflow's
#: reserved prefixes: ``/api/v2``, ``/ui``, ``/execution``, ``/auth``, ``/pluginsv2``).
URL_PREFIX = "/overseer-card"
#: The bundle's file, in the package and in the URL.
BUNDLE = "overseer-card.js"
#: Airflow's UI requires a ``url_route`` of every React app, unique among plugins.
URL_ROUTE = "overseer-card"
#: The canary's facts, below :data:`URL_PREFIX`.
CANARY = "canary"


def bundle_path() -> Any:
    """The built bundle inside the installed package."""
    return files("overseer_airflow").joinpath("static", BUNDLE)


def react_app() -> dict[str, Any]:
    """The card, as Airflow's ``react_apps`` takes it. ``bundle_url`` is relative
    (the UI resolves it against the page's base, which carries ``[api]
    base_url``); the version in its query makes a browser fetch a new bundle
    after an upgrade."""
    return {
        "name": NAME,
        "bundle_url": f"{URL_PREFIX.lstrip('/')}/{BUNDLE}?v={__version__}",
        "destination": "dashboard",
        "url_route": URL_ROUTE,
    }


def canary_access() -> Callable[..., Any]:
    """Airflow's own check that the request's user may read the canary DAG's
    task instances (``GET``, ``DagAccessEntity.TASK_INSTANCE``), as a FastAPI
    dependency."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    try:
        return requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE, param_dag_id=DAG_ID)
    except TypeError:
        # An Airflow before ``param_dag_id`` (3.3 has it) takes the DAG from the
        # path only: task instances of DAGs in general, still Airflow's check.
        return requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE)


def airflow_tasks() -> list[canary_facts.Task]:
    """The canary's task instances, read through Airflow's own session."""
    from airflow.utils.session import create_session

    with create_session() as session:
        return canary_facts.read_tasks(session)


def card_app(
    read: Callable[[], list[canary_facts.Task]] | None = None,
    access: Callable[..., Any] | None = None,
) -> Any:
    """The app serving the bundle at ``<URL_PREFIX>/<BUNDLE>`` (read once, at
    start-up) and the canary's facts at ``<URL_PREFIX>/<CANARY>``. ``read``
    (tests) replaces the read through Airflow's session, ``access`` Airflow's
    check of the user (:func:`canary_access`)."""
    from fastapi import Depends, FastAPI
    from fastapi.responses import JSONResponse
    from starlette.responses import Response

    bundle = bundle_path().read_bytes()
    read = read or airflow_tasks
    # No documentation routes: the app is two URLs of the card's.
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    # No return annotations: FastAPI would read them as response models.
    @app.api_route(f"/{BUNDLE}", methods=["GET", "HEAD"], include_in_schema=False, response_model=None)
    async def serve():
        return Response(
            bundle,
            media_type="text/javascript; charset=utf-8",
            # The URL carries the version: an hour of caching is safe.
            headers={"Cache-Control": "public, max-age=3600"},
        )

    # A plain function: FastAPI runs it in its thread pool, off the event loop.
    @app.get(
        f"/{CANARY}",
        dependencies=[Depends(access or canary_access())],
        include_in_schema=False,
        response_model=None,
    )
    def canary():
        now = datetime.now(timezone.utc)
        try:
            tasks = read()
        except Exception as e:  # noqa: BLE001 - any database error is a 503 saying why
            why = f"the canary's task instances could not be read: {describe(e)}"
            log.warning("Overseer: %s", why)
            return JSONResponse({"detail": why}, status_code=503, headers={"Cache-Control": "no-store"})
        return JSONResponse(canary_facts.facts(tasks, now), headers={"Cache-Control": "no-store"})

    return app


def fastapi_app() -> dict[str, Any]:
    """The card's app, as Airflow's ``fastapi_apps`` takes it."""
    return {"name": "overseer_card", "app": card_app(), "url_prefix": URL_PREFIX}
