/*
 * vecfs-churn - does maintenance keep an index healthy under churn?
 *
 * Reads DIR/base.fvecs and DIR/query.fvecs (TEXMEX format).  The first half
 * of the base goes into a fresh store under keys "0".."N/2-1" and one
 * generation is built.  Each of R rounds then streams in the next share of
 * the other half, deletes 10% of the live keys and moves another 10% to the
 * vector of a random base row plus a little Gaussian noise, all mixed in
 * batches of about 1000 operations.  Nothing is compacted or rebalanced by
 * this program: the library's own maintenance (compaction once a cluster
 * holds compact_deltas deltas, a rebalance above rebalance_ratio, retiring
 * generations beyond keep_generations) runs in the background as it would
 * for any writer.
 *
 * After each round, once maintenance is idle, every query runs at the
 * defaults and is scored against an exact top-10 over the live set computed
 * here, and every hit is checked: its key must be live and its distance
 * that of the key's current vector.  At the end a second store is built from
 * scratch from the same live set, and the churned store's QPS and size are
 * compared with it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vecfs.h"
#include "dataset.h"
#include "toolutil.h"

#define PROG "vecfs-churn"
#define ERRLEN 256
#define TOP_K 10                 /* results per query, recall@10 */
#define INGEST_BATCH 10000       /* rows per vecfs_put when loading */
#define CHURN_BATCH 1000         /* mixed operations per batch in a round */
#define CHURN_SHARE 10           /* 1/10 of the live keys deleted, 1/10 moved */
#define MOVE_NOISE 0.01          /* noise sigma over the row's RMS coordinate */
#define GT_THREADS 2             /* brute-force ground truth */
#define POLL_NS 100000000ull     /* maintenance polling period: 100 ms */
#define IDLE_NS 1000000000ull    /* quiet for 1 s counts as idle */
#define IDLE_MAX_NS 60000000000ull /* give up waiting after 60 s */
#define TIMED_NS 1000000000ull   /* timed query passes: at least 1 s ... */
#define MAX_PASSES 10            /* ... and at most this many passes */
#define COMPARE_RUNS 3           /* churned vs fresh: alternating measurements */
#define DIST_REL 1e-4            /* reported vs exact distance, relative */
#define DIST_ABS 1e-6            /* plus float rounding, of the scale below */
#define MAX_BAD_SHOWN 5          /* offending hits described on stderr */
#define MAX_GENS 64              /* generations listed in the report */

/* Acceptance */
#define MIN_RECALL 0.95
#define MAX_QPS_RATIO 1.2        /* fresh QPS / churned QPS */
#define MAX_SIZE_RATIO 1.5       /* churned store_bytes / fresh store_bytes */

static const char usage_text[] =
	"usage: " PROG " DIR [options]\n"
	"\n"
	"Churn a store built from DIR/base.fvecs and check its searches against\n"
	"an exact ground truth over DIR/query.fvecs after every round, then compare\n"
	"it with a store built from scratch from the same records.\n"
	"\n"
	"options:\n"
	"  --rounds R              churn rounds (default 5)\n"
	"  --metric l2|cosine|dot  distance (default: the `metric:` line of\n"
	"                          DIR/README.md, else l2)\n"
	"  --queries Q             use the first Q queries (default 200)\n"
	"  --seed S                seed of the churn (default 1)\n"
	"  --store PATH            create the churned store at PATH (must not\n"
	"                          exist) and keep it\n"
	"  --keep                  keep the temporary stores and print their paths\n"
	"  --json                  one JSON object per round and a final one\n"
	"  --help                  show this help\n"
	"\n"
	"The first half of the base is loaded under keys \"0\"..\"N/2-1\" and built\n"
	"(auto_build off, every other setting the library's default).  Each round\n"
	"then writes the next R-th of the other half, deletes 10% of the live keys\n"
	"and moves 10% to another base row's vector plus Gaussian noise (sigma 1%\n"
	"of that row's RMS coordinate), mixed in batches of about 1000.  After the\n"
	"writes, stats are polled every 100 ms until nothing changed for 1 s, no\n"
	"cluster is due for compaction and no maintenance is running (at most\n"
	"60 s).\n"
	"\n"
	"Searches use the defaults (k 10, nprobe and refine from the config), one\n"
	"query per call on one thread: one untimed pass, then timed passes until\n"
	"1 s is spent (at most 10).  recall@10 counts the hits whose exact distance\n"
	"is within the exact 10th nearest live record's (ties count).  Every hit\n"
	"of the first timed pass must be a live key reported at the exact distance\n"
	"of its current vector (relative 1e-4); a deleted key or a superseded\n"
	"vector is a failure.  The final comparison measures the churned and the\n"
	"fresh store in turn, three times each, and keeps each one's best QPS.\n"
	"\n"
	"Columns: deltas, unindexed, compact, rebal, imbalance, gens and store_MB\n"
	"are vecfs_stats after maintenance went idle (delta_postings, unindexed,\n"
	"compactions, rebalances, cluster_imbalance, generations, store_bytes);\n"
	"nlist is the active generation's; write_s the round's writes; wait_s the\n"
	"wait for idle maintenance (! when it timed out); bad the hits failing the\n"
	"check; delta/q and stale/q the delta postings scanned and stale postings\n"
	"skipped per query (vecfs_explain).\n"
	"\n"
	"Checks: recall@10 >= 0.95 after every round; no deleted or superseded\n"
	"hit; fresh QPS / churned QPS <= 1.2; churned store_bytes / fresh\n"
	"store_bytes <= 1.5; the churned store verifies and holds the live set.\n"
	"Exit status 0 when all pass, 1 when a check fails, 2 on an error.\n";

/* ---------------------------------------------------------------- options */

struct options {
	struct ds_opts ds;     /* DIR, --metric, --queries, --store, --keep, --json, --help */
	unsigned rounds;
	uint64_t seed;
};

enum opt_id { OPT_ROUNDS, OPT_SEED };

/* Beside the options every data set tool takes (ds_parse_args()). */
static const struct tool_opt opt_table[] = {
	{ "--rounds", 1, OPT_ROUNDS }, { "--seed", 1, OPT_SEED },
};

/* Non-zero when the value is bad. */
static int apply_opt(void *ctx, const struct tool_opt *spec, const char *val)
{
	struct options *o = ctx;
	uint64_t x = 0;
	int bad = 0;

	switch ((enum opt_id)spec->id) {
	case OPT_ROUNDS:
		bad = tool_parse_uint(val, 1, 100000, &x) != 0;
		o->rounds = (unsigned)x;
		break;
	case OPT_SEED:
		bad = tool_parse_uint(val, 0, UINT64_MAX, &x) != 0;
		o->seed = x;
		break;
	}
	return bad;
}

/* The defaults, then the command line (see ds_parse_args). */
static int parse_args(int argc, char **argv, void *opt)
{
	struct options *o = opt;

	memset(o, 0, sizeof *o);
	o->rounds = 5;
	o->ds.queries = 200;
	o->seed = 1;
	return ds_parse_args(argc, argv, opt_table, sizeof opt_table / sizeof opt_table[0], apply_opt,
			     o, &o->ds);
}

