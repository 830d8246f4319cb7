"""Overseer's Airflow plugin: the ``executor`` entry in Airflow's own health JSON,
a card on Airflow's home page, and Overseer's dashboard in Airflow 3's navigation.

- :mod:`overseer_airflow.plugin`: the ``AirflowPlugin`` Airflow finds through the
  ``airflow.plugins`` entry point.
- :mod:`overseer_airflow.middleware`: the root middleware that adds the entry to
  ``GET /api/v2/monitor/health``.
- :mod:`overseer_airflow.read`: the one read of the ``job`` table per request,
  on a connection held for it.
- :mod:`overseer_airflow.card`: the home page card (a React app, its bundle
  built from ``ui/`` by npm into ``static/``) and the app that serves it and
  the canary's facts.
- :mod:`overseer_airflow.canary`: the canary DAG; :mod:`overseer_airflow.canary_facts`:
  its latest facts per queue, read from ``task_instance`` for the card.
- :mod:`overseer_airflow.entry`: the entry's rules, Overseer's, as pure functions.
- :mod:`overseer_airflow.view`: the navigation entry built from ``[overseer] url``.
"""

__version__ = "0.1.0"
