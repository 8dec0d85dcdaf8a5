/*
 * engine/maint/rebalance.c - rebalancing: splits overgrown clusters and merges
 * tiny ones into a new generation that copies the posting blocks of the
 * clusters it leaves alone.
 */
#include "handle.h"
#include "maint.h"
#include "gen/gen.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "record.h"
#include "math/math.h"

/*
 * A local rebalance works from a snapshot of the compacted active
 * generation.  A cluster with more than RB_SPLIT_FACTOR times the mean
 * number of vectors (and at least RB_SPLIT_MIN) is split in two by a
 * 2-means on its exact vectors; a cluster with fewer than RB_MERGE_FACTOR
 * times the mean is merged: each of its vectors goes to the nearest
 * remaining centroid.  Around each split, the vectors of its RB_NEIGHBOURS
 * nearest clusters that are now nearer one of the new centroids move there.
 *
 * The result is a new generation with the parent's rotation, bits, dim and
 * metric, so a code stays valid as long as its cluster keeps its centroid.
 * A cluster whose members did not change has its posting blocks copied byte
 * for byte (under a new id when it moves into the hole a merge left); one
 * that kept its centroid but lost or gained vectors keeps the codes of the
 * vectors it keeps and encodes only the arrivals; both halves of a split
 * are encoded afresh.  A split keeps its id for one half; the other half
 * takes the id of a merged cluster, or a new id at the end.
 */

#define RB_SPLIT_FACTOR 2.0
#define RB_SPLIT_MIN 64
#define RB_MERGE_FACTOR 0.25
#define RB_NEIGHBOURS 8
#define RB_TRAIN_MAX 20000   /* vectors a split's 2-means trains on */
#define RB_NEW UINT32_MAX    /* a final cluster with a new centroid */

enum { RB_KEEP, RB_SPLIT, RB_MERGE };

/* One cluster of the parent. */
typedef struct rb_src {
	int role;
	uint32_t fin, fin2;     /* final ids: of its centroid (a split: first
				   half) and of a split's second half */
	uint32_t split;         /* a split: its index in rebal.splits */
	uint64_t b0, nb;        /* its blocks: rebal.bvals[b0 .. b0 + nb) */
	uint64_t n;             /* postings in them */
	uint32_t *near;         /* splits that count it among their neighbours */
	uint32_t nnear, cnear;
	int loaded;
	vf_code *codes;         /* its postings, pointing into the snapshot */
	uint8_t *planes;        /* their codes' planes */
	uint32_t *dest;         /* final cluster of each */
} rb_src;

/* One cluster of the new generation. */
typedef struct rb_dst {
	uint32_t src;           /* parent cluster whose centroid it keeps, or RB_NEW */
	int changed;            /* its members differ from src's */
	uint64_t e0, ne;        /* changed: its postings, rebal.codes[e0 .. e0 + ne) */
} rb_dst;

typedef struct rebal {
	vecfs *v;
	vf_task t;
	int force;              /* publish even when nothing is split or merged */
	vf_txn *txn;           /* the snapshot */
	vf_genmeta pm, m;       /* the parent, the new generation */
	vf_gen *pg;             /* the parent's centroids */
	uint32_t nlist;         /* the parent's */
	size_t pb;              /* plane bytes of a code */
	rb_src *src;            /* nlist */
	vf_val *bvals;         /* the parent's blocks, cluster by cluster */
	uint64_t nbvals, cbvals;
	uint64_t total;         /* postings in them */
	uint32_t *splits;       /* parent clusters split, ascending */
	float *halves;          /* their new centroids: 2 * dim each */
	uint32_t nsplit, nmerge;
	float *cent;            /* the new generation's centroids */
	rb_dst *dst;            /* m.nlist */
	vf_gen g;               /* its routing state */
	int have_g;
	vf_code *codes;         /* postings of changed clusters, by cluster */
	uint8_t *planes;        /* codes encoded afresh */
	uint32_t *idmap;
	uint64_t id_limit;
	float *x;               /* dim scratch */
	vf_calib cal;           /* the new generation's recall calibration */
} rebal;

/* A posting of parent cluster o: its record's vector in index space, in
 * r->x.  A posting whose record changed or went since the snapshot's
 * parent was compacted is stale (queries skip it, the change log holds the
 * newer version): the cluster's centroid stands in for it. */
static const float *rb_vec(rebal *r, const vf_code *c, uint32_t o)
{
	vf_val d;
	vf_record rec;
	uint32_t dim = r->pm.dim;
	if (vf_records_get(r->txn, r->v->store, c->id, &d) == 0 &&
	    vf_record_decode(d.data, d.len, &rec) == 0 && rec.dim == dim &&
	    rec.seq == c->seq) {
		vf_record_floats(&rec, r->x);
		if (r->pm.metric == VECFS_COSINE)
			vf_to_index_space(VECFS_COSINE, r->x, r->x, dim);
	} else {
		memcpy(r->x, r->pg->centroids + (size_t)o * dim, sizeof(float) * dim);
	}
	return r->x;
}

