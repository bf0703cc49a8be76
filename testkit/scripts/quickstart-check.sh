#!/usr/bin/env bash
# Runs docs/quickstart.md as written and checks that the first turn's reply
# arrives. The doc's code blocks are marked with an HTML comment on the line
# before the fence:
#
#   <!-- qs:build -->            run from the repository root when QS_BIN_DIR
#                                is unset; must name the three binaries
#   <!-- qs:env -->              not run: it may only export BAE_ADDR,
#                                BAE_ADMIN_ADDR and BAE_MOCK_ADDR, which this
#                                script sets to free loopback ports instead
#   <!-- qs:run -->              run, in order, in this one shell
#   <!-- qs:mock -->             run only on the mock-provider path
#   <!-- qs:config NAME -->      a bae-config.toml snippet for provider NAME
#   <!-- qs:file NAME -->        written to the file NAME in the work dir
#
# Every run block executes in a fresh temporary directory as the current
# directory, with the built binaries first on PATH.
#
# Environment:
#   QS_PROVIDER      mock (default): the doc's own mock-provider path;
#                    anthropic | openai | local: the doc's snippet of that
#                    name, with base_url pointed at a mock provider (the
#                    snippet's ${VAR} tokens get dummy values)
#   QS_EXTERNAL_MOCK 1: a mock is already listening on BAE_MOCK_ADDR (the
#                    Rust test's in-process one); else this script starts
#                    bae-mock-provider for the snippet paths
#   QS_EXPECT_REPLY  the assistant text to expect (default: the canned reply
#                    of bae-mock-provider)
#   QS_BIN_DIR       folder holding baesrv, baectl and bae-mock-provider;
#                    unset: run the page's build block (a debug build) and
#                    use target/debug
#   BAE_ADDR, BAE_ADMIN_ADDR, BAE_MOCK_ADDR   default: free loopback ports
#   QS_DOC           the page to run (default docs/quickstart.md)
#   QS_KEEP          1: keep the work directory
#
# Needs bash, curl, python3, sed and awk; fails loudly when one is missing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DOC=${QS_DOC:-$ROOT/docs/quickstart.md}
PROVIDER=${QS_PROVIDER:-mock}
EXPECT=${QS_EXPECT_REPLY:-Hello from the BAE mock provider!}
BINS=(baesrv baectl bae-mock-provider)

say() { echo "quickstart-check: $*"; }
die() {
  echo "quickstart-check: FAIL: $*" >&2
  exit 1
}

case $PROVIDER in
  mock | anthropic | openai | local) ;;
  *) die "QS_PROVIDER must be mock, anthropic, openai or local (got \"$PROVIDER\")" ;;
esac
for tool in curl python3 sed awk; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required but not on PATH"
done
[ -f "$DOC" ] || die "no quickstart page at $DOC"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bae-quickstart.XXXXXX")
META=$(mktemp -d "${TMPDIR:-/tmp}/bae-quickstart-meta.XXXXXX")
CURRENT=""
# The script's own stdout and stderr, for the exit trap: a failing doc
# command exits inside a block's output redirection.
exec 3>&1 4>&2
finish() {
  local status=$?
  set +e
  exec 1>&3 2>&4
  if [ "$status" -ne 0 ] && [ -n "$CURRENT" ]; then
    echo "quickstart-check: FAIL in block $(basename "$CURRENT") (exit $status); its output:" >&2
    cat "$CURRENT.out" >&2 2>/dev/null
    [ -f "$META/mock.log" ] && { echo "--- mock provider log" >&2; cat "$META/mock.log" >&2; }
  fi
  local pids
  pids=$(jobs -p)
  [ -n "$pids" ] && kill $pids 2>/dev/null
  wait 2>/dev/null
  if [ "${QS_KEEP:-}" = 1 ]; then
    echo "quickstart-check: kept $WORK and $META" >&2
  else
    rm -rf "$WORK" "$META"
  fi
  exit "$status"
}
trap finish EXIT

