#!/usr/bin/env bash
# Makes (once per machine) the venv the Airflow interop test runs Airflow from:
# apache-airflow 3.3.2 with the Celery provider, Celery below 5.6 (the provider
# cannot load 5.6+) with its Redis client, and the `postgres` extra: Airflow 3
# opens its metadatabase with two drivers, psycopg2 and (derived from the same
# URL, for its async sessions) asyncpg, and fails at import without the latter.
#
#   bash tests/interop/install-airflow.sh [VENV]
#
# VENV defaults to $INTEROP_AIRFLOW_VENV, else ~/.cache/overseer/airflow-3.3.2-venv:
# outside the clone, so it survives between runs. $INTEROP_AIRFLOW_PYTHON picks the
# interpreter (default python3). (Not OVERSEER_* names: Overseer would read those
# as its own configuration.) A finished venv has a file `.overseer-complete`
# holding the requirements it was made from; without it, or with other
# requirements in it, the folder is removed and made again. A lock
# folder beside it (`VENV.lock`, holding the owner's pid) keeps two runs from
# building at once: the second waits, and takes over a lock whose owner died.
# Airflow's constraint files live on GitHub, which this machine cannot reach:
# pip resolves alone, and only what must be pinned is.
# Prints the venv's path on its last line; exits non-zero when it cannot be made.
set -euo pipefail

VENV="${1:-${INTEROP_AIRFLOW_VENV:-$HOME/.cache/overseer/airflow-3.3.2-venv}}"
PYTHON="${INTEROP_AIRFLOW_PYTHON:-python3}"
REQUIREMENTS=(
  "apache-airflow[postgres]==3.3.2"
  "apache-airflow-providers-celery"
  "celery[redis]<5.6"
  "psycopg2-binary"
)
LOCK="$VENV.lock"
MARK="$VENV/.overseer-complete"

say() { printf 'install-airflow: %s\n' "$*" >&2; }

complete() { [ -f "$MARK" ] && [ "$(cat "$MARK")" = "${REQUIREMENTS[*]}" ]; }

if complete; then
  echo "$VENV"
  exit 0
fi

mkdir -p "$(dirname "$VENV")"
waited=0
until mkdir "$LOCK" 2>/dev/null; do
  owner="$(cat "$LOCK/pid" 2>/dev/null || true)"
  if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
    say "the lock's owner $owner is gone: taking the lock over"
    rm -rf "$LOCK"
    continue
  fi
  if [ -z "$owner" ] && [ "$waited" -ge 10 ]; then
    # A lock without a pid after 10 s: its maker died between mkdir and writing it.
    say "a lock without an owner: taking it over"
    rm -rf "$LOCK"
    continue
  fi
  if [ "$waited" -ge 1800 ]; then
    say "waited 30 min for $LOCK (owner ${owner:-unknown}); giving up"
    exit 1
  fi
  [ $((waited % 30)) -eq 0 ] && say "another run is installing (pid ${owner:-?}); waiting"
  sleep 1
  waited=$((waited + 1))
done
echo $$ >"$LOCK/pid"
trap 'rm -rf "$LOCK"' EXIT

if complete; then
  # Made by the run we waited for.
  echo "$VENV"
  exit 0
fi

started=$(date +%s)
rm -rf "$VENV"
say "making $VENV with $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}" >&2
# The provider must load with the Celery that was resolved, or nothing below works.
# (Importing Airflow makes $AIRFLOW_HOME: a throwaway one, not ~/airflow.)
check_home="$(mktemp -d)"
AIRFLOW_HOME="$check_home" "$VENV/bin/python" - >&2 <<'PY'
import asyncpg, celery, psycopg2  # noqa: F401
from importlib.metadata import version
from airflow.providers.celery.executors.celery_executor import CeleryExecutor  # noqa: F401
print(", ".join(f"{p} {version(p)}" for p in ("apache-airflow", "apache-airflow-providers-celery", "celery", "kombu", "redis", "sqlalchemy")))
PY
rm -rf "$check_home"
"$VENV/bin/python" -m pip freeze --disable-pip-version-check >"$VENV/requirements-resolved.txt"
elapsed=$(($(date +%s) - started))
echo "$elapsed" >"$VENV/.install-seconds"
echo "${REQUIREMENTS[*]}" >"$MARK"
say "installed in ${elapsed}s"
echo "$VENV"