static float rb_dist(const rebal *r, const float *x, const float *c)
{
	return vf_kernels_get()->l2sq(x, c, r->pm.dim);
}

/* The parent's posting blocks: where each cluster's are, how many postings
 * each cluster has.  Its tombstones and delta postings (writes after its
 * last compaction) are left out: the new generation starts at the parent's
 * blocks_seq and takes every later change from the change log. */
static int rb_scan(rebal *r)
{
	uint8_t p[8];
	vf_val k, d;
	vf_cursor *cur;
	vf_be64(p, r->pm.id);
	int rc = vf_cursor_open(r->txn, r->v->store->postings, &cur);
	if (rc)
		return vf_store_err(rc);
	for (rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_SEEK); rc == 0;
	     rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_NEXT)) {
		const uint8_t *kb = k.data;
		if (k.len != sizeof(vf_postkey))
			break;
		if (vf_postkey_kind(kb) != VF_PK_BLOCK)
			continue;
		uint32_t c = vf_postkey_cluster(kb);
		vf_block b;
		if (c >= r->nlist || vf_block_open(d.data, d.len, &b)) {
			rc = -EIO;
			break;
		}
		if (r->nbvals == r->cbvals) {
			uint64_t nc = r->cbvals ? r->cbvals * 2 : 256;
			vf_val *nv = vf_realloc(r->bvals, sizeof *nv * nc);
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			r->bvals = nv;
			r->cbvals = nc;
		}
		rb_src *sc = &r->src[c];
		if (sc->nb == 0)
			sc->b0 = r->nbvals;
		r->bvals[r->nbvals++] = d;
		sc->nb++;
		sc->n += b.n;
		r->total += b.n;
	}
	vf_cursor_close(cur);
	if (rc == -ENOENT)
		rc = 0;
	return rc;
}

/* Every posting of the parent's blocks against its record, before any is
 * copied: damage (a posting of a missing record, of another version or
 * key, a record posted twice) is refused with EIO and a line, not copied
 * into the new generation; a record changed after the parent's blocks_seq
 * is no damage (its posting is stale; the change log brings the newer
 * version).  A posting newer than blocks_seq means the parent's last
 * compaction was left unfinished (another generation became active
 * meanwhile): its blocks are not the snapshot at blocks_seq, -EAGAIN. */
static int rb_check(rebal *r, uint64_t upto)
{
	vf_dirty dirty;
	vf_tombs seen = {0};
	const char *why = NULL;
	uint64_t bad = 0;
	uint32_t cl = 0;
	vf_dirty_init(&dirty);
	int rc = vf_dirty_load(r->txn, r->v->store, r->pm.blocks_seq, upto, &dirty);
	for (uint32_t c = 0; c < r->nlist && rc == 0 && !why; c++) {
		const rb_src *sc = &r->src[c];
		for (uint64_t bi = 0; bi < sc->nb && rc == 0 && !why; bi++) {
			vf_block b;
			if ((rc = vf_block_open_checked(&r->bvals[sc->b0 + bi], &b)))
				break;
			for (uint32_t i = 0; i < b.n && rc == 0 && !why; i++) {
				uint64_t id = vf_block_id(&b, i), seq = vf_block_seq(&b, i);
				uint32_t kl;
				const char *key = vf_block_key(&b, i, &kl);
				if (!key) {
					rc = -EIO;
					break;
				}
				bad = id;
				cl = c;
				if (seq > r->pm.blocks_seq)
					rc = -EAGAIN;
				else if (vf_dirty_find(&dirty, id))
					continue;
				else if (vf_tombs_has(&seen, id, NULL))
					why = "has two postings";
				else if ((rc = vf_posting_matches(r->txn, r->v->store, id, seq, key, kl)) == 0)
					why = "has a posting that does not match the record";
				else if (rc == 1)
					rc = vf_tombs_add(&seen, id, 0);
			}
		}
	}
	vf_dirty_free(&dirty);
	vf_tombs_free(&seen);
	if (rc == -EAGAIN)
		vf_seterr(r->t.err, r->t.errlen, "rebalance: generation %llu was not compacted whole "
			  "(another generation was active meanwhile); try again",
			  (unsigned long long)r->pm.id);
	if (why) {
		vf_seterr(r->t.err, r->t.errlen, "rebalance: generation %llu cluster %u: record id "
			  "%llu %s (salvage repairs it)", (unsigned long long)r->pm.id, cl,
			  (unsigned long long)bad, why);
		rc = -EIO;
	}
	return rc;
}