# Split the page into its marked blocks: $META/NN.TAG (spaces in TAG as _).
awk -v out="$META" '
  pending {
    if ($0 !~ /^```/) { print "marker qs:" tag " is not followed by a code fence" > "/dev/stderr"; exit 1 }
    n++; file = sprintf("%s/%02d.%s", out, n, tag); printf "" > file
    pending = 0; inblock = 1; next
  }
  inblock && /^```[ \t]*$/ { inblock = 0; close(file); next }
  inblock { print >> file; next }
  /^<!-- qs:[^>]*-->[ \t]*$/ {
    tag = $0; sub(/^<!-- qs:/, "", tag); sub(/[ \t]*-->[ \t]*$/, "", tag); gsub(/[ \t]+/, "_", tag)
    pending = 1
  }
  END { if (inblock || pending) { print "unterminated block qs:" tag > "/dev/stderr"; exit 1 } }
' "$DOC" || die "cannot split $DOC into blocks"
blocks=("$META"/[0-9][0-9].*)
[ -e "${blocks[0]}" ] || die "$DOC has no qs: blocks"

if [ -n "${QS_BIN_DIR:-}" ]; then
  BIN_DIR=$QS_BIN_DIR
else
  # The page's own build command, from the repository root.
  build=""
  for b in "$META"/[0-9][0-9].build; do [ -f "$b" ] && build=$b; done
  [ -n "$build" ] || die "the page has no qs:build block"
  say "building with the page's qs:build block"
  (cd "$ROOT" && bash -euo pipefail "$build") || die "the page's build block failed"
  BIN_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/debug
fi
for b in "${BINS[@]}"; do
  [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing (cargo build -p io-smol -p testkit --bins)"
done
BIN_DIR=$(cd "$BIN_DIR" && pwd)

# Nothing from the caller's environment but the three addresses reaches the
# doc's commands; provider tokens get dummy values.
for v in $(compgen -e); do
  case $v in
    BAE_ADDR | BAE_ADMIN_ADDR | BAE_MOCK_ADDR) ;;
    BAE_*) unset "$v" ;;
  esac
done
unset CLIENT_KEY PROFILE_ID SESSION SESSION_ID SESSION_KEY RPC
export ANTHROPIC_API_KEY=qs-check-anthropic-key
export OPENAI_API_KEY=qs-check-openai-key
read -r p1 p2 p3 < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
export BAE_ADDR=${BAE_ADDR:-127.0.0.1:$p1}
export BAE_ADMIN_ADDR=${BAE_ADMIN_ADDR:-127.0.0.1:$p2}
export BAE_MOCK_ADDR=${BAE_MOCK_ADDR:-127.0.0.1:$p3}
export PATH="$BIN_DIR:$PATH"

cd "$WORK"
saw_config=""
for block in "${blocks[@]}"; do
  tag=${block#"$META"/[0-9][0-9].}
  run=""
  case $tag in
    build)
      for b in "${BINS[@]}"; do
        grep -q -- "--bin $b" "$block" || die "the build block does not build $b"
      done
      ;;
    env)
      grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$block" |
        grep -qv -E '^export (BAE_ADDR|BAE_ADMIN_ADDR|BAE_MOCK_ADDR)=[^ ]+([[:space:]]+#.*)?$' &&
        die "the env block may only export BAE_ADDR, BAE_ADMIN_ADDR and BAE_MOCK_ADDR"
      for v in BAE_ADDR BAE_ADMIN_ADDR BAE_MOCK_ADDR; do
        grep -q "^export $v=" "$block" || die "the env block does not export $v"
      done
      ;;
    run) run=1 ;;
    mock) [ "$PROVIDER" = mock ] && run=1 ;;
    config_*)
      if [ "${tag#config_}" = "$PROVIDER" ]; then
        [ -n "${BAE_CONFIG:-}" ] || die "BAE_CONFIG is not set before the $PROVIDER snippet"
        if [ "${QS_EXTERNAL_MOCK:-}" != 1 ]; then
          bae-mock-provider --addr "$BAE_MOCK_ADDR" >"$META/mock.log" 2>&1 &
        fi
        # The snippet verbatim, its base_url pointed at the mock.
        awk -v url="http://$BAE_MOCK_ADDR" '
          /^[[:space:]]*base_url[[:space:]]*=/ { next }
          { print }
          /^\[\[providers\.entries\]\]/ { print "base_url = \"" url "\"" }
        ' "$block" >"$BAE_CONFIG"
        saw_config=1
      fi
      ;;
    file_*) cp "$block" "$WORK/${tag#file_}" ;;
    *) die "unknown block marker qs:$tag" ;;
  esac
  [ -n "$run" ] || continue
  CURRENT=$block
  echo "== block $(basename "$block")"
  sed 's/^/  $ /' "$block"
  # shellcheck disable=SC1090
  { source "$block"; } >"$block.out" 2>&1
  sed 's/^/  | /' "$block.out"
  CURRENT=""
