#!/usr/bin/env bash
# Run by nextest before the tests (.config/nextest.toml): says which of the
# services the tests talk to is missing on this machine. A test that needs a
# missing one prints SKIPPED and passes (it fails when CI is set), so without
# this banner a run with a service down would look fully green.
port_open() { timeout 2 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }

missing=()
for service in "PostgreSQL:5432" "MariaDB:3306" "Redis:6379" "RabbitMQ:5672"; do
  port_open "${service#*:}" || missing+=("${service%%:*} (127.0.0.1:${service#*:})")
done
for program in redis-server chromium chromedriver python3; do
  command -v "$program" >/dev/null 2>&1 || missing+=("$program (not on the PATH)")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "services: every service the tests need answers"
else
  echo "services: MISSING ${#missing[@]}: ${missing[*]}"
  echo "services: the tests that need them print SKIPPED and pass: this run is not fully green"
  echo "services: start them (.ci/run does), or run with CI=true to make them failures"
fi
