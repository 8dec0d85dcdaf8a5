/*
 * engine/handle.h - the store handle (struct vecfs) every engine file works
 * on, the helpers all of them use, and the configuration (config.c).
 */
#ifndef VF_HANDLE_H
#define VF_HANDLE_H

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>

#include "checksum.h"
#include "io.h"
#include "meta.h"
#include "store.h"
#include "vecfs.h"

/* VF_ASSERT_HELD(mu): the caller holds mutex mu, as a function whose
 * comment says "with mu held" needs; an assertion, so compiled out with
 * NDEBUG.  A trylock that succeeds means no thread held it (one held by
 * another thread passes: the check catches a lock not taken). */
static inline int vf_mutex_held(pthread_mutex_t *mu)
{
	if (pthread_mutex_trylock(mu) != 0)
		return 1;
	pthread_mutex_unlock(mu);
	return 0;
}
#define VF_ASSERT_HELD(mu) assert(vf_mutex_held(mu))

struct vf_gen;

#define VF_LAT_RING 4096

/* What a search reads of the meta family, for one snapshot (search.c):
 * the same for every search of that snapshot, so the last one's is kept. */
typedef struct vf_snap_meta {
	int valid;
	uint64_t txnid, epoch; /* the snapshot, and the map it was read through */
	vecfs_config sc;
	vf_counters cnt;
	uint64_t active;
	int gm_ok;             /* gm is the active generation's meta */
	vf_genmeta gm;
} vf_snap_meta;

struct vecfs {
	vf_store *store;
	vf_vcache *vcache;
	pthread_mutex_t gen_mu;     /* generation cache */
	struct vf_gen *gens;
	vf_snap_meta snap_meta;     /* the last search's snapshot, under gen_mu */
	pthread_mutex_t build_mu;   /* builds never overlap */
	pthread_mutex_t stat_mu;    /* in-memory query counters */
	uint64_t queries;
	uint64_t pages_read;        /* major faults of the searches counted */
	uint64_t prefetch_until;    /* searches plan their reads until then
				     * (engine/prefetch.c) */
	uint32_t prefetch_calm;     /* searches in a row since then that waited
				     * for no page */
	atomic_int prefetch_mode;   /* 0: as prefetch.c decides; 1: always; -1:
				     * never (tests, which set it while the
				     * sampler's thread searches) */
	uint32_t lat[VF_LAT_RING];
	uint64_t nlat;
	pthread_t auto_thread;
	int auto_running;           /* guarded by stat_mu */
	pthread_t maint_thread;     /* background compaction */
	pthread_cond_t maint_cv;    /* with stat_mu */
	int maint_started, maint_due;
	int maint_idle_due;         /* a backlog to fold once writes pause */
	int maint_busy;             /* the worker is compacting or rebalancing */
	struct timespec last_write; /* CLOCK_MONOTONIC of the last kick */
	atomic_int closing;         /* set once vecfs_close() began: builds,
				     * rebalances and the workers stop */
	pthread_t hint_thread;      /* fills the record location hints */
	int hint_started;
	atomic_int hint_stop;       /* the hint filler stops */
	int threads;
	size_t pending_bytes;       /* delta postings a write keeps before it
				     * writes them in key order (32 MiB) */
	size_t spool_bytes;         /* rows a batch keeps in memory before it
				     * stages them (32 MiB); the tests set
				     * both smaller */
	uint64_t sync_step;         /* changes a compaction step brings into a
				     * generation that lacks them, at first
				     * (COMPACT_SYNC; VECFS_SYNC_STEP: tests
				     * make it small, so that a generation is
				     * caught up in many steps) */
	void (*before_snapshot)(vecfs *v); /* tests: called by a rebalance
				     * between its compaction and its snapshot
				     * (another generation made active there) */
	int no_preparer;            /* tests: every put encodes each row as it
				     * writes it, as when the preparer cannot
				     * start (write.c) */
	uint32_t gen_flags;         /* VF_GEN_* of the generations it builds (the
				     * tests build the older kind with 0) */
	uint64_t next_batch;        /* staging ids, guarded by stat_mu */
	vecfs_lost_fn lost_fn;      /* damaged records skipped (vecfs_set_lost_fn) */
	void *lost_arg;
	vecfs_notice_fn notice_fn;  /* what the owner should hear (vecfs_set_notice_fn) */
	void *notice_arg;
	struct vf_sampler *sampler; /* the recall of served queries (sampler.c) */
	/* told of each served ANN query (neither exact nor filtered) once its
	 * read transactions ended: vf_sampler_offer, set by vf_sampler_init
	 * when the store opens; NULL: no one (search.c calls it) */
	void (*on_search)(vecfs *v, const float *queries, size_t nq, uint32_t dim,
			  const vecfs_results *r);
	struct vf_fset_cache *_Atomic fset_cache; /* filters' matches by snapshot
					   * (filtered.c), made at first use */
	struct vf_pool *pool;       /* threads kept for a search's parts (NULL:
				     * one CPU): math/parallel.h */
};

static inline void vf_seterr(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static inline void vf_seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* The stored configuration's newest version: 4, the store's records may
 * hold their vectors in bytes (config.c). */
#define VF_CONFIG_VERSION 4
/* The stored configuration, the defaults for what the store does not
 * hold (config.c). */
int vf_load_config(vf_txn *txn, vf_store *s, vecfs_config *c);
/* The same, and the version it was stored in (0: none stored). */
int vf_load_config_version(vf_txn *txn, vf_store *s, vecfs_config *c, uint32_t *version);
/* Store c as the configuration (version VF_CONFIG_VERSION). */
int vf_config_save(vf_txn *txn, vf_store *s, const vecfs_config *c);
/* index space: cosine vectors are normalized; returns 0 or -EINVAL for a
 * zero vector */
int vf_to_index_space(vecfs_metric m, const float *in, float *out, uint32_t dim);

#endif
