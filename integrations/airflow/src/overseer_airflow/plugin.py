"""The plugin Airflow loads through the ``airflow.plugins`` entry point.

- A root middleware (:mod:`overseer_airflow.middleware`) adds the ``executor``
  entry to Airflow's own ``GET /api/v2/monitor/health``, read from the ``job``
  table through Airflow's session: always there, whatever the configuration.
- A card on Airflow's home page (a React app, ``destination: "dashboard"``)
  shows each executor instance's health from that entry; the plugin serves its
  bundle (a ``fastapi_apps`` entry). A package built without the bundle leaves
  the card out, with a warning (see :mod:`overseer_airflow.card`).
- An external view, "Executor health" under Browse, shows Overseer's dashboard
  (``[overseer] url``) inside Airflow's UI; without a usable URL it is left out
  with a warning saying why (see :mod:`overseer_airflow.view`).
"""

from __future__ import annotations

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
    #: The card's bundle, served by the plugin; the card on the home page.
    fastapi_apps, react_apps = card_parts()
    #: Filled when Airflow loads the plugin, from its configuration then.
    external_views: list[Any] = []

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Reads ``[overseer] url`` once Airflow's configuration is in place."""
        from airflow.configuration import conf

        cls.external_views = view.external_views(conf)
