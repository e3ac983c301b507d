# otelctx: build, run and test the Collector distribution and its components.
# `make help` lists every target with its first line below (the `## target:`
# comments); README.md has the details.
#
# Outputs go to _build/ (git-ignored).

SHELL := /bin/bash
comma := ,
space := $(subst ,, )
.DEFAULT_GOAL := help

GO              ?= go
# The version of the distribution and of the CLI, from the one file that
# sets it: passed to the collector builder (dist.version) and to go build
# (-ldflags -X).
VERSION         := $(strip $(file < VERSION))
VERSION_LDFLAGS := -X github.com/otelctx/otelctx/internal/version.Version=$(VERSION)
GOPATH_BIN      := $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin
# Every non-race Go build here (the builder, bpf2go, the distribution, the
# CLI, the image's binaries, the binaries tests build, the VM guests' test
# binaries) uses the distribution's configuration: static and trimmed, as
# the builder builds it. Their packages then compile once per architecture
# and come from the build cache afterwards (a fresh machine's make test
# compiled the standard library four times otherwise).
GO_STATIC       := CGO_ENABLED=0 $(GO)
BUILDER_VERSION := v0.165.0
BUILDER         := $(GOPATH_BIN)/builder
BUILDER_CONFIG  := builder-config.yaml
# golangci-lint (make lint, configured by .golangci.yml), pinned and
# installed into the repository's _build/bin, not $$GOPATH/bin.
GOLANGCI_LINT_VERSION := v2.15.0
TOOLS_BIN       := $(abspath _build/bin)
GOLANGCI_LINT   := $(TOOLS_BIN)/golangci-lint
# The operating systems the module must compile for: what needs Linux is
# behind //go:build linux, and the components and the CLI compile elsewhere
# and fail at start. make cross vets every package for them.
CROSS_GOOS      := darwin windows

BUILD_DIR     := _build
DIST_NAME     := otelcol-otelctx
DIST_BIN      := $(BUILD_DIR)/dist/$(DIST_NAME)
# The demo publisher: the thread-context publisher of the tests in --demo
# mode (process context of the service otelctx-demo, and threads that
# publish thread contexts while they serve "requests" of 2-4 spans).
DEMO_SRC      := testdata/publishers/threadpub.c testdata/publishers/otelctx_tls.c testdata/publishers/procctx.h
DEMO_BIN      := $(BUILD_DIR)/demo/threadpub
PUBLISHER_CC  ?= gcc
# Demo threads and their busy share (percent): 2 x 20 % of a CPU by default.
DEMO_THREADS  ?= 2
DEMO_BUSY     ?= 20

RUN_CONFIG ?= config/otelctx.yaml
# With the default configuration, make run merges its own overrides over it:
# config/make-run.yaml (profiles also to $(BUILD_DIR)/profiles.jsonl) and,
# with RUN_VERBOSE=1, config/make-run-verbose.yaml (detailed dumps).
RUN_VERBOSE ?=
ifeq ($(RUN_CONFIG),config/otelctx.yaml)
RUN_OVERLAYS := config/make-run.yaml $(if $(filter 1 true yes,$(RUN_VERBOSE)),config/make-run-verbose.yaml)
endif
RUN_CONFIG_FLAGS := --config $(RUN_CONFIG) $(foreach f,$(RUN_OVERLAYS),--config $(f))
# The PID of the demo publisher make run started, for make demo-profiles.
DEMO_PID_FILE := $(BUILD_DIR)/demo.pid
CLI_BIN       := $(BUILD_DIR)/otelctx
# Collector flags for `make run`. The default configuration has a profiles
# pipeline, which needs the feature gate; RUN_ARGS= (empty) with a
# configuration without profiles.
RUN_ARGS   ?= --feature-gates=service.profilesSupport

FUZZTIME    ?= 30s
TEST_FLAGS  ?=
# go test's -timeout per package: a hang detector (tests have their own
# deadlines), with room for a busy 2-core host (test/deploy takes about 5
# minutes on an idle one; 12 minutes ran out at load average 17).
TEST_TIMEOUT ?= 20m

# What the distribution is built from: the module's non-test Go sources,
# go.mod/go.sum and the builder configuration.
DIST_SOURCES := $(BUILDER_CONFIG) VERSION go.mod go.sum \
	$(shell find . -name '*.go' ! -name '*_test.go' \
		-not -path './_*' -not -path './.*' -not -path '*/testdata/*' -print)

# Debian packages the tests need (command they provide : package).
# podman and runc: the container image test (test/deploy; runc because this
# machine's hybrid cgroup layout is refused by crun); systemd-analyze: the
# systemd unit test; setpriv (util-linux): the least-privilege test;
# promtool and prometheus (prometheus): the alerting rules' tests, promtool
# test rules and a real Prometheus server (started by the test on loopback,
# never the package's service).
# The Node.js tests' releases and tracer (make node-deps; internal/testutil/nodepub finds them).
NODE_DIR := _build/node
NODE_VERSIONS := 20.20.2 22.23.3 24.21.0 26.10.0
DD_TRACE_VERSION := 6.21.0
DD_PPROF_VERSION := 5.20.0
# The OpenTelemetry SDK for Node of the environment-named service
# (testdata/node/otelsvc.js): the API and the 3.x SDK packages it needs
# (sdk-trace-node 2.x declares @opentelemetry/api <1.10.0 as its peer).
OTEL_JS_API_VERSION := 1.10.0
OTEL_JS_SDK_VERSION := 3.1.0
# The Python and Java tracers' tests (make tracer-deps; internal/testutil/
# tracersvc finds them): ddtrace from PyPI into a virtualenv (version and
# hashes of it and its dependencies in testdata/python/requirements.txt:
# the CPython 3.11 x86-64 wheels) and dd-java-agent from Maven Central,
# checked against its SHA-256.
PY_DIR := _build/python
PYTHON ?= python3
JAVA_DIR := _build/java
DD_JAVA_AGENT_VERSION := 1.68.1
DD_JAVA_AGENT_SHA256 := 86c97c1348277bb024f6185c4fd15a5567c50ab648f88277dffc429adb4bf927
MVN_DEPENDENCY_PLUGIN := org.apache.maven.plugins:maven-dependency-plugin:3.8.1
TEST_TOOLS := gcc:gcc musl-gcc:musl-tools promtool:prometheus prometheus:prometheus clang:clang llvm-objdump:llvm podman:podman runc:runc systemd-analyze:systemd setpriv:util-linux npm:npm

