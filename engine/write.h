/*
 * engine/write.h - writing rows into one transaction, shared by puts
 * (write.c), batches (batch.c) and the catch-up of a generation
 * (catchup.c): the put context and the rows' clusters and codes found
 * beforehand (postings_writer.c).
 */
#ifndef VF_WRITE_H
#define VF_WRITE_H

#include "internal.h"
#include "payload_index.h"

typedef struct vf_prepared vf_prepared; /* rows' clusters and codes: see vf_prepare() */

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

#define VF_NEAR_CHUNK 4096 /* rows prepared together */

/* With an active generation, rows are prepared a chunk at a time before
 * they are written: their nearest centroids found together (the centroids
 * read once for 64 rows), then their codes, on every CPU.  vf_put_row() takes
 * them in order; a row without one (vf_put_row would refuse it, or there was
 * no chunk) is encoded by vf_pw_apply() itself. */
struct vf_prepared {
	size_t n, next;
	vf_precode *pc;      /* .code.planes NULL: none */
	uint8_t *planes;     /* pbytes a row */
	uint32_t *near;
	float *x;            /* the rows in index space, dim floats each */
	uint8_t *bad;
	uint32_t *src;       /* the row (of those given) each one is */
	size_t cap;
};

/* Prepare rows[0..n) (n <= VF_NEAR_CHUNK) but those `skip` marks
 * (superseded later in the same write, so vf_put_row never sees them), on
 * every CPU, and return when they are.  Returns 0 (p->n 0 when there was
 * no memory: vf_pw_apply() encodes the rows itself). */
int vf_prepare(vecfs *v, const vf_gen *g, const vecfs_row *rows, size_t n,
	       const uint8_t *skip, vf_prepared *p);

/* The chunks of a whole write (vf_preparer_chunk() rows each, the last one
 * shorter) prepared ahead of the writer, in order: threads of their own,
 * one CPU fewer than the store uses, prepare up to a few chunks beyond the
 * one being written, and a writer that takes a chunk not done yet prepares
 * rows of it too instead of waiting.  So the writer has a CPU to itself
 * and none is idle while it waits. */
typedef struct vf_preparer vf_preparer;
/* Start preparing rows[0..n) (skip as for vf_prepare; may be NULL).
 * Returns 0 or -ENOMEM (the caller then goes without). */
int vf_preparer_start(vf_preparer **out, vecfs *v, const vf_gen *g, const vecfs_row *rows,
		      size_t n, const uint8_t *skip);
/* Rows a chunk: VF_NEAR_CHUNK, halved (to 256 at least) while one chunk's
 * room for rows of dim dimensions and codes of bits * pdim bits would pass
 * 16 MiB. */
size_t vf_preparer_chunk_rows(uint32_t dim, uint32_t pdim, uint32_t bits);
size_t vf_preparer_chunk(const vf_preparer *pp);
/* Chunk k (rows k * vf_preparer_chunk() on), prepared, once the writer is done
 * with chunk k - 1 (vf_preparer_release()).  Its p->n is 0 when there was
 * no memory for it. */
vf_prepared *vf_preparer_take(vf_preparer *pp, size_t k);
/* The writer is done with chunk k: its room may take a later one. */
void vf_preparer_release(vf_preparer *pp, size_t k);
/* Stop the threads (mid-write too) and free everything; NULL is a no-op. */
void vf_preparer_stop(vf_preparer *pp);

/* The next row's cluster and code, NULL when it has none. */
const vf_precode *vf_prepared_next(vf_prepared *p);
void vf_prepared_free(vf_prepared *p);

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

#endif
