# ClusterKit: the README's two commands are `make synth` and `make test`; everything they need is
# installed from here (Python venvs, the pinned CDK CLI, and Debian packages for the tests).
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
PCVENV := .venv-pcluster
CKVENV := .venv-checkov
CLUSTER ?= demo
CDK := node_modules/.bin/cdk
# Packages the tests run for real: Slurm + munge, squashfs-tools (image store), qemu-user (runs the aarch64 boot
# self-test program, tests/node_package/test_start_path.py), binutils + binutils-aarch64-linux-gnu (assemble that
# program's source for both machines, tests/node_package/test_selftest_program.py), libpmix2 + libpmix-dev (Slurm's mpi/pmix plugin
# loads libpmix.so: srun --mpi=pmix in tests/multinode), mmdebstrap + iproute2 (the multi-node tier builds its
# Debian training image and its network), libfabric + hwloc + autotools (the image-versions tier builds the real
# aws-ofi-nccl against them, tests/image_versions/artifacts.py), and what building and running
# the REAL enroot + pyxis needs (tests/real_runtime/runtime_build.py DEB_PACKAGES lists the same; a test
# checks the two agree), what building the REAL nvidia-container-cli and packing its deb/rpm stand-ins needs (bmake,
# golang-go, libtirpc/libelf/libseccomp/libcap headers, pkg-config, lsb-release, patch, dpkg-dev, rpm, createrepo-c:
# tests/real_runtime/nvidia_build.py, nvidia_packages.py), libfuse3/zstd/lz4/lzo headers (the multi-threaded squashfuse_ll:
# tests/real_runtime/squashfuse_build.py), zsh (tests/cli/test_completion_shells.py completes in it), and iptables
# (tests/node_package/test_imds_lock_netns.py locks a loopback IMDS in a network namespace).
DEB_PACKAGES := slurmctld slurmd slurm-client munge libslurm-dev gcc libc6-dev make libbsd-dev makeself jq \
	parallel squashfs-tools squashfuse fuse-overlayfs fuse3 curl zstd pigz busybox-static util-linux \
	libcap2-bin binutils qemu-user libpmix2 libpmix-dev mmdebstrap iproute2 libfabric-dev libhwloc-dev autoconf \
	automake libtool zsh bmake golang-go libtirpc-dev libelf-dev libseccomp-dev libcap-dev pkg-config lsb-release \
	patch dpkg-dev rpm createrepo-c binutils-aarch64-linux-gnu libfuse3-dev libzstd-dev liblz4-dev liblzo2-dev iptables
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := $(shell node -p "process.versions.node.split('.')[0]" 2>/dev/null)
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1

.PHONY: help python-venv python39 synth test test-deps test-artifacts test-fast real-runtime render render-check compat-rules lock validate deploy diff cdk-diff destroy-cluster destroy-all deploy-platform destroy-platform pcluster-venv checkov-venv system-packages clean

help:
	@echo "make synth                 synthesize the default cluster (demo) offline and summarize it"
	@echo "make test                  install test dependencies, then run the whole test suite"
	@echo "make test-fast             only the pure-Python tier (-m unit): seconds, for the edit-test loop"
	@echo "make real-runtime          build the real enroot + pyxis (both generations) and nvidia-container-cli the tests run"
	@echo "make test-artifacts        download the pinned NVIDIA wheels the image-versions tests build images from"
	@echo "make python39              provide the Python 3.9 the node package is tested under"
	@echo "make render                rewrite cluster_configs/rendered/*.yaml (and docs/spec-reference.md)"
	@echo "make render-check          exit 1 when a rendered file is stale"
	@echo "make compat-rules          regenerate the aws-ofi-nccl rules in compat_rules.json from its vendored release notes"
	@echo "make lock CLUSTER=x        resolve image digests into cluster_configs/x.images.lock"
	@echo "make validate [PCLUSTER=1] check every spec (PCLUSTER=1 adds ParallelCluster's own validators)"
	@echo "make deploy CLUSTER=x      cdk deploy all three stacks (needs AWS credentials)"
	@echo "       [TTL=hours|none]    override lifecycle.ttl_hours; the TTL counts from this deploy"
	@echo "make diff [BASE=ref]       clusterkit diff: review specs, rendered configs and locks against git"
	@echo "make cdk-diff CLUSTER=x    cdk diff against the deployed stacks"
	@echo "make destroy-cluster CLUSTER=x   delete only the cluster stack (network + storage stay)"
	@echo "make destroy-all CLUSTER=x       delete all three stacks (FSx, buckets, FSx group, subnet and VPC retained by default)"
	@echo "                                 (a cluster on a platform: its alerts and cluster stacks; never the platform's)"
	@echo "make synth PLATFORM=p      synthesize platform p's network and storage stacks (cluster_configs/platforms/p.yaml)"
	@echo "make deploy-platform PLATFORM=p  cdk deploy the platform's two stacks (needs AWS credentials)"
	@echo "make destroy-platform PLATFORM=p delete them; refuses while a deployed cluster uses the platform"
	@echo "make test-deps             install everything the tests need (venvs, CDK CLI, Debian packages, artifacts)"
	@echo "make python-venv           make sure python3 can create venvs (installs python3-venv when root)"
	@echo "make pcluster-venv         create .venv-pcluster (aws-parallelcluster, for validate PCLUSTER=1 and diff)"
	@echo "make checkov-venv          create .venv-checkov (checkov, for the security tests)"
	@echo "make system-packages       install the Debian packages the tests run (or print the apt-get command)"
	@echo "make clean                 remove cdk.out, .pytest_cache and .cache"
	@echo "make help                  this list"

