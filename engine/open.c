/*
 * engine/open.c - opening and closing a store: recovery of builds a crash
 * interrupted, the thread that fills the record location hints, and the
 * background threads started and stopped with the handle.
 */
#include "attrs.h"
#include "handle.h"
#include "math/math.h"
#include "io.h"
#include "thread.h" /* vf_thread_start_cpus() */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "query/query.h"
#include "keys.h"
#include "gen/gen.h"
#include "maint/maint.h"
#include "write/write.h"

/* A build that did not finish (crash) leaves a `building` generation: mark
 * it failed and free its keys.  A store made before the payload index
 * gets one. */
static int recover_fn(vf_txn *txn, void *arg)
{
	vf_store *s = arg;
	vf_cursor *cur;
	vf_genmeta m;
	uint64_t stale[64], indexed;
	int n = 0, rc;
	if (!vf_pidx_ready(txn, s) && (rc = vf_pidx_rebuild(txn, s, &indexed)))
		return rc;
	if ((rc = vf_attrs_upgrade(txn, s)))
		return rc;
	if ((rc = vf_cursor_open(txn, s->gens, &cur)))
		return rc;
	for (rc = vf_genmeta_walk(cur, VF_FIRST, &m); rc == 0;
	     rc = vf_genmeta_walk(cur, VF_NEXT, &m))
		if (m.state == VECFS_GEN_BUILDING && n < 64)
			stale[n++] = m.id;
	vf_cursor_close(cur);
	for (int i = 0; i < n; i++) {
		if ((rc = vf_load_genmeta(txn, s, stale[i], &m)))
			return rc;
		if ((rc = vf_drop_generation_keys(txn, s, stale[i])))
			return rc;
		m.state = VECFS_GEN_FAILED;
		snprintf(m.phase, sizeof m.phase, "failed");
		if ((rc = vf_save_genmeta(txn, s, &m)))
			return rc;
	}
	return 0;
}

#define HINT_FILL_CHUNK 65536 /* records a read transaction */

/* Fill the record location hints once, in the background, so a re-rank
 * skips the tree descent from the first queries on, not only for records
 * it has read before.  (Afterwards each lookup that misses refreshes its
 * record's hint.) */
static void *hint_fill(void *arg)
{
	vecfs *v = arg;
	uint8_t next[8] = {0}; /* the first id not yet seen */
	int more = 1;
	/* in short read transactions, so that one never holds up a writer
	 * that must grow the map (or keeps freed pages from reuse) for long */
	while (more && !atomic_load_explicit(&v->hint_stop, memory_order_relaxed)) {
		vf_txn *txn;
		vf_cursor *cur;
		vf_val k = {sizeof next, next}, d;
		more = 0;
		if (vf_read_begin(v->store, &txn))
			return NULL;
		if (vf_cursor_open(txn, v->store->records, &cur) == 0) {
			size_t n = 0;
			for (int rc = vf_cursor_get(cur, &k, &d, VF_SEEK); rc == 0;
			     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
				if (++n > HINT_FILL_CHUNK ||
				    atomic_load_explicit(&v->hint_stop, memory_order_relaxed)) {
					/* resume at this key in the next transaction */
					memcpy(next, k.data, k.len < 8 ? k.len : 8);
					more = k.len == 8;
					break;
				}
				if (k.len == 8)
					vf_hint_put(v->store, txn, vf_rd_be64(k.data), d.data,
						    d.len, 0);
			}
			vf_cursor_close(cur);
		}
		vf_read_end(v->store, txn);
	}
	return NULL;
}

static void hint_start(vecfs *v)
{
	vf_counters cnt;
	/* for the records of today; writes make it larger as they add more */
	if (vf_read_counters(v->store, &cnt) || vf_hint_init(v->store, cnt.live))
		return;
	/* tests that damage the file: a cursor walk into a damaged page is
	 * one of LMDB's assertions (an abort), a point lookup an error */
	if (getenv("VECFS_NO_HINT_FILL") || !vf_hint_fill_wanted(v->store))
		return;
	if (cnt.live && vf_thread_start(&v->hint_thread, hint_fill, v) == 0)
		v->hint_started = 1;
}

