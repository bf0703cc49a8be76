#!/usr/bin/env bash
# The project's one test command: installs the MCP servers and starts the
# container engine (podman serving the Docker API) the end-to-end tests
# need, then runs the whole workspace's tests and checks that no container
# was left running. Extra args go to cargo.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash testkit/scripts/install-test-deps.sh
bash testkit/container-engine.sh
export DOCKER_HOST=unix:///run/bae-podman/podman.sock
cargo test --workspace "$@"

# With no idle session kept in memory (BAE_RESIDENT_SESSIONS=0): every
# request on an idle session loads it back from the store first, and
# restarts restore lazily (docs/architecture.md, "State held in memory").
resident_suites=(
  admin_api admin_keys compaction_auto compaction_manual crash_kill9
  ext_gapless ext_idempotent ext_steer ext_turn_control
  live_gate live_restart live_session_basics live_subscribe live_tools mcp_stdio metrics_endpoint
  rest_auth rest_sessions restart_persistence rpc_envelope sdk_wire_shapes
)
args=()
for t in "${resident_suites[@]}"; do args+=(--test "$t"); done
BAE_TEST_RESIDENT_SESSIONS=0 cargo test -p io-smol "${args[@]}" "$@"
# Every in-process engine test (unit tests and the flows in engine/tests)
# under the same budget: seconds, and it catches what only an evicted and
# reloaded session shows.
BAE_TEST_RESIDENT_SESSIONS=0 cargo test -p engine "$@"

# The second runtime (std threads, docs/porting.md) against every
# end-to-end suite but the replica ones (it cannot forward requests).
threads_suites=(
  admin_api admin_keys admin_ui cli_config compaction_auto compaction_manual crash_kill9 ctl_admin
  ctl_transfer
  ext_gapless ext_idempotent ext_steer ext_turn_control
  live_gate live_history_storage live_providers live_restart live_session_basics live_streaming
  live_subscribe live_tools mcp_http mcp_lifecycle mcp_reconnect mcp_stdio metrics_endpoint
  prompt_cache rest_auth rest_bad_input rest_sessions restart_persistence rpc_envelope
  sandbox_remote sdk_wire_shapes security_storage security_stress security_wire subagent_remote
  quotas telemetry_otlp traffic_limits traffic_retry transfer_export transfer_fork usage_accounting
)
args=()
for t in "${threads_suites[@]}"; do args+=(--test "$t"); done
BAE_TEST_RUNTIME=threads cargo test -p io-smol "${args[@]}" "$@"

# (The suites that start PostgreSQL clusters of their own, store_postgres,
# store_equivalence and replicas_nginx (three replicas behind nginx), ran in
# the workspace pass above.)

# The PostgreSQL store (docs/scaling.md) against the end-to-end suites that
# need no MCP server or container engine and do not inspect the SQLite file:
# one throwaway cluster, a database of its own for every test server.
pg_suites=(
  admin_api admin_keys compaction_auto compaction_manual crash_kill9 ctl_admin
  ext_gapless ext_idempotent ext_steer ext_turn_control
  live_gate live_providers live_restart live_session_basics live_subscribe live_tools metrics_endpoint
  rest_auth rest_bad_input rest_sessions restart_persistence rpc_envelope
  sdk_wire_shapes security_stress security_wire
)
pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/baesrv-pg-e2e.XXXXXX")
cargo build -q -p testkit --bin pg_cluster
pg_cluster=target/debug/pg_cluster
[ -n "${CARGO_TARGET_DIR:-}" ] && pg_cluster="$CARGO_TARGET_DIR/debug/pg_cluster"
pg_env=$("$pg_cluster" start "$pg_dir")
trap '"$pg_cluster" stop "$pg_dir" || true; rm -rf "$pg_dir"' EXIT
export "${pg_env?}"
args=()
for t in "${pg_suites[@]}"; do args+=(--test "$t"); done
BAE_TEST_STORE=postgres cargo test -p io-smol "${args[@]}" "$@"

# No test may leave a remote sandbox container behind.
left=$(docker ps -q --filter label=bae.session)
if [ -n "$left" ]; then
  echo "test-all: containers left running by the tests:" >&2
  docker ps --filter label=bae.session >&2
  exit 1
fi
