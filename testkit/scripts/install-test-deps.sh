#!/usr/bin/env bash
# Installs the real MCP servers the end-to-end tests talk to:
#   - PyPI `mcp` (official Python SDK) for python3 on PATH, used by
#     testkit/fixtures/mcp/fixture_server.py
#   - npm `@modelcontextprotocol/server-everything`, globally, which puts
#     `mcp-server-everything` on PATH
#   - PyPI `grpcio` and `opentelemetry-proto` for python3 on PATH, used by
#     the OTLP receiver testkit/fixtures/otlp/otlp_receiver.py
#     (io-smol/tests/telemetry_otlp.rs)
#   - curl, if missing (Debian's package), which the quickstart check
#     (testkit/scripts/quickstart-check.sh) runs as docs/quickstart.md does
# the official provider SDKs whose stream parsers read the mock provider's
# streamed replies (testkit/tests/mock_stream_sdks.rs):
#   - PyPI `anthropic` and `openai`, for python3 on PATH
# the parser a real Prometheus scraper uses, which reads `GET /metrics` in
# io-smol/tests/metrics_endpoint.rs:
#   - PyPI `prometheus-client`, for python3 on PATH
# the PostgreSQL server the PostgreSQL-store tests start throwaway clusters
# of (testkit/src/pg.rs, io-smol/tests/store_postgres.rs, the e2e pass of
# testkit/scripts/test-all.sh):
#   - Debian `postgresql` (server binaries under /usr/lib/postgresql/N/bin,
#     and the unprivileged `postgres` user initdb runs as when we are
#     root), via apt-get, without its default cluster
# the load balancer the replica tests put in front of three servers
# (testkit/src/nginx.rs, io-smol/tests/replicas_nginx.rs):
#   - Debian `nginx`, via apt-get (the tests run it in the foreground on a
#     loopback port with a config of their own; no service is needed)
# and the browser the admin console's end-to-end test drives
# (io-smol/tests/admin_ui.rs, testkit/ui/console.spec.mjs):
#   - Debian `chromium` (headless), via apt-get
#   - npm `playwright-core`, into testkit/ui/node_modules (not global): the
#     test script imports it from there; it downloads no browser of its own
# and the shells baectl's completion scripts are checked in
# (io-smol/tests/ctl_cli.rs):
#   - Debian `zsh` and `fish`, via apt-get (bash is already there)
# Idempotent: does nothing (quickly) when the pinned versions are present.
set -euo pipefail

if command -v curl >/dev/null 2>&1; then
  echo "install-test-deps: curl already installed"
else
  echo "install-test-deps: apt-get installing curl"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl
  command -v curl >/dev/null || { echo "install-test-deps: curl not on PATH after install" >&2; exit 1; }
fi

pg_ok() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && id postgres >/dev/null 2>&1; }
if pg_ok; then
  echo "install-test-deps: postgresql already installed"
else
  echo "install-test-deps: apt-get installing postgresql (no default cluster)"
  if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
  # The tests start clusters of their own; none should run on 5432.
  "${as_root[@]}" mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" |
    "${as_root[@]}" tee /etc/postgresql-common/createcluster.d/bae-tests.conf >/dev/null
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q postgresql
  pg_ok || { echo "install-test-deps: postgresql installed but initdb or the postgres user is missing" >&2; exit 1; }
fi

nginx_ok() { [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1; }
if nginx_ok; then
  echo "install-test-deps: nginx already installed"
else
  echo "install-test-deps: apt-get installing nginx"
  if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q nginx
  nginx_ok || { echo "install-test-deps: nginx installed but its binary is missing" >&2; exit 1; }
fi

if command -v zsh >/dev/null 2>&1 && command -v fish >/dev/null 2>&1; then
  echo "install-test-deps: zsh and fish already installed"
else
  echo "install-test-deps: apt-get installing zsh and fish"
  if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q zsh fish
  { command -v zsh && command -v fish; } >/dev/null ||
    { echo "install-test-deps: zsh or fish not on PATH after install" >&2; exit 1; }
fi

MCP_PY_VERSION=2.3.0
EVERYTHING_VERSION=2026.8.31
EVERYTHING_PKG=@modelcontextprotocol/server-everything
PLAYWRIGHT_VERSION=1.65.1
UI_DIR="$(cd "$(dirname "$0")/../ui" && pwd)"

# pip_pinned IMPORT PKG==VER...: installs the pinned PyPI packages for
# python3 on PATH unless exactly those versions are present, then checks
# that IMPORT (a python statement) works.
pip_pinned() {
  local check="$1"; shift
  local want have=""
  want="$*"
  for spec in "$@"; do
    have+="${spec%%==*}==$(python3 -c "import importlib.metadata as m; print(m.version('${spec%%==*}'))" 2>/dev/null || echo none) "
  done
  if [ "${have% }" = "$want" ]; then
    echo "install-test-deps: python $want already installed"
    return
  fi
  echo "install-test-deps: pip installing $want for $(command -v python3) (had: ${have% })"
  PIP_ROOT_USER_ACTION=ignore PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    python3 -m pip install --quiet "$@"
  python3 -c "$check" ||
    { echo "install-test-deps: $want installed but not importable" >&2; exit 1; }
}

pip_pinned 'import mcp.server.mcpserver' "mcp==$MCP_PY_VERSION"
pip_pinned 'import prometheus_client.parser' "prometheus-client==0.21.1"
pip_pinned 'import anthropic.lib.streaming, openai.lib.streaming.chat' \
  "anthropic==2.10.0" "openai==3.51.0"
pip_pinned 'import grpc, opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc' \
  "grpcio==1.85.1" "opentelemetry-proto==1.45.2"

have_js=""
if command -v mcp-server-everything >/dev/null 2>&1; then
  pkg_json="$(npm root -g)/$EVERYTHING_PKG/package.json"
  have_js=$(node -p "require('$pkg_json').version" 2>/dev/null || true)
fi
if [ "$have_js" = "$EVERYTHING_VERSION" ]; then
  echo "install-test-deps: $EVERYTHING_PKG $EVERYTHING_VERSION already installed"
else
  echo "install-test-deps: npm installing -g $EVERYTHING_PKG@$EVERYTHING_VERSION (had: ${have_js:-none})"
  npm install -g --no-audit --no-fund --loglevel=error "$EVERYTHING_PKG@$EVERYTHING_VERSION"
  command -v mcp-server-everything >/dev/null ||
    { echo "install-test-deps: mcp-server-everything not on PATH after install" >&2; exit 1; }
fi

if command -v chromium >/dev/null 2>&1; then
  echo "install-test-deps: chromium already installed"
else
  echo "install-test-deps: apt-get installing chromium"
  if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
  "${as_root[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q chromium
  command -v chromium >/dev/null ||
    { echo "install-test-deps: chromium not on PATH after install" >&2; exit 1; }
fi

have_pw=$(node -p "require('$UI_DIR/node_modules/playwright-core/package.json').version" 2>/dev/null || true)
if [ "$have_pw" = "$PLAYWRIGHT_VERSION" ]; then
  echo "install-test-deps: playwright-core $PLAYWRIGHT_VERSION already installed in testkit/ui"
else
  echo "install-test-deps: npm installing playwright-core@$PLAYWRIGHT_VERSION into testkit/ui (had: ${have_pw:-none})"
  npm install --prefix "$UI_DIR" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
    "playwright-core@$PLAYWRIGHT_VERSION"
  node -e "require('$UI_DIR/node_modules/playwright-core')" ||
    { echo "install-test-deps: playwright-core installed but not loadable" >&2; exit 1; }
fi