/* Decode the postings of parent cluster o (every column checked); each
 * stays in o's final cluster until moved. */
static int rb_load(rebal *r, uint32_t o)
{
	rb_src *sc = &r->src[o];
	if (sc->loaded)
		return 0;
	sc->codes = vf_malloc(sizeof(vf_code) * (sc->n ? sc->n : 1));
	sc->dest = vf_malloc(sizeof(uint32_t) * (sc->n ? sc->n : 1));
	sc->planes = vf_malloc(r->pb * (sc->n ? sc->n : 1));
	if (!sc->codes || !sc->dest || !sc->planes)
		return -ENOMEM;
	uint64_t k = 0;
	for (uint64_t bi = 0; bi < sc->nb; bi++) {
		vf_block b;
		int rc = vf_block_open_checked(&r->bvals[sc->b0 + bi], &b);
		if (rc)
			return rc;
		if (b.dim != r->pm.dim || b.pdim != r->pm.pdim || b.bits != r->pm.bits ||
		    k + b.n > sc->n)
			return -EIO;
		for (uint32_t i = 0; i < b.n; i++, k++) {
			if ((rc = vf_block_code(&b, i, &sc->codes[k], sc->planes + k * r->pb)))
				return rc;
			sc->dest[k] = sc->fin;
		}
	}
	if (k != sc->n)
		return -EIO;
	sc->loaded = 1;
	return 0;
}

/* 2-means on the exact vectors of parent cluster o.  A split that leaves
 * one side empty (duplicates) is not made. */
static int rb_split(rebal *r, uint32_t o)
{
	rb_src *sc = &r->src[o];
	uint32_t dim = r->pm.dim;
	int rc = rb_load(r, o);
	if (rc)
		return rc;
	uint64_t ns = sc->n < RB_TRAIN_MAX ? sc->n : RB_TRAIN_MAX;
	float *pts = vf_malloc(sizeof(float) * ns * dim);
	float *h = r->halves + (size_t)r->nsplit * 2 * dim;
	if (!pts)
		return -ENOMEM;
	for (uint64_t i = 0; i < ns; i++)
		memcpy(pts + i * dim, rb_vec(r, &sc->codes[i * sc->n / ns], o), sizeof(float) * dim);
	rc = vf_kmeans(pts, ns, dim, 2, 10, r->pm.seed ^ ((o + 1) * 0x9e3779b97f4a7c15ULL),
		       r->v->threads, h, NULL, NULL);
	free(pts);
	if (rc)
		return rc;
	/* dest: 0 or 1, the half, until the final ids are known */
	uint64_t n1 = 0;
	for (uint64_t k = 0; k < sc->n; k++) {
		const float *x = rb_vec(r, &sc->codes[k], o);
		sc->dest[k] = rb_dist(r, x, h + dim) < rb_dist(r, x, h);
		n1 += sc->dest[k];
	}
	if (n1 == 0 || n1 == sc->n)
		return 0;
	sc->role = RB_SPLIT;
	sc->split = r->nsplit;
	r->splits[r->nsplit++] = o;
	return 0;
}

/* Final cluster ids and centroids.  A split keeps its id for its first
 * half; the second half takes a merged cluster's id while there is one,
 * else the next new id.  Ids merges leave free below the new nlist are
 * filled by moving the last clusters down. */
