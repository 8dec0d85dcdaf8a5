/*
 * tests/fuzz/fuzz_ingest.c - one ingest format's parser (fs/ingest.c): the
 * input, cut into write() pieces by its split plan, is written to a file
 * named by INGEST_NAME and closed (committed), as a file in ingest/ is.
 * Built once per format (-DINGEST_NAME='"f.csv"' ...).  The store starts
 * empty for every input: it is made anew after an input committed rows.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../../fs/ingest.h"
#include "fuzz_common.h"

#ifndef INGEST_NAME
#error "INGEST_NAME: the file name whose ending picks the format"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fs_daemon *dm = fz_daemon(0);
	int fmt = fs_ingest_format_of(INGEST_NAME);
	if (fmt < 0)
		abort();
	ingest *in = fs_ingest_new(dm, INGEST_NAME, fmt, 1);
	if (!in)
		abort();
	fz_split sp;
	fz_split_init(&sp, data, size);
	const uint8_t *p;
	size_t n, written = 0;
	int rc = 0;
	while ((p = fz_split_next(&sp, &n))) {
		rc = fs_ingest_write(in, (const char *)p, n, fs_ingest_size(in), 1); /* appends, one writer */
		written += n;
		if (rc)
			break;
	}
	/* the file's size is what was written; a failed file is dead */
	if (fs_ingest_size(in) != written)
		abort();
	if (rc) {
		if (!fs_ingest_done(in) || fs_ingest_pending(in) || fs_ingest_commit(in) >= 0)
			abort();
	} else {
		rc = fs_ingest_commit(in);
		if (rc == 0 && (fs_ingest_pending(in) || fs_ingest_commit(in) != 0))
			abort();
	}
	fs_ingest_free(in);
	fz_store_reset_if_used();
	return 0;
}
