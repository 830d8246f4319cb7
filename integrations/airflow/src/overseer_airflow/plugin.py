"""The plugin Airflow loads through the ``airflow.plugins`` entry point.

It adds one external view, "Executor health" under Browse, showing Overseer's
dashboard (``[overseer] url``) inside Airflow's UI; without a usable URL it adds
nothing and logs a warning saying why (see :mod:`overseer_airflow.view`).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from overseer_airflow import view


class OverseerPlugin(AirflowPlugin):
    """Overseer's dashboard in Airflow's navigation."""

    name = "overseer"
    #: Filled when Airflow loads the plugin, from its configuration then.
    external_views: list[Any] = []

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Reads ``[overseer] url`` once Airflow's configuration is in place."""
        from airflow.configuration import conf

        cls.external_views = view.external_views(conf)
