# fairseq-ctx: `make demo` (set up + real-data training + BLEU table), `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
export PY

.PHONY: setup demo test rehearsal wheelhouse clean-demo

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
# (then on the offline machine: WHEELHOUSE=wheelhouse make setup).
wheelhouse:
	bash scripts/make-wheelhouse.sh wheelhouse

clean-demo:
	rm -rf work/demo