static int rb_assign_ids(rebal *r)
{
	uint32_t nl = r->nlist, dim = r->pm.dim;
	uint32_t *merged = vf_malloc(sizeof(uint32_t) * (r->nmerge ? r->nmerge : 1));
	uint32_t ntent = nl + (r->nsplit > r->nmerge ? r->nsplit - r->nmerge : 0);
	uint32_t *tmap = vf_malloc(sizeof(uint32_t) * ntent);
	uint8_t *hole = vf_calloc(ntent, 1);
	int rc = -ENOMEM;
	if (!merged || !tmap || !hole)
		goto out;
	uint32_t nm = 0, next = nl, mi = 0;
	for (uint32_t c = 0; c < nl; c++) {
		r->src[c].fin = c;
		if (r->src[c].role == RB_MERGE)
			merged[nm++] = c;
	}
	for (uint32_t j = 0; j < r->nsplit; j++)
		r->src[r->splits[j]].fin2 = mi < nm ? merged[mi++] : next++;
	uint32_t nlist2 = nl + r->nsplit - r->nmerge;
	for (uint32_t c = 0; c < ntent; c++)
		tmap[c] = c;
	for (uint32_t k = mi; k < nm; k++)
		hole[merged[k]] = 1;
	uint32_t last = ntent;
	for (uint32_t k = mi; k < nm && merged[k] < nlist2; k++) {
		do
			last--;
		while (hole[last]);
		tmap[last] = merged[k];
	}
	r->m.nlist = nlist2;
	r->cent = vf_malloc(sizeof(float) * nlist2 * dim);
	r->dst = vf_calloc(nlist2, sizeof *r->dst);
	if (!r->cent || !r->dst)
		goto out;
	for (uint32_t f = 0; f < nlist2; f++)
		r->dst[f].src = UINT32_MAX - 1; /* unfilled */
	rc = -EIO;
	for (uint32_t c = 0; c < nl; c++) {
		rb_src *sc = &r->src[c];
		if (sc->role == RB_MERGE)
			continue;
		sc->fin = tmap[sc->fin];
		if (sc->fin >= nlist2 || r->dst[sc->fin].src != UINT32_MAX - 1)
			goto out;
		if (sc->role == RB_KEEP) {
			r->dst[sc->fin].src = c;
			memcpy(r->cent + (size_t)sc->fin * dim, r->pg->centroids + (size_t)c * dim,
			       sizeof(float) * dim);
			continue;
		}
		sc->fin2 = tmap[sc->fin2];
		if (sc->fin2 >= nlist2 || r->dst[sc->fin2].src != UINT32_MAX - 1)
			goto out;
		const float *h = r->halves + (size_t)sc->split * 2 * dim;
		r->dst[sc->fin].src = r->dst[sc->fin2].src = RB_NEW;
		r->dst[sc->fin].changed = r->dst[sc->fin2].changed = 1;
		memcpy(r->cent + (size_t)sc->fin * dim, h, sizeof(float) * dim);
		memcpy(r->cent + (size_t)sc->fin2 * dim, h + dim, sizeof(float) * dim);
	}
	for (uint32_t f = 0; f < nlist2; f++)
		if (r->dst[f].src == UINT32_MAX - 1)
			goto out;
	/* postings loaded so far now name final clusters */
	for (uint32_t c = 0; c < nl; c++) {
		rb_src *sc = &r->src[c];
		if (sc->loaded)
			for (uint64_t k = 0; k < sc->n; k++)
				sc->dest[k] = sc->role == RB_SPLIT && sc->dest[k] ? sc->fin2 : sc->fin;
	}
	rc = 0;
out:
	free(merged);
	free(tmap);
	free(hole);
	return rc;
}

static int rb_add_near(rb_src *sc, uint32_t split)
{
	if (sc->nnear == sc->cnear) {
		uint32_t nc = sc->cnear ? sc->cnear * 2 : 4;
		uint32_t *n = vf_realloc(sc->near, sizeof *n * nc);
		if (!n)
			return -ENOMEM;
		sc->near = n;
		sc->cnear = nc;
	}
	sc->near[sc->nnear++] = split;
	return 0;
}

/* The RB_NEIGHBOURS clusters nearest each split (by the parent's
 * centroids; merged clusters aside: all their vectors move anyway). */
