#!/usr/bin/env bash
# Runs a command with every core saturated, as on a busy scheduler host:
#   scripts/saturate.sh cargo nextest run --workspace
#   scripts/saturate.sh cargo run --release -p overseer-bench -- --only detect
# One Python busy loop per core, each ending by itself after
# OVERSEER_LOAD_SECONDS (default 3600), and ended by its pid when the command
# ends, however it ends. The command's exit status is this script's.
set -uo pipefail
bound="${OVERSEER_LOAD_SECONDS:-3600}"
cores=$(nproc)
pids=()
stop() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done; wait "${pids[@]}" 2>/dev/null; }
trap stop EXIT
for _ in $(seq 1 "$cores"); do
  python3 -c "import time
end = time.monotonic() + $bound
while time.monotonic() < end:
    pass" &
  pids+=($!)
done
echo "saturate: $cores busy processes (pids ${pids[*]}), at most ${bound}s" >&2
"$@"
