"""The canary DAG's settings without Airflow, and the DAG itself with it.

Run with ``python -m unittest discover -s tests`` and the package on the path
(installed, or ``PYTHONPATH=src``). ``tests/canary.rs`` in Overseer's repository
runs the DAG in a real Airflow 3.3.2.
"""

from __future__ import annotations

import importlib.util
import os
import unittest
from datetime import timedelta
from unittest import mock

from overseer_airflow import canary


class Settings(unittest.TestCase):
    def test_canary_every_reads_seconds_minutes_and_hours(self) -> None:
        self.assertEqual(canary.every("30s"), timedelta(seconds=30))
        self.assertEqual(canary.every(" 5m "), timedelta(minutes=5))
        self.assertEqual(canary.every("1h"), timedelta(hours=1))

    def test_a_bad_period_is_one_line_naming_the_option(self) -> None:
        for bad in ("", "5", "0s", "5 minutes", "-1m", "1d"):
            with self.assertRaises(ValueError) as raised:
                canary.every(bad)
            self.assertEqual(
                str(raised.exception),
                f"[overseer] canary_every: {bad!r} is not a duration such as 30s, 5m or 1h",
            )

    def test_queues_default_to_the_default_queue(self) -> None:
        self.assertEqual(canary.queues("", "default"), ["default"])
        self.assertEqual(canary.queues(" , ", "celery"), ["celery"])
        self.assertEqual(canary.queues("default, gpu ,", "default"), ["default", "gpu"])


@unittest.skipUnless(importlib.util.find_spec("airflow"), "needs Airflow")
class TheDag(unittest.TestCase):
    def test_one_task_per_queue_unpaused_one_run_at_a_time(self) -> None:
        env = {
            "AIRFLOW__OVERSEER__CANARY_EVERY": "30s",
            "AIRFLOW__OVERSEER__CANARY_QUEUES": "default,gpu",
        }
        with mock.patch.dict(os.environ, env):
            canary.build.cache_clear()
            dag = canary.dag
        canary.build.cache_clear()
        self.assertEqual(dag.dag_id, canary.DAG_ID)
        self.assertEqual(
            [(t.task_id, t.queue, t.retries) for t in dag.tasks],
            [("canary_default", "default", 0), ("canary_gpu", "gpu", 0)],
        )
        self.assertEqual(dag.max_active_runs, 1)
        self.assertFalse(dag.is_paused_upon_creation)
        self.assertEqual(dag.tasks[0].execution_timeout, timedelta(seconds=30))


if __name__ == "__main__":
    unittest.main()
