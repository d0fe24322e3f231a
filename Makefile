# pvfs — the two commands of the README, and the rest.
#   make run    set up everything, start a local file system (manager + 4 I/O daemons + mount),
#               copy a file in and read it back, show status and df
#   make test   set up everything and run the whole test suite
#   make bench  run the benchmarks (results as JSON under bench/results/)

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
ADMIN := $(VENV)/bin/pvfs-admin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := fuse3 libfuse3-dev pkg-config attr gcc make python3-venv python3-dev fio iperf3 iproute2 openssh-server openssh-client git util-linux
DEMO_DIR ?= $(CURDIR)/.pvfs
MNT ?= $(CURDIR)/mnt
PYTEST_ARGS ?=

.PHONY: setup system venv build run stop test bench clean lint

setup: system venv build

# System packages: only what is missing, so a machine that has them needs no root.
system:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.deps: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[test,fuse,plot,mpi]'
	@touch $@

venv: $(VENV)/.deps

# The C extension (PVFS_BUILD=debug|asan for other builds; see setup.py).
build: venv
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

run: setup
	@bash scripts/demo.sh "$(DEMO_DIR)" "$(MNT)"

stop:
	-@$(ADMIN) umount "$(MNT)" 2>/dev/null
	-@$(ADMIN) down --config "$(DEMO_DIR)/pvfs.toml"

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: setup
	$(PY) bench/stream.py
	$(PY) bench/fio/run.py --all
	$(PY) bench/meta.py --target gluster --target moosefs --target pvfs --json meta
	$(PY) bench/apps.py --target gluster --target moosefs --target pvfs --json apps
	$(PY) bench/memory.py --json memory_iods
	$(PY) bench/smallfiles.py --json smallfiles
	$(PY) bench/scale.py --files 1000000 --json scale
	$(PY) bench/ior.py --json ior   # $$PVFS_IOR_SRC: a clone of hpc/ior; $$PVFS_LIBFUSE_SRC: libfuse (docs/benchmarks.md)

lint: venv
	$(VENV)/bin/ruff check src daemons cli fuse traces tests bench

clean: stop
	rm -rf build *.egg-info src/*.egg-info $(DEMO_DIR)
