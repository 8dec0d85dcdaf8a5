/*
 * engine/vecfs.c - the store handle: open/close, configuration, record
 * reads, generations (cache, listing, activation, removal), verification,
 * statistics and backup.  Writes live in write.c, builds in build.c and
 * searches in search.c.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "assign.h"
#include "changes.h"
#include "keys.h"
#include "record.h"

/* ------------------------------------------------------------ metric */

const char *vecfs_metric_name(vecfs_metric m)
{
	switch (m) {
	case VECFS_L2: return "l2";
	case VECFS_COSINE: return "cosine";
	case VECFS_DOT: return "dot";
	}
	return "?";
}

int vecfs_metric_parse(const char *s, vecfs_metric *out)
{
	if (!strcmp(s, "l2"))
		*out = VECFS_L2;
	else if (!strcmp(s, "cosine"))
		*out = VECFS_COSINE;
	else if (!strcmp(s, "dot"))
		*out = VECFS_DOT;
	else
		return -EINVAL;
	return 0;
}

int vf_to_index_space(vecfs_metric m, const float *in, float *out, uint32_t dim)
{
	if (m != VECFS_COSINE) {
		if (out != in)
			memcpy(out, in, sizeof(float) * dim);
		return 0;
	}
	double n2 = 0;
	for (uint32_t i = 0; i < dim; i++)
		n2 += (double)in[i] * in[i];
	if (n2 == 0)
		return -EINVAL;
	float inv = (float)(1.0 / sqrt(n2));
	for (uint32_t i = 0; i < dim; i++)
		out[i] = in[i] * inv;
	return 0;
}

/* ------------------------------------------------------------ meta family */

static int get_fixed(MDB_txn *txn, vf_store *s, const char *key, void *out, size_t len)
{
	MDB_val v;
	int rc = vf_get(txn, s->meta, key, strlen(key), &v);
	if (rc == MDB_NOTFOUND)
		return -ENOENT;
	if (rc)
		return vf_mdb_err(rc);
	if (v.mv_size != len)
		return -EIO;
	memcpy(out, v.mv_data, len);
	return 0;
}

void vecfs_config_defaults(vecfs_config *c)
{
	memset(c, 0, sizeof *c);
	c->metric = VECFS_L2;
	c->bits = 4;
	c->nprobe = 32;
	c->k = 10;
	c->refine = 10;
	c->auto_build = 10000;
	c->compact_deltas = 128;
	c->keep_generations = 1;
	c->rebalance_ratio = 3;
	c->seed = 0x7665636673ULL;
}

static void to_stored(const vecfs_config *c, vf_stored_config *s)
{
	memset(s, 0, sizeof *s);
	s->version = 1;
	s->dim = c->dim;
	s->metric = c->metric;
	s->nlist = c->nlist;
	s->bits = c->bits;
	s->nprobe = c->nprobe;
	s->k = c->k;
	s->refine = c->refine;
	s->auto_build = c->auto_build;
	s->compact_deltas = c->compact_deltas;
	s->keep_generations = c->keep_generations;
	s->seed = c->seed;
	s->rebalance_ratio = c->rebalance_ratio;
}

static void from_stored(const vf_stored_config *s, vecfs_config *c)
{
	c->dim = s->dim;
	c->metric = (vecfs_metric)s->metric;
	c->nlist = s->nlist;
	c->bits = s->bits;
	c->nprobe = s->nprobe;
	c->k = s->k;
	c->refine = s->refine;
	c->auto_build = s->auto_build;
	c->compact_deltas = s->compact_deltas;
	c->keep_generations = s->keep_generations;
	c->seed = s->seed;
	c->rebalance_ratio = s->rebalance_ratio;
}

int vf_load_config(MDB_txn *txn, vf_store *s, vf_stored_config *c)
{
	int rc = get_fixed(txn, s, VF_META_CONFIG, c, sizeof *c);
	if (rc == -ENOENT) {
		vecfs_config d;
		vecfs_config_defaults(&d);
		to_stored(&d, c);
		return 0;
	}
	return rc;
}

int vf_load_counters(MDB_txn *txn, vf_store *s, vf_counters *c)
{
	int rc = get_fixed(txn, s, VF_META_COUNTERS, c, sizeof *c);
	if (rc == -ENOENT) {
		memset(c, 0, sizeof *c);
		c->next_gen = 1;
		return 0;
	}
	return rc;
}

int vf_read_counters(vf_store *s, vf_counters *c)
{
	MDB_txn *txn;
	int rc = vf_read_begin(s, &txn);
	if (rc)
		return rc;
	rc = vf_load_counters(txn, s, c);
	vf_read_end(s, txn);
	return rc;
}

int vf_save_counters(MDB_txn *txn, vf_store *s, const vf_counters *c)
{
	return vf_put(txn, s->meta, VF_META_COUNTERS, strlen(VF_META_COUNTERS), c,
		      sizeof *c, 0);
}

uint64_t vf_load_active(MDB_txn *txn, vf_store *s)
{
	uint64_t g = 0;
	if (get_fixed(txn, s, VF_META_ACTIVE, &g, sizeof g))
		return 0;
	return g;
}

