/*
 * tests/fuzz/fuzz_config.c - `key = value` lines written to `config`
 * (fs/config_text.c): each line through config_line, then the whole text
 * through config_apply_text on an empty store (whose configuration is put
 * back when the text changed it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../fs/config_text.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const vecfs_config *a, const vecfs_config *b)
{
	return a->dim == b->dim && a->metric == b->metric && a->nlist == b->nlist &&
	       a->bits == b->bits && a->nprobe == b->nprobe && a->k == b->k &&
	       a->refine == b->refine && a->auto_build == b->auto_build &&
	       a->compact_deltas == b->compact_deltas &&
	       a->keep_generations == b->keep_generations &&
	       a->rebalance_ratio == b->rebalance_ratio && a->seed == b->seed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fs_daemon *dm = fz_daemon(0);
	const char *text = (const char *)data;
	vecfs_config c, before, after;
	vecfs_config_defaults(&c);
	unsigned line = 0;
	for (size_t pos = 0; pos < size;) {
		const char *nl = memchr(text + pos, '\n', size - pos);
		size_t n = nl ? (size_t)(nl - text - pos) : size - pos;
		fs_config_line(&dm->errors, text + pos, n, ++line, &c);
		pos += n + (nl ? 1 : 0);
	}
	if (vecfs_config_get(dm->store, &before))
		abort();
	int rc = fs_config_apply_text(dm->store, &dm->errors, text, size);
	if (vecfs_config_get(dm->store, &after))
		abort();
	if (rc && !same(&before, &after))
		abort(); /* a refused text changed nothing */
	if (!same(&before, &after))
		fz_store_reset();
	return 0;
}