# The virtual machines of test/vm (make vm-deps): Debian 12's cloud kernels
# for amd64 and arm64 (pinned: when the mirror stops serving this ABI, set
# the versions `apt-cache madison linux-image-cloud-amd64` shows) and
# busybox, fetched with apt-get download into VM_DIR; QEMU and the aarch64
# cross compilers of glibc and musl (musl-dev:arm64's aarch64-linux-musl-gcc
# wraps aarch64-linux-gnu-gcc) (path or command : package).
VM_DIR          := $(BUILD_DIR)/vm
VM_KERNEL_ABI   := 6.1.0-47
VM_KERNEL_VER   := 6.1.170-3
VM_BUSYBOX_VER  := 1:1.35.0-4+deb12u1+b1
# Debian 12's 6.12 cloud kernel for amd64 (bookworm-security), which has the
# tail-call counter fixes: test/vm boots it for TestFollowerDuringSetup's
# fentry side and the lock-up hammer's comparison (VM_DIR/amd64-6.12).
VM_612_REL      := 6.12.107+deb12
VM_612_VER      := 6.12.107-1~deb12u1
VM_ARCHES       := amd64 arm64
VM_TOOLS := qemu-system-x86_64:qemu-system-x86 qemu-system-aarch64:qemu-system-arm \
	aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu /usr/aarch64-linux-gnu/include/stdio.h:libc6-dev-arm64-cross \
	aarch64-linux-musl-gcc:musl-dev:arm64 dpkg-deb:dpkg

# The container image (Dockerfile): IMAGE is its name, a manifest list of
# IMAGE_PLATFORMS; IMAGE_BIN the distribution binary make build made for
# this host, used for the architecture its ELF machine says; the others are
# cross-compiled from the same generated sources (_build/dist,
# CGO_ENABLED=0, the builder's flags), so no emulation is needed. IMAGE_TOOL: podman or buildah,
# whichever is installed.
IMAGE           ?= localhost/otelctx:$(VERSION)
IMAGE_BIN       ?= $(DIST_BIN)
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_TOOL      ?= $(firstword $(shell command -v podman buildah 2>/dev/null))
IMAGE_REVISION  := $(shell git rev-parse HEAD 2>/dev/null)

.PHONY: help build cli image image-context soak run demo-profiles test test-no-tracefs test-vm vm-deps cross e2e e2e-profiler test-deps node-deps tracer-deps lint golangci-lint bench fuzz clean builder check-dist-versions generate check-generate

## help: this list (the first line of each target's `## target:` comment).
help:
	@echo "otelctx $(VERSION): make TARGET (README.md has the details)"
	@awk '/^## [a-z][a-z0-9.-]*:/ { t = $$2; sub(/:$$/, "", t); d = $$0; sub(/^## [^:]*: */, "", d); \
		printf "  %-20s %s\n", t, d }' $(firstword $(MAKEFILE_LIST))

## builder: install the pinned collector builder into $$GOPATH/bin.
builder:
	@if ! "$(BUILDER)" version 2>&1 | grep -q '$(BUILDER_VERSION)$$'; then \
		echo "installing go.opentelemetry.io/collector/cmd/builder@$(BUILDER_VERSION) into $(GOPATH_BIN)"; \
		GOBIN="$(GOPATH_BIN)" $(GO_STATIC) install -trimpath go.opentelemetry.io/collector/cmd/builder@$(BUILDER_VERSION); \
	fi

## build: build the distribution _build/dist/otelcol-otelctx (when its inputs changed).
build: $(DIST_BIN)

$(DIST_BIN): $(DIST_SOURCES) | builder
	@mkdir -p $(@D)
	@# dist.version from VERSION: the builder reads its configuration keys
	@# from the environment too (the version in builder-config.yaml is a
	@# placeholder).
	env dist.version="$(VERSION)" "$(BUILDER)" --config $(BUILDER_CONFIG)
	@$(MAKE) --no-print-directory check-dist-versions || { rm -f $@; exit 1; }
	@# go build leaves an up-to-date binary untouched; mark it fresh for make.
	@touch $@

## check-dist-versions: the distribution resolves collector modules as go.mod does.
## Every go.opentelemetry.io/collector module this repository's go.mod resolves must resolve to the same version in the
## distribution (a component pin that drags the core forward or back fails).
check-dist-versions:
	@$(GO) list -m -f '{{.Path}} {{.Version}}' all | grep '^go.opentelemetry.io/collector' > $(BUILD_DIR)/modules-repo.txt
	@cd $(BUILD_DIR)/dist && $(GO) list -m -f '{{.Path}} {{.Version}}' all | grep '^go.opentelemetry.io/collector' > ../modules-dist.txt
	@awk 'NR == FNR { want[$$1] = $$2; next } \
		($$1 in want) && want[$$1] != $$2 { printf "  %s: %s in go.mod, %s in the distribution\n", $$1, want[$$1], $$2; bad = 1 } \
		END { if (bad) print "check-dist-versions: the distribution resolves collector modules differently from go.mod (see builder-config.yaml)"; exit bad }' \
		$(BUILD_DIR)/modules-repo.txt $(BUILD_DIR)/modules-dist.txt