int vf_save_active(MDB_txn *txn, vf_store *s, uint64_t gen)
{
	return vf_put(txn, s->meta, VF_META_ACTIVE, strlen(VF_META_ACTIVE), &gen,
		      sizeof gen, 0);
}

int vf_load_genmeta(MDB_txn *txn, vf_store *s, uint64_t gen, vf_genmeta *m)
{
	vf_genkey k = vf_gen_key(gen, VF_GK_META, 0);
	MDB_val v;
	int rc = vf_get(txn, s->gens, k.b, sizeof k.b, &v);
	if (rc)
		return vf_mdb_err(rc);
	if (v.mv_size != sizeof *m)
		return -EIO;
	memcpy(m, v.mv_data, sizeof *m);
	return 0;
}

int vf_save_genmeta(MDB_txn *txn, vf_store *s, const vf_genmeta *m)
{
	vf_genkey k = vf_gen_key(m->id, VF_GK_META, 0);
	return vf_put(txn, s->gens, k.b, sizeof k.b, m, sizeof *m, 0);
}

int vf_load_manifest(MDB_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
		     vf_manifest *m)
{
	vf_postkey k = vf_post_key(gen, cluster, VF_PK_MANIFEST, 0);
	MDB_val v;
	int rc = vf_get(txn, s->postings, k.b, sizeof k.b, &v);
	if (rc == MDB_NOTFOUND) {
		memset(m, 0, sizeof *m);
		return 0;
	}
	if (rc)
		return vf_mdb_err(rc);
	if (v.mv_size != sizeof *m)
		return -EIO;
	memcpy(m, v.mv_data, sizeof *m);
	return 0;
}

int vf_save_manifest(MDB_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
		     const vf_manifest *m)
{
	vf_postkey k = vf_post_key(gen, cluster, VF_PK_MANIFEST, 0);
	return vf_put(txn, s->postings, k.b, sizeof k.b, m, sizeof *m, 0);
}

/* ------------------------------------------------------------ open / close */

