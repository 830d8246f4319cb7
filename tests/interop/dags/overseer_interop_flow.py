"""The DAG the Airflow interop test (tests/interop_airflow.rs) triggers.

One quick task that a Celery worker must run (a BashOperator: an EmptyOperator
would be marked done by the scheduler without ever reaching the executor). The
test triggers it once, while no worker runs, so that its task instance sits in
`queued` until Overseer says the executor is unhealthy; then it starts a worker,
the task runs, and the verdict returns to healthy.

No schedule, so it runs only when triggered; unpaused at creation, so a
triggered run starts at once.
"""

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG(
    dag_id="overseer_interop_flow",
    schedule=None,
    catchup=False,
    is_paused_upon_creation=False,
    tags=["overseer"],
):
    BashOperator(task_id="say_ok", bash_command="echo ok")