# Debian ships venv's ensurepip in a separate package: install it when root, else say how.
python-venv:
	@if ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing python3-venv"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; \
	  else echo "$(PYTHON) cannot create virtual environments; run: sudo apt-get install -y python3-venv"; exit 1; fi; \
	fi

$(VENV)/.stamp-runtime: requirements.txt pyproject.toml | python-venv
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt
	$(VENV)/bin/pip install -q -e .
	touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-runtime requirements-dev.txt
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	touch $@

$(PCVENV)/.stamp: requirements-pcluster.txt | python-venv
	$(PYTHON) -m venv $(PCVENV)
	$(PCVENV)/bin/pip install -q --upgrade pip
	$(PCVENV)/bin/pip install -q --no-deps -r requirements-pcluster.txt
	touch $@

# Checkov (tests/stacks/test_checkov.py, docs/security.md) in a venv of its own: its pins clash with .venv's.
$(CKVENV)/.stamp: requirements-checkov.txt | python-venv
	$(PYTHON) -m venv $(CKVENV)
	$(CKVENV)/bin/pip install -q --upgrade pip
	$(CKVENV)/bin/pip install -q --no-deps -r requirements-checkov.txt
	touch $@

node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

pcluster-venv: $(PCVENV)/.stamp

checkov-venv: $(CKVENV)/.stamp

# Debian packages: installed when root on Debian/Ubuntu, otherwise the exact command is printed.
system-packages: | python-venv
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else \
	  echo "missing Debian packages: $$missing"; \
	  echo "run: sudo apt-get install -y $$missing"; exit 1; \
	fi

synth: $(VENV)/.stamp-runtime node_modules/.stamp
ifdef PLATFORM
	AWS_EC2_METADATA_DISABLED=true $(CDK) synth --quiet -c platform=$(PLATFORM) >/dev/null
	AWS_EC2_METADATA_DISABLED=true $(VENV)/bin/python -m clusterkit summary --platform --cdk-out cdk.out $(PLATFORM)
else
	AWS_EC2_METADATA_DISABLED=true $(CDK) synth --quiet -c cluster=$(CLUSTER) >/dev/null
	AWS_EC2_METADATA_DISABLED=true $(VENV)/bin/python -m clusterkit summary --cdk-out cdk.out $(CLUSTER)
endif

# Two pytest-xdist workers by default (CI has 2 cores); TEST_JOBS=1 runs serially, e.g. to read one failure.
# The real enroot + pyxis build is shared through a lock file (runtime_build.py), Slurm ports are picked free.
# --dist loadscope: each test module runs on one worker, in order, so a module's clusters (the multi-node tier's
# above all) come up once. (loadgroup would be finer, but pytest-xdist 3.8 cannot tag pytest 9's node ids.)
# --no-loadscope-reorder: modules are handed out in tests/conftest.py's order (slow tiers first), not xdist's default
# of most tests first, which left the few-test, minutes-long cluster modules for last.
TEST_JOBS ?= 2
# What the tests need, installed side by side (-j4): the three venvs and node_modules download in parallel, while the
# three apt users (python-venv, system-packages, python39) run one after another, as dpkg's lock requires.
test-deps: $(VENV)/.stamp-dev $(PCVENV)/.stamp $(CKVENV)/.stamp node_modules/.stamp system-packages python39 \
	test-artifacts