static int rb_neighbours(rebal *r)
{
	uint32_t dim = r->pm.dim;
	const float *pc = r->pg->centroids;
	for (uint32_t j = 0; j < r->nsplit; j++) {
		uint32_t s = r->splits[j], best[RB_NEIGHBOURS], nb = 0;
		float bd[RB_NEIGHBOURS];
		for (uint32_t o = 0; o < r->nlist; o++) {
			if (o == s || r->src[o].role == RB_MERGE)
				continue;
			float d = rb_dist(r, pc + (size_t)s * dim, pc + (size_t)o * dim);
			if (nb == RB_NEIGHBOURS && !(d < bd[nb - 1]))
				continue;
			uint32_t i = nb < RB_NEIGHBOURS ? nb++ : nb - 1;
			for (; i > 0 && d < bd[i - 1]; i--) {
				bd[i] = bd[i - 1];
				best[i] = best[i - 1];
			}
			bd[i] = d;
			best[i] = o;
		}
		for (uint32_t i = 0; i < nb; i++) {
			int rc = rb_add_near(&r->src[best[i]], j);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Where every posting of the affected clusters goes. */
static int rb_reassign(rebal *r)
{
	uint32_t dim = r->pm.dim;
	int rc;
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (sc->role == RB_MERGE) {
			/* to the nearest remaining centroid */
			if ((rc = rb_load(r, o)))
				return rc;
			for (uint64_t k = 0; k < sc->n; k++)
				sc->dest[k] = vf_gen_nearest(&r->g, rb_vec(r, &sc->codes[k], o));
		} else if (sc->nnear) {
			/* boundary vectors: to a new centroid that is nearer */
			if ((rc = rb_load(r, o)))
				return rc;
			for (uint64_t k = 0; k < sc->n; k++) {
				const float *x = rb_vec(r, &sc->codes[k], o);
				uint32_t best = sc->dest[k];
				float bd = rb_dist(r, x, r->cent + (size_t)best * dim);
				for (uint32_t i = 0; i < sc->nnear; i++) {
					const rb_src *sp = &r->src[r->splits[sc->near[i]]];
					uint32_t h[2] = {sp->fin, sp->fin2};
					for (int t = 0; t < 2; t++) {
						float d = rb_dist(r, x, r->cent + (size_t)h[t] * dim);
						if (d < bd) {
							bd = d;
							best = h[t];
						}
					}
				}
				sc->dest[k] = best;
			}
		} else {
			continue;
		}
		if (vf_task_report(&r->t, "assign", (int)((uint64_t)o * 100 / r->nlist)))
			return -ECANCELED;
	}
	/* which final clusters lose or gain postings */
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (!sc->loaded)
			continue;
		for (uint64_t k = 0; k < sc->n; k++)
			if (sc->role == RB_MERGE || sc->dest[k] != sc->fin) {
				r->dst[sc->dest[k]].changed = 1;
				if (sc->role != RB_MERGE)
					r->dst[sc->fin].changed = 1;
			}
	}
	/* a changed cluster keeps the codes of the postings it keeps */
	for (uint32_t f = 0; f < r->m.nlist; f++)
		if (r->dst[f].changed && r->dst[f].src != RB_NEW &&
		    (rc = rb_load(r, r->dst[f].src)))
			return rc;
	return 0;
}

/* Gather the postings of changed clusters by final cluster, encode those
 * whose centroid changed, order each cluster's by id. */
static int rb_encode(rebal *r)
{
	uint32_t nl2 = r->m.nlist;
	uint64_t total = 0, fresh = 0;
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (!sc->loaded)
			continue;
		for (uint64_t k = 0; k < sc->n; k++) {
			rb_dst *d = &r->dst[sc->dest[k]];
			if (!d->changed)
				continue;
			d->ne++;
			total++;
			fresh += d->src != o;
		}
	}
	uint64_t at = 0;
	for (uint32_t f = 0; f < nl2; f++) {
		r->dst[f].e0 = at;
		at += r->dst[f].ne;
		r->dst[f].ne = 0;
	}
	r->codes = vf_malloc(sizeof(vf_code) * (total ? total : 1));
	r->planes = vf_malloc(r->pb * (fresh ? fresh : 1));
	if (!r->codes || !r->planes)
		return -ENOMEM;
	vf_encoder enc;
	int rc = vf_gen_encoder_init(&enc, &r->g);
	if (rc)
		return rc;
	uint64_t done = 0;
	for (uint32_t o = 0; o < r->nlist && rc == 0; o++) {
		rb_src *sc = &r->src[o];
		if (!sc->loaded)
			continue;
		for (uint64_t k = 0; k < sc->n; k++) {
			uint32_t f = sc->dest[k];
			rb_dst *d = &r->dst[f];
			if (!d->changed)
				continue;
			vf_code *c = &r->codes[d->e0 + d->ne++];
			*c = sc->codes[k];
			if (d->src == o)
				continue; /* same centroid: the code stands */
			vf_code e;
			vf_encode(&enc, rb_vec(r, c, o), r->cent + (size_t)f * r->m.dim,
				  r->g.rc + (size_t)f * r->m.pdim, r->planes + done * r->pb, &e);
			e.id = c->id;
			e.seq = c->seq;
			e.has_payload = c->has_payload;
			e.key = c->key;
			e.keylen = c->keylen;
			*c = e;
			if (++done % 4096 == 0 && vf_task_report(&r->t, "encode", (int)(done * 100 / fresh)))
				rc = -ECANCELED;
		}
	}
	vf_encoder_free(&enc);
	if (rc)
		return rc;
	for (uint32_t f = 0; f < nl2; f++)
		if (r->dst[f].ne > 1)
			qsort(r->codes + r->dst[f].e0, r->dst[f].ne, sizeof(vf_code), vf_cmp_code);
	return vf_task_report(&r->t, "encode", 100) ? -ECANCELED : 0;
}

static int rb_calibrate(rebal *r);

/* The new generation's assignment map: the final cluster of every id in
 * the parent's blocks. */
static int rb_idmap(rebal *r)
{
	r->idmap = vf_malloc(sizeof(uint32_t) * (r->id_limit ? r->id_limit : 1));
	if (!r->idmap)
		return -ENOMEM;
	memset(r->idmap, 0xFF, sizeof(uint32_t) * (r->id_limit ? r->id_limit : 1));
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (sc->loaded) {
			for (uint64_t k = 0; k < sc->n; k++) {
				if (sc->codes[k].id >= r->id_limit)
					return -EIO;
				r->idmap[sc->codes[k].id] = sc->dest[k];
			}
			continue;
		}
		for (uint64_t bi = 0; bi < sc->nb; bi++) {
			vf_block b;
			const vf_val *d = &r->bvals[sc->b0 + bi];
			if (vf_block_open(d->data, d->len, &b) ||
			    vf_block_check(NULL, &b, VF_COL_IDS))
				return -EIO;
			for (uint32_t i = 0; i < b.n; i++) {
				uint64_t id = vf_block_id(&b, i);
				if (id >= r->id_limit)
					return -EIO;
				r->idmap[id] = sc->fin;
			}
		}
	}
	return 0;
}

