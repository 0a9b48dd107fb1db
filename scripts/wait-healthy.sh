# Sourced by the GPU serving scripts: wait_healthy URL PID waits (up to 180 s) until the server
# at URL answers /health, and fails at once when process PID exits first.
wait_healthy() {
  local url=$1 pid=$2
  for _ in $(seq 1 180); do
    curl -sf "$url/health" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}
