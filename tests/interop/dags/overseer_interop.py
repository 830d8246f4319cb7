"""The one DAG of the Airflow interop test (tests/interop_airflow.rs).

It gives the DAG processor a file to parse and the scheduler a DAG to look at,
and never runs: no schedule, so no task is ever queued to the Celery broker the
test stops on purpose (a queued task would make the scheduler talk to it).
"""

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG(dag_id="overseer_interop", schedule=None, catchup=False, tags=["overseer"]):
    EmptyOperator(task_id="nothing")
