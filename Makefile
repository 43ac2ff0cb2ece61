# agentq — the two commands (see README):
#   make dev    run agentq on its embedded default (NATS + dev database + consumers)
#   make test   run the whole test suite (what CI runs)

GO       ?= go
GOFLAGS  ?=
export GOFLAGS

.PHONY: dev test test-short race vet fmt bench loadtest build deps clean fuzz

# node_modules holds the PGlite dev database (@electric-sql/pglite-socket),
# pinned by package-lock.json. It is only needed when AGENTQ_DATABASE_URL is
# unset, but installing it is cheap and keeps both commands self-contained.
deps: node_modules/.package-lock.json
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

# Built, then run as the recipe's only process, not with `go run`: the go
# command exits 1 whenever it sees the Ctrl-C itself (cmd/go records the
# interrupt), whatever agentq's own status, and make reports that as
# "Error 1". exec leaves agentq alone to take the signal and exit 0.
dev: deps
	$(GO) build -o bin/agentq ./cmd/agentq
	exec bin/agentq dev $(ARGS)

test: deps vet
	$(GO) test -count=1 -timeout 20m ./...
	$(GO) test -count=1 -race -timeout 10m ./internal/chat/ ./internal/bus/ ./schemas/ ./internal/service/ ./internal/job/ ./internal/provider/... ./internal/library/ ./internal/search/ ./internal/embed/...
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
