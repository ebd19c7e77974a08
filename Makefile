# bext-scheduler. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
PKG := github.com/bext-dev/bext-scheduler
BIN := bin/bext-scheduler
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
TEST_TIMEOUT ?= 20m
BENCH_COUNT ?= 5
FLEET_N ?= 100000
# Pinned release tools, built from the module proxy by `go run` (no binaries
# downloaded); deploy/package_test.go pins the same goreleaser.
GORELEASER := github.com/goreleaser/goreleaser/v2@v2.15.1

.PHONY: help build test test-services test-chart k8s-manifests bench lint fuzz run-example cluster-test demo sim release-snapshot figures clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/bext-scheduler (as the image does: time-zone data embedded)
	CGO_ENABLED=0 $(GO) build -trimpath -tags timetzdata -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/bext-scheduler

test-services: ## make sure the test Redis and Postgres answer (starts them if needed)
	@scripts/test-services

# A value of its own on every run: a test that touches a server or runs a
# built binary reads it (testenv.Uncached), so go test's cache never reuses
# its result; the packages that touch neither are cached as usual.
export BEXT_TEST_RUN := $(shell date +%s%N)
# -trimpath for every build the tests make (the test binaries, and the
# node and helper binaries they build with go build): the build cache then
# keys our packages by content, not by the clone's path, so a fresh clone
# (CI's) reuses what an earlier checkout compiled instead of compiling the
# module again with -race (about 3 of the package step's minutes). Tests
# find the repository with testenv.RepoRoot, not runtime.Caller.
test test-chart figures cluster-test sim: export GOFLAGS += -trimpath
# go test -json, shown as go test shows it, plus the slowest tests
# (scripts/testreport); every step's events are kept for the final list.
TEST_LOG ?= .test-results.json
TESTREPORT = $(GO) run ./scripts/testreport
# How many tests run at once: each package's own default unless PARALLEL
# says (PARALLEL="-parallel 1" runs one at a time, as CI did before issue
# 31). The packages set it where their tests wait rather than compute:
# the CLI tests 6 (cmd/bext-scheduler, proctest.DefaultParallel), e2e's
# clusters 5; the rest GOMAXPROCS.
PARALLEL ?=
# How many packages' test binaries run at once in the package step. Most
# of its time is waiting (wall-clock ticks, servers, node processes): at
# go test's default (GOMAXPROCS, 2 here) the step kept the two cores a
# third busy.
PKG_P ?= 4

test: test-services ## the whole suite, with -race, against the real Redis and Postgres (gofmt and vet are `make lint`)
	@rm -f $(TEST_LOG)
	@echo "== $$(date +%T) packages"
	@set -o pipefail; $(GO) test -json -race -p $(PKG_P) $(PARALLEL) -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v /e2e) | tee -a $(TEST_LOG) | $(TESTREPORT) -slowest 0
	@# The simulation bites: each planted mutation (internal/mutation) is
	@# caught by its invariant within the default seeds.
	@echo "== $$(date +%T) mutations"
	@set -o pipefail; $(GO) test -json -tags simmut -race -run TestMutations ./internal/sim | tee -a $(TEST_LOG) | $(TESTREPORT) -slowest 0
	@echo "== $$(date +%T) chart"
	$(MAKE) --no-print-directory test-chart
	@echo "== $$(date +%T) e2e"
	@# The cluster scenarios: 3-node clusters timing every-second
	@# schedules (5 at a time: e2e's own -parallel), each on backends of
	@# its own; after the packages, whose -race tests would starve the
	@# nodes of the 2 cores. The node binary is not race-built, for the
	@# same reason. The browser tests (e2e/browser) run beside them.
	@set -o pipefail; $(GO) test -json -race $(PARALLEL) -timeout $(TEST_TIMEOUT) -p 2 ./e2e/... | tee -a $(TEST_LOG) | $(TESTREPORT) -slowest 0
	@echo "== $$(date +%T) done"
	@$(TESTREPORT) -slowest 20 -summary < $(TEST_LOG)

