# loopboard: `make run` starts everything, `make test` runs the whole test suite.
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test conformance conformance-node lint format bench screenshots clean speedups

## What `make run` needs: loopboard and the compiler of its engine (the test packages, about
## as many again, come with the first `make test`).
$(RUN_STAMP): pyproject.toml
	@test -x $(PY) || { py=$$(PYTHON="$(PYTHON)" scripts/find-python) && $$py -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[speed]'
	@touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install --quiet -e '.[test,speed]'
	@touch $(STAMP)

## Compile the detection engine with mypyc (build/speedups; plain Python when it cannot).
speedups: $(STAMP)
	$(PY) scripts/build_speedups.py

## Set up (virtualenv, install, migrate, demo data) and start web server + worker. A missing
## or stale compiled engine is built in the background (var/speedups.log): this start serves
## with the plain Python engine, the next one loads the compiled engine.
run: $(RUN_STAMP)
	@$(PY) scripts/build_speedups.py --background
	$(VENV)/bin/loopboard serve

## axe-core (pinned in tests/e2e/axe/package-lock.json) for the browser tests' accessibility checks.
AXE := tests/e2e/axe/node_modules/axe-core/axe.min.js
.PHONY: axe
axe: $(AXE)
$(AXE): tests/e2e/axe/package.json tests/e2e/axe/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing (apt-get install npm): the browser tests need axe-core" >&2; exit 1; }
	cd tests/e2e/axe && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $(AXE)

## Set up and run the whole test suite (DATABASE_URL / CELERY_BROKER_URL when set,
## the embedded PostgreSQL and filesystem broker otherwise): in parallel on TEST_WORKERS
## pytest-xdist workers (auto: one per core; 0 runs serially), each with its own database and
## broker, then SERIAL_TESTS alone (the outage test restarts the PostgreSQL cluster).
## JUNIT=path/name writes name.xml and name-serial.xml.
TEST_WORKERS ?= auto
SERIAL_TESTS := tests/e2e/test_outage.py
TEST_PYTEST := LOOPBOARD_BROKER_DIR=$${LOOPBOARD_BROKER_DIR:-var/test-broker} $(VENV)/bin/pytest
test: speedups $(AXE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TEST_PYTEST) -n $(TEST_WORKERS) --dist worksteal --ignore=tests/conformance \
	  $(SERIAL_TESTS:%=--ignore=%) $(if $(JUNIT),--junitxml=$(JUNIT).xml) $(PYTEST_ARGS)
	$(TEST_PYTEST) $(SERIAL_TESTS) $(if $(JUNIT),--junitxml=$(JUNIT)-serial.xml) $(PYTEST_ARGS)

## The conformance suite: real agent frameworks (each virtualenv in var/conformance/<name>,
## built from tests/conformance/requirements/<name>.txt, stamped so a second run installs
## nothing) export to a live loopboard and a real worker.
CONFORMANCE := var/conformance
CONFORMANCE_STAMPS := $(patsubst tests/conformance/requirements/%.txt,$(CONFORMANCE)/%/.installed,$(wildcard tests/conformance/requirements/*.txt))

$(CONFORMANCE)/%/.installed: tests/conformance/requirements/%.txt
	@test -x $(CONFORMANCE)/$*/bin/python || { py=$$(PYTHON="$(PYTHON)" scripts/find-python) && $$py -m venv $(CONFORMANCE)/$*; }
	$(CONFORMANCE)/$*/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	@touch $@

## The Vercel AI SDK producer's npm packages (pinned in tests/conformance/node/package-lock.json).
CONFORMANCE_NODE := tests/conformance/node/node_modules/.installed
$(CONFORMANCE_NODE): tests/conformance/node/package.json tests/conformance/node/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing (apt-get install npm): the Node producer needs it" >&2; exit 1; }
	cd tests/conformance/node && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $@

conformance-node: $(CONFORMANCE_NODE)

conformance: speedups $(CONFORMANCE_STAMPS) $(CONFORMANCE_NODE)
	LOOPBOARD_BROKER_DIR=$${LOOPBOARD_BROKER_DIR:-var/test-broker} $(VENV)/bin/pytest tests/conformance $(PYTEST_ARGS)

## The chaos tests (tests/chaos): `loopboard serve` on a fresh database per fault (a slow
## webhook receiver, a 20,000-run upload, concurrent back-tests, a worker killed mid-import),
## another project's upload timed to analyzed against a stated bound. They need DATABASE_URL
## (PostgreSQL) and CELERY_BROKER_URL (Redis; its database is emptied) and take minutes.
.PHONY: chaos
chaos: speedups
	$(VENV)/bin/pytest tests/chaos $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) var/staticfiles .pytest_cache build tests/e2e/axe/node_modules
