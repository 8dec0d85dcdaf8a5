/*
 * engine/blocks.c - posting blocks shared by compaction, rebalance and
 * salvage: codes in id order, a block opened with every column checked,
 * a posting of it as a code, codes packed into a cluster's blocks.
 */
#include "internal.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"

int vf_cmp_code(const void *a, const void *b)
{
	const vf_code *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Posting i of an opened block whose columns were checked, as a code
 * pointing into the block, its planes copied to `planes`: 0, or -EIO when
 * its key is damaged. */
int vf_block_code(const vf_block *b, uint32_t i, vf_code *code, uint8_t *planes)
{
	code->id = vf_block_id(b, i);
	code->seq = vf_block_seq(b, i);
	code->has_payload = vf_block_has_payload(b, i);
	code->add = vf_block_f1(b, 0, i);
	code->r1 = vf_block_f1(b, 1, i);
	code->e1 = vf_block_f1(b, 2, i);
	code->rb = vf_block_f2(b, 0, i);
	code->eb = vf_block_f2(b, 1, i);
	code->cdot = vf_block_f2(b, 2, i);
	vf_block_planes(b, i, planes);
	code->planes = planes;
	if (!(code->key = vf_block_key(b, i, &code->keylen)))
		return -EIO;
	return 0;
}

/* Open a posting block and check every column. */
int vf_block_open_checked(const vf_val *d, vf_block *b)
{
	int rc = vf_block_open(d->data, d->len, b);
	for (int col = 0; col < VF_NCOL && rc == 0; col++)
		rc = vf_block_check(NULL, b, col);
	return rc;
}

/* Pack codes[0..n) (in that order) into evenly filled posting blocks
 * 0, 1, ... of cluster c of generation m and save its manifest, which
 * counts `deltas` delta postings left beside them. */
int vf_write_blocks(vf_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
			const vf_code *codes, size_t n, uint64_t deltas, uint8_t **buf,
			size_t *bufcap)
{
	vf_manifest mf = {.deltas = deltas};
	uint32_t nblocks = (uint32_t)((n + VF_BLOCK_TARGET - 1) / VF_BLOCK_TARGET);
	int rc;
	for (uint32_t bi = 0; bi < nblocks; bi++) {
		size_t a = n * bi / nblocks, e = n * (bi + 1) / nblocks;
		size_t sz = vf_block_size(codes + a, (uint32_t)(e - a), m->pdim, m->bits);
		if (sz > *bufcap) {
			uint8_t *nb = vf_realloc(*buf, sz);
			if (!nb)
				return -ENOMEM;
			*buf = nb;
			*bufcap = sz;
		}
		vf_block_write(*buf, codes + a, (uint32_t)(e - a), m->dim, m->pdim, m->bits);
		if ((rc = vf_posting_put(txn, s, m->id, c, VF_PK_BLOCK, bi, *buf, sz)))
			return vf_store_err(rc);
		mf.vectors += e - a;
	}
	mf.blocks = nblocks;
	return vf_save_manifest(txn, s, m->id, c, &mf);
}