static int drop_range(MDB_txn *txn, MDB_dbi dbi, const uint8_t *prefix, size_t plen)
{
	MDB_cursor *cur;
	MDB_val k = {plen, (void *)prefix}, d;
	int rc = mdb_cursor_open(txn, dbi, &cur);
	if (rc)
		return rc;
	rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
	while (rc == 0 && k.mv_size >= plen && !memcmp(k.mv_data, prefix, plen)) {
		if ((rc = mdb_cursor_del(cur, 0)))
			break;
		rc = mdb_cursor_get(cur, &k, &d, MDB_GET_CURRENT);
		if (rc == MDB_NOTFOUND || rc == EINVAL)
			rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT);
		/* after a delete the cursor points at the next item */
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

int vf_drop_generation_keys(MDB_txn *txn, vf_store *s, uint64_t gen)
{
	uint8_t p[8];
	int rc;
	vf_be64(p, gen);
	if ((rc = drop_range(txn, s->postings, p, 8)))
		return rc;
	return drop_range(txn, s->gens, p, 8);
}

/* A build that did not finish (crash) leaves a `building` generation: mark
 * it failed and free its keys. */
static int recover_fn(MDB_txn *txn, void *arg)
{
	vf_store *s = arg;
	MDB_cursor *cur;
	MDB_val k, d;
	uint64_t stale[64];
	int n = 0, rc = mdb_cursor_open(txn, s->gens, &cur);
	if (rc)
		return rc;
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		if (k.mv_size != 17 || ((uint8_t *)k.mv_data)[8] != VF_GK_META ||
		    d.mv_size != sizeof(vf_genmeta))
			continue;
		vf_genmeta m;
		memcpy(&m, d.mv_data, sizeof m);
		if (m.state == VECFS_GEN_BUILDING && n < 64)
			stale[n++] = m.id;
	}
	mdb_cursor_close(cur);
	for (int i = 0; i < n; i++) {
		vf_genmeta m;
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
	while (more && !__atomic_load_n(&v->hint_stop, __ATOMIC_RELAXED)) {
		MDB_txn *txn;
		MDB_cursor *cur;
		MDB_val k = {sizeof next, next}, d;
		more = 0;
		if (vf_read_begin(v->store, &txn))
			return NULL;
		if (mdb_cursor_open(txn, v->store->records, &cur) == 0) {
			size_t n = 0;
			for (int rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE); rc == 0;
			     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
				if (++n > HINT_FILL_CHUNK ||
				    __atomic_load_n(&v->hint_stop, __ATOMIC_RELAXED)) {
					/* resume at this key in the next transaction */
					memcpy(next, k.mv_data, k.mv_size < 8 ? k.mv_size : 8);
					more = k.mv_size == 8;
					break;
				}
				if (k.mv_size == 8)
					vf_hint_put(v->store, vf_rd_be64(k.mv_data), d.mv_data,
						    d.mv_size);
			}
			mdb_cursor_close(cur);
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
	if (getenv("VECFS_NO_HINT_FILL"))
		return;
	if (cnt.live && pthread_create(&v->hint_thread, NULL, hint_fill, v) == 0)
		v->hint_started = 1;
}

static int open_store(const char *dir, int readonly, vecfs **out, char *err, size_t errlen)
{
	vecfs *v = calloc(1, sizeof *v);
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
	v->vcache = calloc(1, sizeof *v->vcache);
	if (!v->vcache) {
		vf_store_close(v->store);
		free(v);
		return -ENOMEM;
	}
	pthread_mutex_init(&v->gen_mu, NULL);
	pthread_mutex_init(&v->build_mu, NULL);
	pthread_mutex_init(&v->stat_mu, NULL);
	long nc = sysconf(_SC_NPROCESSORS_ONLN);
	v->threads = nc < 1 ? 1 : nc > 16 ? 16 : (int)nc;
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
	if (v->maint_started)
		vf_maint_stop(v);
	pthread_mutex_lock(&v->stat_mu);
	v->closing = 1;
	int running = v->auto_running;
	pthread_mutex_unlock(&v->stat_mu);
	if (running)
		pthread_join(v->auto_thread, NULL);
	if (v->hint_started) {
		__atomic_store_n(&v->hint_stop, 1, __ATOMIC_RELAXED);
		pthread_join(v->hint_thread, NULL);
	}
	while (v->gens) {
		vf_gen *g = v->gens;
		v->gens = g->next;
		g->refs = 1;
		vf_gen_put(v, g);
	}
	vf_store_close(v->store);
	free(v->vcache);
	pthread_mutex_destroy(&v->gen_mu);
	pthread_mutex_destroy(&v->build_mu);
	pthread_mutex_destroy(&v->stat_mu);
	free(v);
}

/* ------------------------------------------------------------ config */

int vecfs_config_get(vecfs *v, vecfs_config *out)
{
	MDB_txn *txn;
	vf_stored_config sc;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_load_config(txn, v->store, &sc);
	vf_read_end(v->store, txn);
	if (rc == 0)
		from_stored(&sc, out);
	return rc;
}

typedef struct config_job {
	vecfs *v;
	const vecfs_config *c;
	char *err;
	size_t errlen;
} config_job;

static int config_fn(MDB_txn *txn, void *arg)
{
	config_job *j = arg;
	vf_stored_config old, nw;
	vf_counters cnt;
	int rc;
	if ((rc = vf_load_config(txn, j->v->store, &old)) ||
	    (rc = vf_load_counters(txn, j->v->store, &cnt)))
		return rc;
	int has_data = cnt.next_id > 0 || cnt.live > 0;
	if (has_data && (j->c->dim != old.dim || (uint32_t)j->c->metric != old.metric)) {
		vf_seterr(j->err, j->errlen, "config: %s cannot change once the store has records",
			  j->c->dim != old.dim ? "dim" : "metric");
		return -EBUSY;
	}
	to_stored(j->c, &nw);
	return vf_put(txn, j->v->store->meta, VF_META_CONFIG, strlen(VF_META_CONFIG),
		      &nw, sizeof nw, 0);
}

int vecfs_config_set(vecfs *v, const vecfs_config *c, char *err, size_t errlen)
{
	if (c->dim > VECFS_DIM_MAX) {
		vf_seterr(err, errlen, "config: dim must be at most %d", VECFS_DIM_MAX);
		return -EINVAL;
	}
	if (c->metric != VECFS_L2 && c->metric != VECFS_COSINE && c->metric != VECFS_DOT) {
		vf_seterr(err, errlen, "config: metric must be l2, cosine or dot");
		return -EINVAL;
	}
	if (c->bits < 1 || c->bits > 8) {
		vf_seterr(err, errlen, "config: bits must be 1..8");
		return -EINVAL;
	}
	if (c->nlist > 1000000) {
		vf_seterr(err, errlen, "config: nlist must be at most 1000000");
		return -EINVAL;
	}
	if (c->nprobe < 1 || c->k < 1 || c->refine < 1 || c->k > 100000 ||
	    c->refine > 1000) {
		vf_seterr(err, errlen, "config: nprobe, k and refine must be positive (k <= 100000, refine <= 1000)");
		return -EINVAL;
	}
	if (c->compact_deltas < 1) {
		vf_seterr(err, errlen, "config: compact_deltas must be positive");
		return -EINVAL;
	}
	if (c->keep_generations > 1000) {
		vf_seterr(err, errlen, "config: keep_generations must be at most 1000");
		return -EINVAL;
	}
	if (c->rebalance_ratio == 1 || c->rebalance_ratio > 1000) {
		vf_seterr(err, errlen, "config: rebalance_ratio must be 0 (never) or 2..1000");
		return -EINVAL;
	}
	config_job j = {v, c, err, errlen};
	return vf_write(v->store, config_fn, &j);
}

/* ------------------------------------------------------------ generation cache */

static void gen_free(vf_gen *g)
{
	float *centroids = g->centroids;
	vf_gen_routing_free(g);
	free(centroids);
	free(g->located);
	pthread_mutex_destroy(&g->located_mu);
	free(g);
}

static int gen_load(MDB_txn *txn, vf_store *s, uint64_t id, vf_gen **out)
{
	vf_genmeta m;
	float *centroids = NULL;
	int rc;
	if ((rc = vf_load_genmeta(txn, s, id, &m)))
		return rc;
	vf_genkey k = vf_gen_key(id, VF_GK_CENTROIDS, 0);
	MDB_val v;
	if ((rc = vf_get(txn, s->gens, k.b, sizeof k.b, &v)))
		return vf_mdb_err(rc);
	size_t want = (size_t)m.nlist * m.dim * 4;
	if (v.mv_size != want + 8 || m.nlist == 0)
		return -EIO;
	uint64_t sum;
	memcpy(&sum, (uint8_t *)v.mv_data + want, 8);
	if (vf_checksum(v.mv_data, want) != sum)
		return -EIO;
	vf_gen *g = calloc(1, sizeof *g);
	if (!g || !(centroids = malloc(want))) {
		free(g);
		return -ENOMEM;
	}
	memcpy(centroids, v.mv_data, want);
	pthread_mutex_init(&g->located_mu, NULL);
	/* routing state (rotation, centroid index, rotated centroids) */
	if ((rc = vf_gen_routing(g, &m, centroids))) {
		free(centroids);
		free(g);
		return rc;
	}
	*out = g;
	return 0;
}

int vf_gen_get(vecfs *v, MDB_txn *txn, uint64_t id, vf_gen **out)
{
	pthread_mutex_lock(&v->gen_mu);
	for (vf_gen *g = v->gens; g; g = g->next)
		if (g->id == id) {
			g->refs++;
			pthread_mutex_unlock(&v->gen_mu);
			*out = g;
			return 0;
		}
	pthread_mutex_unlock(&v->gen_mu);
	vf_gen *g = NULL;
	int rc = gen_load(txn, v->store, id, &g);
	if (rc)
		return rc;
	if (g->meta.state != VECFS_GEN_READY && g->meta.state != VECFS_GEN_BUILDING) {
		gen_free(g);
		return -EINVAL;
	}
	pthread_mutex_lock(&v->gen_mu);
	for (vf_gen *h = v->gens; h; h = h->next)
		if (h->id == id) { /* loaded concurrently */
			h->refs++;
			pthread_mutex_unlock(&v->gen_mu);
			gen_free(g);
			*out = h;
			return 0;
		}
	g->refs = 2; /* the cache's and the caller's */
	g->next = v->gens;
	v->gens = g;
	pthread_mutex_unlock(&v->gen_mu);
	*out = g;
	return 0;
}

void vf_gen_put(vecfs *v, vf_gen *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&v->gen_mu);
	int last = --g->refs == 0;
	pthread_mutex_unlock(&v->gen_mu);
	if (last)
		gen_free(g);
}

void vf_gen_forget(vecfs *v, uint64_t id)
{
	vf_gen *found = NULL;
	pthread_mutex_lock(&v->gen_mu);
	for (vf_gen **pp = &v->gens; *pp; pp = &(*pp)->next)
		if ((*pp)->id == id) {
			found = *pp;
			*pp = found->next;
			break;
		}
	pthread_mutex_unlock(&v->gen_mu);
	vf_gen_put(v, found);
}

uint32_t vf_gen_nearest(const vf_gen *g, const float *x)
{
	uint32_t best = 0;
	float bd = 0;
	vf_nearest(&g->ci, x, 1, &best, &bd, 1);
	return best;
}

/* ------------------------------------------------------------ records */

static int lookup_id(MDB_txn *txn, vf_store *s, const char *key, size_t keylen,
		     uint64_t *id)
{
	MDB_val v;
	if (keylen == 0 || keylen > VECFS_KEY_MAX)
		return -ENOENT;
	int rc = vf_get(txn, s->keys, key, keylen, &v);
	if (rc)
		return vf_mdb_err(rc);
	if (v.mv_size != 8)
		return -EIO;
	memcpy(id, v.mv_data, 8);
	return 0;
}

int vecfs_get(vecfs *v, const char *key, size_t keylen, float *vec, uint32_t cap,
	      uint32_t *dim, void *payload, size_t pcap, size_t *plen)
{
	MDB_txn *txn;
	uint64_t id = 0;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	if ((rc = lookup_id(txn, v->store, key, keylen, &id)) == 0) {
		vf_key64 k = vf_key_u64(id);
		MDB_val d;
		vf_record r;
		rc = vf_mdb_err(vf_get(txn, v->store->records, k.b, 8, &d));
		if (rc == -ENOENT)
			rc = -EIO; /* key without record */
		if (rc == 0)
			rc = vf_record_decode(d.mv_data, d.mv_size, &r);
		if (rc == 0) {
			*dim = r.dim;
			if (vec)
				memcpy(vec, r.vec, sizeof(float) * (r.dim < cap ? r.dim : cap));
			if (plen)
				*plen = r.plen;
			if (payload && pcap)
				memcpy(payload, r.payload, r.plen < pcap ? r.plen : pcap);
		}
	}
	vf_read_end(v->store, txn);
	return rc;
}

int vecfs_keys(vecfs *v, const char *after, size_t afterlen, size_t max,
	       vecfs_key_fn fn, void *arg)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k = {afterlen, (void *)after}, d;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	if ((rc = mdb_cursor_open(txn, v->store->keys, &cur))) {
		vf_read_end(v->store, txn);
		return vf_mdb_err(rc);
	}
	if (after && afterlen) {
		rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
		if (rc == 0 && k.mv_size == afterlen && !memcmp(k.mv_data, after, afterlen))
			rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT);
	} else {
		rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST);
	}
	size_t n = 0;
	int ret = 0;
	for (; rc == 0 && n < max; rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT), n++)
		if ((ret = fn(arg, k.mv_data, k.mv_size)))
			break;
	mdb_cursor_close(cur);
	vf_read_end(v->store, txn);
	if (ret)
		return ret;
	return rc == MDB_NOTFOUND || rc == 0 ? 0 : vf_mdb_err(rc);
}