typedef struct rb_blocks_job {
	rebal *r;
	uint32_t f_lo, f_hi;    /* final clusters written by this transaction */
	uint8_t *buf;
	size_t bufcap;
} rb_blocks_job;

static int rb_blocks_fn(vf_txn *txn, void *arg)
{
	rb_blocks_job *j = arg;
	rebal *r = j->r;
	vf_store *s = r->v->store;
	int rc;
	for (uint32_t f = j->f_lo; f < j->f_hi; f++) {
		const rb_dst *d = &r->dst[f];
		if (d->changed) {
			if ((rc = vf_write_blocks(txn, s, &r->m, f, r->codes + d->e0, d->ne, 0, &j->buf,
					       &j->bufcap)))
				return rc;
			continue;
		}
		/* untouched: the parent's blocks as they are */
		const rb_src *sc = &r->src[d->src];
		for (uint64_t bi = 0; bi < sc->nb; bi++) {
			const vf_val *v = &r->bvals[sc->b0 + bi];
			if ((rc = vf_posting_put(txn, s, r->m.id, f, VF_PK_BLOCK, bi, v->data,
						  v->len)))
				return rc;
		}
		vf_manifest mf = {0};
		mf.vectors = sc->n;
		mf.blocks = (uint32_t)sc->nb;
		if ((rc = vf_save_manifest(txn, s, r->m.id, f, &mf)))
			return rc;
	}
	return 0;
}

static int rb_write(rebal *r)
{
	rb_blocks_job j = {r, 0, 0, NULL, 0};
	size_t per_vec = r->pb + 64; /* code, factors, id, key */
	uint32_t nl2 = r->m.nlist;
	int rc = 0;
	if (vf_task_report(&r->t, "publish", 0))
		return -ECANCELED;
	while (j.f_hi < nl2) {
		j.f_lo = j.f_hi;
		uint64_t bytes = 0;
		while (j.f_hi < nl2 && bytes < VF_PUBLISH_TXN_BYTES) {
			const rb_dst *d = &r->dst[j.f_hi];
			if (d->changed) {
				bytes += d->ne * per_vec + 256;
			} else {
				const rb_src *sc = &r->src[d->src];
				for (uint64_t bi = 0; bi < sc->nb; bi++)
					bytes += r->bvals[sc->b0 + bi].len + 64;
				bytes += 256;
			}
			j.f_hi++;
		}
		if ((rc = vf_write(r->v->store, rb_blocks_fn, &j)))
			break;
		if (vf_task_report(&r->t, "publish", (int)((uint64_t)j.f_hi * 99 / nl2))) {
			rc = -ECANCELED;
			break;
		}
	}
	free(j.buf);
	return rc;
}

/* Snapshot, plan, write, publish.  With build_mu held.  -EALREADY when
 * nothing needs splitting or merging and !r->force (nothing published). */
