# shaper: make run (the embedded demo), make test (everything, with -race).
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: build run test bench lint test-deps

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/shaper ./cmd/shaper

run:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/shaper demo

test: lint test-deps
	$(GO) test -race -count=1 -timeout 15m ./...

# The Redis-shared limiter is tested against a real redis-server process,
# started by the tests themselves; install it where it is missing (Debian).
test-deps:
	@command -v redis-server >/dev/null || { \
		echo "installing redis-server (the shared-limiter tests start real ones)"; \
		SUDO=$$(command -v sudo || true); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@redis-server --version

# Limiter overhead beside golang.org/x/time/rate (feed the output to benchstat),
# shaping precision through the real pipeline (3 s of traffic per run), the
# memory of a `shaper run` child working through a 100k Kafka backlog, and
# the Redis-shared limiter's calls and latency per slot.
bench:
	$(GO) test -run '^$$' -bench '^BenchmarkReserve' -benchmem -count 10 ./limiter/
	$(GO) test -run '^$$' -bench ShapingPrecision -benchtime 1x -count 3 ./shaper/
	$(GO) test -run '^$$' -bench KafkaBacklogMemory -benchtime 1x ./cmd/shaper/
	$(GO) test -run '^$$' -bench SharedReserve -benchtime 2s ./limiter/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
