# Coverage-guided fuzzing (libFuzzer, clang): one target per entry point,
# see tests/fuzz/README.md.  `make fuzz-build` builds them into build-fuzz/
# (library objects with -fsanitize=fuzzer-no-link, address and undefined);
# `make fuzz` runs each FUZZ_SECONDS on its corpus; `make fuzz-crashes`
# runs each on the inputs saved in tests/fuzz/crashes/.
FUZZ_BUILD   := build-fuzz
FUZZ_CC      := clang
FUZZ_SECONDS ?= 60
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN)
FUZZ_FORMATS := csv tsv txt jsonl fvecs bvecs npy
FUZZ_TARGETS := $(FUZZ_FORMATS:%=ingest_%) query config block record filter options rows json \
	query_input number
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz/%)

.PHONY: fuzz fuzz-build fuzz-bins fuzz-crashes fuzz-clean
fuzz-build:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT=-O1 \
		CFLAGS="$(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link" fuzz-bins

fuzz-bins: $(FUZZ_BINS)

fuzz: fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_TARGETS)

fuzz-crashes: fuzz-build
	@bash tests/fuzz/run.sh --crashes $(FUZZ_BUILD) $(FUZZ_TARGETS)

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

FUZZ_LIBS := $(BUILD)/libvecfs-fs.a $(BUILD)/libvecfs.a
FUZZ_LINK  = $(FUZZ_CC) $(BASEFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer
FUZZ_FS_INC = -Iengine/include $(FUSE_CFLAGS)

$(BUILD)/fuzz/ingest_%: tests/fuzz/fuzz_ingest.c tests/fuzz/fuzz_common.c \
		tests/fuzz/fuzz_common.h $(FUZZ_LIBS)
	@mkdir -p $(dir $@)
	$(FUZZ_LINK) $(FUZZ_FS_INC) -DINGEST_NAME='"fuzz.$*"' -o $@ \
		tests/fuzz/fuzz_ingest.c tests/fuzz/fuzz_common.c $(FUZZ_LIBS) $(FUSE_LIBS) $(LIBS)

$(BUILD)/fuzz/query $(BUILD)/fuzz/config: $(BUILD)/fuzz/%: tests/fuzz/fuzz_%.c \
		tests/fuzz/fuzz_common.c tests/fuzz/fuzz_common.h $(FUZZ_LIBS)
	@mkdir -p $(dir $@)
	$(FUZZ_LINK) $(FUZZ_FS_INC) -o $@ $< tests/fuzz/fuzz_common.c $(FUZZ_LIBS) \
		$(FUSE_LIBS) $(LIBS)

$(BUILD)/fuzz/block $(BUILD)/fuzz/record $(BUILD)/fuzz/filter $(BUILD)/fuzz/options \
		$(BUILD)/fuzz/rows $(BUILD)/fuzz/json $(BUILD)/fuzz/query_input \
		$(BUILD)/fuzz/number: $(BUILD)/fuzz/%: tests/fuzz/fuzz_%.c \
		tests/fuzz/fuzz_read.h $(BUILD)/libvecfs.a
	@mkdir -p $(dir $@)
	$(FUZZ_LINK) $(ENGINE_INC) -o $@ $< $(BUILD)/libvecfs.a $(LIBS)