static int rebalance_locked(rebal *r, int activate, uint64_t *gen_out)
{
	vecfs *v = r->v;
	vf_counters cnt;
	int rc, registered = 0;
	struct timespec t0, t1;
	VF_ASSERT_HELD(&v->build_mu);
	clock_gettime(CLOCK_MONOTONIC, &t0);

	/* every live posting into packed blocks first */
	if ((rc = vf_compact_locked(v, NULL, r->t.err, r->t.errlen))) {
		if (rc == -ENOENT)
			vf_seterr(r->t.err, r->t.errlen, "rebalance: there is no active generation");
		return rc;
	}
	if ((rc = vf_store_reserve(v->store, VF_GEN_RESERVE(v->store))))
		return rc;
	if (v->before_snapshot)
		v->before_snapshot(v);
	if ((rc = vf_read_begin(v->store, &r->txn)))
		return rc;
	uint64_t active = vf_load_active(r->txn, v->store);
	if (!active) {
		vf_seterr(r->t.err, r->t.errlen, "rebalance: there is no active generation");
		rc = -ENOENT;
		goto out;
	}
	if ((rc = vf_load_counters(r->txn, v->store, &cnt)) ||
	    (rc = vf_load_genmeta(r->txn, v->store, active, &r->pm)) ||
	    (rc = vf_gen_get(v, r->txn, active, &r->pg)))
		goto out;
	r->nlist = r->pm.nlist;
	r->pb = (size_t)r->pm.bits * r->pm.pdim / 8;
	r->id_limit = cnt.next_id;
	r->src = vf_calloc(r->nlist, sizeof *r->src);
	r->x = vf_malloc(sizeof(float) * r->pm.dim);
	if (!r->src || !r->x) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t c = 0; c < r->nlist; c++)
		r->src[c].fin = c;
	if ((rc = rb_scan(r)) || (rc = rb_check(r, cnt.seq)))
		goto out;

	/* what to split and what to merge, against the mean cluster size or,
	 * when nlist is chosen automatically, the size a fresh build would
	 * give (vf_auto_nlist), whichever asks for more clusters: a growing
	 * store keeps the cluster sizes of a fresh build */
	double mean = (double)r->total / r->nlist;
	vecfs_config cfg;
	if (vecfs_config_get(r->v, &cfg) == 0 && cfg.nlist == 0 && r->total > 0) {
		double ideal = (double)r->total / vf_auto_nlist(r->total);
		if (ideal < mean)
			mean = ideal;
	}
	for (uint32_t c = 0; c < r->nlist; c++)
		if (r->nlist > 1 && (double)r->src[c].n < RB_MERGE_FACTOR * mean) {
			r->src[c].role = RB_MERGE;
			r->nmerge++;
		}
	uint32_t ncand = 0, tried = 0;
	for (uint32_t c = 0; c < r->nlist; c++)
		ncand += (double)r->src[c].n > RB_SPLIT_FACTOR * mean && r->src[c].n >= RB_SPLIT_MIN;
	r->splits = vf_malloc(sizeof(uint32_t) * (ncand ? ncand : 1));
	r->halves = vf_malloc(sizeof(float) * 2 * r->pm.dim * (ncand ? ncand : 1));
	if (!r->splits || !r->halves) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t c = 0; c < r->nlist; c++) {
		if (!((double)r->src[c].n > RB_SPLIT_FACTOR * mean && r->src[c].n >= RB_SPLIT_MIN))
			continue;
		if (vf_task_report(&r->t, "train", (int)(tried++ * 100 / ncand))) {
			rc = -ECANCELED;
			goto out;
		}
		if ((rc = rb_split(r, c)))
			goto out;
	}
	if (!r->force && r->nsplit == 0 && r->nmerge == 0) {
		rc = -EALREADY;
		goto out;
	}

	/* the new generation: the parent's codes stay valid in it */
	r->m.state = VECFS_GEN_BUILDING;
	r->m.metric = r->pm.metric;
	r->m.created = (uint64_t)time(NULL);
	r->m.snap_seq = r->pm.blocks_seq;
	r->m.covered = r->total;
	r->m.parent = active;
	r->m.seed = r->pm.seed;
	r->m.nlist = r->nlist;
	r->m.bits = r->pm.bits;
	r->m.dim = r->pm.dim;
	r->m.pdim = r->pm.pdim;
	r->m.flags = r->pm.flags; /* how the kept codes were encoded */
	r->m.id_limit = r->id_limit;
	snprintf(r->m.phase, sizeof r->m.phase, "assign");
	if ((rc = vf_gen_register(v, &r->m)))
		goto out;
	registered = 1;
	if ((rc = rb_assign_ids(r)) ||
	    (rc = vf_gen_routing(&r->g, &r->m, r->cent, r->pg->center)))
		goto out;
	r->have_g = 1;
	if ((rc = rb_neighbours(r)) || (rc = rb_reassign(r)) || (rc = rb_encode(r)) ||
	    (rc = rb_idmap(r)) || (rc = rb_write(r)) || (rc = rb_calibrate(r)))
		goto out;
	vf_read_end(v->store, r->txn);
	r->txn = NULL;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	r->m.build_seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	if ((rc = vf_gen_publish(v, &r->m, r->cent, r->idmap, r->id_limit, &r->g, activate, 1)))
		goto out;
	*gen_out = r->m.id;
out:
	if (r->txn)
		vf_read_end(v->store, r->txn);
	r->txn = NULL;
	if (rc == -ECANCELED)
		vf_seterr(r->t.err, r->t.errlen, "rebalance: cancelled");
	else if (rc && rc != -EALREADY && r->t.err && !r->t.err[0])
		vf_seterr(r->t.err, r->t.errlen, "rebalance: %s", strerror(-rc));
	if (rc && registered)
		vf_gen_abandon(v, &r->m);
	return rc;
}

