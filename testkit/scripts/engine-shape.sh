#!/usr/bin/env bash
# The engine's shape figures (issue 42: the endpoint / session split), counted
# from the sources. Run from the repository root.
set -euo pipefail
src=engine/src
fields=$(awk '/^pub struct Engine \{/{on=1;next} on&&/^\}/{on=0} on&&/^    [a-z_]+:/{n++} END{print n+0}' $src/lib.rs)
files=$(grep -rl --include=*.rs '^impl Engine\b' $src | sort)
methods=$(for f in $files; do awk '/^impl Engine[ {]/{on=1;next} on&&/^\}/{on=0} on&&/^    (pub(\(crate\))? )?fn /{n++} END{print n+0}' "$f"; done | awk "{s+=\$1} END{print s}")
inproc=$(grep -rE --include=*.rs '^\s*#\[test\]' engine proto sim io-smol/src testkit | wc -l)
binary=$(grep -rE --include=*.rs '^\s*#\[test\]' io-smol/tests | wc -l)
echo "Engine fields:            $fields"
echo "methods in impl Engine:   $methods"
echo "files with impl Engine:   $(echo "$files" | grep -c .)"
echo "in-process #[test]s:      $inproc (engine, proto, sim, testkit, io-smol/src)"
echo "binary-booting #[test]s:  $binary (io-smol/tests)"
# Item 3: ids and errors typed across module boundaries.
echo "session_id: &str params:  $(grep -rE --include=*.rs 'session_id: &str' $src | wc -l)"
echo "key_id: &str params:      $(grep -rE --include=*.rs 'key_id: &str' $src | wc -l)"
echo "Result<_, String>:        $(grep -rE --include=*.rs 'Result<[^>]*, String>' $src | wc -l)"
echo "  in proto/src/jsonrpc:   $(grep -rE --include=*.rs 'Result<[^>]*, String>' proto/src/jsonrpc | wc -l) (params parse errors)"
echo "TurnLoop Option/bool:     $(awk '/^pub struct TurnLoop \{/{on=1;next} on&&/^\}/{on=0} on&&/^    (pub(\(super\))? )?[a-z_]+: (Option<|bool)/{n++} END{print n+0}' $src/session_core/turn.rs)"
