"""The DAG of the Airflow interop test (tests/interop_airflow.rs) that never runs.

It gives the DAG processor a file to parse and the scheduler a DAG to look at,
and never runs: no schedule and paused at creation (Airflow's default), so none
of its tasks is ever queued. The test checks that it has no DAG run at the end.
The work that does run is the other file's, overseer_interop_flow.py.
"""

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG(dag_id="overseer_interop", schedule=None, catchup=False, tags=["overseer"]):
    EmptyOperator(task_id="nothing")
