# Overseer's tasks. `just --list` shows each with its comment.
# (just itself: `pip install rust-just`, or `cargo install just`.)

# Run the service on the embedded SQLite default (./overseer.db), until Ctrl-C.
run *ARGS:
    cargo run -- serve {{ARGS}}

# Run every test of the workspace against the real databases and brokers on loopback.
test *ARGS:
    cargo nextest run --workspace {{ARGS}}

# The first run builds the Airflow venv in ~/.cache/overseer (minutes); later runs reuse it.

# Overseer beside a real Airflow 3.3.2 (CeleryExecutor, Redis, Postgres), phase by phase.
interop-airflow:
    cargo nextest run --workspace -E 'test(/^interop_airflow::/)' --no-capture

# The Airflow plugin: its card's tests and bundle (npm), then its wheel in dist/, as CI builds it.
airflow-plugin:
    cd integrations/airflow && npm ci --no-audit --no-fund && npm test && npm run build
    python3 -m pip wheel --no-deps ./integrations/airflow -w dist/

# Retake the README's screenshot of Airflow's home page card (docs/airflow-home-card.png).
screenshot:
    OVERSEER_UPDATE_SCREENSHOT=1 cargo nextest run --workspace -E 'test(/^airflow_home_card::/)'

# Run the whole suite N times with every core busy (scripts/saturate.sh): times and failures.
loaded-runs N="3":
    #!/usr/bin/env bash
    set -uo pipefail
    failed=0
    for run in $(seq 1 {{N}}); do
      log=$(mktemp)
      start=$(date +%s)
      scripts/saturate.sh cargo nextest run --workspace --no-fail-fast >"$log" 2>&1
      status=$?
      summary=$(grep -E '^ *Summary' "$log" | tail -n1)
      echo "run $run: exit $status in $(( $(date +%s) - start ))s: $summary"
      grep -E '^ *(FAIL|SIGSEGV|SIGABRT|TIMEOUT) ' "$log" | sort -u
      [ "$status" = 0 ] || failed=$((failed + 1))
    done
    echo "$failed of {{N}} loaded runs failed"
    [ "$failed" = 0 ]

# Formatting and clippy, as CI checks them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# `just bench --smoke` or `--only scale,http` write to a temporary folder instead.

# Run every benchmark (release; installs wrk if missing) and rewrite BENCHMARKS.md and docs/bench.
bench *ARGS:
    command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
    cargo run --release -p overseer-bench -- {{ARGS}}

# Build the Debian package (target/debian/overseer_<version>-1_<arch>.deb; `cargo install cargo-deb` first).
deb:
    cargo deb -p overseer --locked

# Everything CI runs, services included: the same script CI uses.
ci:
    bash .ci/run