# deploy/helmtest is a module of its own (the node never links Helm), so the
# root's ./... does not reach it. Its TestMain builds the node from this
# module. Under 10 s with a warm build cache, about 4 min cold (Helm is large).
test-chart: test-services ## the Helm chart's tests: render with the Helm SDK, strict decode, validate the ConfigMap and run the pod's command with the built binary (real Redis)
	cd deploy/helmtest && $(GO) vet ./... && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

k8s-manifests: ## regenerate deploy/kubernetes/ from the Helm chart (TestPlainManifestsCurrent fails when it is stale)
	cd deploy/helmtest && $(GO) run ./gen

SEEDS ?= 3000
SIM_FIRST ?= 1
SIM_FLAGS ?=
sim: ## the cluster simulation (internal/sim) over SEEDS seeds from SIM_FIRST, with -race (SIM_FLAGS=-strict: the known holes fail too); the last line says how many failed
	@sum=$$(mktemp); \
	$(GO) test -race -count=1 -timeout 0 -run '^TestSim$$' ./internal/sim -seeds $(SEEDS) -first $(SIM_FIRST) $(SIM_FLAGS) -summary $$sum; rc=$$?; \
	if [ -s $$sum ]; then cat $$sum; else echo "$(SEEDS) seeds, ? violations (the run did not finish)"; fi; rm -f $$sum; exit $$rc

bench: test-services build ## the benchmarks (several counts; feed to benchstat), then the built node holding FLEET_N schedules against robfig/cron
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./...
	scripts/fleet compare $(FLEET_N)

lint: ## gofmt, go vet (and staticcheck when installed)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# The code only make cluster-test, make figures and the mutation run
	@# compile: vetted here so that it does not rot between releases.
	$(GO) vet -tags 'e2elong figures simmut bexttest' ./...
	cd deploy/helmtest && $(GO) vet ./...
	@if command -v staticcheck >/dev/null; then staticcheck ./...; fi

fuzz: ## fuzz the config loader for a minute
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./config/

run-example: build ## run one node on examples/bext.config.toml (memory backend)
	$(BIN) run --config examples/bext.config.toml

SIMREAL_FLAGS ?=
cluster-test: build test-services ## before a release: the long cluster run (5 nodes per backend, faults at random, the full rolling deploy), the simulation's workload in real time on Redis and Postgres (SIMREAL_FLAGS=-realseeds 12), and the deb installed with dpkg (several minutes)
	@# TestDebPackage builds the linux/amd64 deb with goreleaser, installs
	@# it with dpkg (root), starts it under systemd's unit and purges it:
	@# what only a release changes, and minutes of goreleaser's own build.
	BEXT_TEST_DEB=1 $(GO) test -count=1 -timeout 30m -v -run '^TestDebPackage$$' ./deploy/
	$(GO) test -tags e2elong -count=1 -timeout 60m -v -run 'TestLongRun|TestRollingDeployFull' ./e2e/
	$(GO) test -race -tags e2elong -count=1 -timeout 20m -v -run '^TestSim(Redis|Postgres|RealSplitBrain)$$' ./internal/sim $(SIMREAL_FLAGS)

# FIGURES=failover,lateness,sizing,cost picks sections (default all); the
# others stay as docs/FIGURES.md has them. FIGURES_TRIALS (failover, 30),
# FIGURES_SIZES (lateness and sizing, 1000,10000,100000), FIGURES_WINDOW and
# FIGURES_COST_WINDOW (seconds, 15) shorten a trial run.
FIGURES ?=
figures: test-services ## measure failover, lateness, backend cost per tick and sizing on this machine into docs/FIGURES.md (~20 min; FIGURES=failover,cost picks sections)
	FIGURES=$(FIGURES) $(GO) test -tags figures -count=1 -timeout 60m -p 1 -v -run '^TestFigures$$' ./e2e/

demo: build test-services ## three local nodes on the local Redis for ~30s: who ran each tick, contention elsewhere
	scripts/demo

release-snapshot: ## archives (linux amd64/arm64, darwin), deb, rpm, checksums and SBOMs into dist/, offline (no image: no Docker engine here)
	$(GO) run $(GORELEASER) release --snapshot --clean --skip=docker

clean:
	rm -rf bin dist .release .test-results.json
