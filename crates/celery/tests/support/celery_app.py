"""The Celery app the tests run: a real Celery 5.5.3 worker and client.

Everything a test varies comes from the environment, so that parallel tests never
share a queue or a control exchange:
  OVERSEER_TEST_BROKER            the broker URL
  OVERSEER_TEST_CONTROL_EXCHANGE  Celery's control_exchange (the pidbox exchange's prefix)
"""
import os
import time

from celery import Celery

app = Celery("overseer_test", broker=os.environ["OVERSEER_TEST_BROKER"])
app.conf.update(
    control_exchange=os.environ.get("OVERSEER_TEST_CONTROL_EXCHANGE", "celery"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="overseer.add")
def add(x, y):
    return x + y


# Acknowledged once it ends (Airflow's [celery] task_acks_late is True), so a
# worker started with --prefetch-multiplier 1, as Airflow starts its workers,
# holds no more messages than it has slots: the rest wait in the broker.
@app.task(name="overseer.sleep", acks_late=True)
def sleep(seconds):
    time.sleep(seconds)
