"""The home page card's React app and the app serving its bundle
(:mod:`overseer_airflow.card`). The bundle is built by npm when the package is
built; from a source folder where it was never built (``PYTHONPATH=src``), the
tests that serve it are skipped, saying so. Starlette's test client needs httpx
(Airflow's environment has both). Overseer's ``tests/airflow_home_card.rs``
shows the card in a real Airflow's home page."""

from __future__ import annotations

import unittest

from overseer_airflow import __version__, card

try:
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient
except ImportError:  # pragma: no cover - outside Airflow's environment
    Starlette = None  # type: ignore[assignment,misc]

BUILT = card.bundle_path().is_file()


class ReactApp(unittest.TestCase):
    def test_the_card_goes_on_the_home_page_and_loads_its_bundle_relative_to_the_base(self) -> None:
        app = card.react_app()
        self.assertEqual(
            app,
            {
                "name": "Overseer executor health",
                "bundle_url": f"overseer-card/overseer-card.js?v={__version__}",
                "destination": "dashboard",
                "url_route": "overseer-card",
            },
        )
        # Relative: resolved against the UI's <base href>, which carries [api] base_url.
        self.assertFalse(app["bundle_url"].startswith("/"))

    def test_the_prefix_is_none_of_airflows_reserved_ones(self) -> None:
        for reserved in ["/api/v2", "/ui", "/execution", "/auth", "/pluginsv2"]:
            self.assertFalse(card.URL_PREFIX.startswith(reserved), reserved)


@unittest.skipUnless(BUILT, "the card's bundle is not built here: `npm ci && npm run build`")
@unittest.skipIf(Starlette is None, "needs Starlette and httpx (Airflow's environment)")
class Bundle(unittest.TestCase):
    def client(self, root_path: str = "") -> TestClient:
        part = card.fastapi_app()
        self.assertEqual(part["url_prefix"], "/overseer-card")
        root = Starlette(routes=[Mount(part["url_prefix"], app=part["app"])])
        return TestClient(root, root_path=root_path)

    def test_the_bundle_is_served_as_javascript_that_sets_airflows_global(self) -> None:
        answer = self.client().get("/overseer-card/overseer-card.js", params={"v": __version__})
        self.assertEqual(answer.status_code, 200)
        self.assertEqual(answer.headers["content-type"], "text/javascript; charset=utf-8")
        # The UMD bundle leaves the component where Airflow's UI looks, and takes
        # React from Airflow's globals rather than bundling its own.
        self.assertIn("AirflowPlugin", answer.text)
        self.assertIn("ReactJSXRuntime", answer.text)
        self.assertNotIn("react.development", answer.text)

    def test_only_the_bundle(self) -> None:
        client = self.client()
        for path in ["/overseer-card/", "/overseer-card/../setup.py", "/overseer-card/other.js"]:
            self.assertEqual(client.get(path).status_code, 404, path)
        self.assertEqual(client.post("/overseer-card/overseer-card.js").status_code, 405)


if __name__ == "__main__":
    unittest.main()
