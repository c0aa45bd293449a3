# Two commands do all the set-up:  make run   and   make test
# On a device (a Pi, a Jetson): make device-venv, the agent without the server's packages.
# torch comes first, the build that fits the machine (commands/install_torch.py: the CPU build
# on x86_64 without an NVIDIA driver, the Pi pin deploy/torch-aarch64.txt on aarch64); set
# TORCH_SPEC (e.g. 'torch @ file:///path/to/jetpack.whl') to choose the requirement yourself.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?=
RUN_CONFIG ?= configs/flagship.toml
NAME ?= smoke
JOBS ?= 2
PYTEST_ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.edgeflex-installed
DEVICE_STAMP := $(VENV)/.edgeflex-device-installed
INSTALL_TORCH = $(BIN)/python -m commands.install_torch $(if $(TORCH_SPEC),--spec '$(TORCH_SPEC)')

.PHONY: venv device-venv run compare test test-fast test-cpu-paths test-flwr-nightly lint clean

$(STAMP): pyproject.toml deploy/torch-aarch64.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and explicitly: a plain torch request would pull a multi-GB CUDA build.
	$(INSTALL_TORCH)
	$(BIN)/python -m pip install --quiet -e ".[server,dev]"
	# System packages the tests start on loopback ports of their own: mosquitto (the MQTT broker
	# of the stream tests) and nginx (commands/fleet_gate.py, in front of a TLS SuperLink).
	@missing=""; \
	{ command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; } || missing="$$missing mosquitto"; \
	{ command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; } || missing="$$missing nginx-light"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing$$missing with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		case "$$missing" in *nginx*) if command -v systemctl >/dev/null 2>&1 && \
			systemctl is-active --quiet nginx 2>/dev/null; then \
			echo "stopping the nginx service the package started on :80 (the gate runs its own)"; \
			systemctl disable --now nginx; fi;; esac; \
	else \
		echo "not installed, and this is not root with apt-get:$$missing; the tests that need" \
			"it will skip (install it: sudo apt-get install$$missing)"; \
	fi
	# `flwr run .` as Flower users type it: FLWR_HOME in the repo, runtime installs off.
	$(BIN)/python -m commands.flwr_home setup
	@touch $(STAMP)

venv: $(STAMP)

# A device's agent only: no Ray, pymoo or dev tools (docs/deployment.md).
$(DEVICE_STAMP): pyproject.toml deploy/torch-aarch64.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(INSTALL_TORCH)
	$(BIN)/python -m pip install --quiet -e .
	@touch $(DEVICE_STAMP)

device-venv: $(DEVICE_STAMP)

run: $(STAMP)
	$(BIN)/python -m commands.run --run-config "$(RUN_CONFIG)"

compare: $(STAMP)
	$(BIN)/python -m commands.compare $(NAME) --jobs $(JOBS)

# Everything: the tests that start no process of their own on both cores, then the slow ones
# (SuperLinks, agents, brokers with ports of their own) one at a time. Exit 5 is pytest's "no
# test selected" (PYTEST_ARGS='-k name' may leave one half empty).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not slow" -n $(JOBS) $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]

# Everything but the slow tests (those that start processes: SuperLink, SuperNodes, agents,
# mosquitto, nginx, Ray; or take over 5 s), on both cores: under two minutes on 2 cores.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "not slow" -n 2 $(PYTEST_ARGS)

# The golden records again under CPU kernel paths forced on this machine: a record that holds on
# one CPU only fails here (tests/records_match.py says what may differ between CPUs).
CPU_PATHS ?= MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default
test-cpu-paths: $(STAMP)
	@for path in $(CPU_PATHS); do \
		echo "golden records under $$path"; \
		env $$path $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_golden.py || exit 1; \
	done

# The fast suite against the newest flwr-nightly from PyPI, in a venv of its own (the project
# as in $(VENV), then Flower's nightly in place of flwr): what Flower's next release breaks.
# One test process: slow on 2 cores. Results: docs/results/flwr-nightly.md.
NIGHTLY_VENV ?= .venv-flwr-nightly
NIGHTLY_STAMP := $(NIGHTLY_VENV)/.edgeflex-installed

$(NIGHTLY_STAMP): pyproject.toml deploy/torch-aarch64.txt
	@test -x $(NIGHTLY_VENV)/bin/python || $(PYTHON) -m venv $(NIGHTLY_VENV)
	$(NIGHTLY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(NIGHTLY_VENV)/bin/python -m commands.install_torch $(if $(TORCH_SPEC),--spec '$(TORCH_SPEC)')
	# flwr-nightly installs the same `flwr` package as the release: only one of them at a time.
	$(NIGHTLY_VENV)/bin/python -m pip uninstall --quiet --yes flwr-nightly
	$(NIGHTLY_VENV)/bin/python -m pip install --quiet -e ".[server,dev]"
	$(NIGHTLY_VENV)/bin/python -m pip uninstall --quiet --yes flwr
	$(NIGHTLY_VENV)/bin/python -m pip install --quiet --pre --upgrade "flwr-nightly[simulation]"
	@touch $(NIGHTLY_STAMP)

test-flwr-nightly: $(NIGHTLY_STAMP)
	$(NIGHTLY_VENV)/bin/python -m pip install --quiet --pre --upgrade "flwr-nightly[simulation]"
	@$(NIGHTLY_VENV)/bin/python -c "import flwr; print('flwr', flwr.__version__)"
	$(NIGHTLY_VENV)/bin/python -m pytest -m "not slow" -n 1 -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf .flwr .pytest_cache .mypy_cache .ruff_cache
