"""Where the plugin's UI pieces are built (:mod:`overseer_airflow.plugin`): only
where Airflow serves or lists them, so that the scheduler, the DAG processor, the
triggerer and the workers, which load every plugin too, never log the warnings
of pieces they have no use for (``[overseer] url`` unset, a bundle missing).

Needs Airflow (its ``plugins_manager`` and configuration): skipped without it.
The tests through Airflow's own plugin loading need the package installed (its
``airflow.plugins`` entry point), as ``tests/airflow_plugin.rs`` in Overseer's
repository installs it; from a source folder they are skipped, saying so.
"""

from __future__ import annotations

import logging
import os
import unittest
from importlib.metadata import entry_points
from unittest import mock

try:
    from airflow import plugins_manager

    from overseer_airflow import plugin
except ImportError:  # pragma: no cover - outside Airflow's environment
    plugin = None  # type: ignore[assignment]

#: Airflow's configuration without ``[overseer] url``.
NO_URL = {k: v for k, v in os.environ.items() if k != "AIRFLOW__OVERSEER__URL"}
#: The plugin's loggers, all of them.
LOGGER = "overseer_airflow"


def installed() -> bool:
    """Whether Airflow finds the plugin through its entry point."""
    return any(e.name == "overseer" for e in entry_points(group="airflow.plugins"))


def forget_ui_parts() -> None:
    """Forgets the UI pieces built, as a new Airflow process starts."""
    plugin.ui_parts.cache_clear()


def load_plugins_afresh() -> None:
    """Forgets what this process loaded, as a new Airflow process starts."""
    forget_ui_parts()
    for cached in (
        plugins_manager._get_plugins,
        plugins_manager._get_ui_plugins,
        plugins_manager.get_flask_plugins,
        plugins_manager.get_fastapi_plugins,
        plugins_manager._get_extra_operators_links_plugins,
        plugins_manager.integrate_macros_plugins,
    ):
        cached.cache_clear()


@unittest.skipIf(plugin is None, "needs Airflow")
@mock.patch.dict(os.environ, NO_URL, clear=True)
class WhereTheUiIsBuilt(unittest.TestCase):
    def setUp(self) -> None:
        forget_ui_parts()
        self.addCleanup(forget_ui_parts)

    def test_loading_the_plugin_warns_nothing_reading_its_views_warns_once(self) -> None:
        # What every Airflow process does with it: the class, an instance, on_load.
        with self.assertNoLogs(LOGGER, logging.WARNING):
            loaded = plugin.OverseerPlugin()
            loaded.on_load()
        # What the api-server does (init_plugins, /api/v2/plugins): then the warning.
        with self.assertLogs(LOGGER, logging.WARNING) as logs:
            self.assertEqual(loaded.external_views, [])
        url_warnings = [line for line in logs.output if "AIRFLOW__OVERSEER__URL" in line]
        self.assertEqual(len(url_warnings), 1, logs.output)
        # Built once: read again, by the class or another instance, it says nothing more.
        with self.assertNoLogs(LOGGER, logging.WARNING):
            self.assertIs(plugin.OverseerPlugin.external_views, loaded.external_views)
            self.assertIs(plugin.OverseerPlugin().react_apps, loaded.react_apps)
            loaded.fastapi_apps  # noqa: B018

    def test_the_url_is_read_when_the_views_are_built(self) -> None:
        loaded = plugin.OverseerPlugin()
        loaded.on_load()
        with mock.patch.dict(os.environ, {"AIRFLOW__OVERSEER__URL": "https://overseer.example.com/"}):
            with self.assertNoLogs("overseer_airflow.view", logging.WARNING):
                views = loaded.external_views
        self.assertEqual([v["href"] for v in views], ["https://overseer.example.com/"])

    def test_the_card_and_its_bundle_come_together(self) -> None:
        loaded = plugin.OverseerPlugin()
        self.assertEqual(len(loaded.fastapi_apps), len(loaded.react_apps))

    @unittest.skipUnless(installed(), "the package is not installed: no airflow.plugins entry point")
    def test_through_airflows_plugin_loading_only_the_api_servers_reads_warn(self) -> None:
        load_plugins_afresh()
        self.addCleanup(load_plugins_afresh)
        # The scheduler, the DAG processor, the triggerer, a worker's task runner:
        # they load the plugins, their macros and operator links, no UI.
        with self.assertNoLogs(LOGGER, logging.WARNING):
            plugins_manager.ensure_plugins_loaded()
            plugins_manager.integrate_macros_plugins()
            plugins_manager.get_operator_extra_links()
        names = [p.name for p in plugins_manager._get_plugins()[0]]
        self.assertIn("overseer", names)
        # The api-server building its app: its sub-apps and root middlewares.
        with self.assertLogs(LOGGER, logging.WARNING) as logs:
            apps, middlewares = plugins_manager.get_fastapi_plugins()
        self.assertTrue(any("AIRFLOW__OVERSEER__URL" in line for line in logs.output), logs.output)
        self.assertIn("overseer_executor_health", [m["name"] for m in middlewares])
        # What `airflow plugins` and /api/v2/plugins list, without another warning.
        with self.assertNoLogs(LOGGER, logging.WARNING):
            info = next(p for p in plugins_manager.get_plugin_info() if p["name"] == "overseer")
        self.assertEqual(info["external_views"], [])
        self.assertEqual(len(info["fastapi_apps"]), len(info["react_apps"]))


if __name__ == "__main__":
    unittest.main()