/* ---------------------------------------------------------------- signals */

/* ---------------------------------------------------------------- random */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static size_t rng_below(uint64_t *s, size_t n)
{
	return (size_t)(rng_next(s) % n);
}

static double rng_unit(uint64_t *s) /* (0, 1] */
{
	return (double)((rng_next(s) >> 11) + 1) * 0x1p-53;
}

static double rng_gauss(uint64_t *s) /* Box-Muller, one of the pair */
{
	return sqrt(-2.0 * log(rng_unit(s))) * cos(2.0 * M_PI * rng_unit(s));
}

/* ---------------------------------------------------------------- state */

enum key_state { KEY_NEW = 0, KEY_LIVE = 1, KEY_DELETED = 2 };
enum op_kind { OP_INSERT, OP_DELETE, OP_UPDATE };

struct op {
	uint32_t key;
	uint8_t kind;
};

/* Search figures of one store at one point. */
struct measure {
	double recall, qps, p50_us;
	uint64_t hits;
	uint64_t bad_deleted;  /* key deleted */
	uint64_t bad_stale;    /* key live, distance not its current vector's */
	uint64_t bad_other;    /* key never written, not a row, or repeated */
	unsigned passes;
	/* per query, from the first timed pass's explain */
	double probed, pass1, pass2, deltas, stale, reranked, uncovered;
};

/* What maintenance left after the writes. */
struct health {
	vecfs_stats st;
	uint32_t nlist;        /* of the active generation */
	double wait_s;
	int idle;              /* 0: still busy after IDLE_MAX_NS */
};

struct round_report {
	unsigned round;        /* 0: after the first build */
	size_t inserted, deleted, updated;
	double write_s;
	struct health h;
	struct measure m;
};

struct churn {
	const struct options *opt;
	struct ds_data ds;     /* name, metric, base and queries */
	size_t n, nq;
	uint32_t dim;
	vecfs_config cfg;      /* as stored in the churned store */

	/* the live set as it should be: key i is base row i's key */
	float *cur;            /* n x dim: each key's current vector */
	float *norm;           /* n: |cur[i]| */
	uint8_t *state;        /* n: enum key_state */
	uint32_t *live, *pos;  /* live keys; pos[key] is its index in live */
	size_t nlive, next_row;
	uint32_t *scratch;     /* n */
	struct op *ops;        /* n */
	uint64_t rng;

	/* ground truth of the current live set */
	float *qnorm;          /* nq */
	float *gt_kth;         /* nq: distance of the k-th nearest live record */
	size_t gt_k;           /* min(TOP_K, live) */

	uint64_t *lat_ns;      /* nq x MAX_PASSES */
	vecfs_row *rows;       /* INGEST_BATCH */
	char (*keys)[16];      /* INGEST_BATCH */
	unsigned round;        /* for messages */
	unsigned bad_shown;

	struct ds_store churned, fresh; /* labelled "churned", "fresh" */
	struct round_report *reports; /* rounds + 1 */
};

static const float *base_row(const struct churn *c, size_t i)
{
	return (const float *)c->ds.base.data + i * c->dim;
}

static float *cur_row(const struct churn *c, size_t key)
{
	return c->cur + key * c->dim;
}

static float norm_f(const float *x, uint32_t dim)
{
	double s = 0;

	for (uint32_t j = 0; j < dim; j++)
		s += (double)x[j] * x[j];
	return (float)sqrt(s);
}

static void live_add(struct churn *c, uint32_t key)
{
	c->pos[key] = (uint32_t)c->nlive;
	c->live[c->nlive++] = key;
	c->state[key] = KEY_LIVE;
}

static void live_remove(struct churn *c, uint32_t key)
{
	uint32_t at = c->pos[key], last = c->live[--c->nlive];

	c->live[at] = last;
	c->pos[last] = at;
	c->state[key] = KEY_DELETED;
}

static int alloc_state(struct churn *c)
{
	size_t n = c->n;

	c->cur = malloc(n * c->dim * sizeof *c->cur);
	c->norm = malloc(n * sizeof *c->norm);
	c->state = calloc(n, 1);
	c->live = malloc(n * sizeof *c->live);
	c->pos = malloc(n * sizeof *c->pos);
	c->scratch = malloc(n * sizeof *c->scratch);
	c->ops = malloc(n * sizeof *c->ops);
	c->qnorm = malloc(c->nq * sizeof *c->qnorm);
	c->gt_kth = malloc(c->nq * sizeof *c->gt_kth);
	c->lat_ns = malloc(c->nq * MAX_PASSES * sizeof *c->lat_ns);
	c->rows = malloc(INGEST_BATCH * sizeof *c->rows);
	c->keys = malloc(INGEST_BATCH * sizeof *c->keys);
	c->reports = calloc(c->opt->rounds + 1, sizeof *c->reports);
	if (!c->cur || !c->norm || !c->state || !c->live || !c->pos ||
	    !c->scratch || !c->ops || !c->qnorm || !c->gt_kth || !c->lat_ns ||
	    !c->rows || !c->keys || !c->reports)
		return tool_fail(-ENOMEM, NULL, "allocate the live set");
	memcpy(c->cur, c->ds.base.data, n * c->dim * sizeof *c->cur);
	for (size_t i = 0; i < n; i++)
		c->norm[i] = norm_f(base_row(c, i), c->dim);
	for (size_t q = 0; q < c->nq; q++)
		c->qnorm[q] = norm_f((const float *)c->ds.query.data + q * c->dim, c->dim);
	return 0;
}

static int load_dataset(struct churn *c)
{
	const struct options *o = c->opt;
	char detail[96];
	int rc;

	if ((rc = ds_load(&o->ds, &c->ds)))
		return rc;
	if (c->ds.base.n < 2 || c->ds.base.n > UINT32_MAX) {
		snprintf(detail, sizeof detail, "%zu base rows", c->ds.base.n);
		return tool_fail(-EINVAL, detail, "load %s/base.fvecs", o->ds.dir);
	}
	c->n = c->ds.base.n;
	c->nq = c->ds.query.n;
	c->dim = c->ds.base.dim;
	return alloc_state(c);
}

/* ---------------------------------------------------------------- distances */

/* The distance the library reports: l2 squared, cosine 1 - cos, dot -dot.
 * `qn` and `xn` are the norms (used by cosine only). */
static float dist_f(vecfs_metric m, const float *q, float qn, const float *x,
		    float xn, uint32_t dim)
{
	float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	uint32_t j = 0;

	if (m == VECFS_L2) {
		for (; j + 4 <= dim; j += 4) {
			float d0 = q[j] - x[j], d1 = q[j + 1] - x[j + 1];
			float d2 = q[j + 2] - x[j + 2], d3 = q[j + 3] - x[j + 3];

			s0 += d0 * d0;
			s1 += d1 * d1;
			s2 += d2 * d2;
			s3 += d3 * d3;
		}
		for (; j < dim; j++)
			s0 += (q[j] - x[j]) * (q[j] - x[j]);
		return (s0 + s1) + (s2 + s3);
	}
	for (; j + 4 <= dim; j += 4) {
		s0 += q[j] * x[j];
		s1 += q[j + 1] * x[j + 1];
		s2 += q[j + 2] * x[j + 2];
		s3 += q[j + 3] * x[j + 3];
	}
	for (; j < dim; j++)
		s0 += q[j] * x[j];
	s0 = (s0 + s1) + (s2 + s3);
	if (m == VECFS_DOT)
		return -s0;
	return qn > 0 && xn > 0 ? 1 - s0 / (qn * xn) : 1;
}

