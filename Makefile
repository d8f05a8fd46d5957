# shaper: make run (the embedded demo), make test (everything, with -race).
GO      ?= go
# The version and commit stamped into binaries. Outside a git checkout they
# are empty, and shaper --version falls back to what Go recorded (the
# module's version, or the VCS revision), else "dev".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: build dist run test test-faults fuzz soak vulncheck bench lint test-deps FORCE

# Every package but the fault suite, which has its own target.
PKGS = $$($(GO) list ./... | grep -v /faults)

# The release build, like the Dockerfile's: -tags nodemo leaves out
# `shaper demo` and its embedded nats-server and kfake (docs/operations.md, Deploying).
# make run and go run ./cmd/shaper demo keep the demo.
build:
	$(GO) build -tags nodemo -ldflags "$(LDFLAGS)" -o bin/shaper ./cmd/shaper

# Release binaries for Linux and macOS on amd64 and arm64, built like make
# build (no cgo, so they run on any libc), stripped, into $(DIST)/ with
# SHA256SUMS: make dist, or make -j4 dist. DIST_PLATFORMS=linux-amd64 makes
# one.
DIST           ?= dist
DIST_PLATFORMS ?= linux-amd64 linux-arm64 darwin-amd64 darwin-arm64
SHA256SUM      ?= $(shell command -v sha256sum >/dev/null 2>&1 && echo sha256sum || echo shasum -a 256)
dist: $(DIST_PLATFORMS:%=$(DIST)/shaper-%)
	cd $(DIST) && $(SHA256SUM) $(DIST_PLATFORMS:%=shaper-%) > SHA256SUMS

$(DIST)/shaper-%: FORCE
	CGO_ENABLED=0 GOOS=$(word 1,$(subst -, ,$*)) GOARCH=$(word 2,$(subst -, ,$*)) \
		$(GO) build -trimpath -tags nodemo -ldflags "$(LDFLAGS) -s -w" -o $@ ./cmd/shaper

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
# corpora are in testdata/fuzz. The budget is a count of runs, not a time:
# with a time, Go's fuzzing coordinator can fail a target with a bare
# "context deadline exceeded" when a worker is mid-run as the time ends
# (no input written; it happened in CI on a loaded machine). Longer:
# make fuzz FUZZTIME=5000000x (or a time, FUZZTIME=5m, by hand).
FUZZTIME ?= 100000x
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

# What the tests run besides Go modules, as command:Debian package: a C
# compiler (-race needs cgo), redis-server (the shared-limiter tests start
# real ones), chromium (the admin status page's headless-browser test, in
# shaper/browser) and zsh (the completion test). Installed with apt-get
# where missing; where there is no apt-get, make says what to install
# (macOS: brew install redis zsh; brew install --cask chromium) and the
# tests that need it fail.
TEST_TOOLS = gcc:gcc redis-server:redis-server chromium:chromium zsh:zsh
test-deps:
	@missing=; for t in $(TEST_TOOLS); do command -v $${t%%:*} >/dev/null || missing="$$missing $${t#*:}"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null; then \
		echo "make test needs:$$missing; install them (macOS: brew install redis zsh; brew install --cask chromium)"; exit 0; fi; \
	echo "installing$$missing (the tests run them)"; \
	SUDO=$$(command -v sudo || true); \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null
	@redis-server --version

# The benchmark harness: shaping precision beside a fixed-window counter and
# x/time/rate, limiter overhead (benchstat), CPU per message, idle CPU,
# throughput with no limit, backlog memory, the Redis-shared limiter, push-back,
# lanes, destinations, and shaper beside the peers a user would run instead
# (hand-written loops, Benthos: `-only peers`); it writes docs/benchmarks.md,
# docs/benchmarks.json and the pictures (peers alone take about 8.5 minutes;
# `go run ./bench -quick` checks the harness).
bench: test-deps
	$(GO) run ./bench

# gofmt -l . walks the tree itself, so lint works outside a git checkout
# (a tarball) and never waits on stdin for a list of files.
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
