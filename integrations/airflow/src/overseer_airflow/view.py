"""The navigation entry, from ``[overseer] url``: plain data, no Airflow import.

Airflow 3's UI shows an *external view* whose ``url_route`` is set inside its
own page, in an iframe at ``/plugin/<url_route>``; the entry sits in the menu
its ``category`` names (``browse``: Browse). The frame shows Overseer's
dashboard only when Overseer lets the Airflow UI's origin frame it
(``[api] frame_ancestors`` in Overseer's configuration); otherwise the
browser leaves the frame blank.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: Airflow's configuration section and option holding Overseer's URL
#: (``AIRFLOW__OVERSEER__URL`` in the environment).
SECTION = "overseer"
OPTION = "url"

#: The entry's label in the navigation.
NAME = "Executor health"
#: The Airflow menu it sits in.
CATEGORY = "browse"
#: Where Airflow's UI shows it: ``/plugin/overseer``.
URL_ROUTE = "overseer"


class Config(Protocol):
    """What is read of Airflow's configuration (``airflow.configuration.conf``)."""

    def get(self, section: str, key: str, fallback: Any = ...) -> Any: ...


def dashboard_url(conf: Config) -> str | None:
    """Overseer's dashboard URL from ``[overseer] url``, or ``None`` (with a
    warning saying why) when it is unset or not an ``http(s)://`` URL.

    There is no default: the URL is opened by the user's browser, not by
    Airflow, and the browser's ``localhost`` is rarely the host Overseer runs
    on (its own default address is ``127.0.0.1:8781``).
    """
    url = (conf.get(SECTION, OPTION, fallback="") or "").strip()
    if not url:
        log.warning(
            "[%s] %s is not set (AIRFLOW__OVERSEER__URL): Overseer's dashboard is not added "
            "to Airflow's navigation",
            SECTION,
            OPTION,
        )
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as e:
        log.warning("[%s] %s is not a URL (%s): Overseer's view is left out", SECTION, OPTION, e)
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        log.warning(
            "[%s] %s must be an http:// or https:// URL with a host, such as "
            "https://overseer.example.com/: Overseer's view is left out",
            SECTION,
            OPTION,
        )
        return None
    # The dashboard is Overseer's root page: a bare origin means it.
    if not parts.path:
        url = parts._replace(path="/").geturl()
    return url


def external_view(url: str) -> dict[str, Any]:
    """The external view opening the dashboard at ``url`` inside Airflow's UI."""
    return {
        "name": NAME,
        "href": url,
        "destination": "nav",
        "category": CATEGORY,
        "url_route": URL_ROUTE,
    }


def external_views(conf: Config) -> list[dict[str, Any]]:
    """The plugin's external views: the dashboard's, or none without a usable URL."""
    url = dashboard_url(conf)
    return [external_view(url)] if url else []
