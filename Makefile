# The two commands of the README: `make demo` and `make test`. Both bootstrap first
# (.venv with the package and its dev extras, the Kafka/ZooKeeper jars, the local stack).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test unit lint typecheck check down clean

# An editable install of our layout (folders mapped into tickwheel.*) always draws setuptools'
# informational "Editable installation" notice; it is filtered by its text, so that any other
# build warning still shows.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tickwheel needs Python 3.11+; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)
	$(BIN)/tickwheel dev up
	$(BIN)/tickwheel db migrate

demo: install
	$(BIN)/tickwheel demo

# The operators' page tests keep a screenshot of each view there, for a person to look at.
ARTIFACTS ?= artifacts

test: install check
	TICKWHEEL_ARTIFACTS=$(abspath $(ARTIFACTS)) $(BIN)/pytest

unit: $(STAMP)
	$(BIN)/pytest -m unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	scripts/typecheck.sh

check: lint typecheck

down:
	$(BIN)/tickwheel dev down

clean: down
	rm -rf .devstack .typecheck
