"""Overseer's Airflow plugin: its executor-health dashboard in Airflow 3's navigation.

- :mod:`overseer_airflow.plugin`: the ``AirflowPlugin`` Airflow finds through the
  ``airflow.plugins`` entry point.
- :mod:`overseer_airflow.view`: the navigation entry built from ``[overseer] url``.
"""

__version__ = "0.1.0"