# The real NCCL / CUDA runtime / nvcc wheels (pinned by sha256 in tests/image_versions/artifacts.py) into
# $$CK_TEST_CACHE/wheels (default ~/.cache/clusterkit-tests), outside the clone, and aws-ofi-nccl built from
# ../shared/vendor beside them (cached by content: nothing is downloaded or built twice).
test-artifacts: $(VENV)/.stamp-runtime | system-packages
	@$(VENV)/bin/python tests/image_versions/artifacts.py fetch
	@$(VENV)/bin/python tests/image_versions/artifacts.py plugin >/dev/null

test:
	@$(MAKE) --no-print-directory -j4 test-deps
	$(VENV)/bin/python -m pytest -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder

# The Python-only tier alone (tests/tiers.py gives every test file its tier: unit, moto, node, process, synth,
# pcluster, system), from its own folders so nothing else is even imported; it imports, never spawns (the CLI runs in
# the interpreter: tests/in_process.py); `make test` runs every tier and is what CI runs.
UNIT_FOLDERS = $(shell $(PYTHON) -c 'import runpy; print(" ".join("tests/" + f for f in runpy.run_path("tests/tiers.py")["folders"]("unit")))')
test-fast: $(VENV)/.stamp-dev
	$(VENV)/bin/python -m pytest -n $(TEST_JOBS) -m unit $(UNIT_FOLDERS)

# The oldest Python the node package supports (clusterkit_node: 3.9, the python3 of alinux2023 and rhel9), which
# the tests run the node zipapp under: one on this machine (CK_PYTHON39, python3.9 on PATH, pyenv), else Debian
# 11's python3.9 packages unpacked into .cache/python3.9 (Debian 12 has none; nothing is installed).
python39: | system-packages
	@py="$$($(PYTHON) tests/oldest_python.py)" && echo "python 3.9 for the node package tests: $$py"

# The real NVIDIA enroot + pyxis (two generations) the tests run, built from ../shared/vendor (or the
# upstream tags at the pinned commits) into .cache/real-runtime; the tests build it on demand too.
real-runtime: system-packages
	$(PYTHON) tests/real_runtime/runtime_build.py all

render: $(VENV)/.stamp-runtime
	$(VENV)/bin/python -m clusterkit render

render-check: $(VENV)/.stamp-runtime
	$(VENV)/bin/python -m clusterkit render --check

# The aws-ofi-nccl rules of clusterkit/data/compat_rules.json, from RELEASENOTES.md inside
# ../shared/vendor/aws-ofi-nccl-*.tar.gz (tests/compat/test_compat_build.py fails when the file is stale).
compat-rules: $(VENV)/.stamp-runtime
	$(VENV)/bin/python -m clusterkit.rules.compat_build

lock: $(VENV)/.stamp-runtime
	$(VENV)/bin/python -m clusterkit lock $(CLUSTER)

validate: $(VENV)/.stamp-runtime $(if $(PCLUSTER),$(PCVENV)/.stamp)
	$(VENV)/bin/python -m clusterkit validate $(if $(PCLUSTER),--pcluster)

deploy: $(VENV)/.stamp-runtime node_modules/.stamp
	$(CDK) deploy --all -c cluster=$(CLUSTER) -c deploy_time=$$(date -u +%Y-%m-%dT%H:%M:00Z) \
	  $(if $(TTL),-c ttl_hours=$(TTL)) --require-approval broadening

# The review tool the docs name `diff`; the CloudFormation-level diff against a deployed cluster is cdk-diff.
diff: $(VENV)/.stamp-runtime $(PCVENV)/.stamp
	$(VENV)/bin/python -m clusterkit diff $(if $(BASE),--base $(BASE))

cdk-diff: $(VENV)/.stamp-runtime node_modules/.stamp
	$(CDK) diff --all -c cluster=$(CLUSTER)

destroy-cluster: $(VENV)/.stamp-runtime node_modules/.stamp
	$(CDK) destroy -c cluster=$(CLUSTER) "$$($(VENV)/bin/python -c 'import sys; from clusterkit.spec.naming import stack_names; print(stack_names(sys.argv[1])["cluster"])' $(CLUSTER))"

destroy-all: $(VENV)/.stamp-runtime node_modules/.stamp
	$(CDK) destroy --all -c cluster=$(CLUSTER)

# A platform's network and storage stacks: deployed once, used by every cluster spec that names it.
deploy-platform: $(VENV)/.stamp-runtime node_modules/.stamp
	$(CDK) deploy --all -c platform=$(PLATFORM) --require-approval broadening

# Refuses, naming them, while any deployed cluster stack imports the platform's exports.
destroy-platform: $(VENV)/.stamp-runtime node_modules/.stamp
	$(VENV)/bin/python -m clusterkit platform-users $(PLATFORM)
	$(CDK) destroy --all -c platform=$(PLATFORM)

clean:
	rm -rf cdk.out .pytest_cache .cache