/* The same in double, for checking reported distances; *scale gets the
 * magnitude float rounding is relative to. */
static double dist_d(vecfs_metric m, const float *q, const float *x,
		     uint32_t dim, double *scale)
{
	double qq = 0, xx = 0, qx = 0, l2 = 0;

	*scale = 1;
	for (uint32_t j = 0; j < dim; j++) {
		double d = (double)q[j] - x[j];

		qq += (double)q[j] * q[j];
		xx += (double)x[j] * x[j];
		qx += (double)q[j] * x[j];
		l2 += d * d;
	}
	switch (m) {
	case VECFS_L2:
		*scale = qq + xx;
		return l2;
	case VECFS_DOT:
		*scale = sqrt(qq * xx);
		return -qx;
	case VECFS_COSINE:
		return qq > 0 && xx > 0 ? 1 - qx / sqrt(qq * xx) : 1;
	}
	return 0;
}

static int distance_matches(double reported, double exact, double scale)
{
	return fabs(reported - exact) <= DIST_REL * fabs(exact) + DIST_ABS * scale;
}

/* ---------------------------------------------------------------- ground truth */

struct gt_job {
	struct churn *c;
	size_t q0, q1;
};

/* Distance of the k-th nearest live record of query q. */
static float kth_nearest(const struct churn *c, size_t q, size_t k)
{
	const float *qv = (const float *)c->ds.query.data + q * c->dim;
	float best[TOP_K];
	size_t cnt = 0;

	for (size_t i = 0; i < c->nlive; i++) {
		uint32_t key = c->live[i];
		float d = dist_f(c->ds.metric, qv, c->qnorm[q], cur_row(c, key),
				 c->norm[key], c->dim);
		size_t at;

		if (cnt == k && !(d < best[k - 1]))
			continue;
		at = cnt < k ? cnt++ : k - 1;
		while (at > 0 && best[at - 1] > d) {
			best[at] = best[at - 1];
			at--;
		}
		best[at] = d;
	}
	return best[k - 1];
}

static void *gt_worker(void *arg)
{
	struct gt_job *j = arg;

	for (size_t q = j->q0; q < j->q1; q++)
		j->c->gt_kth[q] = kth_nearest(j->c, q, j->c->gt_k);
	return NULL;
}

/* Exact top-k of every query over the live set, on GT_THREADS threads. */
static int compute_gt(struct churn *c)
{
	pthread_t th[GT_THREADS];
	struct gt_job jobs[GT_THREADS];
	int started = 0, rc = 0;

	c->gt_k = c->nlive < TOP_K ? c->nlive : TOP_K;
	if (c->gt_k == 0)
		return tool_fail(-ENOENT, "no live records", "ground truth");
	for (int t = 0; t < GT_THREADS; t++) {
		jobs[t] = (struct gt_job){ c, c->nq * t / GT_THREADS,
					   c->nq * (t + 1) / GT_THREADS };
		rc = pthread_create(&th[t], NULL, gt_worker, &jobs[t]);
		if (rc) {
			tool_fail(-rc, NULL, "pthread_create");
			break;
		}
		started++;
	}
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	return rc ? -rc : 0;
}

/* ---------------------------------------------------------------- stores */

/* A new store: library defaults but no automatic build; *cfg: as
 * stored. */
static int open_store(struct churn *c, struct ds_store *s, const char *path, vecfs_config *cfg)
{
	int rc = ds_store_create(s, path, c->dim, c->ds.metric, cfg);

	return rc ? rc : ds_store_config(s, cfg);
}

static size_t format_key(char *buf, size_t cap, uint32_t key)
{
	return (size_t)snprintf(buf, cap, "%u", key);
}

static vecfs_row key_row(struct churn *c, size_t slot, uint32_t key)
{
	size_t len = format_key(c->keys[slot], sizeof c->keys[slot], key);

	return (vecfs_row){ .key = c->keys[slot], .keylen = len,
			    .vec = cur_row(c, key) };
}

static int put_rows(struct churn *c, struct ds_store *s, size_t n)
{
	char err[ERRLEN] = "";
	size_t bad = SIZE_MAX;
	int rc = vecfs_put(s->v, c->rows, n, c->dim, &bad, err, sizeof err);

	if (rc && bad < n)
		return tool_fail(rc, err, "vecfs_put (%s store, key %s)", s->label,
			    c->rows[bad].key);
	if (rc)
		return tool_fail(rc, err, "vecfs_put (%s store, %zu rows)", s->label, n);
	return 0;
}

/* Write keys[0..n) with their current vectors, INGEST_BATCH per put. */
static int load_keys(struct churn *c, struct ds_store *s, const uint32_t *keys,
		     size_t n)
{
	uint64_t t0 = tool_now_ns();
	struct tool_progress p;
	int rc = 0;

	tool_progress_init(&p, s->label, "rows");
	for (size_t start = 0; start < n && rc == 0; start += INGEST_BATCH) {
		size_t cnt = n - start < INGEST_BATCH ? n - start : INGEST_BATCH;

		if (tool_interrupted()) {
			rc = tool_report_interrupt();
			break;
		}
		for (size_t j = 0; j < cnt; j++)
			c->rows[j] = key_row(c, j, keys[start + j]);
		if ((rc = put_rows(c, s, cnt)) == 0)
			tool_progress_show(&p, "load", start + cnt, n);
	}
	tool_progress_end(&p);
	s->load_s = tool_seconds_since(t0);
	return rc;
}

static int build_store(struct ds_store *s)
{
	int rc = ds_store_build(s);

	if (rc)
		return rc;
	if (vecfs_active(s->v) != s->gen)
		return tool_fail(-EPROTO, "not active after the build",
			    "generation %llu", (unsigned long long)s->gen);
	return 0;
}

/* Bytes of a compacted copy (vecfs_backup): the data without free pages. */
static int compacted_bytes(struct ds_store *s, uint64_t *out)
{
	const char *tmp = getenv("TMPDIR");
	char path[PATH_MAX];
	struct stat st;
	int fd, rc;

	if (!tmp || !*tmp)
		tmp = "/tmp";
	if ((size_t)snprintf(path, sizeof path, "%s/" PROG ".copy.XXXXXX", tmp) >=
	    sizeof path)
		return tool_fail(-ENAMETOOLONG, NULL, "temporary file in %s", tmp);
	if ((fd = mkstemp(path)) < 0)
		return tool_fail(-errno, NULL, "mkstemp %s", path);
	unlink(path);
	rc = vecfs_backup(s->v, fd);
	if (rc)
		tool_fail(rc, NULL, "vecfs_backup (%s store)", s->label);
	else if (fstat(fd, &st))
		rc = tool_fail(-errno, NULL, "stat a copy of the %s store", s->label);
	else
		*out = (uint64_t)st.st_size;
	close(fd);
	return rc;
}

