/*
 * engine/write/write.h - writing rows into one transaction, shared by puts
 * (write.c), batches (batch.c) and salvage (salvage.c): the put context,
 * the rows' checks, records forgotten.
 */
#ifndef VF_WRITE_H
#define VF_WRITE_H

#include "handle.h"
#include "gen/gen.h"
#include "query/query.h"

/* Writing rows into one transaction: begin, a row at a time, end. */
typedef struct vf_put_ctx {
	vecfs *v;
	vf_txn *txn;
	vf_counters cnt;
	vf_gen *g;            /* the active generation, if any */
	vf_genmeta gm;
	vf_posting_writer w;
	uint64_t seq_before;
	uint32_t dim;
	uint8_t *rec;
	size_t reccap;
	int *maint_due;        /* out: compaction is due */
	uint64_t *live;        /* out: live records after the write */
	vf_prepared *pre;         /* clusters and codes of the rows to come, in order */
	uint32_t compact_deltas;
	vf_pidx_batch pidx;       /* the payload index's changes, applied at the end */
	int64_t export_delta;     /* how the export's length moves */
} vf_put_ctx;

/* Remove the spool files of batches (batch.c) that a crash left in the
 * store's directory dir; they are unlinked when made, so only a crash
 * between their making and their unlinking leaves one. */
void vf_batch_sweep(const char *dir);

/* Is the row acceptable for a store configured as cfg? 0 or -EINVAL with
 * the reason in err. */
int vf_row_check(const vecfs_config *cfg, const vecfs_row *row, uint32_t dim,
		 char *err, size_t errlen);
/* vf_row_check() of rows[i], called row `number` in the error: when it is
 * bad, i goes to *bad_row (may be NULL) and "row <number>: <reason>" to err. */
int vf_row_check_at(const vecfs_config *cfg, const vecfs_row *rows, size_t i, uint32_t dim,
		    uint64_t number, size_t *bad_row, char *err, size_t errlen);
/* Begin writing rows of dimension dim in txn (the store takes dim with its
 * first row); one row; the end saves counters and the generation's sync
 * point and frees the context, returning rc or the first error. */
int vf_put_begin(vf_put_ctx *c, vecfs *v, vf_txn *txn, uint32_t dim, char *err,
		 size_t errlen);
int vf_put_row(vf_put_ctx *c, const vecfs_row *r);
int vf_put_end(vf_put_ctx *c, int rc);

/* Records ids[0..n) were removed (with their keys) in txn: as a delete
 * does, a change-log entry each (cnt->seq advances, cnt->deleted counts)
 * and their postings in the active generation killed; *maint_due (may be
 * NULL) says whether compaction is due.  The caller saves cnt. */
int vf_forget_records(vecfs *v, vf_txn *txn, const uint64_t *ids, size_t n,
		      vf_counters *cnt, int *maint_due);


#endif