# The variable in the executable, exported (-rdynamic), TLSDESC: the
# conformance cell glibc/exe/tlsdesc.
$(DEMO_BIN): $(DEMO_SRC)
	@mkdir -p $(@D)
	$(PUBLISHER_CC) -O2 -Wall -g -pthread -rdynamic -mtls-dialect=gnu2 -o $@ $(filter %.c,$^)

## cli: build the otelctx CLI into _build/otelctx (version from VERSION).
cli:
	@mkdir -p $(BUILD_DIR)
	$(GO_STATIC) build -trimpath -ldflags "$(VERSION_LDFLAGS)" -o $(CLI_BIN) ./cmd/otelctx

## image: build the multi-arch container image localhost/otelctx:VERSION (podman or buildah, no registry).
## A manifest list of IMAGE_PLATFORMS (linux/amd64, linux/arm64) from
## image-context's _build/image/; the Dockerfile starts FROM scratch and
## only COPYs, so no emulation is needed. The run flags are in docs/deploy.md.
image: image-context
	@if [ -z "$(IMAGE_TOOL)" ]; then echo "make image: podman or buildah is needed (apt-get install podman)" >&2; exit 1; fi
	@# A previous image or list of that name is replaced.
	@"$(IMAGE_TOOL)" manifest rm "$(IMAGE)" >/dev/null 2>&1 || "$(IMAGE_TOOL)" rmi -f "$(IMAGE)" >/dev/null 2>&1 || true
	"$(IMAGE_TOOL)" build --layers=false --platform $(subst $(space),$(comma),$(strip $(IMAGE_PLATFORMS))) \
		--manifest "$(IMAGE)" --build-arg VERSION=$(VERSION) --build-arg REVISION=$(IMAGE_REVISION) \
		-f Dockerfile $(BUILD_DIR)/image

## image-context: the image's build context _build/image/: per architecture, its distribution and CLI.
## For each of IMAGE_PLATFORMS: otelcol-otelctx-ARCH (IMAGE_BIN when its
## ELF machine is ARCH's, else the same generated sources cross-compiled)
## and otelctx-ARCH (the CLI, static), each checked to be a static ELF
## executable of ARCH's machine whatever the build host; and the shipped
## configuration.
image-context: $(IMAGE_BIN)
	@rm -rf $(BUILD_DIR)/image && mkdir -p $(BUILD_DIR)/image
	@set -e; for p in $(IMAGE_PLATFORMS); do \
		arch=$${p#linux/}; dir=$(abspath $(BUILD_DIR))/image; \
		case $$arch in amd64) machine=x86-64;; arm64) machine='ARM aarch64';; \
			*) echo "make image: no ELF machine known for $$arch (IMAGE_PLATFORMS)" >&2; exit 1;; esac; \
		if file -b "$(IMAGE_BIN)" | grep -q "$$machine"; then cp "$(IMAGE_BIN)" "$$dir/otelcol-otelctx-$$arch"; \
		else echo "make image: cross-compiling the distribution for $$p"; \
			(cd $(BUILD_DIR)/dist && GOOS=linux GOARCH=$$arch $(GO_STATIC) build -trimpath -ldflags="-s -w" -o "$$dir/otelcol-otelctx-$$arch" .); fi; \
		GOOS=linux GOARCH=$$arch $(GO_STATIC) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o "$$dir/otelctx-$$arch" ./cmd/otelctx; \
		for f in "$$dir/otelcol-otelctx-$$arch" "$$dir/otelctx-$$arch"; do \
			desc=$$(file -b "$$f"); \
			case "$$desc" in *"$$machine"*) ;; *) echo "make image: $$f is not a $$machine executable ($$p): $$desc" >&2; exit 1;; esac; \
			case "$$desc" in *"statically linked"*) ;; *) echo "make image: $$f is not statically linked: $$desc" >&2; exit 1;; esac; \
		done; \
	done
	cp config/otelctx.yaml $(BUILD_DIR)/image/otelctx.yaml

## soak: run the distribution for an hour beside churning publishers and a 997 Hz profiler (as root).
## test/soak: the production configuration, publishers that come and go,
## the stand-in profiler's samples sent as profiles through ctxenrich; the
## agent's RSS, heap, CPU and catalog sizes every minute to
## _build/soak/soak.tsv, and the bound after the warm-up (BENCHMARKS.md).
## SOAK_ARGS: its flags (-duration, -every, -hz, ...).
soak: $(DIST_BIN)
	$(GO) run ./test/soak -dist $(DIST_BIN) $(SOAK_ARGS)

## run: build and run the collector with the demo publisher (Ctrl-C stops both).
## The demo publisher in the background, the collector in the
## foreground (its output on this terminal). Ctrl-C, SIGTERM to make, or the
## collector exiting stops both; the EXIT trap always reaps the publisher.
## The collector runs as a job and the shell waits for it, so that a signal
## to this shell is handled at once (a plain foreground child would delay the
## trap until it exited) and forwarded to the collector as SIGTERM.
run: $(DIST_BIN) $(DEMO_BIN)
	@set -uo pipefail; \
	col=; pub=; \
	stop() { \
		[ -n "$$col" ] && kill -TERM "$$col" 2>/dev/null && wait "$$col" 2>/dev/null; \
		[ -n "$$pub" ] && [ "$$(cat "$(DEMO_PID_FILE)" 2>/dev/null)" = "$$pub" ] && rm -f "$(DEMO_PID_FILE)"; \
		if [ -n "$$pub" ] && kill -TERM "$$pub" 2>/dev/null; then \
			wait "$$pub" 2>/dev/null; echo "make run: stopped demo publisher (pid $$pub)"; \
		fi; \
	}; \
	trap 'stop' EXIT; \
	trap 'echo; echo "make run: interrupted, stopping"; exit 130' INT; \
	trap 'exit 143' TERM HUP; \
	"$(DEMO_BIN)" --demo --demo-threads $(DEMO_THREADS) --demo-busy $(DEMO_BUSY) & pub=$$!; \
	echo "$$pub" > "$(DEMO_PID_FILE)"; \
	echo "make run: demo publisher running (pid $$pub, in $(DEMO_PID_FILE)); collector: $(DIST_BIN) $(RUN_CONFIG_FLAGS) $(RUN_ARGS)"; \
	OTELCTX_RUN_DIR="$(abspath $(BUILD_DIR))" "$(DIST_BIN)" $(RUN_CONFIG_FLAGS) $(RUN_ARGS) & col=$$!; \
	wait "$$col"; rc=$$?; col=; exit $$rc