/* ---------------------------------------------------------------- maintenance */

/* 1 when a cluster of the active generation holds compact_deltas deltas
 * and tombstones: a compaction is due or running. */
static int compaction_due(vecfs *v, uint64_t active, uint32_t compact_deltas,
			  int *due)
{
	vecfs_cluster_info *ci = NULL;
	uint32_t n = 0;
	int rc;

	*due = 0;
	if (!active)
		return 0;
	rc = vecfs_gen_clusters(v, active, &ci, &n);
	if (rc == -ENOENT) /* retired between the two calls */
		return 0;
	if (rc)
		return tool_fail(rc, NULL, "vecfs_gen_clusters %llu",
			    (unsigned long long)active);
	for (uint32_t i = 0; i < n && !*due; i++)
		*due = ci[i].deltas + ci[i].tombstones >= compact_deltas;
	free(ci);
	return 0;
}

static int stats_differ(const vecfs_stats *a, const vecfs_stats *b)
{
	return a->delta_postings != b->delta_postings ||
	       a->unindexed != b->unindexed || a->compactions != b->compactions ||
	       a->rebalances != b->rebalances || a->active != b->active ||
	       a->generations != b->generations;
}

/* Poll until the backlog, the maintenance counters and the active
 * generation stayed the same for IDLE_NS and no compaction is due or
 * running (stats' maintenance flag: an idle compaction starts half a second
 * after the writes stop); give up
 * after IDLE_MAX_NS.  Fills h with the state then. */
static int wait_idle(struct churn *c, struct ds_store *s, struct health *h)
{
	uint64_t t0 = tool_now_ns(), quiet_since = t0;
	vecfs_stats prev = { 0 };
	vecfs_gen_info gi;
	int rc, due, first = 1;

	for (;;) {
		uint64_t t;

		if ((rc = vecfs_stats_get(s->v, &h->st)))
			return tool_fail(rc, NULL, "vecfs_stats_get (%s store)", s->label);
		if ((rc = compaction_due(s->v, h->st.active, c->cfg.compact_deltas,
					 &due)))
			return rc;
		t = tool_now_ns();
		if (first || due || h->st.maintenance || stats_differ(&prev, &h->st))
			quiet_since = t;
		prev = h->st;
		first = 0;
		h->idle = t - quiet_since >= IDLE_NS;
		if (h->idle || t - t0 >= IDLE_MAX_NS)
			break;
		if (tool_interrupted())
			return tool_report_interrupt();
		tool_sleep_ns(POLL_NS);
	}
	h->wait_s = tool_seconds_since(t0);
	h->nlist = 0;
	if (h->st.active && vecfs_gen_info_get(s->v, h->st.active, &gi) == 0)
		h->nlist = gi.nlist;
	return 0;
}

/* ---------------------------------------------------------------- searches */

static void show_bad(struct churn *c, const struct ds_store *s, size_t q,
		     const vecfs_hit *hit, const char *what, double exact)
{
	if (c->bad_shown++ >= MAX_BAD_SHOWN)
		return;
	fprintf(stderr, PROG ": %s store, round %u, query %zu: key '%.*s' %s",
		s->label, c->round, q, (int)(hit->key ? hit->keylen : 0),
		hit->key ? hit->key : "", what);
	if (!isnan(exact))
		fprintf(stderr, " (reported distance %.6g, current vector's %.6g)",
			hit->distance, exact);
	fputc('\n', stderr);
}

/* Check one hit against the live set and the keys seen before it in the
 * same result (appending its key there); 1 when it counts towards recall. */
static int check_hit(struct churn *c, const struct ds_store *s, size_t q,
		     const vecfs_hit *hit, uint32_t *seen, size_t *nseen,
		     struct measure *m)
{
	const float *qv = (const float *)c->ds.query.data + q * c->dim;
	uint64_t key;
	double exact, scale;

	if (ds_key_row(hit, 10, &key) || key >= c->n || c->state[key] == KEY_NEW) {
		m->bad_other++;
		show_bad(c, s, q, hit, "was never written", NAN);
		return 0;
	}
	if (c->state[key] == KEY_DELETED) {
		m->bad_deleted++;
		show_bad(c, s, q, hit, "is deleted", NAN);
		return 0;
	}
	for (size_t i = 0; i < *nseen; i++) {
		if (seen[i] == key) {
			m->bad_other++;
			show_bad(c, s, q, hit, "is returned twice", NAN);
			return 0;
		}
	}
	seen[(*nseen)++] = (uint32_t)key;
	exact = dist_d(c->ds.metric, qv, cur_row(c, key), c->dim, &scale);
	if (!distance_matches(hit->distance, exact, scale)) {
		m->bad_stale++;
		show_bad(c, s, q, hit, "has a superseded distance", exact);
		return 0;
	}
	return dist_f(c->ds.metric, qv, c->qnorm[q], cur_row(c, key), c->norm[key],
		      c->dim) <= c->gt_kth[q];
}

/* Check every hit of query q; its recall. */
static double check_result(struct churn *c, const struct ds_store *s, size_t q,
			   const vecfs_results *r, struct measure *m)
{
	size_t cnt = r->nq ? r->count[0] : 0, found = 0, nseen = 0;
	uint32_t seen[TOP_K];

	if (cnt > TOP_K)
		cnt = TOP_K;
	for (size_t j = 0; j < cnt; j++)
		found += check_hit(c, s, q, &r->hits[0][j], seen, &nseen, m);
	m->hits += cnt;
	if (found > c->gt_k)
		found = c->gt_k;
	return (double)found / (double)c->gt_k;
}

/* The explain counters a measure keeps: as the JSON output names them
 * (KEY_per_query), and where. */
static const struct {
	const char *key;
	size_t off;
} explain[] = {
	{ "clusters_probed", offsetof(struct measure, probed) },
	{ "pass1_scored", offsetof(struct measure, pass1) },
	{ "pass2_scored", offsetof(struct measure, pass2) },
	{ "delta_scanned", offsetof(struct measure, deltas) },
	{ "stale_skipped", offsetof(struct measure, stale) },
	{ "reranked", offsetof(struct measure, reranked) },
	{ "uncovered_scanned", offsetof(struct measure, uncovered) },
};
#define N_EXPLAIN (sizeof explain / sizeof explain[0])
#define EXPLAIN_AT(m, i) ((double *)((char *)(m) + explain[i].off))

/* Explain counters, summed here, divided by the queries at the end. */
static void add_explain(struct measure *m, const vecfs_explain *e)
{
	const uint64_t v[N_EXPLAIN] = { e->clusters_probed, e->pass1_scored, e->pass2_scored,
					e->delta_scanned, e->stale_skipped, e->reranked,
					e->uncovered_scanned };

	for (size_t i = 0; i < N_EXPLAIN; i++)
		*EXPLAIN_AT(m, i) += (double)v[i];
}

