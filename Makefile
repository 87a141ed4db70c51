# teamster: build, test and run a local fleet.
#
#   make demo   a whole local fleet (embedded NATS, redis-server, router,
#               workers) playing a scenario end to end
#   make test   the full test suite (real redis-server, embedded NATS)
#
# Both install what they need first (make deps-redis beside the demo's build,
# make deps for the tests).

GO        ?= go
BIN       ?= bin
# The version the binaries report (--version, the registry, teamster_build_info).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS   := -X github.com/teamster-fleet/teamster/internal/cmdutil.version=$(VERSION)
# Packages whose tests run under the race detector: everything with goroutines.
RACE_PKGS ?= ./...
GOTESTFLAGS ?=

.PHONY: all deps deps-core deps-redis demo-build compose-credentials build test test-tail test-short lint fmt vet demo bench chaos fuzz clean

all: build

## deps-core: install redis-server (apt-get, when missing) and download the Go
## modules: all that demo, chaos and bench need.
deps-core: deps-redis
	@$(GO) mod download

## deps-redis: install redis-server with apt-get when it is missing.
deps-redis:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "deps: redis-server not found; installing it with apt-get"; \
		if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	fi
	@redis-server --version

## deps: deps-core, then what only the full test suite needs, into .tools/:
## the pinned Codex CLI (npm) for the codex harness's tests, the pinned
## Claude Code CLI (npm) for the claude harness's tests, Node.js 24 and
## the pinned openclaw for the OpenClaw plugin's tests (npm and nodejs with
## apt-get when npm is missing); prometheus and promtool for the monitoring
## assets' tests (deploy/monitoring; Debian's prometheus, with apt-get when
## either is missing).
deps: deps-core
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "deps: npm not found; installing nodejs and npm with apt-get"; \
		if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; \
	fi
	@if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then \
		echo "deps: promtool or prometheus not found; installing prometheus with apt-get"; \
		if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	fi
	@sh harness/codex/install.sh
	@sh harness/claude/install.sh
	@integrations/openclaw/scripts/deps.sh

## build: build the binaries into ./bin.
build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

## lint: gofmt and go vet must be clean.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## test: the full suite: the Go packages under the race detector, against a
## real redis-server and real NATS servers (started by the tests), then the
## OpenClaw plugin's tests (unit, and end to end with the real OpenClaw).
test: deps lint
	$(GO) test -race -count=1 -timeout 15m $(GOTESTFLAGS) $(RACE_PKGS)
	@$(MAKE) --no-print-directory test-tail

## test-tail: the chaos suite's CI subset and the OpenClaw plugin's tests,
## side by side: both mostly wait on the real servers and processes they
## start (each on its own free ports), so together they take about as long
## as the longer one. Each one's output is printed whole once both ended;
## it fails when either failed.
test-tail:
	@d=$$(mktemp -d); \
	$(GO) run ./chaos -short >$$d/chaos.log 2>&1 & c=$$!; \
	integrations/openclaw/scripts/test.sh >$$d/plugin.log 2>&1 & p=$$!; \
	wait $$c; cs=$$?; wait $$p; ps=$$?; \
	echo "== go run ./chaos -short (exit $$cs)"; cat $$d/chaos.log; \
	echo "== integrations/openclaw/scripts/test.sh (exit $$ps)"; cat $$d/plugin.log; \
	rm -rf $$d; test $$cs -eq 0 && test $$ps -eq 0

## chaos: the reliability suite: real router, worker, redis-server and
## nats-server processes under kill -9, SIGSTOP, restarts, partitions (a TCP
## proxy) and rolling drains, checked against an independent ledger; prints a
## table. make test runs its CI-sized subset (-short). CHAOSFLAGS passes flags
## (-help).
CHAOSFLAGS ?=
chaos: deps-core
	$(GO) run ./chaos $(CHAOSFLAGS)

## demo: run a whole local fleet (embedded NATS on a free port, a redis-server
## it starts, one router, two workers) and play a scenario end to end. It
## builds only bin/demo/teamster, which holds the whole fleet, and builds it
## without inlining (-gcflags=all=-l): on a fresh two-core machine that halves
## the cold compile (nats-server and go-redis dominate it) at a runtime cost a
## demo does not notice. `make build` gives the release binaries in bin/.
## The build runs beside the redis-server install (one waits on the network
## and the disk, the other on the CPU).
demo:
	@$(MAKE) --no-print-directory -j2 deps-redis demo-build
	./$(BIN)/demo/teamster dev --demo --nats-port 0

demo-build:
	@mkdir -p $(BIN)/demo
	$(GO) build -gcflags=all=-l -ldflags "$(LDFLAGS)" -o $(BIN)/demo/ ./cmd/teamster

## compose-credentials: the secrets of deploy/compose's deployment (NKeys
## and NATS permissions, TLS certificates, Redis ACL users), generated into
## the git-ignored deploy/compose/secrets/; run again to add what is new.
compose-credentials:
	$(GO) run ./cmd/teamster credentials --dir deploy/compose/secrets

## bench: teamster against the physical floor of its own hops (a table on
## stdout and bench/results.json), then the hot-function benchmarks with
## allocation counts. BENCHFLAGS passes flags to the bench program (-help).
BENCHFLAGS ?=
bench: deps-core
	$(GO) run ./bench -out bench/results.json $(BENCHFLAGS)
	$(GO) test -run '^$$' -bench . -benchmem ./bus ./leases ./selection

## fuzz: run every fuzz target for FUZZTIME each (default 30s).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

clean:
	rm -rf $(BIN)