## demo-profiles: send a profile of make run's demo, as a profiler would.
## While `make run` runs (as root), sample the threads of
## the demo publisher it started (its PID in _build/demo.pid) from /proc
## (every 5 ms, those running) for 3 s and send them as one OTLP profile
## shaped like the OTel eBPF profiler's to 127.0.0.1:4318; the collector
## prints it enriched (links, service.name). DEMO_PID=N picks another.
demo-profiles:
	@pid="$(DEMO_PID)"; \
	if [ -z "$$pid" ]; then \
		pid=$$(cat "$(DEMO_PID_FILE)" 2>/dev/null); \
		if [ -z "$$pid" ] || ! kill -0 "$$pid" 2>/dev/null; then \
			echo "make demo-profiles: no demo publisher of make run is running ($(DEMO_PID_FILE) missing or stale): start make run first, or pass DEMO_PID=N" >&2; \
			exit 1; \
		fi; \
	fi; \
	echo "make demo-profiles: demo publisher pid $$pid"; \
	$(GO) run ./test/enrich/demoprofiles -pid "$$pid" $(DEMO_PROFILES_ARGS)

## test-deps: install the Debian packages the tests need (as root).
## What the tests compile with (C publisher for glibc and musl,
## clang for BPF objects). Installed with apt-get as root; otherwise listed.
test-deps:
	@missing=; \
	for t in $(TEST_TOOLS); do \
		command -v "$${t%%:*}" >/dev/null 2>&1 || missing="$$missing $${t##*:}"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "make test: installing Debian packages:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		log=$$(mktemp); \
		if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; } >"$$log" 2>&1; then \
			cat "$$log" >&2; rm -f "$$log"; echo "make test: apt-get install$$missing failed" >&2; exit 1; \
		fi; \
		rm -f "$$log"; \
	else \
		echo "make test: missing packages:$$missing"; \
		echo "make test:   install them with: sudo apt-get install -y$$missing"; \
		echo "make test:   tests that need them skip (and fail under CI=true)"; \
	fi

## node-deps: install the Node.js releases, dd-trace and the OTel SDK of the Node tests from npm into _build/node.
## Once (`make clean` removes them): node-linux-<arch> 20, 22, 24 and 26 (the
## packages that ship bin/node), dd-trace with @datadog/pprof, and the
## OpenTelemetry SDK for Node (api, sdk-trace, resources, context-async-hooks); npm's
## cache is kept there too: nothing global.
node-deps:
	@if ! command -v npm >/dev/null 2>&1; then echo "make test: npm missing: the Node.js tests skip (and fail under CI=true)"; exit 0; fi; \
	arch=$$(uname -m); case $$arch in x86_64) arch=x64;; aarch64) arch=arm64;; esac; \
	npm="npm install --no-audit --no-fund --loglevel=error --cache $(abspath $(NODE_DIR))/.npm-cache"; \
	for v in $(NODE_VERSIONS); do \
		d=$(NODE_DIR)/node-$${v%%.*}; \
		[ -x $$d/node_modules/node-linux-$$arch/bin/node ] && continue; \
		echo "make test: installing node-linux-$$arch@$$v into $$d"; \
		mkdir -p $$d && $$npm --prefix $$d node-linux-$$arch@$$v >/dev/null || exit 1; \
	done; \
	d=$(NODE_DIR)/tracer; \
	if [ ! -f $$d/node_modules/dd-trace/package.json ] || [ ! -f $$d/node_modules/@datadog/pprof/package.json ]; then \
		echo "make test: installing dd-trace@$(DD_TRACE_VERSION) @datadog/pprof@$(DD_PPROF_VERSION) into $$d"; \
		mkdir -p $$d && $$npm --prefix $$d dd-trace@$(DD_TRACE_VERSION) @datadog/pprof@$(DD_PPROF_VERSION) >/dev/null || exit 1; \
	fi; \
	d=$(NODE_DIR)/otelsdk; \
	if [ ! -f $$d/node_modules/@opentelemetry/sdk-trace/package.json ]; then \
		echo "make test: installing @opentelemetry/api@$(OTEL_JS_API_VERSION) sdk-trace, resources, context-async-hooks @$(OTEL_JS_SDK_VERSION) into $$d"; \
		mkdir -p $$d && $$npm --prefix $$d @opentelemetry/api@$(OTEL_JS_API_VERSION) @opentelemetry/sdk-trace@$(OTEL_JS_SDK_VERSION) \
			@opentelemetry/resources@$(OTEL_JS_SDK_VERSION) @opentelemetry/context-async-hooks@$(OTEL_JS_SDK_VERSION) >/dev/null || exit 1; \
	fi

