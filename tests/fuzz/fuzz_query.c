/*
 * tests/fuzz/fuzz_query.c - a query session's `in` (fs/query.c): options
 * lines, text vectors and binary fvecs.  The input, cut into write()
 * pieces by its split plan, is appended to a fresh session's input, which
 * is then closed (the query runs against a store of 16 records of
 * dimension 4) and its out, out.json and stats are rendered.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../fs/query.h"
#include "fuzz_common.h"

#define QDIM 4
#define QREC 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fs_daemon *world(void)
{
	static fs_daemon *dm;
	if (dm)
		return dm;
	dm = fz_daemon(QDIM);
	static char keys[QREC][8];
	float vecs[QREC * QDIM];
	vecfs_row rows[QREC];
	char err[256] = "";
	for (int i = 0; i < QREC; i++) {
		for (int j = 0; j < QDIM; j++)
			vecs[i * QDIM + j] = (float)((i * 7 + j * 3) % 11) - 5.0f;
		rows[i] = (vecfs_row){keys[i], (size_t)snprintf(keys[i], sizeof keys[i], "r%d", i),
				      vecs + i * QDIM, i % 3 ? NULL : "{\"p\":1}", i % 3 ? 0 : 7};
	}
	if (vecfs_put(dm->store, rows, QREC, QDIM, NULL, err, sizeof err)) {
		fprintf(stderr, "fuzz: vecfs_put: %s\n", err);
		abort();
	}
	return dm;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fs_daemon *dm = world();
	qsession *q = fs_qs_new(dm, "1");
	if (!q)
		abort();
	fz_split sp;
	fz_split_init(&sp, data, size);
	const uint8_t *p;
	size_t n;
	uint64_t off = 0;
	while ((p = fz_split_next(&sp, &n))) {
		if (fs_qs_in_write(q, (const char *)p, n, off))
			break;
		off += n;
	}
	int ran;
	if (fs_qs_in_flush(q, &ran) == 0) {
		for (int w = QS_OUT; w <= QS_STATS; w++) {
			size_t len;
			free(fs_qs_render(q, w, &len));
		}
	}
	/* the same bytes as one synchronous write, run at once */
	if (fs_qs_in_write_run(q, (const char *)data, size, &ran) == 0) {
		size_t len;
		free(fs_qs_render(q, QS_OUT, &len));
	}
	fs_qs_free(q);
	if (dm->query_input.used != 0)
		abort(); /* the session's input was given back */
	return 0;
}