/* ------------------------------------------------------------ generations */

uint64_t vecfs_active(vecfs *v)
{
	MDB_txn *txn;
	if (vf_read_begin(v->store, &txn))
		return 0;
	uint64_t a = vf_load_active(txn, v->store);
	vf_read_end(v->store, txn);
	return a;
}

typedef struct activate_job {
	vecfs *v;
	uint64_t gen;
	char *err;
	size_t errlen;
} activate_job;

static int activate_fn(MDB_txn *txn, void *arg)
{
	activate_job *j = arg;
	vf_genmeta m;
	int rc = vf_load_genmeta(txn, j->v->store, j->gen, &m);
	if (rc == -ENOENT) {
		vf_seterr(j->err, j->errlen, "generation %llu does not exist",
			  (unsigned long long)j->gen);
		return rc;
	}
	if (rc)
		return rc;
	if (m.state != VECFS_GEN_READY) {
		vf_seterr(j->err, j->errlen, "generation %llu is not ready",
			  (unsigned long long)j->gen);
		return -EINVAL;
	}
	return vf_save_active(txn, j->v->store, j->gen);
}

int vecfs_activate(vecfs *v, uint64_t gen, char *err, size_t errlen)
{
	activate_job j = {v, gen, err, errlen};
	return vf_write(v->store, activate_fn, &j);
}

