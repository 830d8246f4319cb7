"""The navigation entry from ``[overseer] url``, without Airflow.

Run with ``python -m unittest discover -s tests`` and the package on the path
(installed, or ``PYTHONPATH=src``). ``tests/airflow_plugin.rs`` in Overseer's
repository runs it against the installed package, then the plugin in a real
Airflow 3.3.2.
"""

from __future__ import annotations

import logging
import unittest

from overseer_airflow import view


class Conf:
    """Airflow's ``conf.get``, over a dict of ``[overseer]`` options."""

    def __init__(self, **options: str) -> None:
        self.options = options

    def get(self, section: str, key: str, fallback: object = None) -> object:
        assert section == "overseer"
        return self.options.get(key, fallback)


class ExternalViews(unittest.TestCase):
    def test_the_url_becomes_a_view_in_the_browse_menu_shown_in_a_frame(self) -> None:
        views = view.external_views(Conf(url="https://overseer.example.com:8443/"))
        self.assertEqual(
            views,
            [
                {
                    "name": "Executor health",
                    "href": "https://overseer.example.com:8443/",
                    "destination": "nav",
                    "category": "browse",
                    "url_route": "overseer",
                }
            ],
        )

    def test_a_bare_origin_means_the_dashboard_at_its_root(self) -> None:
        self.assertEqual(view.dashboard_url(Conf(url=" http://127.0.0.1:8080 ")), "http://127.0.0.1:8080/")

    def test_no_url_no_view_and_a_warning_naming_the_option(self) -> None:
        for conf in (Conf(), Conf(url=""), Conf(url="  ")):
            with self.assertLogs(view.log, logging.WARNING) as logs:
                self.assertEqual(view.external_views(conf), [])
            self.assertIn("AIRFLOW__OVERSEER__URL", logs.output[0])

    def test_anything_but_an_http_url_is_left_out_with_a_warning(self) -> None:
        for url in ("overseer.example.com", "ftp://overseer.example.com/", "http://", "http://host:port/"):
            with self.assertLogs(view.log, logging.WARNING) as logs:
                self.assertEqual(view.external_views(Conf(url=url)), [], url)
            self.assertIn("[overseer] url", logs.output[0])


if __name__ == "__main__":
    unittest.main()
