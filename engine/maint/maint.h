/*
 * engine/maint/maint.h - what maint/ offers the other folders: the
 * background worker, compaction, and whether a posting matches its record.
 */
#ifndef VF_MAINT_H
#define VF_MAINT_H

#include "handle.h"
#include "gen/gen.h"

/* Background maintenance: compaction once a cluster's delta postings
 * reach compact_deltas or the backlog grew large, and of a smaller backlog
 * once writes paused for VF_MAINT_IDLE_MS. */
#define VF_MAINT_IDLE_MS 500
enum { VF_MAINT_NONE = 0, VF_MAINT_WHEN_IDLE = 1, VF_MAINT_NOW = 2 };
void vf_maint_start(vecfs *v);
void vf_maint_stop(vecfs *v);
/* After a write: `level` is vf_maint_due()'s answer (NONE does nothing). */
void vf_maint_kick(vecfs *v, int level);
/* vecfs_compact() in steps of about step_us of folding each, a step
 * bringing `sync` changes at first into a generation that lacks some, and
 * trimming `sync` change-log entries at the end (see compact_job in
 * compact.c); `between`, if set, runs after each step but
 * the last (the tests write there; non-zero stops the compaction as a
 * crash would: -ECANCELED).  With build_mu held. */
int vf_compact_steps(vecfs *v, uint32_t *clusters, uint64_t step_us, uint64_t sync,
		     int (*between)(void *), void *arg, char *err, size_t errlen);

/* Is compaction due after w wrote into generation m of a store with `live`
 * records?  NOW when a cluster reached compact_deltas or the whole backlog
 * passed both 4 x compact_deltas and 2% of the live records; WHEN_IDLE when
 * it passed both compact_deltas and 0.1% of them (scanning it costs queries
 * more than folding it costs a store with nothing else to do). */
int vf_maint_due(const vf_posting_writer *w, const vf_genmeta *m, uint64_t live,
		 uint32_t compact_deltas);
/* 1 while maintenance is due or running. */
int vf_maint_busy(vecfs *v);
/* Cluster c of generation m rewritten as a compaction folds it (up to its
 * blocks_seq: its later delta postings stay), every posting of an id in
 * `drop` left out; postings of ids in `dirty` (the changes m lacks) kept
 * as they are.  -EIO when a posting kept does not match its record, or an
 * id has two live postings there (salvage.c). */
struct vf_dirty;
struct vf_tombs;
int vf_refold_cluster(vf_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
		      const struct vf_dirty *dirty, const struct vf_tombs *drop);
/* Does a live posting of record id (version seq, key) match the record?
 * 1 yes, or the record fails its checksum (nothing to compare: salvage
 * removes it, and a build or rebalance leaves it out rather than fail); 0
 * no (the record is missing, or of another version or key); else a store
 * error (verify.c). */
int vf_posting_matches(vf_txn *txn, vf_store *s, uint64_t id, uint64_t seq, const char *key,
		       uint32_t keylen);
int vf_compact_locked(vecfs *v, uint32_t *clusters, char *err, size_t errlen);
/* Microseconds since t (CLOCK_MONOTONIC). */
int64_t vf_us_since(const struct timespec *t);
/* After an automatic compaction: rebalance when the largest cluster is over
 * rebalance_ratio times the mean (rebalance.c). */
int vf_maybe_rebalance(vecfs *v, char *err, size_t errlen);

#endif
