# shaper: make run (the embedded demo), make test (everything, with -race).
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: build run test test-faults fuzz soak vulncheck bench lint test-deps

# Every package but the fault suite, which has its own target.
PKGS = $$($(GO) list ./... | grep -v /faults)

# The release build, like the Dockerfile's: -tags nodemo leaves out
# `shaper demo` and its embedded nats-server and kfake (README, Deploying).
# make run and go run ./cmd/shaper demo keep the demo.
build:
	$(GO) build -tags nodemo -ldflags "$(LDFLAGS)" -o bin/shaper ./cmd/shaper

run:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/shaper demo

test: lint test-deps
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

# Crashes, sink and broker faults, poison input: real `shaper run` child
# processes against real servers (docs/reliability.md has the results).
test-faults: test-deps
	$(GO) test -race -count=1 -timeout 10m ./faults/

# Short fuzz runs of the config loader (config), the Retry-After parser and the
# URL guard of url_from (internal/urlguard); the seed
# corpora are in testdata/fuzz. Longer: make fuzz FUZZTIME=5m.
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./config/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRetryAfter$$' -fuzztime $(FUZZTIME) ./sinks/
	$(GO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) ./internal/urlguard/

# Ten minutes of mixed faults with a summary (not in CI).
soak: test-deps
	$(GO) test -run TestSoak -timeout 20m ./faults/ -args -soak=10m

# Known vulnerabilities in the code and its modules. The database lives at
# vuln.go.dev; where that cannot be reached the check says so and passes.
vulncheck:
	@scripts/vulncheck

# The Redis-shared limiter is tested against a real redis-server process,
# started by the tests themselves; install it where it is missing (Debian).
test-deps:
	@command -v redis-server >/dev/null || { \
		echo "installing redis-server (the shared-limiter tests start real ones)"; \
		SUDO=$$(command -v sudo || true); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@redis-server --version

# The benchmark harness: shaping precision beside a fixed-window counter and
# x/time/rate, limiter overhead (benchstat), CPU per message, idle CPU,
# throughput with no limit, backlog memory, the Redis-shared limiter; it
# writes docs/benchmarks.md, docs/benchmarks.json and docs/shaping.svg
# (about 4 minutes on 2 cores; `go run ./bench -quick` checks the harness).
bench: test-deps
	$(GO) run ./bench

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
