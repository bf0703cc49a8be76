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

# No test may leave a remote sandbox container behind.
left=$(docker ps -q --filter label=bae.session)
if [ -n "$left" ]; then
  echo "test-all: containers left running by the tests:" >&2
  docker ps --filter label=bae.session >&2
  exit 1
fi