static int remove_fn(MDB_txn *txn, void *arg)
{
	activate_job *j = arg;
	vf_genmeta m;
	int rc = vf_load_genmeta(txn, j->v->store, j->gen, &m);
	if (rc)
		return rc;
	if (vf_load_active(txn, j->v->store) == j->gen)
		return -EBUSY;
	if (m.state == VECFS_GEN_BUILDING)
		return -EBUSY;
	return vf_drop_generation_keys(txn, j->v->store, j->gen);
}

int vecfs_gen_remove(vecfs *v, uint64_t gen)
{
	activate_job j = {v, gen, NULL, 0};
	int rc = vf_write(v->store, remove_fn, &j);
	if (rc == 0)
		vf_gen_forget(v, gen);
	return rc;
}

static int list_gens(MDB_txn *txn, vf_store *s, uint64_t *ids, size_t cap, size_t *n)
{
	MDB_cursor *cur;
	MDB_val k, d;
	size_t cnt = 0;
	int rc = mdb_cursor_open(txn, s->gens, &cur);
	if (rc)
		return vf_mdb_err(rc);
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		const uint8_t *kb = k.mv_data;
		if (k.mv_size != 17 || kb[8] != VF_GK_META)
			continue;
		if (cnt < cap)
			ids[cnt] = vf_rd_be64(kb);
		cnt++;
	}
	mdb_cursor_close(cur);
	*n = cnt;
	return rc == MDB_NOTFOUND ? 0 : vf_mdb_err(rc);
}

int vecfs_gen_list(vecfs *v, uint64_t *ids, size_t cap, size_t *n)
{
	MDB_txn *txn;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = list_gens(txn, v->store, ids, cap, n);
	vf_read_end(v->store, txn);
	return rc;
}

static int sum_manifests(MDB_txn *txn, vf_store *s, uint64_t gen, uint32_t nlist,
			 uint64_t *deltas, uint64_t *tombs)
{
	*deltas = *tombs = 0;
	for (uint32_t c = 0; c < nlist; c++) {
		vf_manifest m;
		int rc = vf_load_manifest(txn, s, gen, c, &m);
		if (rc)
			return rc;
		*deltas += m.deltas;
		*tombs += m.tombstones;
	}
	return 0;
}

static int cluster_imbalance(MDB_txn *txn, vf_store *s, const vf_genmeta *m, double *out)
{
	uint64_t total = 0, largest = 0;
	for (uint32_t c = 0; c < m->nlist; c++) {
		vf_manifest mf;
		int rc = vf_load_manifest(txn, s, m->id, c, &mf);
		if (rc)
			return rc;
		uint64_t n = mf.vectors + mf.deltas;
		n = n > mf.tombstones ? n - mf.tombstones : 0;
		total += n;
		if (n > largest)
			largest = n;
	}
	*out = total ? (double)largest * m->nlist / (double)total : 0;
	return 0;
}

