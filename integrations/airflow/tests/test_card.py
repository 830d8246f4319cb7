"""The home page card's React app and the app serving its bundle
(:mod:`overseer_airflow.card`; its canary route: ``test_canary_facts.py``). The bundle is built by npm when the package is
built; from a source folder where it was never built (``PYTHONPATH=src``), the
tests that serve it are skipped, saying so. Starlette's test client needs httpx
(Airflow's environment has both). Overseer's ``tests/airflow_home_card.rs``
shows the card in a real Airflow's home page."""

from __future__ import annotations

import importlib.util
import unittest

from overseer_airflow import __version__, card

try:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
except ImportError:  # pragma: no cover - outside Airflow's environment
    FastAPI = None  # type: ignore[assignment,misc]

BUILT = card.bundle_path().is_file()
HAS_AIRFLOW = importlib.util.find_spec("airflow") is not None


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
@unittest.skipIf(FastAPI is None, "needs FastAPI and httpx (Airflow's environment)")
class Bundle(unittest.TestCase):
    def client(self) -> TestClient:
        # Mounted as Airflow mounts it; the canary's check is Airflow's (below).
        root = FastAPI()
        root.mount(card.URL_PREFIX, card.card_app(read=list, access=lambda: None))
        return TestClient(root)

    @unittest.skipUnless(HAS_AIRFLOW, "needs Airflow (the canary route's check is Airflow's)")
    def test_airflow_mounts_the_app_under_the_prefix(self) -> None:
        part = card.fastapi_app()
        self.assertEqual((part["name"], part["url_prefix"]), ("overseer_card", "/overseer-card"))
        self.assertIsInstance(part["app"], FastAPI)

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
