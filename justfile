# Overseer's tasks. `just --list` shows each with its comment.
# (just itself: `pip install rust-just`, or `cargo install just`.)

# Run the service on the embedded SQLite default (./overseer.db), until Ctrl-C.
run *ARGS:
    cargo run -- serve {{ARGS}}

# Run every test of the workspace against the real databases and brokers on loopback.
test *ARGS:
    cargo nextest run --workspace {{ARGS}}

# Overseer beside a real Airflow 3.3.2 (CeleryExecutor, Redis, Postgres). The first run builds the
# venv in ~/.cache/overseer/airflow-3.3.2-venv (minutes: pip resolves Airflow); later runs reuse it.
interop-airflow:
    cargo nextest run -p overseer --test interop_airflow --no-capture

# Formatting and clippy, as CI checks them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Run every benchmark side by side (release; installs wrk if missing): prints the tables and
# rewrites BENCHMARKS.md and docs/bench/*.svg. `just bench --smoke` / `--only scale,http` write to a temp folder.
bench *ARGS:
    command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
    cargo run --release -p overseer-bench -- {{ARGS}}

# Everything CI runs, services included: the same script CI uses.
ci:
    bash .ci/run