static void per_query(struct measure *m, size_t nq)
{
	for (size_t i = 0; i < N_EXPLAIN; i++)
		*EXPLAIN_AT(m, i) /= (double)nq;
}

/* One pass over the queries at the defaults (k TOP_K, nprobe and refine
 * from the config); latencies into lat, checked when m is set. */
static int query_pass(struct churn *c, struct ds_store *s, uint64_t *lat,
		      struct measure *m, double *recall_sum)
{
	const vecfs_query_opts qo = { .k = TOP_K };

	for (size_t q = 0; q < c->nq; q++) {
		vecfs_results *r;
		int rc;

		if ((q & 31) == 0 && tool_interrupted())
			return tool_report_interrupt();
		rc = ds_search(s, &c->ds, q, &qo, &r, lat ? &lat[q] : NULL);
		if (rc)
			return rc;
		if (m) {
			*recall_sum += check_result(c, s, q, r, m);
			add_explain(m, &r->explain);
		}
		vecfs_results_free(r);
	}
	return 0;
}

/* One untimed pass, then timed passes until TIMED_NS were spent in
 * vecfs_search (at most MAX_PASSES); the first timed pass is checked. */
static int measure_store(struct churn *c, struct ds_store *s, struct measure *m)
{
	uint64_t total = 0;
	double recall_sum = 0;
	size_t nlat;
	int rc;

	memset(m, 0, sizeof *m);
	if ((rc = query_pass(c, s, NULL, NULL, NULL)))
		return rc;
	while (m->passes < MAX_PASSES && (m->passes == 0 || total < TIMED_NS)) {
		uint64_t *lat = c->lat_ns + m->passes * c->nq;

		rc = query_pass(c, s, lat, m->passes ? NULL : m, &recall_sum);
		if (rc)
			return rc;
		for (size_t q = 0; q < c->nq; q++)
			total += lat[q];
		m->passes++;
	}
	nlat = m->passes * c->nq;
	qsort(c->lat_ns, nlat, sizeof *c->lat_ns, tool_cmp_u64);
	per_query(m, c->nq);
	m->recall = recall_sum / (double)c->nq;
	m->qps = total ? (double)nlat * 1e9 / (double)total : 0;
	m->p50_us = (double)c->lat_ns[(nlat - 1) / 2] / 1e3;
	return 0;
}

/* ---------------------------------------------------------------- churn */

/* A moved vector for key: another random base row plus Gaussian noise of
 * MOVE_NOISE times that row's RMS coordinate. */
static void move_key(struct churn *c, uint32_t key)
{
	size_t src = rng_below(&c->rng, c->n - 1);
	const float *from;
	float *to = cur_row(c, key);
	double sigma;

	if (src >= key)
		src++;
	from = base_row(c, src);
	sigma = MOVE_NOISE * norm_f(from, c->dim) / sqrt((double)c->dim);
	for (uint32_t j = 0; j < c->dim; j++)
		to[j] = from[j] + (float)(sigma * rng_gauss(&c->rng));
	c->norm[key] = norm_f(to, c->dim);
}

static void shuffle_ops(struct churn *c, size_t n)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = rng_below(&c->rng, i);
		struct op t = c->ops[i - 1];

		c->ops[i - 1] = c->ops[j];
		c->ops[j] = t;
	}
}

/* The first `m` of c->scratch: distinct random live keys. */
static void pick_live(struct churn *c, size_t m)
{
	memcpy(c->scratch, c->live, c->nlive * sizeof *c->scratch);
	for (size_t i = 0; i < m; i++) {
		size_t j = i + rng_below(&c->rng, c->nlive - i);
		uint32_t t = c->scratch[i];

		c->scratch[i] = c->scratch[j];
		c->scratch[j] = t;
	}
}

/* Rows the round adds: its share of the second half of the base. */
static size_t round_inserts(const struct churn *c, unsigned r)
{
	size_t half = c->n / 2, rest = c->n - half, R = c->opt->rounds;

	return rest * r / R - rest * (r - 1) / R;
}

/* The round's operations, shuffled, in c->ops; moved vectors are in
 * c->cur already. */
static size_t plan_round(struct churn *c, unsigned r, struct round_report *rep)
{
	size_t nd = c->nlive / CHURN_SHARE, nu = c->nlive / CHURN_SHARE;
	size_t ni = round_inserts(c, r), k = 0;

	pick_live(c, nd + nu);
	for (size_t i = 0; i < nd; i++)
		c->ops[k++] = (struct op){ c->scratch[i], OP_DELETE };
	for (size_t i = nd; i < nd + nu; i++) {
		c->ops[k++] = (struct op){ c->scratch[i], OP_UPDATE };
		move_key(c, c->scratch[i]);
	}
	for (size_t i = 0; i < ni; i++)
		c->ops[k++] = (struct op){ (uint32_t)(c->next_row + i), OP_INSERT };
	shuffle_ops(c, k);
	rep->inserted = ni;
	rep->deleted = nd;
	rep->updated = nu;
	return k;
}

/* A batch of mixed operations: its inserts and updates in one put, then
 * its deletes.  No key appears twice in a round, so the order within a
 * batch does not change the outcome. */
static int apply_batch(struct churn *c, const struct op *ops, size_t n)
{
	size_t nrows = 0;
	char key[16];
	int rc;

	for (size_t i = 0; i < n; i++)
		if (ops[i].kind != OP_DELETE) {
			c->rows[nrows] = key_row(c, nrows, ops[i].key);
			nrows++;
		}
	if (nrows && (rc = put_rows(c, &c->churned, nrows)))
		return rc;
	for (size_t i = 0; i < n; i++) {
		size_t len;

		if (ops[i].kind != OP_DELETE)
			continue;
		len = format_key(key, sizeof key, ops[i].key);
		if ((rc = vecfs_delete(c->churned.v, key, len)))
			return tool_fail(rc, NULL, "vecfs_delete %s", key);
	}
	return 0;
}

static void apply_to_model(struct churn *c, size_t nops)
{
	for (size_t i = 0; i < nops; i++) {
		if (c->ops[i].kind == OP_DELETE)
			live_remove(c, c->ops[i].key);
		else if (c->ops[i].kind == OP_INSERT)
			live_add(c, c->ops[i].key);
	}
}

static int write_round(struct churn *c, unsigned r, struct round_report *rep)
{
	size_t nops = plan_round(c, r, rep);
	uint64_t t0 = tool_now_ns();
	struct tool_progress p;
	char phase[32];
	int rc = 0;

	tool_progress_init(&p, c->churned.label, "operations");
	snprintf(phase, sizeof phase, "round %u", r);
	for (size_t start = 0; start < nops && rc == 0; start += CHURN_BATCH) {
		size_t cnt = nops - start < CHURN_BATCH ? nops - start : CHURN_BATCH;

		if (tool_interrupted())
			rc = tool_report_interrupt();
		else if ((rc = apply_batch(c, c->ops + start, cnt)) == 0)
			tool_progress_show(&p, phase, start + cnt, nops);
	}
	tool_progress_end(&p);
	if (rc)
		return rc;
	rep->write_s = tool_seconds_since(t0);
	apply_to_model(c, nops);
	c->next_row += rep->inserted;
	return 0;
}