int vecfs_gen_info_get(vecfs *v, uint64_t gen, vecfs_gen_info *out)
{
	MDB_txn *txn;
	vf_genmeta m;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_load_genmeta(txn, v->store, gen, &m);
	if (rc == 0) {
		memset(out, 0, sizeof *out);
		out->id = m.id;
		out->state = (vecfs_gen_state)m.state;
		out->created = m.created;
		out->covered = m.covered;
		out->nlist = m.nlist;
		out->bits = m.bits;
		out->dim = m.dim;
		out->metric = (vecfs_metric)m.metric;
		out->seed = m.seed;
		out->build_seconds = m.build_seconds;
		out->parent = m.parent;
		out->phase_pct = m.pct;
		snprintf(out->phase, sizeof out->phase, "%s", m.phase);
		if (m.state == VECFS_GEN_READY)
			rc = sum_manifests(txn, v->store, gen, m.nlist, &out->delta_postings,
					   &out->tombstones);
	}
	vf_read_end(v->store, txn);
	return rc;
}

int vecfs_gen_centroids(vecfs *v, uint64_t gen, float **out, uint32_t *nlist,
			uint32_t *dim)
{
	MDB_txn *txn;
	vf_gen *g;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	rc = vf_gen_get(v, txn, gen, &g);
	vf_read_end(v->store, txn);
	if (rc)
		return rc;
	size_t n = (size_t)g->meta.nlist * g->meta.dim;
	*out = malloc(sizeof(float) * n);
	if (!*out) {
		vf_gen_put(v, g);
		return -ENOMEM;
	}
	memcpy(*out, g->centroids, sizeof(float) * n);
	*nlist = g->meta.nlist;
	*dim = g->meta.dim;
	vf_gen_put(v, g);
	return 0;
}

int vecfs_gen_clusters(vecfs *v, uint64_t gen, vecfs_cluster_info **out, uint32_t *n)
{
	MDB_txn *txn;
	vf_genmeta m;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	if ((rc = vf_load_genmeta(txn, v->store, gen, &m)))
		goto out;
	vecfs_cluster_info *ci = calloc(m.nlist ? m.nlist : 1, sizeof *ci);
	if (!ci) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t c = 0; c < m.nlist && rc == 0; c++) {
		vf_manifest mf;
		if ((rc = vf_load_manifest(txn, v->store, gen, c, &mf)))
			break;
		ci[c].id = c;
		ci[c].blocks = mf.blocks;
		ci[c].deltas = mf.deltas;
		ci[c].tombstones = mf.tombstones;
		uint64_t live = mf.vectors + mf.deltas;
		ci[c].vectors = live > mf.tombstones ? live - mf.tombstones : 0;
	}
	if (rc) {
		free(ci);
		goto out;
	}
	*out = ci;
	*n = m.state == VECFS_GEN_READY ? m.nlist : 0;
out:
	vf_read_end(v->store, txn);
	return rc;
}

/* ------------------------------------------------------------ verify */

typedef struct verify_state {
	uint64_t blocks, deltas, live, stale, uncovered, bad;
	char first[256];
	char where[80]; /* what the walk reads: said when LMDB fails it */
	int mdb_rc;     /* LMDB's own code of that failure */
} verify_state;

/* An LMDB failure of the walk: kept as LMDB says it, returned as -errno. */
static int vfail(verify_state *st, int rc)
{
	if (rc >= MDB_KEYEXIST && rc <= MDB_LAST_ERRCODE && rc != MDB_NOTFOUND && !st->mdb_rc)
		st->mdb_rc = rc;
	return vf_mdb_err(rc);
}

static void vbad(verify_state *st, const char *fmt, unsigned long long a,
		 unsigned long long b)
{
	if (!st->bad++)
		snprintf(st->first, sizeof st->first, fmt, a, b);
}

/* Record `id` into r: *ok is 0 when it is missing or fails its checksum.
 * Returns LMDB's code when the tree is damaged (st->where then names the
 * record), else 0. */
static int verify_record(MDB_txn *txn, vf_store *s, verify_state *st, uint64_t id,
			 vf_record *r, int *ok)
{
	vf_key64 rk = vf_key_u64(id);
	MDB_val rv;
	int rc = mdb_get(txn, s->records, &(MDB_val){8, rk.b}, &rv);
	if (rc && rc != MDB_NOTFOUND) { /* not a missing record: a damaged tree */
		snprintf(st->where, sizeof st->where, "record id %llu", (unsigned long long)id);
		return rc;
	}
	*ok = !rc && vf_record_decode(rv.mv_data, rv.mv_size, r) == 0;
	return 0;
}

/* A live posting must match its record: same version and key (the record's
 * own checksum covers its vector). */
static int verify_posting(MDB_txn *txn, vf_store *s, verify_state *st, uint64_t gen,
			  uint64_t id, uint64_t seq, const char *key, uint32_t keylen,
			  uint32_t dim)
{
	vf_record r;
	int ok;
	st->live++;
	int rc = verify_record(txn, s, st, id, &r, &ok);
	if (rc)
		return rc;
	if (!ok) {
		vbad(st, "generation %llu: a live posting names record id %llu, which is missing",
		     gen, id);
		return 0;
	}
	if (r.seq != seq || r.keylen != keylen || memcmp(r.key, key, keylen) || r.dim != dim)
		vbad(st, "generation %llu: the posting of record id %llu does not match the record",
		     gen, id);
	return 0;
}

