"""The card on Airflow's home page: a React app (``react_apps``, ``destination:
"dashboard"``) and the small app that serves its bundle (``fastapi_apps``).

The bundle, ``static/overseer-card.js``, is built by ``npm run build`` from
``ui/`` in the plugin's source (``vite.config.js``) and shipped inside the
package. Airflow 3.3's UI imports it from ``bundle_url``, resolved against the
page's base (so under any ``[api] base_url`` prefix), and renders the component
it leaves in ``globalThis.AirflowPlugin`` with Airflow's own React. The card
then reads Airflow's ``/api/v2/monitor/health`` on the same origin every 5 s.

The bundle is served here, by the plugin itself: one route, one file, no
directory listing; public, as Airflow's own UI assets are (it holds no data).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from overseer_airflow import __version__

#: The React app's name: the key Airflow's UI files the component under.
NAME = "Overseer executor health"
#: Where the bundle's app is mounted on the api-server (not one of Airflow's
#: reserved prefixes: ``/api/v2``, ``/ui``, ``/execution``, ``/auth``, ``/pluginsv2``).
URL_PREFIX = "/overseer-card"
#: The bundle's file, in the package and in the URL.
BUNDLE = "overseer-card.js"
#: Airflow's UI requires a ``url_route`` of every React app, unique among plugins.
URL_ROUTE = "overseer-card"


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


def bundle_app() -> Any:
    """The app serving the bundle at ``<URL_PREFIX>/<BUNDLE>``: a Starlette app
    (FastAPI's base, in Airflow's environment), read once at start-up."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    bundle = bundle_path().read_bytes()

    async def serve(request: Any) -> Response:
        return Response(
            bundle,
            media_type="text/javascript; charset=utf-8",
            # The URL carries the version: an hour of caching is safe.
            headers={"Cache-Control": "public, max-age=3600"},
        )

    return Starlette(routes=[Route(f"/{BUNDLE}", serve, methods=["GET", "HEAD"])])


def fastapi_app() -> dict[str, Any]:
    """The bundle's app, as Airflow's ``fastapi_apps`` takes it."""
    return {"name": "overseer_card_bundle", "app": bundle_app(), "url_prefix": URL_PREFIX}