## tracer-deps: install dd-trace-py (PyPI) and the Datadog Java agent (Maven Central) of the tracer tests into _build.
## Once per pin (`make clean` removes them): a virtualenv _build/python/venv
## with testdata/python/requirements.txt (hashes required, wheels only) and
## _build/java/dd-java-agent.jar, its SHA-256 checked; pip's and Maven's
## caches are kept there too: nothing global. Missing python3 (3.11 on
## x86-64) or mvn: the tests skip (and fail under CI=true).
tracer-deps:
	@req=testdata/python/requirements.txt; venv=$(PY_DIR)/venv; \
	if cmp -s $$req $$venv/requirements.txt; then :; \
	elif ! command -v $(PYTHON) >/dev/null 2>&1; then \
		echo "make test: $(PYTHON) missing: the Python tracer tests skip (and fail under CI=true)"; \
	elif [ "$$($(PYTHON) -c 'import platform, sys; print("%d.%d-%s" % (sys.version_info[0], sys.version_info[1], platform.machine()))')" != 3.11-x86_64 ]; then \
		echo "make test: $$req pins CPython 3.11 x86-64 wheels, $(PYTHON) is another: the Python tracer tests skip (and fail under CI=true)"; \
	else \
		echo "make test: installing $$(grep -o '^ddtrace==[^ ]*' $$req) into $$venv"; \
		rm -rf $$venv && $(PYTHON) -m venv $$venv && \
		$$venv/bin/pip install -q --disable-pip-version-check --cache-dir $(abspath $(PY_DIR))/.pip-cache \
			--no-deps --require-hashes --only-binary=:all: -r $$req && cp $$req $$venv/requirements.txt || exit 1; \
	fi; \
	jar=$(JAVA_DIR)/dd-java-agent.jar; \
	if [ -f $$jar ] && echo "$(DD_JAVA_AGENT_SHA256)  $$jar" | sha256sum -c --status; then exit 0; fi; \
	if ! command -v mvn >/dev/null 2>&1; then echo "make test: mvn missing: the Java tracer tests skip (and fail under CI=true)"; exit 0; fi; \
	echo "make test: installing com.datadoghq:dd-java-agent:$(DD_JAVA_AGENT_VERSION) into $$jar"; \
	mkdir -p $(JAVA_DIR) && log=$$(mktemp) && \
	if ! mvn -B -q -Dmaven.repo.local=$(abspath $(JAVA_DIR))/m2 $(MVN_DEPENDENCY_PLUGIN):copy \
		-Dartifact=com.datadoghq:dd-java-agent:$(DD_JAVA_AGENT_VERSION) -DoutputDirectory=$(abspath $(JAVA_DIR))/dl >$$log 2>&1; then \
		cat $$log >&2; rm -f $$log; echo "make test: mvn could not fetch dd-java-agent $(DD_JAVA_AGENT_VERSION)" >&2; exit 1; \
	fi; rm -f $$log; \
	dl=$(JAVA_DIR)/dl/dd-java-agent-$(DD_JAVA_AGENT_VERSION).jar; \
	if ! echo "$(DD_JAVA_AGENT_SHA256)  $$dl" | sha256sum -c --status; then \
		echo "make test: $$dl: SHA-256 $$(sha256sum < $$dl | cut -d' ' -f1), want $(DD_JAVA_AGENT_SHA256)" >&2; rm -f $$dl; exit 1; \
	fi; \
	mv $$dl $$jar

## test: every test with the race detector (what CI runs, then make lint and make cross).
## Unit, integration and race tests of every package, and the
## end-to-end test of the distribution (test/e2e), which gets the binary
## through OTELCTX_DIST_BIN. Three runs side by side: test/vm (the
## longest: it builds each guest's test binaries and boots three QEMU
## guests) starts first, as soon as the kernels are there, in the
## background, while the distribution builds; then the eBPF sampler's
## package in test-no-tracefs (tracefs unmounted) and every other package,
## the longest first. Their logs: _build/test-vm.log, _build/test-no-tracefs.log.
## The background runs are process groups (set -m): a failed build or an
## interrupt ends them, QEMU included.
test: test-deps node-deps tracer-deps vm-deps check-generate
	@mkdir -p $(BUILD_DIR); vmlog=$(BUILD_DIR)/test-vm.log; ntlog=$(BUILD_DIR)/test-no-tracefs.log; \
	start=$$SECONDS; \
	echo "make test: test/vm in the background ($$vmlog), started at 0s"; \
	set -m; \
	$(MAKE) --no-print-directory test-vm-run > $$vmlog 2>&1 & vm=$$!; \
	trap 'kill -- -$$vm $${pre:+-$$pre} $${nt:+-$$nt} 2>/dev/null; $(UNSTICK)' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	$(GO) test -race $(GO_TEST_VET) -c -o $(BUILD_DIR)/sampler-race.test ./internal/threads/sampler > $$ntlog 2>&1 & pre=$$!; \
	$(MAKE) --no-print-directory $(DIST_BIN) || exit 1; \
	echo "make test: distribution built at $$((SECONDS - start))s"; \
	wait $$pre; pre=; \
	echo "make test: the race build of the sampler's tests ended by $$((SECONDS - start))s"; \
	$(MAKE) --no-print-directory test-no-tracefs > $$ntlog 2>&1 & nt=$$!; \
	echo '$(GO) test -race $(GO_TEST_VET) -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) (every package but test/vm and the sampler'"'"'s; test-no-tracefs beside it)'; \
	OTELCTX_DIST_BIN="$(abspath $(DIST_BIN))" $(GO) test -race $(GO_TEST_VET) -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(TEST_PKGS); rc=$$?; \
	echo "make test: main run ended at $$((SECONDS - start))s"; \
	wait $$nt; ntrc=$$?; echo "== test-no-tracefs (ended by $$((SECONDS - start))s)"; cat $$ntlog; \
	wait $$vm; vmrc=$$?; echo "== test/vm (ended by $$((SECONDS - start))s)"; cat $$vmlog; \
	trap - EXIT; \
	if ! $(UNSTICK) && [ "$$CI" = true ]; then echo "make test: unstick aborted a FUSE connection a test left, or could not look (CI=true)" >&2; rc=1; fi; \
	if [ $$ntrc != 0 ]; then echo "make test: test-no-tracefs failed" >&2; rc=1; fi; \
	if [ $$vmrc != 0 ]; then echo "make test: test/vm failed" >&2; rc=1; fi; exit $$rc

