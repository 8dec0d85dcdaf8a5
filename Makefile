# vecfs build.  `make` builds the library, tools and daemon into build/;
# `make test` runs every test, `make check` the fast ones; `make asan` and
# `make tsan` run tests under the sanitizers (build-asan/, build-tsan/).
CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
# WERROR=1 (CI's build): a warning fails the build.
WERROR  ?=
WARN    += $(if $(filter 1,$(WERROR)),-Werror,)
BASEFLAGS := -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-strict-aliasing -pthread \
	$(WARN)
# Layers: the public header (engine/include/vecfs.h) is the only one that
# fs/ and tools/ see; engine/ sees layout/'s headers; layout/ sees its own.
# engine/'s sources are in engine/ and its folders (engine/*/*.c): a file
# includes its own folder's headers by name, engine/'s (handle.h) and another
# folder's one header by path ("gen/gen.h"); tests/ name any engine header by
# its path.  No folder is on the path itself (math/math.h would hide <math.h>).
PUBLIC_INC := -Iengine/include
ENGINE_INC := -Iengine -Ilayout $(PUBLIC_INC)
$(BUILD)/obj/layout/%.o: BASEFLAGS += -Ilayout
$(BUILD)/obj/engine/%.o: BASEFLAGS += $(ENGINE_INC)
$(BUILD)/obj/fs/%.o:     BASEFLAGS += $(PUBLIC_INC)
$(BUILD)/obj/tools/%.o:  BASEFLAGS += $(PUBLIC_INC)
$(BUILD)/obj/tests/%.o:  BASEFLAGS += $(ENGINE_INC)
FUSE_CFLAGS = $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS   = $(shell pkg-config --libs fuse3 2>/dev/null || echo -lfuse3)
LIBS    := -llmdb -lxxhash -lzstd -lm -pthread
SIMD_AVX2 := -mavx2 -mfma -mf16c -mpopcnt
SIMD_AVX512 := $(SIMD_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq

LAYOUT_SRC := $(wildcard layout/*.c)
ENGINE_SRC := $(wildcard engine/*.c engine/*/*.c)
LIB_SRC    := $(LAYOUT_SRC) $(ENGINE_SRC)
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
FS_SRC     := $(wildcard fs/*.c)
FS_OBJ     := $(FS_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC   := $(wildcard tests/test_*.c)
TEST_BIN   := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOLS      := $(BUILD)/vecfs-bench $(BUILD)/vecfs-data $(BUILD)/vecfs-churn $(BUILD)/vecfs-inspect \
	$(BUILD)/vecfs-filterbench
DAEMON     := $(if $(FS_SRC),$(BUILD)/vecfs,)
DEPS_OK    := $(BUILD)/.deps-ok

# Objects made on the way are kept (no `rm` after a run: the suites' summary
# line stays the last one printed).
.SECONDARY:

.PHONY: all test check unit layers mount-test crash-test ops-test full-test python-test cluster-test stress soak conformance install \
	flip-race flip-soak flip-tsan \
	asan tsan sanitized bench bench-kernels clean deps
all: $(DEPS_OK) $(BUILD)/libvecfs.a $(TOOLS) $(DAEMON)

$(DEPS_OK): tools/ensure-deps.sh
	@sh tools/ensure-deps.sh
	@mkdir -p $(BUILD) && touch $@
deps: $(DEPS_OK)

$(BUILD)/obj/%_avx2.o: %_avx2.c $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) $(SIMD_AVX2) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) $(SIMD_AVX512) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_vnni.o: %_vnni.c $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) $(SIMD_AVX512) -mavx512vnni -MMD -MP -c $< -o $@

$(BUILD)/obj/fs/%.o: fs/%.c $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) $(FUSE_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libvecfs.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

TOOL_OBJ   := $(BUILD)/obj/tools/dataset.o $(BUILD)/obj/tools/toolutil.o

$(BUILD)/vecfs-bench: $(BUILD)/obj/tools/vecfs_bench.o $(BUILD)/obj/tools/memcap.o $(TOOL_OBJ) \
		$(BUILD)/libvecfs.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/vecfs-churn: $(BUILD)/obj/tools/vecfs_churn.o $(TOOL_OBJ) $(BUILD)/libvecfs.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/vecfs-filterbench: $(BUILD)/obj/tools/vecfs_filterbench.o $(TOOL_OBJ) $(BUILD)/libvecfs.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/vecfs-inspect: $(BUILD)/obj/tools/vecfs_inspect.o $(BUILD)/obj/tools/toolutil.o \
		$(BUILD)/libvecfs.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/vecfs-data: $(BUILD)/obj/tools/vecfs_data.o $(BUILD)/obj/tools/toolutil.o
	$(CC) $(CFLAGS) -o $@ $^ -lm -pthread

# the daemon: main() over the fs/ library (every fs/ object but main.o),
# which the fs/ tests link too
FS_LIB_OBJ := $(filter-out $(BUILD)/obj/fs/main.o,$(FS_OBJ))
$(BUILD)/libvecfs-fs.a: $(FS_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/vecfs: $(BUILD)/obj/fs/main.o $(BUILD)/libvecfs-fs.a $(BUILD)/libvecfs.a
	$(CC) $(CFLAGS) -o $@ $^ $(FUSE_LIBS) $(LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/testutil.o $(BUILD)/libvecfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(LIBS)

# the fs/ tests: numbers, and ingest files and query sessions driven through
# a daemon context (not mounted); the fs/ headers need FUSE's
FS_TESTS := $(BUILD)/tests/test_ingest $(BUILD)/tests/test_query $(BUILD)/tests/test_number
$(FS_TESTS:$(BUILD)/tests/%=$(BUILD)/obj/tests/%.o): BASEFLAGS += $(FUSE_CFLAGS)
$(FS_TESTS): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/testutil.o \
		$(BUILD)/libvecfs-fs.a $(BUILD)/libvecfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(FUSE_LIBS) $(LIBS)

# Unit tests (cmocka), one binary per area; the summary line comes last.
unit: all $(TEST_BIN)
	@bash tests/run-unit.sh $(TEST_BIN)

# Mount-level tests of the daemon (needs /dev/fuse; skipped without it).
mount-test: all
	@$(SAN_DAEMON) bash tests/mount_test.sh $(BUILD)/vecfs

# kill -9 of the busy daemon, rounds of it: nothing acknowledged is lost.
# Operations: exit statuses, fsname, --log, fstab mount helpers, the systemd unit.
ops-test: all
	@$(SAN_DAEMON) bash tests/ops_test.sh $(BUILD)/vecfs

crash-test: all
	@$(SAN_DAEMON) bash tests/crash_test.sh $(BUILD)/vecfs

# The store's filesystem full (a small tmpfs; needs root): ENOSPC, nothing lost.
full-test: all
	@$(SAN_DAEMON) bash tests/full_test.sh $(BUILD)/vecfs

# The Python module tools/python against a mount, with and without numpy.
python-test: all
	@$(SAN_DAEMON) bash tests/python_test.sh $(BUILD)/vecfs

# vecfs.cluster: a ShardedIndex on a LocalCluster of Dask worker processes,
# each mounting its own store, against one store.
cluster-test: all
	@$(SAN_DAEMON) bash tests/cluster_test.sh $(BUILD)/vecfs

# The layers, on the built objects and the sources (tests/check_layers.sh).
layers: all $(TEST_BIN)
	@bash tests/check_layers.sh $(BUILD)

# kill -9 cycles until SOAK_CYCLES (1000) or SOAK_SECONDS: nothing acknowledged
# lost, nothing half there, the store as the crash left it verifies.  Not in
# make test (about 5 s a cycle).
soak: all
	@bash tests/soak.sh $(BUILD)/vecfs

# The daemon under concurrent load of every kind, STRESS_SECONDS long.
stress: all
	@$(SAN_DAEMON) bash tests/stress.sh $(BUILD)/vecfs

# Upserts racing with flips of generations/active, rounds checked against
# what was acknowledged (tests/flip_race.sh): FLIP_SECONDS long (24 s in
# make test); flip-soak runs it for 30 minutes, flip-tsan for 5 under
# ThreadSanitizer (the daemon of make tsan-build).
flip-race: all
	@$(SAN_DAEMON) bash tests/flip_race.sh $(BUILD)/vecfs

flip-soak: all
	@FLIP_SECONDS=$${FLIP_SECONDS:-1800} bash tests/flip_race.sh $(BUILD)/vecfs

flip-tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 CFLAGS="$(TSAN_CFLAGS)" all
	@$(SAN_ENV_tsan) VECFS_SANITIZER=tsan FLIP_SECONDS=$${FLIP_SECONDS:-300} \
		bash tests/flip_race.sh build-tsan/vecfs

# Suites one after another (tests/run-suite.sh), each one's time, and
# `total: N passed, N failed`.
check: all $(TEST_BIN)
	@MAKE="$(MAKE)" bash tests/run-suite.sh unit layers

test: all $(TEST_BIN)
	@MAKE="$(MAKE)" bash tests/run-suite.sh unit layers mount-test ops-test crash-test full-test python-test \
		cluster-test flip-race

# The acceptance suite in ../shared/conformance, run against $(BUILD)/vecfs;
# PENDING (a regex of groups not run) passes through the environment.
conformance: all
	$(SAN_DAEMON) VECFS=$(BUILD)/vecfs bash ../shared/conformance/run.sh

# Sanitizer builds: `make asan` (ASan+UBSan: unit, mount, crash, full-disk
# and conformance suites) and `make tsan` (ThreadSanitizer: unit tests, tests/stress.sh and
# tests/flip_race.sh).
# Reports go to files in $(BUILD)/san/, which tests/run-suite.sh counts as
# failures (tests/stress.sh keeps its daemon's in its own log).  ASan stops
# at the first error.  Leaks are looked for in the test binaries, not in the
# daemon: what it leaves is freed by its exit (the handles of files still
# open when a signal takes the mount away, libfuse's mount data).
SAN_LOG = $(CURDIR)/$(BUILD)/san
ASAN_CFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined
TSAN_CFLAGS := -O1 -g -fsanitize=thread -fno-omit-frame-pointer
SAN_ENV_asan = ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:log_path=$(SAN_LOG)/asan \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(SAN_LOG)/ubsan
SAN_ENV_tsan = TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1:log_path=$(SAN_LOG)/tsan:suppressions=$(CURDIR)/tests/tsan.supp
SAN_DAEMON_asan = VECFS_SANITIZER=asan ASAN_OPTIONS="$$ASAN_OPTIONS:detect_leaks=0"
SAN_DAEMON_tsan = VECFS_SANITIZER=tsan
SAN_DAEMON = $(SAN_DAEMON_$(SAN))
SAN_SUITES_asan := unit mount-test crash-test full-test conformance
SAN_SUITES_tsan := unit stress flip-race
asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 CFLAGS="$(ASAN_CFLAGS)" SAN=asan sanitized
tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 CFLAGS="$(TSAN_CFLAGS)" SAN=tsan sanitized
# the same builds without running anything (CI builds them ahead)
asan-build:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 CFLAGS="$(ASAN_CFLAGS)" all $(TEST_BIN:$(BUILD)/%=build-asan/%)
tsan-build:
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 CFLAGS="$(TSAN_CFLAGS)" all $(TEST_BIN:$(BUILD)/%=build-tsan/%)
sanitized: all $(TEST_BIN)
	@rm -rf $(SAN_LOG) && mkdir -p $(SAN_LOG)
	@$(SAN_ENV_$(SAN)) SAN_LOGS=$(SAN_LOG) MAKE="$(MAKE)" bash tests/run-suite.sh $(SAN_SUITES_$(SAN))

# A clustered data set through a live mount: ingest, build, queries, recall.
.PHONY: demo
demo: all
	@BUILD=$(BUILD) bash tools/demo.sh

bench: all
	$(BUILD)/vecfs-bench ../shared/data/sift-128

# The encoder's time a row with each kernel table this CPU has.
bench-kernels: $(BUILD)/tests/bench_kernels
	@for k in scalar avx2 avx512 avx512vnni; do VECFS_KERNEL=$$k $(BUILD)/tests/bench_kernels; done

clean:
	rm -rf build build-asan build-tsan build-fuzz

# The daemon and tools into $(PREFIX)/bin (/usr/local/bin is on the PATH
# that mount(8) gives mount.fuse3, so an fstab line of type fuse.vecfs finds
# vecfs), and the systemd unit, its ExecStart pointed at them.
PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)/etc/systemd/system
	install -m 755 $(DAEMON) $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	sed 's#/usr/local/bin/#$(PREFIX)/bin/#' tools/vecfs@.service >$(DESTDIR)/etc/systemd/system/vecfs@.service

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include tests/fuzz/fuzz.mk