static int verify_gen(MDB_txn *txn, vf_store *s, const vf_genmeta *m,
		      const vf_counters *cnt, verify_state *st)
{
	MDB_cursor *cur;
	uint8_t p[8];
	MDB_val k = {8, p}, d;
	vf_dirty dirty;
	vf_tombs tombs = {0};
	uint32_t cluster = UINT32_MAX;
	vf_be64(p, m->id);
	vf_dirty_init(&dirty);
	snprintf(st->where, sizeof st->where, "the change log");
	int rc = vf_dirty_load(txn, s, m->synced_seq, cnt->seq, &dirty);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < dirty.cap; i++)
		if (dirty.slots[i].id && dirty.slots[i].ch.op == VF_OP_PUT &&
		    dirty.slots[i].ch.gen != m->id)
			st->uncovered++;
	snprintf(st->where, sizeof st->where, "the postings of generation %llu",
		 (unsigned long long)m->id);
	if ((rc = mdb_cursor_open(txn, s->postings, &cur))) {
		vf_dirty_free(&dirty);
		return vfail(st, rc);
	}
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
	     rc == 0 && !memcmp(k.mv_data, p, 8);
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		const uint8_t *kb = k.mv_data;
		uint32_t cl = vf_postkey_cluster(kb);
		if (cl != cluster) {
			vf_tombs_clear(&tombs);
			cluster = cl;
		}
		uint8_t kind = vf_postkey_kind(kb);
		if (kind == VF_PK_TOMB) {
			uint64_t ks;
			if (d.mv_size != 8) {
				vbad(st, "generation %llu cluster %llu: damaged tombstone", m->id, cl);
				continue;
			}
			memcpy(&ks, d.mv_data, 8);
			if ((rc = vf_tombs_add(&tombs, vf_postkey_sub(kb), ks)))
				break;
		} else if (kind == VF_PK_BLOCK) {
			vf_block b;
			st->blocks++;
			if (vf_block_open(d.mv_data, d.mv_size, &b)) {
				vbad(st, "generation %llu cluster %llu: block header damaged", m->id, cl);
				continue;
			}
			int ok = 1;
			for (int c = 0; c < VF_NCOL && ok; c++)
				if (vf_block_check(NULL, &b, c)) {
					vbad(st, "generation %llu cluster %llu: block checksum mismatch",
					     m->id, cl);
					ok = 0;
				}
			for (uint32_t i = 0; i < b.n && ok; i++) {
				uint64_t id = vf_block_id(&b, i), seq = vf_block_seq(&b, i);
				uint32_t kl;
				const char *key = vf_block_key(&b, i, &kl);
				if (!key) {
					vbad(st, "generation %llu cluster %llu: posting damaged", m->id, cl);
					break;
				}
				if (vf_posting_stale(&tombs, &dirty, id, seq))
					st->stale++;
				else if ((rc = verify_posting(txn, s, st, m->id, id, seq, key, kl,
							      b.dim)))
					break;
			}
			if (rc)
				break;
		} else if (kind == VF_PK_DELTA) {
			vf_code c;
			st->deltas++;
			if (vf_delta_open(d.mv_data, d.mv_size, m->dim, m->pdim, m->bits, &c))
				vbad(st, "generation %llu cluster %llu: delta posting checksum mismatch",
				     m->id, cl);
			else if (vf_posting_stale(&tombs, &dirty, c.id, c.seq))
				st->stale++;
			else if ((rc = verify_posting(txn, s, st, m->id, c.id, c.seq, c.key,
						      c.keylen, m->dim)))
				break;
		}
	}
	mdb_cursor_close(cur);
	vf_tombs_free(&tombs);
	vf_dirty_free(&dirty);
	return rc == MDB_NOTFOUND || rc == 0 ? 0 : vfail(st, rc);
}