# Run at the end of make test, also when it fails or is interrupted: it
# says what the tests left (it should be nothing: a test that holds a
# FUSE READ has the connection aborted when its process dies).
UNSTICK := bash test/unstick

## unstick: abort and unmount every FUSE connection the tests left (mount source testfuse) and list threads in state D (as root).
## When ps, pgrep or a test hangs, or a test process does not die after
## SIGKILL (docs/building.md). It aborts the connections of running tests
## too. Reads only mountinfo, stat and comm under /proc (never cmdline).
.PHONY: unstick
unstick:
	@$(UNSTICK)

# go test's own vet pass is off in make test's runs: make lint (which CI
# runs after make test) vets every package with every analyzer, and the
# pass cost a fresh machine about a minute of its two cores.
GO_TEST_VET := -vet=off

# The packages of make test's main run: the longest first; the sampler's
# package is test-no-tracefs's, test/vm runs apart (test-vm-run) and
# test/vm/lockup only inside its guests.
TEST_FIRST = ./test/deploy ./test/enrich ./test/conformance ./cmd/otelctx
TEST_PKGS = $(shell $(GO) list $(TEST_FIRST) ./... | grep -v -e '/internal/threads/sampler$$' -e '/test/vm$$' -e '/test/vm/lockup$$')

# test/vm's go test timeout: its guests stretch their deadlines on a busy
# host (test/vm's TimeScale), and end a minute before this.
VM_TEST_TIMEOUT ?= 30m
# test/vm's boots at once: two per architecture (test/vm's secondBoot).
VM_BOOTS := 4

## test-no-tracefs: the eBPF sampler's tests where tracefs is not mounted (a fresh machine).
## In a private mount namespace (unshare -m) in which tracefs is unmounted,
## whatever the host has mounted (tests and tools mount it and leave it):
## what a new user's first make test meets. The tests fail if tracefs was
## there when they started (OTELCTX_TEST_NO_TRACEFS). Needs root and
## unshare (util-linux); without them it is skipped, and fails under CI=true.
test-no-tracefs:
	@if [ "$$(id -u)" != 0 ] || ! command -v unshare >/dev/null 2>&1; then \
		echo "test-no-tracefs: needs root and unshare (util-linux): not run"; \
		if [ "$$CI" = true ]; then exit 1; fi; exit 0; \
	fi
	unshare --mount --propagation private sh -c 'for m in /sys/kernel/debug/tracing /sys/kernel/tracing; do \
		while mountpoint -q "$$m"; do umount "$$m" || exit 1; done; done; \
		OTELCTX_TEST_NO_TRACEFS=1 exec $(GO) test -race $(GO_TEST_VET) -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./internal/threads/sampler/...'

## test-vm: only the VM tests (test/vm), verbose: Linux 6.1 amd64 and arm64, 6.12 amd64, under QEMU.
## test/vm boots Debian 12's cloud kernels with QEMU's TCG (no KVM
## needed) and runs tests of the sampler, following (fentry and hrtimer,
## its precision under load, during a tail-calling profiler's set-up),
## ptrace and the TLS conformance cells inside; make test runs it too.
test-vm: vm-deps
	OTELCTX_VM_DIR="$(abspath $(VM_DIR))" $(GO) test -count=1 -v -parallel $(VM_BOOTS) -timeout $(VM_TEST_TIMEOUT) $(TEST_FLAGS) ./test/vm

## test-vm-run: test/vm as make test runs it (after vm-deps; not verbose, never a cached result).
# go test cannot see what the guests' binaries are built from (their
# builds are cached), hence -count=1.
.PHONY: test-vm-run
test-vm-run:
	OTELCTX_VM_DIR="$(abspath $(VM_DIR))" $(GO) test $(GO_TEST_VET) -count=1 -parallel $(VM_BOOTS) -timeout $(VM_TEST_TIMEOUT) $(TEST_FLAGS) ./test/vm

## vm-deps: install QEMU and the aarch64 cross compilers (glibc, musl), fetch the VM kernels (as root).
## The kernels and busybox of each architecture in VM_ARCHES go to
## VM_DIR/ARCH/{vmlinuz,busybox}, fetched once with apt-get download (arm64
## packages after dpkg --add-architecture arm64) and unpacked with dpkg-deb.
vm-deps:
	@missing=; \
	for t in $(VM_TOOLS); do \
		p="$${t%%:*}"; \
		if [ "$${p#/}" != "$$p" ]; then [ -e "$$p" ] || missing="$$missing $${t#*:}"; \
		else command -v "$$p" >/dev/null 2>&1 || missing="$$missing $${t#*:}"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
			echo "make vm-deps: missing packages:$$missing (sudo apt-get install -y$$missing); test/vm skips (fails under CI=true)"; exit 0; \
		fi; \
		echo "make vm-deps: installing Debian packages:$$missing"; \
		case "$$missing" in *:arm64*) dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64;; esac; \
		log=$$(mktemp); \
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; } >"$$log" 2>&1; then \
			cat "$$log" >&2; rm -f "$$log"; echo "make vm-deps: apt-get install$$missing failed" >&2; exit 1; \
		fi; \
		rm -f "$$log"; \
	fi
	@for arch in $(VM_ARCHES); do \
		[ -s "$(VM_DIR)/$$arch/vmlinuz" ] && [ -s "$(VM_DIR)/$$arch/busybox" ] && continue; \
		$(MAKE) --no-print-directory vm-fetch VM_ARCH=$$arch || exit 1; \
	done
	@$(MAKE) --no-print-directory vm-kernel-6.12

