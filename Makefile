# fairseq-ctx: `make demo` (set up + real-data training + BLEU table), `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
export PY

.PHONY: setup demo test rehearsal wheelhouse clean-demo

# keeps a torch already in the venv (CPU or CUDA) and rebuilds fairseq when that torch
# changes; knobs (TORCH_SPEC, TORCH_INDEX_URL, FORCE_TORCH, SKIP_TORCH, WHEELHOUSE,
# CONSTRAINTS): see scripts/setup-env.sh and README "Installing"
setup:
	bash scripts/setup-env.sh

demo: setup
	bash scripts/demo.sh

test: setup
	bash scripts/run-tests.sh

# every paper table end to end at smoke scale (tiny models, small real corpora, CPU): minutes
rehearsal: setup
	$(PY) -m fairseq_ctx.reproduce.rehearsal

# Download every wheel/sdist needed for an offline install into ./wheelhouse
# (then on the offline machine: WHEELHOUSE=wheelhouse make setup). GPU / cluster:
# TORCH_SPEC + TORCH_INDEX_URL for a CUDA torch, or SKIP_TORCH=1 when the cluster has one.
wheelhouse:
	bash scripts/make-wheelhouse.sh wheelhouse

clean-demo:
	rm -rf "$${DEMO_DIR:-$${FAIRSEQ_CTX_WORK:-work}/demo}"