/* ---------------------------------------------------------------- output */

static double mb(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static void json_u64(const char *key, uint64_t x)
{
	printf(",\"%s\":%llu", key, (unsigned long long)x);
}

static void print_header(const struct churn *c, const struct ds_store *s)
{
	const vecfs_config *g = &c->cfg;

	printf("dataset  %s (%s)\n", c->ds.name, c->opt->ds.dir);
	printf("vectors  N %zu, dim %u, metric %s (%s), queries %zu, k %d\n",
	       c->n, c->dim, vecfs_metric_name(c->ds.metric), c->ds.metric_from, c->nq,
	       TOP_K);
	printf("churn    %u rounds, seed %llu: each writes its share of the last "
	       "%zu rows, deletes\n         1/%d of the live keys and moves 1/%d, "
	       "in mixed batches of %d\n", c->opt->rounds,
	       (unsigned long long)c->opt->seed, c->n - c->n / 2, CHURN_SHARE,
	       CHURN_SHARE, CHURN_BATCH);
	printf("config   nprobe %u, refine %u, bits %u, compact_deltas %u, "
	       "keep_generations %u,\n         rebalance_ratio %u, auto_build 0\n",
	       g->nprobe, g->refine, g->bits, g->compact_deltas,
	       g->keep_generations, g->rebalance_ratio);
	printf("kernel   %s\n", vecfs_kernel_name());
	printf("start    %zu rows loaded in %.2f s, built in %.2f s (generation %llu)\n",
	       c->n / 2, s->load_s, s->build_s, (unsigned long long)s->gen);
	printf("\n%5s %7s %9s %8s %7s %7s %9s %7s %7s %9s %4s %5s %8s %7s %6s %4s "
	       "%8s %8s\n", "round", "live", "recall@10", "QPS", "p50_us", "deltas",
	       "unindexed", "compact", "rebal", "imbalance", "gens", "nlist",
	       "store_MB", "write_s", "wait_s", "bad", "delta/q", "stale/q");
	fflush(stdout);
}

static void print_round(const struct round_report *rp)
{
	const vecfs_stats *st = &rp->h.st;
	const struct measure *m = &rp->m;

	printf("%5u %7llu %9.4f %8.1f %7.1f %7llu %9llu %7llu %7llu %9.2f %4llu "
	       "%5u %8.1f %7.2f %5.1f%s %4llu %8.0f %8.0f\n", rp->round,
	       (unsigned long long)st->records, m->recall, m->qps, m->p50_us,
	       (unsigned long long)st->delta_postings,
	       (unsigned long long)st->unindexed,
	       (unsigned long long)st->compactions,
	       (unsigned long long)st->rebalances, st->cluster_imbalance,
	       (unsigned long long)st->generations, rp->h.nlist,
	       mb(st->store_bytes), rp->write_s, rp->h.wait_s, rp->h.idle ? " " : "!",
	       (unsigned long long)(m->bad_deleted + m->bad_stale + m->bad_other),
	       m->deltas, m->stale);
	fflush(stdout);
}

static void json_measure(const struct measure *m)
{
	tool_json_num("recall_at_10", m->recall, 4);
	tool_json_num("qps", m->qps, 1);
	tool_json_num("p50_us", m->p50_us, 1);
	json_u64("hits", m->hits);
	json_u64("bad_deleted", m->bad_deleted);
	json_u64("bad_superseded", m->bad_stale);
	json_u64("bad_other", m->bad_other);
	for (size_t i = 0; i < N_EXPLAIN; i++) {
		char key[64];

		snprintf(key, sizeof key, "%s_per_query", explain[i].key);
		tool_json_num(key, *(const double *)((const char *)m + explain[i].off), 1);
	}
}

static void json_round(const struct churn *c, const struct round_report *rp)
{
	const vecfs_stats *st = &rp->h.st;

	printf("{\"mode\":\"round\",\"dataset\":");
	tool_json_string(c->ds.name);
	printf(",\"metric\":\"%s\",\"round\":%u", vecfs_metric_name(c->ds.metric),
	       rp->round);
	json_u64("live", st->records);
	json_u64("inserted", rp->inserted);
	json_u64("deleted", rp->deleted);
	json_u64("updated", rp->updated);
	json_measure(&rp->m);
	json_u64("delta_postings", st->delta_postings);
	json_u64("unindexed", st->unindexed);
	json_u64("compactions", st->compactions);
	json_u64("rebalances", st->rebalances);
	tool_json_num("cluster_imbalance", st->cluster_imbalance, 3);
	json_u64("generations", st->generations);
	json_u64("active", st->active);
	printf(",\"nlist\":%u", rp->h.nlist);
	json_u64("store_bytes", st->store_bytes);
	tool_json_num("write_s", rp->write_s, 3);
	tool_json_num("maintenance_wait_s", rp->h.wait_s, 3);
	printf(",\"maintenance_idle\":%s}\n", rp->h.idle ? "true" : "false");
	fflush(stdout);
}

static void report_round(const struct churn *c, const struct round_report *rp)
{
	if (c->opt->ds.json)
		json_round(c, rp);
	else
		print_round(rp);
}

/* ---------------------------------------------------------------- verdict */

struct final {
	struct health h;            /* fresh store after its build */
	struct measure m;           /* fresh store, best QPS of COMPARE_RUNS */
	struct measure cm;          /* churned store, the same */
	uint64_t churned_bytes, fresh_bytes;
	uint64_t churned_copy, fresh_copy; /* compacted copies */
	double min_recall;
	uint64_t hits, bad;         /* hits checked, bad ones, in every search */
	uint64_t bad_deleted, bad_stale, bad_other;
	double qps_ratio;           /* fresh QPS / churned QPS */
	double size_ratio;          /* churned / fresh store_bytes */
	char verify[256];
	int verify_rc;
	uint64_t churned_records;
	int pass_recall, pass_keys, pass_qps, pass_size, pass_store;
	vecfs_gen_info gens[MAX_GENS];
	size_t ngens, gens_total;
};

static int list_generations(struct ds_store *s, struct final *f)
{
	uint64_t ids[MAX_GENS];
	int rc = vecfs_gen_list(s->v, ids, MAX_GENS, &f->gens_total);

	if (rc)
		return tool_fail(rc, NULL, "vecfs_gen_list (%s store)", s->label);
	f->ngens = f->gens_total < MAX_GENS ? f->gens_total : MAX_GENS;
	for (size_t i = 0; i < f->ngens; i++)
		if ((rc = vecfs_gen_info_get(s->v, ids[i], &f->gens[i])))
			return tool_fail(rc, NULL, "vecfs_gen_info_get %llu",
				    (unsigned long long)ids[i]);
	return 0;
}

static void add_bad(struct final *f, const struct measure *m)
{
	f->hits += m->hits;
	f->bad_deleted += m->bad_deleted;
	f->bad_stale += m->bad_stale;
	f->bad_other += m->bad_other;
}

static void judge(const struct churn *c, struct final *f)
{
	const struct round_report *last = &c->reports[c->opt->rounds];

	f->min_recall = 1;
	for (unsigned r = 0; r <= c->opt->rounds; r++) {
		const struct measure *m = &c->reports[r].m;

		if (m->recall < f->min_recall)
			f->min_recall = m->recall;
		add_bad(f, m);
	}
	f->bad = f->bad_deleted + f->bad_stale + f->bad_other;
	f->churned_bytes = last->h.st.store_bytes;
	f->fresh_bytes = f->h.st.store_bytes;
	f->qps_ratio = f->cm.qps > 0 ? f->m.qps / f->cm.qps : INFINITY;
	f->size_ratio = f->fresh_bytes ? (double)f->churned_bytes / f->fresh_bytes
				       : INFINITY;
	f->pass_recall = f->min_recall >= MIN_RECALL;
	f->pass_keys = f->bad == 0;
	f->pass_qps = f->qps_ratio <= MAX_QPS_RATIO;
	f->pass_size = f->size_ratio <= MAX_SIZE_RATIO;
	f->pass_store = f->verify_rc == 0 && f->churned_records == c->nlive;
}

static int all_pass(const struct final *f)
{
	return f->pass_recall && f->pass_keys && f->pass_qps && f->pass_size &&
	       f->pass_store;
}

static const char *gen_state_name(vecfs_gen_state s)
{
	return s == VECFS_GEN_READY ? "ready" :
	       s == VECFS_GEN_BUILDING ? "building" : "failed";
}

static void print_final(const struct churn *c, const struct final *f)
{
	const struct round_report *last = &c->reports[c->opt->rounds];
	const struct ds_store *s = &c->fresh;

	printf("\nfresh    %zu rows loaded in %.2f s, built in %.2f s (generation "
	       "%llu, nlist %u)\n", c->nlive, s->load_s, s->build_s,
	       (unsigned long long)s->gen, f->h.nlist);
	printf("         recall@10 %.4f, QPS %.1f, p50 %.1f us, store %.1f MB\n",
	       f->m.recall, f->m.qps, f->m.p50_us, mb(f->fresh_bytes));
	printf("churned  recall@10 %.4f, QPS %.1f, p50 %.1f us, store %.1f MB "
	       "(generation %llu, nlist %u)\n", f->cm.recall, f->cm.qps,
	       f->cm.p50_us, mb(f->churned_bytes),
	       (unsigned long long)last->h.st.active, last->h.nlist);
	printf("         QPS: best of %d measurements of each store, alternating\n",
	       COMPARE_RUNS);
	printf("ratios   QPS churned/fresh %.3f (fresh/churned %.3f), "
	       "store churned/fresh %.3f\n", f->qps_ratio > 0 ? 1 / f->qps_ratio : 0,
	       f->qps_ratio, f->size_ratio);
	printf("explain  per query, churned / fresh: probed %.0f / %.0f, pass1 "
	       "%.0f / %.0f, pass2 %.0f / %.0f,\n         deltas %.0f / %.0f, stale "
	       "%.0f / %.0f, reranked %.0f / %.0f\n", f->cm.probed, f->m.probed,
	       f->cm.pass1, f->m.pass1, f->cm.pass2, f->m.pass2, f->cm.deltas,
	       f->m.deltas, f->cm.stale, f->m.stale, f->cm.reranked, f->m.reranked);
	printf("copies   compacted (vecfs_backup): churned %.1f MB, fresh %.1f MB\n",
	       mb(f->churned_copy), mb(f->fresh_copy));
	printf("gens     churned store, %zu:", f->gens_total);
	for (size_t i = 0; i < f->ngens; i++) {
		const vecfs_gen_info *g = &f->gens[i];

		printf("%s %llu %s%s (covers %llu, nlist %u, parent %llu)",
		       i ? "," : "", (unsigned long long)g->id,
		       gen_state_name(g->state),
		       g->id == last->h.st.active ? " active" : "",
		       (unsigned long long)g->covered, g->nlist,
		       (unsigned long long)g->parent);
	}
	printf("\nverify   %s\n", f->verify);
	printf("\n%s  recall@10 >= %.2f after every round (lowest %.4f)\n",
	       f->pass_recall ? "PASS" : "FAIL", MIN_RECALL, f->min_recall);
	printf("%s  no deleted or superseded key returned (%llu of %llu hits: "
	       "deleted %llu, superseded %llu, other %llu)\n",
	       f->pass_keys ? "PASS" : "FAIL", (unsigned long long)f->bad,
	       (unsigned long long)f->hits, (unsigned long long)f->bad_deleted,
	       (unsigned long long)f->bad_stale, (unsigned long long)f->bad_other);
	printf("%s  QPS within %.1fx of a fresh build (fresh/churned %.3f)\n",
	       f->pass_qps ? "PASS" : "FAIL", MAX_QPS_RATIO, f->qps_ratio);
	printf("%s  store within %.1fx of a fresh build (churned/fresh %.3f)\n",
	       f->pass_size ? "PASS" : "FAIL", MAX_SIZE_RATIO, f->size_ratio);
	printf("%s  churned store verifies and holds the %zu live records (%llu)\n",
	       f->pass_store ? "PASS" : "FAIL", c->nlive,
	       (unsigned long long)f->churned_records);
	printf("\nresult   %s\n", all_pass(f) ? "PASS" : "FAIL");
	fflush(stdout);
}

static void json_final(const struct churn *c, const struct final *f)
{
	const struct round_report *last = &c->reports[c->opt->rounds];

	printf("{\"mode\":\"final\",\"dataset\":");
	tool_json_string(c->ds.name);
	printf(",\"metric\":\"%s\",\"n\":%zu,\"dim\":%u,\"queries\":%zu,\"rounds\":%u",
	       vecfs_metric_name(c->ds.metric), c->n, c->dim, c->nq, c->opt->rounds);
	json_u64("seed", c->opt->seed);
	json_u64("live", c->nlive);
	tool_json_num("churned_recall_at_10", f->cm.recall, 4);
	tool_json_num("churned_qps", f->cm.qps, 1);
	tool_json_num("churned_p50_us", f->cm.p50_us, 1);
	json_u64("churned_store_bytes", f->churned_bytes);
	json_u64("churned_compacted_bytes", f->churned_copy);
	tool_json_num("fresh_recall_at_10", f->m.recall, 4);
	tool_json_num("fresh_qps", f->m.qps, 1);
	tool_json_num("fresh_p50_us", f->m.p50_us, 1);
	json_u64("fresh_store_bytes", f->fresh_bytes);
	json_u64("fresh_compacted_bytes", f->fresh_copy);
	printf(",\"fresh_nlist\":%u,\"churned_nlist\":%u", f->h.nlist, last->h.nlist);
	tool_json_num("fresh_build_s", c->fresh.build_s, 3);
	printf(",\"compare_runs\":%d", COMPARE_RUNS);
	json_u64("churned_delta_postings", last->h.st.delta_postings);
	tool_json_num("churned_delta_scanned_per_query", f->cm.deltas, 1);
	tool_json_num("churned_stale_skipped_per_query", f->cm.stale, 1);
	tool_json_num("churned_pass2_scored_per_query", f->cm.pass2, 1);
	tool_json_num("fresh_pass2_scored_per_query", f->m.pass2, 1);
	tool_json_num("qps_ratio", f->qps_ratio > 0 ? 1 / f->qps_ratio : 0, 4);
	tool_json_num("fresh_over_churned_qps", f->qps_ratio, 4);
	tool_json_num("store_ratio", f->size_ratio, 4);
	tool_json_num("min_recall_at_10", f->min_recall, 4);
	json_u64("hits", f->hits);
	json_u64("bad_hits", f->bad);
	json_u64("bad_deleted", f->bad_deleted);
	json_u64("bad_superseded", f->bad_stale);
	json_u64("bad_other", f->bad_other);
	printf(",\"verify\":");
	tool_json_string(f->verify);
	printf(",\"generations\":[");
	for (size_t i = 0; i < f->ngens; i++) {
		const vecfs_gen_info *g = &f->gens[i];

		printf("%s{\"id\":%llu,\"state\":\"%s\",\"active\":%s,\"covered\":%llu,"
		       "\"nlist\":%u,\"parent\":%llu}", i ? "," : "",
		       (unsigned long long)g->id, gen_state_name(g->state),
		       g->id == last->h.st.active ? "true" : "false",
		       (unsigned long long)g->covered, g->nlist,
		       (unsigned long long)g->parent);
	}
	printf("],\"pass_recall\":%s,\"pass_keys\":%s,\"pass_qps\":%s,"
	       "\"pass_store_size\":%s,\"pass_store_consistent\":%s,\"pass\":%s}\n",
	       f->pass_recall ? "true" : "false", f->pass_keys ? "true" : "false",
	       f->pass_qps ? "true" : "false", f->pass_size ? "true" : "false",
	       f->pass_store ? "true" : "false", all_pass(f) ? "true" : "false");
	fflush(stdout);
}

/* ---------------------------------------------------------------- the run */

/* Wait for maintenance, then search and check. */
static int observe(struct churn *c, struct ds_store *s, struct health *h,
		   struct measure *m)
{
	int rc;

	if ((rc = wait_idle(c, s, h)))
		return rc;
	return measure_store(c, s, m);
}

static int start_churned(struct churn *c)
{
	struct ds_store *s = &c->churned;
	int rc;

	if ((rc = open_store(c, s, c->opt->ds.store, &c->cfg)))
		return rc;
	for (size_t i = 0; i < c->n / 2; i++)
		live_add(c, (uint32_t)i);
	c->next_row = c->n / 2;
	if ((rc = load_keys(c, s, c->live, c->nlive)) || (rc = build_store(s)))
		return rc;
	if (!c->opt->ds.json)
		print_header(c, s);
	return 0;
}

static int run_rounds(struct churn *c)
{
	struct ds_store *s = &c->churned;
	int rc;

	for (unsigned r = 0; r <= c->opt->rounds; r++) {
		struct round_report *rp = &c->reports[r];

		c->round = rp->round = r;
		if (r > 0 && (rc = write_round(c, r, rp)))
			return rc;
		if ((rc = compute_gt(c)) || (rc = observe(c, s, &rp->h, &rp->m)))
			return rc;
		report_round(c, rp);
	}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* The live set, in key order, into a new store; then search it. */
static int run_fresh(struct churn *c, struct final *f)
{
	struct ds_store *s = &c->fresh;
	vecfs_config cfg;
	int rc;

	memcpy(c->scratch, c->live, c->nlive * sizeof *c->scratch);
	qsort(c->scratch, c->nlive, sizeof *c->scratch, cmp_u32);
	if ((rc = open_store(c, s, NULL, &cfg)) ||
	    (rc = load_keys(c, s, c->scratch, c->nlive)) || (rc = build_store(s)))
		return rc;
	return wait_idle(c, s, &f->h);
}

/* Measure the churned and the fresh store in turn, COMPARE_RUNS times,
 * keeping each one's best QPS: interference from elsewhere on the machine
 * only ever slows a measurement down, and it hits both alike. */
static int compare_stores(struct churn *c, struct final *f)
{
	struct measure m;
	int rc;

	for (unsigned i = 0; i < COMPARE_RUNS; i++) {
		if ((rc = measure_store(c, &c->churned, &m)))
			return rc;
		add_bad(f, &m);
		if (i == 0 || m.qps > f->cm.qps)
			f->cm = m;
		if ((rc = measure_store(c, &c->fresh, &m)))
			return rc;
		add_bad(f, &m);
		if (i == 0 || m.qps > f->m.qps)
			f->m = m;
	}
	return 0;
}

static int finish(struct churn *c, struct final *f)
{
	vecfs_stats st;
	int rc;

	f->verify_rc = vecfs_verify(c->churned.v, f->verify, sizeof f->verify);
	if ((rc = vecfs_stats_get(c->churned.v, &st)))
		return tool_fail(rc, NULL, "vecfs_stats_get");
	f->churned_records = st.records;
	if ((rc = list_generations(&c->churned, f)) ||
	    (rc = compacted_bytes(&c->churned, &f->churned_copy)) ||
	    (rc = compacted_bytes(&c->fresh, &f->fresh_copy)))
		return rc;
	judge(c, f);
	if (c->opt->ds.json)
		json_final(c, f);
	else
		print_final(c, f);
	return 0;
}

static int churn_run(struct churn *c, struct final *f)
{
	int rc;

	if ((rc = load_dataset(c)))
		return rc;
	c->rng = c->opt->seed;
	if ((rc = start_churned(c)) || (rc = run_rounds(c)))
		return rc;
	c->round = c->opt->rounds;
	if ((rc = run_fresh(c, f)) || (rc = compare_stores(c, f)))
		return rc;
	return finish(c, f);
}

static void churn_free(struct churn *c)
{
	ds_store_close(&c->churned, c->opt->ds.keep);
	ds_store_close(&c->fresh, c->opt->ds.keep);
	ds_data_free(&c->ds);
	free(c->cur);
	free(c->norm);
	free(c->state);
	free(c->live);
	free(c->pos);
	free(c->scratch);
	free(c->ops);
	free(c->qnorm);
	free(c->gt_kth);
	free(c->lat_ns);
	free(c->rows);
	free(c->keys);
	free(c->reports);
}

/* Exit status 0 when every check passes, 1 when one fails, 2 on an error. */
static int churn_main(void *opt)
{
	static struct churn c;
	static struct final f;
	int rc;

	c.opt = opt;
	c.churned.label = "churned";
	c.fresh.label = "fresh";
	rc = churn_run(&c, &f);
	churn_free(&c);
	if (rc)
		return 2;
	return all_pass(&f) ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const struct tool_main tool = { PROG, usage_text, 2, parse_args, churn_main };
	static struct options opt;

	return tool_main(argc, argv, &tool, &opt, &opt.ds.help);
}
