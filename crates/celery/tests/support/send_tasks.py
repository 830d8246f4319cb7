"""Sends tasks the way Airflow's Celery executor does: apply_async through the
real Celery client, to one queue, with an optional priority.

usage: send_tasks.py QUEUE COUNT [PRIORITY]
"""
import sys

from celery_app import add

queue, count = sys.argv[1], int(sys.argv[2])
priority = int(sys.argv[3]) if len(sys.argv) > 3 else None
for i in range(count):
    add.apply_async(args=(i, i), queue=queue, priority=priority)
