#!/usr/bin/env bash
# The project's one test command: installs the MCP servers the end-to-end
# tests need, then runs the whole workspace's tests. Extra args go to cargo.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash testkit/scripts/install-test-deps.sh
cargo test --workspace "$@"
