"""The plugin Airflow loads through the ``airflow.plugins`` entry point.

- A root middleware (:mod:`overseer_airflow.middleware`) adds the ``executor``
  entry to Airflow's own ``GET /api/v2/monitor/health``, read from the ``job``
  table on a connection of its own made from Airflow's engine
  (:mod:`overseer_airflow.read`): always there, whatever the configuration.
- A card on Airflow's home page (a React app, ``destination: "dashboard"``)
  shows each executor instance's health from that entry, and the canary's
  latest facts per queue; the plugin serves its bundle and those facts (a
  ``fastapi_apps`` entry). A package built without the bundle leaves the card
  out, with a warning (see :mod:`overseer_airflow.card`).
- An external view, "Executor health" under Browse, shows Overseer's dashboard
  (``[overseer] url``) inside Airflow's UI; without a usable URL it is left out
  with a warning saying why (see :mod:`overseer_airflow.view`).

Every Airflow process loads its plugins (the scheduler, the DAG processor, the
triggerer, the workers' task runners), but only the api-server serves a UI: the
card, its bundle and the view are built, and their warnings logged, at the first
read of ``fastapi_apps``, ``react_apps`` or ``external_views``, which is the
api-server building its app (or ``airflow plugins`` and ``/api/v2/plugins``
listing them), never at import or ``on_load``.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from overseer_airflow import card, view
from overseer_airflow.middleware import ExecutorHealthMiddleware

log = logging.getLogger(__name__)


def card_parts() -> tuple[list[Any], list[Any]]:
    """The card's ``fastapi_apps`` and ``react_apps``: both, or neither (with a
    warning) when the package has no bundle."""
    try:
        app = card.fastapi_app()
    except OSError as e:
        log.warning(
            "Overseer: the home page card's bundle is missing from the package (%s): the card is "
            "left out; build the package with npm (integrations/airflow/README.md)",
            e,
        )
        return [], []
    return [app], [card.react_app()]


@functools.cache
def ui_parts() -> dict[str, list[Any]]:
    """The plugin's pieces of the api-server's UI, built once, together: the
    card's bundle app and React app, and the navigation entry from Airflow's
    configuration as it is then (``[overseer] url``)."""
    from airflow.configuration import conf

    fastapi_apps, react_apps = card_parts()
    return {
        "fastapi_apps": fastapi_apps,
        "react_apps": react_apps,
        "external_views": view.external_views(conf),
    }


class UiPart:
    """A plugin attribute that only the api-server's UI uses, built at its first
    read (see :func:`ui_parts`): Airflow reads these where it serves or lists
    them (``init_plugins``, ``get_plugin_info``), and nowhere else."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> list[Any]:
        return ui_parts()[self.name]


class OverseerPlugin(AirflowPlugin):
    """Overseer's executor entry in Airflow's health JSON, its card on Airflow's
    home page, and its dashboard in Airflow's navigation."""

    name = "overseer"
    #: The api-server's root app runs it on every request; it changes only the
    #: health route's answer.
    fastapi_root_middlewares = [
        {
            "name": "overseer_executor_health",
            "middleware": ExecutorHealthMiddleware,
            "args": [],
            "kwargs": {},
        }
    ]
    #: The card's bundle and the canary's facts, served by the plugin; the card
    #: on the home page.
    fastapi_apps = UiPart()
    react_apps = UiPart()
    #: The dashboard in the navigation, from ``[overseer] url``.
    external_views = UiPart()