static int open_store(const char *dir, int readonly, vecfs **out, char *err, size_t errlen)
{
	vecfs *v = vf_calloc(1, sizeof *v);
	int rc;
	if (!v)
		return -ENOMEM;
	const char *ms = getenv("VECFS_MAPSIZE"); /* tests: start small */
	size_t mapsize = ms ? strtoull(ms, NULL, 0) : 0;
	if ((rc = readonly ? vf_store_open_readonly(dir, &v->store, err, errlen)
			   : vf_store_open(dir, mapsize, &v->store, err, errlen))) {
		free(v);
		return rc;
	}
	if (!readonly)
		vf_batch_sweep(dir); /* spool files a crash left behind */
	v->vcache = vf_calloc(1, sizeof *v->vcache);
	if (!v->vcache) {
		vf_store_close(v->store);
		free(v);
		return -ENOMEM;
	}
	pthread_mutex_init(&v->gen_mu, NULL);
	pthread_mutex_init(&v->build_mu, NULL);
	pthread_mutex_init(&v->stat_mu, NULL);
	/* the CPUs the program may run on (taskset, a container's cpuset),
	 * not all the machine's */
	int cpus[16];
	long nc = vf_thread_start_cpus(cpus, 16);
	if (nc < 1)
		nc = sysconf(_SC_NPROCESSORS_ONLN);
	v->threads = nc < 1 ? 1 : nc > 16 ? 16 : (int)nc;
	v->pool = vf_pool_new(); /* (none: threads started a search) */
	v->pending_bytes = (size_t)32 << 20;
	v->spool_bytes = VECFS_BATCH_BUF;
	v->gen_flags = VF_GEN_QUERY_TABLE;
	const char *ss = getenv("VECFS_SYNC_STEP");
	v->sync_step = ss ? strtoull(ss, NULL, 0) : 0;
	if ((rc = vf_sampler_init(v))) {
		vecfs_close(v);
		return rc;
	}
	if (readonly) { /* as it is: no recovery, no maintenance */
		*out = v;
		return 0;
	}
	if ((rc = vf_write(v->store, recover_fn, v->store))) {
		vf_seterr(err, errlen, "cannot recover store %s: %s", dir, strerror(-rc));
		vecfs_close(v);
		return rc;
	}
	hint_start(v);
	vf_maint_start(v);
	*out = v;
	return 0;
}

int vecfs_open(const char *dir, vecfs **out, char *err, size_t errlen)
{
	return open_store(dir, 0, out, err, errlen);
}

int vecfs_open_readonly(const char *dir, vecfs **out, char *err, size_t errlen)
{
	return open_store(dir, 1, out, err, errlen);
}

void vecfs_close(vecfs *v)
{
	if (!v)
		return;
	vf_sampler_fini(v); /* (its exact runs search the store) */
	if (v->maint_started)
		vf_maint_stop(v);
	pthread_mutex_lock(&v->stat_mu);
	atomic_store_explicit(&v->closing, 1, memory_order_relaxed);
	int running = v->auto_running;
	pthread_mutex_unlock(&v->stat_mu);
	if (running)
		pthread_join(v->auto_thread, NULL);
	if (v->hint_started) {
		atomic_store_explicit(&v->hint_stop, 1, memory_order_relaxed);
		pthread_join(v->hint_thread, NULL);
	}
	while (v->gens) {
		vf_gen *g = v->gens;
		v->gens = g->next;
		g->refs = 1;
		vf_gen_put(v, g);
	}
	vf_pool_free(v->pool); /* (no search runs now) */
	vf_store_close(v->store);
	vf_fset_cache_free(v);
	free(v->vcache);
	pthread_mutex_destroy(&v->gen_mu);
	pthread_mutex_destroy(&v->build_mu);
	pthread_mutex_destroy(&v->stat_mu);
	free(v);
}

int vecfs_cpus(const vecfs *v)
{
	return v->threads;
}

typedef struct user_job {
	void (*fn)(void *);
	void *arg;
} user_job;

static void *user_run(void *arg)
{
	user_job *j = arg;
	j->fn(j->arg);
	return NULL;
}

void vecfs_parallel(vecfs *v, void (*fn)(void *arg), void *args, size_t arg_size, int n)
{
	user_job jobs[VF_PARALLEL_MAX];
	for (int at = 0; at < n; at += VF_PARALLEL_MAX) { /* (more: in rounds) */
		int m = n - at < VF_PARALLEL_MAX ? n - at : VF_PARALLEL_MAX;
		for (int i = 0; i < m; i++)
			jobs[i] = (user_job){fn, (char *)args + (size_t)(at + i) * arg_size};
		vf_parallel_on(v->pool, user_run, jobs, sizeof jobs[0], m);
	}
}

void vecfs_set_notice_fn(vecfs *v, vecfs_notice_fn fn, void *arg)
{
	v->notice_fn = fn;
	v->notice_arg = arg;
}