static void rebal_free(rebal *r)
{
	if (r->src)
		for (uint32_t c = 0; c < r->nlist; c++) {
			free(r->src[c].near);
			free(r->src[c].codes);
			free(r->src[c].planes);
			free(r->src[c].dest);
		}
	if (r->have_g)
		vf_gen_routing_free(&r->g);
	vf_gen_put(r->v, r->pg);
	free(r->src);
	free(r->bvals);
	free(r->splits);
	free(r->halves);
	free(r->cent);
	free(r->dst);
	free(r->codes);
	free(r->planes);
	free(r->idmap);
	free(r->x);
}

typedef struct rb_cal {
	const uint8_t **vecs;   /* records' vectors, in the snapshot's map */
	uint8_t *kinds;         /* how each holds its numbers (VF_VEC_*) */
	uint32_t dim;
	vecfs_metric metric;
} rb_cal;

static void rb_cal_vec(const void *arg, uint64_t i, float *out)
{
	const rb_cal *c = arg;
	vf_record r = {.dim = c->dim, .kind = c->kinds[i], .vec = c->vecs[i]};
	vf_record_floats(&r, out);
	if (c->metric == VECFS_COSINE)
		vf_to_index_space(VECFS_COSINE, out, out, c->dim);
}

static int rb_cal_tick(void *arg, int pct)
{
	return vf_task_report(arg, "calibrate", pct);
}

/* The recall calibration of the new generation (calibrate.h), on the
 * records its clusters hold in the snapshot. */
static int rb_calibrate(rebal *r)
{
	uint64_t n = 0;
	for (uint64_t id = 0; id < r->id_limit; id++)
		n += r->idmap[id] != UINT32_MAX;
	rb_cal c = {vf_malloc(sizeof(uint8_t *) * (n ? n : 1)), vf_malloc(n ? n : 1), r->pm.dim,
		    (vecfs_metric)r->pm.metric};
	uint32_t *assign = vf_malloc(sizeof(uint32_t) * (n ? n : 1));
	int rc = 0;
	if (!c.vecs || !c.kinds || !assign) {
		rc = -ENOMEM;
		goto out;
	}
	n = 0;
	for (uint64_t id = 0; id < r->id_limit && rc == 0; id++) {
		if (r->idmap[id] == UINT32_MAX)
			continue;
		vf_val d;
		vf_record rec;
		rc = vf_records_get(r->txn, r->v->store, id, &d);
		if (rc == -ENOENT) { /* deleted since: its posting is stale */
			rc = 0;
			continue;
		}
		if (rc)
			break;
		/* a record that fails its checksum is left out of the sample
		 * (as rb_vec() leaves it out of the clustering; salvage removes it) */
		if (vf_record_decode(d.data, d.len, &rec) || rec.dim != r->pm.dim)
			continue;
		c.vecs[n] = (const uint8_t *)rec.vec;
		c.kinds[n] = (uint8_t)rec.kind;
		assign[n++] = r->idmap[id];
	}
	if (rc == 0 && (rc = vf_calibrate(&r->g, c.metric, n, rb_cal_vec, &c, assign,
					 r->v->threads, r->m.seed ^ r->m.id, rb_cal_tick, &r->t,
					 &r->cal)) == 0)
		r->g.cal = &r->cal;
out:
	free(c.vecs);
	free(c.kinds);
	free(assign);
	return rc;
}

static int rebalance(vecfs *v, int activate, int force, uint64_t *gen_out,
		     vecfs_progress_fn progress, void *parg, char *err, size_t errlen)
{
	rebal r;
	uint64_t gen = 0;
	memset(&r, 0, sizeof r);
	r.v = v;
	r.force = force;
	vf_task_init(&r.t, v, &r.m, progress, parg, err, errlen);
	pthread_mutex_lock(&v->build_mu);
	int rc = rebalance_locked(&r, activate, &gen);
	pthread_mutex_unlock(&v->build_mu);
	rebal_free(&r);
	vf_task_end(&r.t);
	if (rc)
		return rc;
	vf_retire_generations(v, gen);
	if (gen_out)
		*gen_out = gen;
	return 0;
}

int vecfs_rebalance(vecfs *v, int activate, uint64_t *gen_out,
		    vecfs_progress_fn progress, void *parg, char *err, size_t errlen)
{
	return rebalance(v, activate, 1, gen_out, progress, parg, err, errlen);
}

/* After an automatic compaction: rebalance when the largest cluster is over
 * rebalance_ratio times the mean.  0 when not due. */
int vf_maybe_rebalance(vecfs *v, char *err, size_t errlen)
{
	vecfs_config c;
	uint64_t active;
	double imbalance;
	if (vecfs_config_get(v, &c) || !c.rebalance_ratio ||
	    vf_active_imbalance(v, &active, &imbalance) || !active ||
	    !(imbalance > c.rebalance_ratio))
		return 0;
	return rebalance(v, 1, 0, NULL, NULL, NULL, err, errlen);
}