done
[ "$PROVIDER" = mock ] || [ -n "$saw_config" ] || die "the doc has no qs:config $PROVIDER snippet"

# Give the background processes a moment to flush their last log lines.
sleep 0.3
outputs=("$META"/*.out)
[ -f "$META/mock.log" ] && outputs+=("$META/mock.log")

# The first turn over curl: a terminal response carrying the reply.
python3 - "$EXPECT" "${outputs[@]}" <<'EOF' || die "no sendMessage response with the expected reply"
import json, sys
expect, files = sys.argv[1], sys.argv[2:]
for path in files:
    for line in open(path, encoding="utf-8", errors="replace"):
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or not isinstance(msg.get("result"), dict):
            continue
        result = msg["result"]
        if "message" not in result:
            continue
        text = result["message"]["content"][0]["text"]
        kinds = [e["event_type"] for e in result["events"]]
        if text != expect:
            sys.exit(f"reply {text!r}, expected {expect!r}")
        for k in ("client.message.send", "provider.request", "provider.response", "server.message.send"):
            if k not in kinds:
                sys.exit(f"event {k} missing from {kinds}")
        print(f"quickstart-check: curl turn answered {text!r} ({', '.join(kinds)})")
        sys.exit(0)
sys.exit("no terminal sendMessage response found")
EOF

# The Python example printed the reply last.
py_out=$(grep -l '^python3 ' "$META"/*.run | head -n 1)
[ -n "$py_out" ] || die "no block runs python3"
[ "$(tail -n 1 "$py_out.out")" = "$EXPECT" ] || die "the Python example did not print the reply"
say "python example answered too"

# The first-boot hint, and no secret in any output.
grep -qF "admin key written to $BAE_ADMIN_KEY_FILE; next: baectl " "${outputs[@]}" ||
  die "baesrv did not log the first-boot hint for $BAE_ADMIN_KEY_FILE"
admin_key=$(tr -d '[:space:]' <"$BAE_ADMIN_KEY_FILE")
[ -n "$admin_key" ] || die "the admin key file is empty"
for secret in "$admin_key" "$CLIENT_KEY" "$SESSION_KEY"; do
  [ -n "$secret" ] || die "a key variable of the doc is empty"
  if grep -qF -- "$secret" "${outputs[@]}"; then
    die "a key (prefix ${secret:0:8}) appears in the output"
  fi
done

# The provider request reached the mock on the expected endpoint.
if [ "${QS_EXTERNAL_MOCK:-}" != 1 ]; then
  case $PROVIDER in
    mock | anthropic) path=/v1/messages ;;
    *) path=/v1/chat/completions ;;
  esac
  grep -qF "bae-mock-provider: POST $path " "${outputs[@]}" ||
    die "the mock provider logged no POST $path"
fi

say "ok (provider $PROVIDER)"
