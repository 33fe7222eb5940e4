# effectusd — one command per job. `make install` once, then the others.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The bench measures PostgreSQL (the production store); it makes its own scratch database there.
BENCH_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/postgres

.PHONY: install test lint demo bench bench-peers bench-instructions chaos clean

$(BIN)/effectusd: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/effectusd

# Four workers (pytest-xdist, one database each; the chaos and failover tests spend most of
# their time waiting for leases and restarts, so four fill two cores better than two), an idle
# worker taking tests queued on a busy one; then the tests marked serial one at a time (they
# need the machine alone). Both always run, and either failing fails the target.
test: install
	$(BIN)/pytest -q -n 4 --dist worksteal -m "not serial" tests; parallel=$$?; \
	$(BIN)/pytest -q -m serial tests && exit $$parallel

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Needs nothing but Python: effectusd and the example shop keep SQLite files in .demo/.
demo: install
	$(BIN)/python contrib/demo.py

bench: install
	$(BIN)/effectusd --config examples/effectusd.toml --database-url $(BENCH_DATABASE_URL) bench

# effectusd beside pgqueuer and DBOS (aiohttp) on the same sink, in one run: the rates and ratios.
# PEERS_ARGS passes options on, e.g. PEERS_ARGS="--delivery at_least_once --skip-dbos".
bench-peers: install
	$(BIN)/pip install --quiet -e '.[peers]'
	$(BIN)/python -m effectusd.bench.peers --database-url $(BENCH_DATABASE_URL) $(PEERS_ARGS)

# The daemon's instructions per step under callgrind (needs valgrind; a few minutes): the figure
# to compare two revisions by when the machine's speed moves (docs/performance.md).
bench-instructions: install
	$(BIN)/python -m effectusd.bench.instructions --database-url $(BENCH_DATABASE_URL)

# The long chaos run (about fifteen minutes): prints the evidence table published in docs/evidence.md,
# then the failover rows (a primary and standby of its own: tests/failover).
chaos: install
	$(BIN)/python -m tests.chaos.runner; chaos=$$?; \
	$(BIN)/python -m tests.failover.runner && exit $$chaos

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
