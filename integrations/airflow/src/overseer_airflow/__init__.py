"""Overseer's Airflow plugin: the ``executor`` entry in Airflow's own health JSON,
and Overseer's dashboard in Airflow 3's navigation.

- :mod:`overseer_airflow.plugin`: the ``AirflowPlugin`` Airflow finds through the
  ``airflow.plugins`` entry point.
- :mod:`overseer_airflow.middleware`: the root middleware that adds the entry to
  ``GET /api/v2/monitor/health``.
- :mod:`overseer_airflow.read`: the one read of the ``job`` table per request.
- :mod:`overseer_airflow.entry`: the entry's rules, Overseer's, as pure functions.
- :mod:`overseer_airflow.view`: the navigation entry built from ``[overseer] url``.
"""

__version__ = "0.1.0"