## vm-fetch: one architecture's kernel and busybox (VM_ARCH), by vm-deps.
.PHONY: vm-fetch
vm-fetch:
	@set -e; arch=$(VM_ARCH); dir="$(VM_DIR)/$$arch"; dl="$(VM_DIR)/dl"; \
	kpkg=linux-image-$(VM_KERNEL_ABI)-cloud-$$arch-unsigned; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
		echo "make vm-deps: not root: the $$arch VM kernel is not fetched; test/vm skips (fails under CI=true)"; exit 0; \
	fi; \
	if [ "$$arch" != "$$(dpkg --print-architecture)" ] && ! dpkg --print-foreign-architectures | grep -qx "$$arch"; then \
		echo "make vm-deps: dpkg --add-architecture $$arch (for apt-get download)"; \
		dpkg --add-architecture "$$arch"; apt-get update -qq >/dev/null; \
	fi; \
	apt-cache show "$$kpkg:$$arch=$(VM_KERNEL_VER)" >/dev/null 2>&1 || apt-get update -qq >/dev/null; \
	mkdir -p "$$dl" "$$dir"; rm -rf "$$dl/$$arch"; mkdir -p "$$dl/$$arch"; \
	echo "make vm-deps: apt-get download $$kpkg:$$arch=$(VM_KERNEL_VER) busybox-static:$$arch=$(VM_BUSYBOX_VER)"; \
	if ! (cd "$$dl/$$arch" && apt-get download -qq "$$kpkg:$$arch=$(VM_KERNEL_VER)" "busybox-static:$$arch=$(VM_BUSYBOX_VER)" 2>&1 | grep -v 'couldn.t be accessed by user'); then :; fi; \
	for d in "$$dl/$$arch"/*.deb; do [ -e "$$d" ] || { echo "make vm-deps: apt-get download failed: is $(VM_KERNEL_VER) still served? (apt-cache madison $$kpkg:$$arch; update VM_KERNEL_ABI/VM_KERNEL_VER)" >&2; exit 1; }; dpkg-deb -x "$$d" "$$dl/$$arch/x"; done; \
	cp "$$dl/$$arch/x/boot/vmlinuz-$(VM_KERNEL_ABI)-cloud-$$arch" "$$dir/vmlinuz.tmp" && mv "$$dir/vmlinuz.tmp" "$$dir/vmlinuz"; \
	cp "$$dl/$$arch/x/bin/busybox" "$$dir/busybox.tmp" && mv "$$dir/busybox.tmp" "$$dir/busybox"; \
	rm -rf "$$dl/$$arch"

## vm-kernel-6.12: Debian 12's 6.12 amd64 cloud kernel into VM_DIR/amd64-6.12, by vm-deps.
.PHONY: vm-kernel-6.12
vm-kernel-6.12:
	@set -e; dir="$(VM_DIR)/amd64-6.12"; dl="$(VM_DIR)/dl/amd64-6.12"; \
	kpkg=linux-image-$(VM_612_REL)-cloud-amd64-unsigned; \
	[ -s "$$dir/vmlinuz" ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
		echo "make vm-deps: not root: the 6.12 VM kernel is not fetched; its test/vm run skips (fails under CI=true)"; exit 0; \
	fi; \
	apt-cache show "$$kpkg=$(VM_612_VER)" >/dev/null 2>&1 || apt-get update -qq >/dev/null; \
	rm -rf "$$dl"; mkdir -p "$$dl" "$$dir"; \
	echo "make vm-deps: apt-get download $$kpkg=$(VM_612_VER)"; \
	if ! (cd "$$dl" && apt-get download -qq "$$kpkg=$(VM_612_VER)" 2>&1 | grep -v 'couldn.t be accessed by user'); then :; fi; \
	for d in "$$dl"/*.deb; do [ -e "$$d" ] || { echo "make vm-deps: apt-get download failed: is $(VM_612_VER) still served? (apt-cache madison $$kpkg; update VM_612_REL/VM_612_VER)" >&2; exit 1; }; dpkg-deb -x "$$d" "$$dl/x"; done; \
	cp "$$dl/x/boot/vmlinuz-$(VM_612_REL)-cloud-amd64" "$$dir/vmlinuz.tmp" && mv "$$dir/vmlinuz.tmp" "$$dir/vmlinuz"; \
	rm -rf "$$dl"

## generate: rebuild the committed BPF objects of the eBPF sampler.
## The objects (internal/threads/sampler/sampler_{x86,arm64}_bpfel.{go,o}), from
## sampler.bpf.c with clang and llvm-strip, through bpf2go.
generate:
	$(GO_STATIC) generate ./internal/threads/sampler/...

## check-generate: the committed BPF objects match their sources.
## They must be what their sources
## compile to (clang output is reproducible and path-independent: bpf2go
## compiles with relative paths). Regenerates in place and fails when git
## sees a difference; skipped without clang/llvm-strip or outside git.
check-generate:
	@if ! command -v clang >/dev/null 2>&1 || ! command -v llvm-strip >/dev/null 2>&1; then \
		echo "check-generate: clang or llvm-strip missing, BPF objects not checked"; \
		if [ "$$CI" = true ]; then exit 1; fi; exit 0; \
	fi; \
	if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		echo "check-generate: not a git checkout, BPF objects not checked"; exit 0; \
	fi; \
	$(MAKE) --no-print-directory generate >/dev/null && \
	if [ -n "$$(git status --porcelain -- 'internal/threads/sampler/*_bpfel.*')" ]; then \
		git status --short -- 'internal/threads/sampler/*_bpfel.*'; \
		echo "check-generate: the BPF objects differ from their sources: run make generate and commit the result"; \
		exit 1; \
	fi

## cross: vet every package and its tests for arm64, and for $(CROSS_GOOS).
## arm64 is built and unit-tested by cross-compilation only (this
## machine is x86-64): vet compiles every package and its tests for arm64.
## On CROSS_GOOS what needs Linux is left out by //go:build linux; the rest,
## the components' and the CLI's stubs included (they fail at start), must
## compile. Then image-context: the distribution and the CLI
## cross-compiled for every platform of the image, each checked to be a
## static executable of its machine (make test's TestImage builds only this
## host's platform).
cross:
	GOARCH=arm64 $(GO) vet ./...
	$(MAKE) --no-print-directory image-context
	@set -e; for os in $(CROSS_GOOS); do echo "GOOS=$$os $(GO) vet ./..."; GOOS=$$os $(GO) vet ./...; done

## e2e: only the distribution's end-to-end test, uncached and verbose.
e2e: $(DIST_BIN)
	OTELCTX_DIST_BIN="$(abspath $(DIST_BIN))" $(GO) test -count=1 -v $(TEST_FLAGS) ./test/e2e

## e2e-profiler: score the real OTel eBPF profiler's links (PROFILER_SRC=DIR).
## The distribution with the real OTel eBPF profiler (built
## outside this repository, see test/profilere2e/README.md; PROFILER_SRC is
## the directory it was built in), on a busy host, as root: the collector
## first, then the profiler while a publisher switches spans (10 ms, then
## 50 ms; publishers in E2E_PROFILER_PUBLISHERS: threadpub.c and a Node.js
## 24 service traced by dd-trace); scores each of the profiler's samples of it against the ground
## truth, the first 10 s of samples apart, once per frequency in E2E_PROFILER_HZ.
## E2E_PROFILER_ARGS adds flags (-goal=false, -keep, -run 20s, ...); -mode cputime
## (CPU time by route and span through the cputime connector: threadpub's
## workers, and node24's HTTP service by dd-trace's endpoint) and -mode environ
## (a C process and a Node.js service with the OpenTelemetry SDK named only by
## OTEL_SERVICE_NAME/OTEL_RESOURCE_ATTRIBUTES; a dd-trace service keeping its
## published resource). One CPU hog per core, every agent at nice 0, by default.
E2E_PROFILER_HZ   ?= 20 997
E2E_PROFILER_PUBLISHERS ?= threadpub node24
E2E_PROFILER_ARGS ?=
e2e-profiler: $(DIST_BIN) node-deps
	@if [ -z "$(PROFILER_SRC)" ]; then \
		echo "make e2e-profiler: PROFILER_SRC is not set: build the OTel eBPF profiler outside this repository as test/profilere2e/README.md describes, then run make e2e-profiler PROFILER_SRC=DIR (the directory it was built in)" >&2; \
		exit 2; \
	fi
	$(GO) run ./test/profilere2e -dist "$(abspath $(DIST_BIN))" -profiler "$(PROFILER_SRC)" -hz "$(E2E_PROFILER_HZ)" -publishers "$(E2E_PROFILER_PUBLISHERS)" $(E2E_PROFILER_ARGS)

## scale: measure the distribution at host scale (as root, ~15 min; not part of make test).
## test/scale: the collector's CPU, RSS and fds with its default settings
## beside 10,000 idle publishers with 100,000 threads, 50 new publishers a
## second beside 3,000 idle ones, and 100 to 10,000 non-publishing
## processes (BENCHMARKS.md, "Scale"). SCALE_ARGS adds flags (-scenarios a,
## -window 5m, ...); -scenarios d measures the peak RSS with 40 hostile
## publishers against 40 ordinary ones (-before-dist: a second binary;
## BENCHMARKS.md, "Context budget"). It raises kernel.pid_max/threads-max if needed and
## restores them; every process it starts is killed on every path.
SCALE_ARGS ?=
.PHONY: scale
scale: $(DIST_BIN)
	$(GO) run ./test/scale -dist "$(abspath $(DIST_BIN))" $(SCALE_ARGS)

## lint: gofmt -l (fails on any unformatted file), go vet and golangci-lint (.golangci.yml).
lint: golangci-lint
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './_*' -not -path './.*')); \
	if [ -n "$$out" ]; then echo "gofmt -l: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	"$(GOLANGCI_LINT)" run ./...

## golangci-lint: install the pinned golangci-lint into _build/bin.
golangci-lint:
	@if [ "$$("$(GOLANGCI_LINT)" version --short 2>/dev/null)" != "$(GOLANGCI_LINT_VERSION:v%=%)" ]; then \
		echo "installing github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) into $(TOOLS_BIN)"; \
		GOBIN="$(TOOLS_BIN)" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	fi

## bench: every benchmark, no tests.
bench:
	$(GO) test -run '^$$' -bench . ./...

## fuzz: every fuzz target (go test -list '^Fuzz'), FUZZTIME (30s) each.
fuzz:
	@set -euo pipefail; \
	targets=$$($(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { n[++c] = $$1; next } /^ok/ { for (i = 1; i <= c; i++) print $$2 " " n[i]; c = 0 }'); \
	if [ -z "$$targets" ]; then echo "make fuzz: no fuzz targets"; exit 0; fi; \
	while read -r pkg name; do \
		echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done <<< "$$targets"

## clean: remove _build/.
clean:
	rm -rf $(BUILD_DIR)
