# trainmon - GNU Makefile.  Sources are picked up by wildcard: a new module
# in src/lib, a new subcommand in src/cli, a new tests/unit/test_*.c or
# tests/fuzz/fuzz_*.c needs no edit here.
#
# Warnings: -Wall -Wextra -Wshadow -Wconversion -Werror.  -Wsign-conversion
# (part of -Wconversion in C) is turned off: the /proc counters are unsigned
# and the code converts between size_t and ssize_t at every read(); the
# casts it would demand hide more than they show.

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
PYTHON  ?= /usr/bin/python3

WARN    := -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Werror
CFLAGS  ?= -O2 -g
# The flags the code needs, kept apart so that `make CFLAGS=...` (the
# sanitizer build) only replaces optimisation and instrumentation.
override CFLAGS += -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WARN) -Iinclude -Isrc/lib
LDLIBS  += -ldl -lpthread -lm

# Optional parts are compiled out, not failed on, where their development
# files are missing (a GPU machine with only a driver and CUDA torch, say):
# `trainmon serve` needs libmicrohttpd's header (the library itself is
# loaded at run time, see serve.c), the Python extension needs Python.h.
# make deps installs both.
HAVE_MHD   := $(shell printf '\043include <microhttpd.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1)
ifneq ($(HAVE_MHD),1)
override CFLAGS += -DTM_NO_HTTP
endif

LIB_SRC  := $(wildcard src/lib/*.c)
CLI_SRC  := $(wildcard src/cli/*.c)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
BENCH_SRC:= $(wildcard bench/*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
HELPER_SRC := $(wildcard tests/helpers/*.c)
HELPER_BIN := $(HELPER_SRC:tests/helpers/%.c=$(BUILD)/tests/helpers/%)
BENCH_BIN:= $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
# Fake shared libraries standing in for missing hardware stacks (NVML):
# tests/fakes/NAME.c -> build/tests/fakes/NAME.so
FAKE_SRC := $(wildcard tests/fakes/*.c)
FAKE_LIB := $(FAKE_SRC:tests/fakes/%.c=$(BUILD)/tests/fakes/%.so)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)

# The CPython extension (python/trainmon), built in place for $(PYTHON) with
# Python's own compiler flags: the sanitizer build's CC/CFLAGS (exported by
# make to recipes) must not leak into it, or it would not import in a plain
# interpreter.
PYEXT := python/trainmon/_trainmon$(shell $(PYTHON) -c 'import sysconfig;print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null || echo .so)

.PHONY: all lib deps venv format-check test test-only demo-only unit unit-bins e2e asan fuzz fuzz-run bench format demo clean install python

HAVE_PYDEV := $(shell $(PYTHON) -c 'import os,sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))))' 2>/dev/null)
ifeq ($(HAVE_PYDEV),1)
all: $(BUILD)/trainmon $(BUILD)/libtrainmon.a $(BUILD)/libtrainmon.so $(PYEXT)
else
all: $(BUILD)/trainmon $(BUILD)/libtrainmon.a $(BUILD)/libtrainmon.so
	@echo "note: no Python.h for $(PYTHON): the Python extension was not built (make deps)"
endif

# --force: make decides when to build; setuptools alone would look only at
# the .c files and keep objects older than a changed header
$(PYEXT): python/trainmon/_trainmon.c $(LIB_SRC) $(wildcard include/*.h src/lib/*.h) setup.py
	env -u CC -u CFLAGS -u LDFLAGS -u LDLIBS $(PYTHON) setup.py -q build_ext --inplace --force \
	    --build-temp build/python-ext --build-lib build/python-lib

lib: $(BUILD)/libtrainmon.a $(BUILD)/libtrainmon.so

$(BUILD)/%.o: %.c $(wildcard include/*.h src/lib/*.h src/cli/*.h) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/libtrainmon.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libtrainmon.so: $(LIB_OBJ)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libtrainmon.so.0 -o $@ $^ $(LDFLAGS) $(LDLIBS)

# The sitecustomize `trainmon run` writes for the job (src/cli/sitecustomize.py)
# is compiled into the binary as a C string.
$(BUILD)/gen/sitecustomize.inc: src/cli/sitecustomize.py Makefile
	@mkdir -p $(dir $@)
	sed -e 's/[\\"?]/\\&/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@.tmp && mv $@.tmp $@
$(BUILD)/src/cli/run.o: $(BUILD)/gen/sitecustomize.inc
$(BUILD)/src/cli/run.o: override CFLAGS += -I$(BUILD)/gen

$(BUILD)/trainmon: $(CLI_OBJ) $(BUILD)/libtrainmon.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libtrainmon.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(wildcard tests/unit/*.h) $(BUILD)/libtrainmon.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-missing-prototypes -o $@ $< $(BUILD)/libtrainmon.a $(LDFLAGS) -lcmocka $(LDLIBS)

$(BUILD)/tests/helpers/%: tests/helpers/%.c $(BUILD)/libtrainmon.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-missing-prototypes -o $@ $< $(BUILD)/libtrainmon.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/fakes/%.so: tests/fakes/%.c $(FAKE_SRC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-missing-prototypes -shared -o $@ $<

# The callgrind client requests of bench/agent_loops.py (loaded with ctypes);
# valgrind's header, so only where valgrind is installed (make deps).
HAVE_VALGRIND := $(shell test -e /usr/include/valgrind/callgrind.h && echo 1)
ifeq ($(HAVE_VALGRIND),1)
CGMARK := $(BUILD)/bench/cgmark.so
endif
$(BUILD)/bench/cgmark.so: bench/cgmark/cgmark.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -shared -o $@ $<

$(BUILD)/bench/%: bench/%.c $(BUILD)/libtrainmon.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-missing-prototypes -o $@ $< $(BUILD)/libtrainmon.a $(LDFLAGS) $(LDLIBS)

# Every Debian package the project needs; idempotent, and quick when all
# are installed already.
DEPS := build-essential clang libclang-rt-14-dev clang-format libcmocka-dev sysstat fio \
        python3 python3-dev python3-pytest python3-setuptools python3-pip python3-torch \
        python3-psutil util-linux e2fsprogs procps libmicrohttpd-dev prometheus \
        prometheus-node-exporter wrk curl chromium valgrind
deps:
	@missing=$$(for p in $(DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	    grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing:" $$missing; \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all installed"; fi
	@$(MAKE) --no-print-directory venv

# The torch 2.x half of the test matrix: a virtualenv made from the python3
# first on PATH (users run torch 2.x from pip, not Debian's 1.13), with the
# CPU build of torch pinned (a plain `pip install torch` would fetch the
# multi-GB CUDA build).  The framework loops (tests/e2e/frameworks.sh) add
# Lightning and the HF Trainer (transformers + accelerate), pinned to
# releases that take torch 2.13 as it is: torch stays on the same command
# line, so pip never swaps it; an existing venv lacking one of them gets
# them.  Without a reachable package index each part is skipped with one
# line: without torch the tests run on Debian's torch alone, without the
# frameworks tests/e2e/frameworks.sh skips.
VENV       ?= .venv
VENV_TORCH ?= torch==2.13.0
VENV_FW    ?= lightning==2.6.6 transformers==5.18.0 accelerate==1.15.0
VENV_PY    := $(VENV)/bin/python
venv:
	@if [ -x $(VENV_PY) ] && $(VENV_PY) -c 'import torch, pytest, setuptools, tensorboard, pandas, lightning, transformers, accelerate' 2>/dev/null; then \
	    echo "venv: $(VENV) has torch $$($(VENV_PY) -c 'import torch; print(torch.__version__)')"; \
	else \
	    echo "venv: making $(VENV) with $(VENV_TORCH) (CPU), pytest, the official readers (tensorboard, pandas) and $(VENV_FW)"; \
	    python3 -m venv $(VENV) && \
	    $(VENV_PY) -m pip install -q --disable-pip-version-check $(VENV_TORCH) pytest setuptools numpy \
	        tensorboard pandas \
	    || echo "venv: could not install $(VENV_TORCH) (package index unreachable?): the torch 2.x tests will be skipped"; \
	    if $(VENV_PY) -c 'import torch' 2>/dev/null; then \
	        $(VENV_PY) -m pip install -q --disable-pip-version-check $(VENV_FW) $(VENV_TORCH) \
	        || echo "venv: could not install $(VENV_FW) (package index unreachable?): the framework loops will be skipped"; \
	    fi; \
	fi

unit: $(UNIT_BIN) $(FAKE_LIB)
	@tests/run_unit.sh $(UNIT_BIN)

# everything the tests run, built (no test run)
unit-bins: $(UNIT_BIN) $(HELPER_BIN) $(FAKE_LIB)

e2e: all $(HELPER_BIN) $(FAKE_LIB)
	@BUILD=$(BUILD) tests/run_e2e.sh

# All tests; the runners print their own closing lines, then one overall.
test: deps
	@$(MAKE) --no-print-directory test-only

test-only: all $(UNIT_BIN) $(HELPER_BIN) $(FAKE_LIB)
	@BUILD=$(BUILD) PYTHON=$(PYTHON) VENV_PY=$(VENV_PY) tests/run_all.sh $(UNIT_BIN)

# The objects are built on every CPU first, the tests then run from a make
# without -j (the tests' own makes get no jobserver of ours).
ASAN_VARS = BUILD=build-asan CC=clang \
    CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
    LDFLAGS="-fsanitize=address,undefined"
asan:
	$(MAKE) -j$$(nproc) $(ASAN_VARS) all unit-bins
	SKIP_PYTHON="the extension is not built with sanitizers" $(MAKE) $(ASAN_VARS) test-only

# libFuzzer targets: the library is built once with coverage and
# sanitizers (fuzzer-no-link), each target links against those objects.
# -fno-sanitize-recover=all: a UBSan report aborts, so fuzz-run fails on it
# (by default UBSan prints and carries on, and the run "passes").
FUZZ_CFLAGS := -g -O1 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/lib -fno-sanitize-recover=all
FUZZ_OBJ := $(LIB_SRC:%.c=$(BUILD)/fuzzobj/%.o)
$(BUILD)/fuzzobj/%.o: %.c $(wildcard include/*.h src/lib/*.h) Makefile
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -c -o $@ $<
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_OBJ) -ldl -lpthread -lm

fuzz: $(FUZZ_BIN)
# The instrumented objects are intermediates of a pattern chain: without
# this, make deletes them after linking and rebuilds all of them each time.
.SECONDARY: $(FUZZ_OBJ)

FUZZ_SECONDS ?= 15
fuzz-run: $(FUZZ_BIN)
	@BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh $(FUZZ_BIN)

bench: all $(BENCH_BIN) $(HELPER_BIN) $(FAKE_LIB) $(CGMARK)
	@BUILD=$(BUILD) bench/run.sh

FORMAT_SRC = $(wildcard include/*.h src/lib/*.[ch] src/cli/*.[ch] python/trainmon/*.c \
               tests/unit/*.[ch] tests/fuzz/*.c tests/helpers/*.[ch] tests/fakes/*.c bench/*.c \
               bench/cgmark/*.c)
format:
	clang-format -i $(FORMAT_SRC)

# CI: the tree is as `make format` leaves it (lists the files it would change).
format-check:
	@bad=$$(for f in $(FORMAT_SRC); do clang-format "$$f" | cmp -s - "$$f" || echo "$$f"; done); \
	if [ -n "$$bad" ]; then echo "format-check: not formatted (run make format):" $$bad; exit 1; \
	else echo "format-check: $(words $(FORMAT_SRC)) files formatted"; fi

demo: deps
	@$(MAKE) --no-print-directory demo-only

demo-only: all
	@BUILD=$(BUILD) scripts/demo.sh

# The Python package goes where `trainmon run` looks beside an installed
# binary, PREFIX/share/trainmon/python/trainmon: __init__.py and every
# extension built in python/trainmon (one per interpreter: `make python
# PYTHON=...` adds one), stale ones removed.  Beside it the package's
# source archive, which `pip install` builds for any other interpreter (the
# fix `trainmon run` prints when the job's interpreter has none).
VERSION := $(shell sed -n 's/^\#define TM_VERSION "\(.*\)"/\1/p' include/trainmon.h)
SDIST   := $(BUILD)/trainmon-$(VERSION).tar.gz
SDIST_SRC := setup.py pyproject.toml python/trainmon/__init__.py python/trainmon/_trainmon.c \
             $(wildcard include/*.h src/lib/*.[ch])
PYSHARE  = $(DESTDIR)$(PREFIX)/share/trainmon

$(SDIST): $(SDIST_SRC)
	@mkdir -p $(dir $@)
	tar -czf $@ --owner=0 --group=0 --numeric-owner --transform 's,^,trainmon-$(VERSION)/,' $(SDIST_SRC)

# The extension alone, for $(PYTHON): make python PYTHON=/path/to/python3.12
python: $(PYEXT)

install: all $(SDIST)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	    $(PYSHARE)/python/trainmon
	install -m 755 $(BUILD)/trainmon $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BUILD)/libtrainmon.a $(BUILD)/libtrainmon.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/trainmon.h $(DESTDIR)$(PREFIX)/include/
	rm -f $(PYSHARE)/python/trainmon/_trainmon*.so
	install -m 644 python/trainmon/__init__.py $(PYSHARE)/python/trainmon/
	for f in python/trainmon/_trainmon*.so; do [ ! -e "$$f" ] || install -m 755 "$$f" $(PYSHARE)/python/trainmon/ || exit 1; done
	install -m 644 $(SDIST) $(PYSHARE)/

clean:
	rm -rf build build-asan python/trainmon/*.so python/trainmon.egg-info
