# qimg: `make run` (install, build, demo) and `make test` (every suite).
# meson does the building; this file only strings the steps together.

MESON_SETUP = meson setup --wipe
JOBS ?= 2

.PHONY: all deps build build-installed build-asan build-tsan build-fuzz run test check-long fuzz bench install clean qemu-iotests

all: build

deps:
	@scripts/install-deps.sh

build/build.ninja:
	meson setup build

build: deps build/build.ninja
	ninja -C build -j $(JOBS)

# make test's share of build/: what meson install installs (the library,
# qimg, the nbdkit plugin), which the iotests and scripts/check-*.sh run;
# not build/'s unit tests: make test runs them from build-asan (make build
# and make check-long build them)
build-installed: deps build/build.ninja
	ninja -C build build.ninja  # regenerate first: the list below reads it
	ninja -C build -j $(JOBS) $$(scripts/installed-targets.sh build)

build-asan/build.ninja:
	meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
	    -Dbuildtype=debug

build-asan: deps build-asan/build.ninja
	ninja -C build-asan -j $(JOBS)

build-tsan/build.ninja:
	CC=clang meson setup build-tsan -Db_sanitize=thread -Db_lundef=false \
	    -Dbuildtype=debug

build-tsan: deps build-tsan/build.ninja
	ninja -C build-tsan build.ninja  # regenerate first: the list below reads it
	ninja -C build-tsan -j $(JOBS) tests/test-pool \
	    tests/test-file-io tests/test-file-space \
	    tests/test-vmstate-save tests/test-vmstate-load \
	    tests/test-aio-workload tests/test-aio-interleave \
	    $$(ninja -C build-tsan -t targets all 2>/dev/null | \
	       sed -n 's/^\(tests\/test-[a-z0-9-]*thread[a-z0-9-]*\):.*/\1/p')

build-fuzz/build.ninja:
	CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false -Db_lundef=false \
	    -Dbuildtype=debugoptimized

# the fuzz targets only (fuzz/fuzz-*.c, what scripts/run-tests.sh and
# fuzz-long.sh run): not the tree's uninstrumented library, qimg and
# plugin, which nothing runs from build-fuzz
build-fuzz: deps build-fuzz/build.ninja
	ninja -C build-fuzz build.ninja
	ninja -C build-fuzz -j $(JOBS) $$(ls fuzz/fuzz-*.c | sed 's/\.c$$//')

run: build
	@scripts/demo.sh

# build-tsan and build-fuzz: scripts/run-tests.sh builds them at nice 10
# in the background while the unit tests and iotests run (its step 2)
test: build-installed build-asan
	@scripts/run-tests.sh

check-long: build
	scripts/aio-stress.sh 50
	QIMG_LONG=1 meson test -C build --suite unit --num-processes 2 --timeout-multiplier 0
	QIMG_LONG=1 QIMG=$(CURDIR)/build/tools/qimg iotests/run

fuzz: build-fuzz
	scripts/fuzz-long.sh

bench: build
	bench/run.sh

qemu-iotests: deps
	scripts/qemu-iotests.sh $(QEMU_IOTESTS)

install: build
	meson install -C build

clean:
	rm -rf build build-asan build-tsan build-fuzz
