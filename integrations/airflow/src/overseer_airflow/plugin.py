"""The plugin Airflow loads through the ``airflow.plugins`` entry point.

- A root middleware (:mod:`overseer_airflow.middleware`) adds the ``executor``
  entry to Airflow's own ``GET /api/v2/monitor/health``, read from the ``job``
  table through Airflow's session: always there, whatever the configuration.
- An external view, "Executor health" under Browse, shows Overseer's dashboard
  (``[overseer] url``) inside Airflow's UI; without a usable URL it is left out
  with a warning saying why (see :mod:`overseer_airflow.view`).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from overseer_airflow import view
from overseer_airflow.middleware import ExecutorHealthMiddleware


class OverseerPlugin(AirflowPlugin):
    """Overseer's executor entry in Airflow's health JSON, and its dashboard in
    Airflow's navigation."""

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
    #: Filled when Airflow loads the plugin, from its configuration then.
    external_views: list[Any] = []

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Reads ``[overseer] url`` once Airflow's configuration is in place."""
        from airflow.configuration import conf

        cls.external_views = view.external_views(conf)