int vecfs_verify(vecfs *v, char *msg, size_t msglen)
{
	MDB_txn *txn;
	verify_state st;
	uint64_t ids[1024];
	size_t n, nready = 0;
	vf_counters cnt;
	memset(&st, 0, sizeof st);
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	snprintf(st.where, sizeof st.where, "the list of generations");
	if ((rc = list_gens(txn, v->store, ids, 1024, &n)) ||
	    (rc = vf_load_counters(txn, v->store, &cnt)))
		goto out;
	for (size_t i = 0; i < n && i < 1024; i++) {
		vf_genmeta m;
		if ((rc = vf_load_genmeta(txn, v->store, ids[i], &m)))
			goto out;
		if (m.state != VECFS_GEN_READY)
			continue;
		nready++;
		uint64_t live0 = st.live, unc0 = st.uncovered;
		if ((rc = verify_gen(txn, v->store, &m, &cnt, &st)))
			goto out;
		/* every live record is either posted once or scanned exactly */
		if (st.live - live0 + st.uncovered - unc0 != cnt.live)
			vbad(&st, "generation %llu covers %llu records, the store has %llu live",
			     m.id, (st.live - live0) + (st.uncovered - unc0));
	}
	/* every key maps to a record whose key matches */
	MDB_cursor *cur;
	MDB_val k, d;
	uint64_t nkeys = 0;
	snprintf(st.where, sizeof st.where, "the keys");
	if ((rc = mdb_cursor_open(txn, v->store->keys, &cur))) {
		rc = vfail(&st, rc);
		goto out;
	}
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		uint64_t id;
		vf_record r;
		int ok;
		nkeys++;
		memcpy(&id, d.mv_data, 8);
		if ((rc = verify_record(txn, v->store, &st, id, &r, &ok)))
			break; /* a damaged tree */
		if (!ok || r.keylen != k.mv_size || memcmp(r.key, k.mv_data, r.keylen))
			vbad(&st, "record id %llu (key #%llu) is missing or does not match its key",
			     id, nkeys);
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND) {
		rc = vfail(&st, rc);
		goto out;
	}
	rc = 0;
	if (nkeys != cnt.live)
		vbad(&st, "record counter says %llu live records, keys hold %llu",
		     cnt.live, nkeys);
out:
	vf_read_end(v->store, txn);
	if (rc) {
		if (st.mdb_rc) /* one of LMDB's own: a damaged B-tree page */
			snprintf(msg, msglen,
				 "verify: failed reading %s: %s (the store's file is damaged; "
				 "restore it from a backup)", st.where, mdb_strerror(st.mdb_rc));
		else
			snprintf(msg, msglen, "verify: failed reading %s: %s", st.where,
				 strerror(-rc));
		return rc;
	}
	if (st.bad) {
		snprintf(msg, msglen, "verify: %llu problem(s); first: %s",
			 (unsigned long long)st.bad, st.first);
		return -EIO;
	}
	snprintf(msg, msglen,
		 "verify: ok: %llu records, %zu ready generation(s), %llu posting blocks, "
		 "%llu delta postings, %llu live postings checked against records, "
		 "%llu superseded",
		 (unsigned long long)cnt.live, nready, (unsigned long long)st.blocks,
		 (unsigned long long)st.deltas, (unsigned long long)st.live,
		 (unsigned long long)st.stale);
	return 0;
}

/* ------------------------------------------------------------ stats, backup */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}


int vecfs_stats_get(vecfs *v, vecfs_stats *out)
{
	MDB_txn *txn;
	vf_counters cnt;
	vf_stored_config sc;
	size_t ngen = 0;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	memset(out, 0, sizeof *out);
	if ((rc = vf_load_counters(txn, v->store, &cnt)) ||
	    (rc = vf_load_config(txn, v->store, &sc)) ||
	    (rc = list_gens(txn, v->store, NULL, 0, &ngen)))
		goto out;
	out->dim = sc.dim;
	out->metric = (vecfs_metric)sc.metric;
	out->records = cnt.live;
	out->deleted = cnt.deleted;
	out->generations = ngen;
	out->active = vf_load_active(txn, v->store);
	out->ingest_rows = cnt.ingest_rows;
	out->next_key = cnt.next_key;
	out->compactions = cnt.compactions;
	out->rebalances = cnt.rebalances;
	if (out->active) {
		vf_genmeta m;
		uint64_t tombs;
		if ((rc = vf_load_genmeta(txn, v->store, out->active, &m)) ||
		    (rc = sum_manifests(txn, v->store, out->active, m.nlist,
					&out->delta_postings, &tombs)) ||
		    (rc = vf_count_unindexed(v, txn, out->active, &out->unindexed)) ||
		    (rc = cluster_imbalance(txn, v->store, &m, &out->cluster_imbalance)))
			goto out;
	} else {
		out->unindexed = cnt.live;
	}
	out->store_bytes = vf_store_used_bytes(v->store, txn);
out:
	vf_read_end(v->store, txn);
	out->maintenance = vf_maint_busy(v);
	pthread_mutex_lock(&v->stat_mu);
	out->queries = v->queries;
	size_t nl = v->nlat < VF_LAT_RING ? v->nlat : VF_LAT_RING;
	uint32_t *tmp = nl ? malloc(sizeof(uint32_t) * nl) : NULL;
	if (tmp)
		memcpy(tmp, v->lat, sizeof(uint32_t) * nl);
	pthread_mutex_unlock(&v->stat_mu);
	if (tmp) {
		qsort(tmp, nl, sizeof *tmp, cmp_u32);
		out->p50_us = tmp[(nl - 1) / 2];
		out->p99_us = tmp[(nl - 1) * 99 / 100];
		free(tmp);
	}
	return rc;
}

int vecfs_backup(vecfs *v, int fd)
{
	pthread_rwlock_rdlock(&v->store->resize);
	int rc = mdb_env_copyfd2(v->store->env, fd, MDB_CP_COMPACT);
	pthread_rwlock_unlock(&v->store->resize);
	return vf_mdb_err(rc);
}
