/*
 * vecfs-bench - recall and speed of vecfs on a dataset in TEXMEX format.
 *
 * Reads DIR/base.fvecs, DIR/query.fvecs and DIR/gt.ivecs, loads the base
 * vectors into a fresh store, builds one generation, then measures an exact
 * scan and an index search for each --nprobe value.  Every query is one
 * vecfs_search call on one thread.  Keys are assigned by the store in order
 * ("0", "1", ...), so a hit's key is the base row index, which is the id the
 * ground truth uses.
 *
 * With --mount the same figures are taken through the filesystem as well:
 * the daemon mounts a fresh store, the base goes in through ingest/, the
 * build through ctl and every query through query/b/in and out; then the
 * store is unmounted, opened with the library and measured again at the same
 * settings, so one run compares the two.
 */
#include <ctype.h>
#include <endian.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vecfs.h"
#include "dataset.h"
#include "memcap.h"
#include "toolutil.h"

#define PROG "vecfs-bench"
#define BATCH_ROWS 10000   /* rows per vecfs_put */
#define RECALL_AT 10       /* ground-truth ids a query is scored against */
#define MAX_NPROBE 64      /* values in one --nprobe list */
#define MAX_ROUNDS 20      /* --rounds */
#define MAX_PASSES 20      /* --passes */
#define MAX_FILES 10000   /* --ingest-files */
#define ERRLEN 256

static const char usage_text[] =
	"usage: " PROG " DIR [options]\n"
	"\n"
	"Benchmark vecfs on DIR/base.fvecs, DIR/query.fvecs and DIR/gt.ivecs\n"
	"(TEXMEX format).  The base vectors go into a fresh store, one generation\n"
	"is built, then an exact scan and one index search per nprobe value are\n"
	"timed, one query per call on one thread.\n"
	"\n"
	"options:\n"
	"  --metric l2|cosine|dot  distance (default: the `metric:` line of\n"
	"                          DIR/README.md, else l2)\n"
	"  --nprobe LIST           comma-separated nprobe values (default 4,8,16,32,64);\n"
	"                          0: the defaults (nprobe chosen per query to reach\n"
	"                          the config's recall_target; no option sent)\n"
	"  --served N              last, on the store opened afresh: N queries at the\n"
	"                          defaults, one a call, then the store's recall\n"
	"                          estimate (stats) is awaited (up to 10 min, until\n"
	"                          it rests on 100 samples or stops growing for 60 s)\n"
	"                          and printed next to the measured recall\n"
	"  --recall LIST           comma-separated recall targets (e.g. 0.95,0.99):\n"
	"                          after the nprobe values, a search per target with\n"
	"                          the clusters chosen per query to reach it\n"
	"  --bits B                RaBitQ bits per dimension (default: library's)\n"
	"  --refine R              re-rank candidates per result (default: library's)\n"
	"  --nlist N               clusters (default: chosen from N at build time)\n"
	"  --k K                   results per query (default 10)\n"
	"  --queries Q             use only the first Q queries (default all)\n"
	"  --exact-queries Q       time the exact scan on the first Q queries\n"
	"                          (default 200; it is the slow baseline)\n"
	"  --warmup N              untimed queries before each timed setting\n"
	"                          (default: one pass over all queries, so the\n"
	"                          figures are steady state, index in memory)\n"
	"  --reuse PATH            query a store kept by --store PATH as it is\n"
	"                          (no ingest, no build; for profiling)\n"
	"  --store PATH            create the store at PATH (must not exist) and keep it\n"
	"  --keep                  keep the temporary store and print its path\n"
	"  --json                  one JSON object per line per setting on stdout\n"
	"  --plot FILE.png         draw recall@10 against QPS (log scale) of every\n"
	"                          measured setting into FILE.png, with gnuplot\n"
	"                          (Debian: gnuplot-nox); not with --mount\n"
	"  --mount                 measure through the filesystem too: the daemon\n"
	"                          mounts a temporary store, the base is written\n"
	"                          into ingest/, the build runs through ctl and each\n"
	"                          query is one write of query/b/in and one read of\n"
	"                          query/b/out (one client); then the store is\n"
	"                          unmounted, opened with the library and measured\n"
	"                          at the same settings (no exact scan)\n"
	"  --vecfs PATH            the daemon for --mount (default: vecfs in the\n"
	"                          directory of this program)\n"
	"  --ingest-after-build    ingest the first half of the base, build, then\n"
	"                          ingest the second half into the active\n"
	"                          generation (delta postings); with --mount as a\n"
	"                          second file\n"
	"  --ingest-files F        with --mount --ingest-after-build: the second half\n"
	"                          as F files, one after the other, with the\n"
	"                          daemon's automatic compaction and rebalancing on\n"
	"                          (each file's write-to-close time: p50 and max;\n"
	"                          then the bench waits for maintenance to finish\n"
	"                          and turns it off before the queries)\n"
	"  --passes P              library alone: time all queries P times for each\n"
	"                          setting, after the warm-up, and report the fastest\n"
	"                          pass (a slow moment of the machine then falls on\n"
	"                          one pass, not on the figure).  Default 2, at most 20\n"
	"  --rounds R              with --mount: after the build, measure R times in\n"
	"                          turn through the mount (mounted again each round)\n"
	"                          and with the library, so that a machine's drift\n"
	"                          in speed falls on both; prints each round's\n"
	"                          ratios, their median and the pooled ratio (all\n"
	"                          queries of all rounds), and the round trips held\n"
	"                          descriptors and the query call add, each round's\n"
	"                          over its own GETATTR round trip, their median and\n"
	"                          pooled (*_added_rt_median, *_added_rt_pooled).\n"
	"                          Default 1, at most 20\n"
	"  --batch B               also time the same queries B to a vecfs_search\n"
	"                          call (one snapshot, searched in parts on every\n"
	"                          CPU): batch_rec, batch_QPS and xSingle, the\n"
	"                          batch QPS over one query a call; with --mount\n"
	"                          also B queries an input through the mount\n"
	"                          (one pwritev(), the close of a dup(), out\n"
	"                          read to the end), beside the library's;\n"
	"                          at the defaults also as .fvecs rows (no option\n"
	"                          line); each round keeps the fastest of 3\n"
	"                          passes of each\n"
	"  --memory-cap MB|P%      library alone: search with this process in a\n"
	"                          memory cgroup capped at MB MiB, or at P percent\n"
	"                          of the store's size (cgroup v1, root), the page\n"
	"                          cache dropped and the store opened afresh before\n"
	"                          each cold pass: cold and warm QPS (the fastest of\n"
	"                          --passes), recall and pages_read per query (the\n"
	"                          pages a search waited to read from disk), one\n"
	"                          query a call and, with --batch, B a call; no\n"
	"                          exact scan, no warm-up pass\n"
	"  --help                  show this help\n"
	"\n"
	"recall@10 is the share of the first 10 ground-truth ids found among the\n"
	"returned keys.  QPS is queries divided by the time spent in vecfs_search;\n"
	"p50_us and p99_us are per-query latencies; xExact is QPS over the exact\n"
	"scan's QPS.  The temporary store is made under $TMPDIR (or /tmp) and\n"
	"removed at exit.\n"
	"\n"
	"With --mount a query is timed from open(in) to close(out); ratio is the\n"
	"mount's QPS over the library's, added_us the mean latency the mount adds\n"
	"to a query.  Each setting is also timed with the query session's\n"
	"descriptors held open (held_*), one kernel round trip a query: in opened\n"
	"with O_DSYNC, a pwrite() of the request at offset 0 runs it, then a\n"
	"pread() of out from offset 0; held_write_us and held_read_us are the\n"
	"mean time of each.  getattr_us is the mean of an fstat() loop on in (one\n"
	"GETATTR round trip each), measured after each setting's held queries;\n"
	"held_added_rt is the latency held descriptors add to the library's over\n"
	"getattr_us.\n"
	"Then again through the query call (call_*), one system call a query:\n"
	"an ioctl() of in (VECFS_IOC_QUERY) carries the request in and the\n"
	"results out; call_getattr_us is the fstat() loop measured after it and\n"
	"call_added_rt the latency the call adds to the library's over it.\n"
	"ingest_rows_per_s is the first (or only) ingest file, into a\n"
	"store without a generation; ingest_after_build_rows_per_s the second file\n"
	"of --ingest-after-build.  The daemon's peak VmRSS and RssAnon are sampled\n"
	"every 100 ms while ingesting and while building.  Nothing runs in the\n"
	"background meanwhile: auto_build = 0 and, where the daemon has them,\n"
	"no automatic compaction or rebalance (delta postings stay, so the mount\n"
	"and the library query the same index).  The temporary directory (store/\n"
	"and mnt/) is unmounted and removed at exit, also on errors and signals.\n";

static const uint32_t default_nprobe[] = { 4, 8, 16, 32, 64 };

/* ---------------------------------------------------------------- options */

struct options {
	struct ds_opts ds;       /* DIR, --metric, --queries, --store, --keep, --json, --help */
	uint32_t nprobe[MAX_NPROBE];
	size_t n_nprobe;
	float recall[MAX_NPROBE];  /* --recall: targets, nprobe chosen per query */
	size_t n_recall;
	uint32_t bits, refine, nlist; /* 0 = library default */
	uint32_t k;
	size_t exact_queries;    /* queries timed for the exact scan */
	const char *reuse;       /* an existing store to query as it is */
	size_t warmup;           /* untimed queries before each setting */
	int have_warmup;
	int mount;               /* --mount */
	int after_build;         /* --ingest-after-build */
	const char *vecfs_bin;   /* --vecfs: the daemon; NULL = beside argv[0] */
	unsigned rounds;         /* --rounds: mount, library, mount, ... */
	unsigned passes;         /* --passes: timed passes a setting, fastest kept */
	size_t batch;            /* --batch: also time calls of this many queries */
	size_t files;            /* --ingest-files: the second half in this many */
	size_t served;           /* --served: check the store's recall estimate */
	const char *plot;        /* --plot FILE.png: recall against QPS */
	uint64_t cap_mb;         /* --memory-cap MB (0: none) */
	unsigned cap_pct;        /* --memory-cap P%: of the store's size */
	const char *argv0;
};

enum opt_id {
	OPT_NPROBE, OPT_BITS, OPT_REFINE, OPT_NLIST, OPT_K,
	OPT_EXACTQ, OPT_REUSE, OPT_WARMUP,
	OPT_MOUNT, OPT_VECFS, OPT_AFTER_BUILD, OPT_ROUNDS, OPT_BATCH, OPT_FILES, OPT_RECALL, OPT_SERVED,
	OPT_PLOT, OPT_PASSES, OPT_MEMCAP
};

/* Beside the options every data set tool takes (ds_parse_args()). */
static const struct tool_opt opt_table[] = {
	{ "--nprobe", 1, OPT_NPROBE },
	{ "--recall", 1, OPT_RECALL },    { "--served", 1, OPT_SERVED },
	{ "--plot", 1, OPT_PLOT },       { "--passes", 1, OPT_PASSES },
	{ "--bits", 1, OPT_BITS },       { "--refine", 1, OPT_REFINE },
	{ "--nlist", 1, OPT_NLIST },     { "--k", 1, OPT_K },
	{ "--exact-queries", 1, OPT_EXACTQ }, { "--reuse", 1, OPT_REUSE },
	{ "--warmup", 1, OPT_WARMUP },
	{ "--mount", 0, OPT_MOUNT },     { "--vecfs", 1, OPT_VECFS },
	{ "--ingest-after-build", 0, OPT_AFTER_BUILD }, { "--rounds", 1, OPT_ROUNDS },
	{ "--batch", 1, OPT_BATCH },     { "--ingest-files", 1, OPT_FILES },
	{ "--memory-cap", 1, OPT_MEMCAP },
};

static int parse_u32(const char *s, uint32_t min, uint32_t *out)
{
	uint64_t x;

	if (tool_parse_uint(s, min, UINT32_MAX, &x))
		return -EINVAL;
	*out = (uint32_t)x;
	return 0;
}

static int parse_nprobe_list(const char *s, struct options *o)
{
	char item[32];
	size_t n = 0;

	for (;;) {
		size_t len = strcspn(s, ",");

		if (len == 0 || len >= sizeof item || n == MAX_NPROBE)
			return -EINVAL;
		memcpy(item, s, len);
		item[len] = '\0';
		if (parse_u32(item, 0, &o->nprobe[n]))
			return -EINVAL;
		n++;
		if (s[len] == '\0')
			break;
		s += len + 1;
	}
	o->n_nprobe = n;
	return 0;
}

static int parse_recall_list(const char *s, struct options *o)
{
	size_t n = 0;

	for (;;) {
		char *end;
		double t = strtod(s, &end);

		if (end == s || !(t > 0 && t <= 1) || n == MAX_NPROBE ||
		    (*end != ',' && *end != '\0'))
			return -EINVAL;
		o->recall[n++] = (float)t;
		if (*end == '\0')
			break;
		s = end + 1;
	}
	o->n_recall = n;
	return 0;
}

/* Non-zero when the value is bad. */
static int apply_opt(void *ctx, const struct tool_opt *spec, const char *val)
{
	struct options *o = ctx;
	uint64_t q;
	int bad = 0;

	switch ((enum opt_id)spec->id) {
	case OPT_NPROBE:
		bad = parse_nprobe_list(val, o) != 0;
		break;
	case OPT_SERVED:
		bad = tool_parse_uint(val, 1, 1000000, &q) != 0;
		o->served = (size_t)q;
		break;
	case OPT_RECALL:
		bad = parse_recall_list(val, o) != 0;
		break;
	case OPT_BITS:
		bad = parse_u32(val, 1, &o->bits) != 0;
		break;
	case OPT_REFINE:
		bad = parse_u32(val, 0, &o->refine) != 0;
		break;
	case OPT_NLIST:
		bad = parse_u32(val, 0, &o->nlist) != 0;
		break;
	case OPT_K:
		bad = parse_u32(val, 1, &o->k) != 0;
		break;
	case OPT_WARMUP:
		bad = tool_parse_uint(val, 0, SIZE_MAX, &q) != 0;
		o->warmup = (size_t)q;
		o->have_warmup = 1;
		break;
	case OPT_REUSE:
		bad = *val == '\0';
		o->reuse = val;
		break;
	case OPT_EXACTQ:
		bad = tool_parse_uint(val, 1, SIZE_MAX, &q) != 0;
		o->exact_queries = (size_t)q;
		break;
	case OPT_PLOT:
		o->plot = val;
		return 0;
	case OPT_MOUNT:
		o->mount = 1;
		break;
	case OPT_VECFS:
		bad = *val == '\0';
		o->vecfs_bin = val;
		break;
	case OPT_AFTER_BUILD:
		o->after_build = 1;
		break;
	case OPT_ROUNDS:
		bad = tool_parse_uint(val, 1, MAX_ROUNDS, &q) != 0;
		o->rounds = (unsigned)q;
		break;
	case OPT_PASSES:
		bad = tool_parse_uint(val, 1, MAX_PASSES, &q) != 0;
		o->passes = (unsigned)q;
		break;
	case OPT_BATCH:
		bad = tool_parse_uint(val, 1, 1u << 20, &q) != 0;
		o->batch = (size_t)q;
		break;
	case OPT_FILES:
		bad = tool_parse_uint(val, 1, MAX_FILES, &q) != 0;
		o->files = (size_t)q;
		break;
	case OPT_MEMCAP: {
		size_t n = strlen(val);
		if (n > 1 && val[n - 1] == '%') {
			char pct[16];
			bad = n > sizeof pct;
			if (!bad) {
				memcpy(pct, val, n - 1);
				pct[n - 1] = 0;
				bad = tool_parse_uint(pct, 1, 1000, &q) != 0;
				o->cap_pct = (unsigned)q;
			}
		} else {
			bad = tool_parse_uint(val, 16, 1u << 30, &q) != 0;
			o->cap_mb = q;
		}
		break;
	}
	}
	return bad;
}

/* The defaults, then the command line (see ds_parse_args). */
static int parse_args(int argc, char **argv, void *opt)
{
	struct options *o = opt;
	int rc;

	memset(o, 0, sizeof *o);
	o->argv0 = argv[0];
	o->k = 10;
	o->rounds = 1;
	memcpy(o->nprobe, default_nprobe, sizeof default_nprobe);
	o->n_nprobe = sizeof default_nprobe / sizeof default_nprobe[0];

	rc = ds_parse_args(argc, argv, opt_table, sizeof opt_table / sizeof opt_table[0], apply_opt,
			   o, &o->ds);
	if (rc)
		return rc;
	if (o->files && (!o->mount || !o->after_build))
		return tool_usage_error("%s", "--ingest-files needs --mount and "
				   "--ingest-after-build");
	if (o->mount && o->passes)
		return tool_usage_error("%s", "--passes times the library alone; with --mount "
				   "each round times one pass of each (--rounds)");
	if (!o->passes)
		o->passes = o->mount ? 1 : 2;
	if (!o->mount && (o->vecfs_bin || o->rounds > 1))
		return tool_usage_error("%s", o->vecfs_bin ? "--vecfs needs --mount"
				   : "--rounds needs --mount");
	if (o->reuse && o->after_build)
		return tool_usage_error("%s", "--reuse queries a kept store as it is; it does "
				   "not take --ingest-after-build");
	if (o->mount && (o->reuse || o->ds.store))
		return tool_usage_error("%s", "--mount makes its own store (--keep keeps it); "
				   "it does not take --reuse or --store");
	if (o->mount && (o->cap_mb || o->cap_pct))
		return tool_usage_error("%s", "--memory-cap measures the library alone; it does "
				   "not take --mount");
	if (o->mount && o->plot)
		return tool_usage_error("%s", "--plot draws the library's settings; it does not "
				   "take --mount");
	return 0;
}

/* ---------------------------------------------------------------- the run */

/* One measured setting; nprobe 0 is the exact scan. */
struct measure {
	uint32_t nprobe;
	float target;   /* recall target (nprobe chosen per query), or 0 */
	double clusters; /* clusters probed per query */
	double recall, qps, p50_us, p99_us;
	double pass1_scored, pass1_pruned, pass2_scored, reranked; /* per query */
	double write_us, read_us; /* held descriptors: mean of each step */
	double getattr_us;        /* held: one GETATTR round trip, the floor */
	double batch_qps, batch_recall;     /* --batch: calls of that many queries */
	double bin_qps, bin_recall;         /* --mount --batch: the same as .fvecs rows
					     * (NaN when not measured) */
	double pages;                       /* pages_read per query */
	/* --memory-cap: the first pass after the page cache was dropped */
	double cold_qps, cold_recall, cold_pages;
	double batch_cold_qps, batch_cold_recall, batch_cold_pages, batch_pages;
	uint64_t peak;                      /* the cgroup's peak bytes */
};

struct bench {
	const struct options *opt;
	struct ds_data ds;        /* name, metric, base and queries */
	struct ds_vecs gt;
	size_t nq;
	struct ds_store st;       /* the store, its generation, the times of
				   * its first ingest and its build */
	vecfs_config cfg;         /* as stored after setup */
	vecfs_gen_info gen;
	double ingest_rate;
	size_t ingest_n;          /* rows of the first ingest */
	double after_s, after_rate; /* --ingest-after-build: the second half */
	uint64_t code_bytes, store_bytes;
	double exact_qps;
	uint64_t *lat_ns;         /* nq latencies of the current setting */
	uint64_t *hit_ids;        /* k parsed keys of one result */
	struct {                  /* --plot: every measured setting */
		char label[16];
		double recall, qps;
	} pts[2 * MAX_NPROBE + 1];
	size_t npts;
	struct memcap cap;        /* --memory-cap: the cgroup this process is in */
	uint64_t cap_bytes;
};

/* The data set and the first nq rows of DIR/gt.ivecs. */
static int load_dataset(struct bench *b)
{
	const struct options *o = b->opt;
	char path[PATH_MAX];
	char detail[96];
	int rc;

	if ((rc = ds_load(&o->ds, &b->ds)))
		return rc;
	b->nq = b->ds.query.n;
	if ((rc = ds_join_path(path, sizeof path, o->ds.dir, "gt.ivecs")) ||
	    (rc = ds_load_vecs(path, b->nq, &b->gt)))
		return rc;
	if (b->gt.n < b->nq) {
		snprintf(detail, sizeof detail, "%zu rows for %zu queries",
			 b->gt.n, b->nq);
		return tool_fail(-EINVAL, detail, "load %s", path);
	}
	return 0;
}

/* The store: --store PATH (must not exist) or a temporary one. */
static int open_store(struct bench *b)
{
	const struct options *o = b->opt;
	vecfs_config c;
	int rc;

	if ((rc = ds_store_create(&b->st, o->ds.store, b->ds.base.dim, b->ds.metric, &c)))
		return rc;
	if (o->bits)
		c.bits = o->bits;
	if (o->refine)
		c.refine = o->refine;
	if (o->nlist)
		c.nlist = o->nlist;
	if (o->after_build) {
		/* nor compacts nor rebalances: the rows written after the build
		 * stay delta postings, as through the mount (a compaction would
		 * hold the writes back for its one transaction) */
		c.compact_deltas = UINT32_MAX;
		c.rebalance_ratio = 0;
	}
	if ((rc = ds_store_config(&b->st, &c)))
		return rc;
	b->cfg = c;
	return 0;
}

/* The store must hold exactly the base rows under keys "0".."N-1". */
static int check_ingested(struct bench *b)
{
	vecfs_stats st;
	char detail[128];
	int rc = vecfs_stats_get(b->st.v, &st);

	if (rc)
		return tool_fail(rc, NULL, "vecfs_stats_get");
	if (st.records != b->ds.base.n || st.next_key != b->ds.base.n) {
		snprintf(detail, sizeof detail,
			 "%llu records and key counter %llu after %zu rows",
			 (unsigned long long)st.records,
			 (unsigned long long)st.next_key, b->ds.base.n);
		return tool_fail(-EPROTO, detail, "ingest");
	}
	return 0;
}

/* vecfs_put of base rows [from, to), BATCH_ROWS a call; *secs: the time. */
static int ingest_rows(struct bench *b, size_t from, size_t to, double *secs)
{
	const float *base = b->ds.base.data;
	const uint32_t dim = b->ds.base.dim;
	struct tool_progress p;
	vecfs_row *rows = calloc(BATCH_ROWS, sizeof *rows);
	char err[ERRLEN] = "";
	uint64_t t0;
	int rc = 0;

	if (!rows)
		return tool_fail(-ENOMEM, NULL, "ingest");
	tool_progress_init(&p, from ? "ingest after build" : "ingest", "rows");
	t0 = tool_now_ns();
	for (size_t start = from; start < to;) {
		size_t cnt = to - start, bad = SIZE_MAX;

		if (cnt > BATCH_ROWS)
			cnt = BATCH_ROWS;
		if (tool_interrupted()) {
			tool_progress_end(&p);
			rc = tool_report_interrupt();
			break;
		}
		for (size_t j = 0; j < cnt; j++)
			rows[j] = (vecfs_row){ .vec = base + (start + j) * dim };
		rc = vecfs_put(b->st.v, rows, cnt, dim, &bad, err, sizeof err);
		if (rc) {
			tool_progress_end(&p);
			if (bad < cnt)
				tool_fail(rc, err, "vecfs_put (base row %zu)", start + bad);
			else
				tool_fail(rc, err, "vecfs_put (base rows %zu..%zu)", start,
				     start + cnt - 1);
			break;
		}
		start += cnt;
		tool_progress_show(&p, "", start - from, to - from);
	}
	*secs = (double)(tool_now_ns() - t0) / 1e9;
	tool_progress_end(&p);
	free(rows);
	return rc;
}

/* The base, or with --ingest-after-build its first half. */
static int ingest(struct bench *b)
{
	b->ingest_n = b->opt->after_build ? b->ds.base.n / 2 : b->ds.base.n;
	int rc = ingest_rows(b, 0, b->ingest_n, &b->st.load_s);
	if (rc)
		return rc;
	b->ingest_rate = b->st.load_s > 0 ? (double)b->ingest_n / b->st.load_s : 0;
	return b->opt->after_build ? 0 : check_ingested(b);
}

/* --ingest-after-build: the second half, into the active generation. */
static int ingest_after_build(struct bench *b)
{
	int rc = ingest_rows(b, b->ingest_n, b->ds.base.n, &b->after_s);
	if (rc)
		return rc;
	size_t n = b->ds.base.n - b->ingest_n;
	vecfs_stats st;
	b->after_rate = b->after_s > 0 ? (double)n / b->after_s : 0;
	if ((rc = check_ingested(b)))
		return rc;
	if ((rc = vecfs_stats_get(b->st.v, &st)))
		return tool_fail(rc, NULL, "vecfs_stats_get");
	b->store_bytes = st.store_bytes;
	return 0;
}

/* The active generation's info, and the code bytes a vector of it takes:
 * bits planes plus the sign copy the first pass reads. */
static int gen_load(struct bench *b)
{
	int rc = vecfs_gen_info_get(b->st.v, b->st.gen, &b->gen);

	if (rc)
		return tool_fail(rc, NULL, "vecfs_gen_info_get %llu",
			    (unsigned long long)b->st.gen);
	b->code_bytes = (uint64_t)(b->gen.bits + 1) * b->gen.pdim / 8;
	return 0;
}

static int build(struct bench *b)
{
	vecfs_stats st;
	int rc;

	if ((rc = ds_store_build(&b->st)))
		return rc;
	if ((rc = gen_load(b)))
		return rc;
	if (b->gen.state != VECFS_GEN_READY || vecfs_active(b->st.v) != b->st.gen)
		return tool_fail(-EPROTO, "not ready and active after the build",
			    "generation %llu", (unsigned long long)b->st.gen);
	if ((rc = vecfs_stats_get(b->st.v, &st)))
		return tool_fail(rc, NULL, "vecfs_stats_get");
	b->store_bytes = st.store_bytes;
	return 0;
}

/* Share of the first RECALL_AT ground-truth ids of query qi among the
 * cnt row ids in b->hit_ids. */
static double recall_of(const struct bench *b, size_t qi, size_t cnt)
{
	const int32_t *gt = (const int32_t *)b->gt.data + qi * b->gt.dim;
	size_t want = b->gt.dim < RECALL_AT ? b->gt.dim : RECALL_AT;
	size_t found = 0;

	for (size_t a = 0; a < want; a++) {
		if (gt[a] < 0)
			continue;
		for (size_t j = 0; j < cnt; j++) {
			if (b->hit_ids[j] == (uint64_t)gt[a]) {
				found++;
				break;
			}
		}
	}
	return (double)found / (double)want;
}

static int query_recall(struct bench *b, size_t qi, const vecfs_results *r,
			double *out)
{
	size_t cnt = r->nq ? r->count[0] : 0;

	if (cnt > b->opt->k)
		cnt = b->opt->k;
	for (size_t j = 0; j < cnt; j++)
		if (ds_key_row(&r->hits[0][j], 0, &b->hit_ids[j]))
			return tool_fail(-EPROTO, r->hits[0][j].key,
				    "query %zu: hit key is not a row index", qi);
	*out = recall_of(b, qi, cnt);
	return 0;
}

static int warm_up(struct bench *b, const vecfs_query_opts *qo)
{
	size_t want = b->opt->have_warmup ? b->opt->warmup : b->nq;
	size_t n = b->nq < want ? b->nq : want;

	for (size_t i = 0; i < n; i++) {
		vecfs_results *r;
		int rc = ds_search(&b->st, &b->ds, i, qo, &r, NULL);

		if (rc)
			return rc;
		vecfs_results_free(r);
	}
	return 0;
}

/* Nearest-rank percentile of sorted values, in microseconds. */
static double percentile_us(const uint64_t *sorted, size_t n, unsigned pct)
{
	size_t rank = (pct * n + 99) / 100;

	return (double)sorted[rank ? rank - 1 : 0] / 1e3;
}

static void add_explain(vecfs_explain *sum, const vecfs_explain *e)
{
	sum->pass1_scored += e->pass1_scored;
	sum->pass1_pruned += e->pass1_pruned;
	sum->pass2_scored += e->pass2_scored;
	sum->reranked += e->reranked;
	sum->clusters_probed += e->clusters_probed;
	sum->pages_read += e->pages_read;
}

/* One timed pass over the queries into lat (their times), *total_ns, the
 * summed recall and counters. */
static int time_pass(struct bench *b, const vecfs_query_opts *qo, uint64_t *lat,
		     uint64_t *total_ns, double *recall_sum, vecfs_explain *sum)
{
	*total_ns = 0;
	*recall_sum = 0;
	*sum = (vecfs_explain){ 0 };
	for (size_t i = 0; i < b->nq; i++) {
		vecfs_results *r;
		double recall = 0;
		int rc;

		if ((i & 63) == 0 && tool_interrupted())
			return tool_report_interrupt();
		rc = ds_search(&b->st, &b->ds, i, qo, &r, &lat[i]);
		if (rc)
			return rc;
		*total_ns += lat[i];
		rc = query_recall(b, i, r, &recall);
		add_explain(sum, &r->explain);
		vecfs_results_free(r);
		if (rc)
			return rc;
		*recall_sum += recall;
	}
	return 0;
}

/* Warm up, then time every query opt->passes times with these options and
 * keep the fastest pass (latencies, recall and counters all of that pass). */
static int measure_setting(struct bench *b, const vecfs_query_opts *qo,
			   struct measure *m)
{
	vecfs_explain sum = { 0 };
	uint64_t total_ns = 0;
	double recall_sum = 0;
	uint64_t *lat = NULL;
	int rc;

	if ((rc = warm_up(b, qo)))
		return rc;
	if (b->opt->passes > 1 && !(lat = malloc(b->nq * sizeof *lat)))
		return tool_fail(-ENOMEM, NULL, "measure");
	for (unsigned p = 0; p < b->opt->passes; p++) {
		vecfs_explain ps;
		uint64_t pt;
		double pr;

		rc = time_pass(b, qo, p ? lat : b->lat_ns, &pt, &pr, &ps);
		if (rc) {
			free(lat);
			return rc;
		}
		if (!p || pt < total_ns) { /* the fastest so far */
			if (p)
				memcpy(b->lat_ns, lat, b->nq * sizeof *lat);
			total_ns = pt;
			recall_sum = pr;
			sum = ps;
		}
	}
	free(lat);
	qsort(b->lat_ns, b->nq, sizeof *b->lat_ns, tool_cmp_u64);
	m->nprobe = qo->exact ? 0 : qo->nprobe;
	m->target = qo->exact ? 0 : qo->recall;
	vecfs_config cfg;
	if (!qo->exact && !qo->nprobe && !qo->recall && vecfs_config_get(b->st.v, &cfg) == 0)
		m->target = cfg.recall_target; /* the defaults */
	m->clusters = (double)sum.clusters_probed / (double)b->nq;
	m->recall = recall_sum / (double)b->nq;
	m->qps = total_ns ? (double)b->nq * 1e9 / (double)total_ns : 0;
	m->p50_us = percentile_us(b->lat_ns, b->nq, 50);
	m->p99_us = percentile_us(b->lat_ns, b->nq, 99);
	m->pass1_scored = (double)sum.pass1_scored / (double)b->nq;
	m->pass1_pruned = (double)sum.pass1_pruned / (double)b->nq;
	m->pass2_scored = (double)sum.pass2_scored / (double)b->nq;
	m->reranked = (double)sum.reranked / (double)b->nq;
	m->pages = (double)sum.pages_read / (double)b->nq;
	return 0;
}

/* --batch: the same queries again, opt->batch to a vecfs_search call (a
 * last shorter call takes the rest).  Every result must be the one the
 * query gets alone (m->recall); the QPS is queries over the time in
 * vecfs_search. */
static int batch_pass(struct bench *b, const vecfs_query_opts *qo, double *qps,
		      double *rec, double *pages)
{
	size_t per = b->opt->batch, dim = b->ds.query.dim;
	uint64_t total_ns = 0, pages_read = 0;
	double recall_sum = 0;

	for (size_t from = 0; from < b->nq; from += per) {
		size_t n = b->nq - from < per ? b->nq - from : per;
		const float *q = (const float *)b->ds.query.data + from * dim;
		char err[ERRLEN] = "";
		vecfs_results *r;

		if (tool_interrupted())
			return tool_report_interrupt();
		uint64_t t0 = tool_now_ns();
		int rc = vecfs_search(b->st.v, q, n, b->ds.query.dim, qo, &r, err, sizeof err);
		total_ns += tool_now_ns() - t0;
		if (rc)
			return tool_fail(rc, err, "vecfs_search (queries %zu to %zu)", from,
					 from + n - 1);
		if (r->nq != n) {
			vecfs_results_free(r);
			return tool_fail(-EPROTO, NULL, "a batch of %zu queries got %zu results", n,
					 r->nq);
		}
		pages_read += r->explain.pages_read;
		for (size_t i = 0; i < n && rc == 0; i++) {
			vecfs_results one = *r;
			double recall = 0;
			one.nq = 1;
			one.hits = r->hits + i;
			one.count = r->count + i;
			rc = query_recall(b, from + i, &one, &recall);
			recall_sum += recall;
		}
		vecfs_results_free(r);
		if (rc)
			return rc;
	}
	*rec = recall_sum / (double)b->nq;
	*qps = total_ns ? (double)b->nq * 1e9 / (double)total_ns : 0;
	*pages = (double)pages_read / (double)b->nq;
	return 0;
}

static int measure_batch(struct bench *b, const vecfs_query_opts *qo, struct measure *m)
{
	return batch_pass(b, qo, &m->batch_qps, &m->batch_recall, &m->batch_pages);
}

/* With --mount, each round times the batches this many times each way
 * (through the mount, the library) and keeps the fastest pass: one pass of
 * sift-128's 1,000 queries lasts a hundredth of a second, and a slow moment
 * of the machine moved a single pass's ratio by a quarter. */
#define MNT_BATCH_PASSES 3

/* The library's batches: the fastest of `passes` passes, with that pass's
 * recall and pages read. */
static int measure_batch_fastest(struct bench *b, const vecfs_query_opts *qo, unsigned passes,
				 struct measure *m)
{
	struct measure t = *m;
	int rc;

	for (unsigned p = 0; p < passes; p++) {
		if ((rc = measure_batch(b, qo, &t)))
			return rc;
		if (p == 0 || t.batch_qps > m->batch_qps) {
			m->batch_qps = t.batch_qps;
			m->batch_recall = t.batch_recall;
			m->batch_pages = t.batch_pages;
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- output */

static void print_header(const struct bench *b)
{
	const struct options *o = b->opt;

	printf("dataset  %s (%s)\n", b->ds.name, o->ds.dir);
	printf("vectors  N %zu, dim %u, metric %s (%s), queries %zu, k %u\n",
	       b->ds.base.n, b->ds.base.dim, vecfs_metric_name(b->ds.metric),
	       b->ds.metric_from, b->nq, o->k);
	printf("timing   each setting: a warm-up pass, then the fastest of %u timed "
	       "pass%s over the queries\n", o->passes, o->passes == 1 ? "" : "es");
	printf("index    generation %llu: nlist %u, bits %u, refine %u, "
	       "covers %llu, code %llu bytes/vector\n",
	       (unsigned long long)b->st.gen, b->gen.nlist, b->gen.bits,
	       o->refine ? o->refine : b->cfg.refine,
	       (unsigned long long)b->gen.covered,
	       (unsigned long long)b->code_bytes);
	printf("kernel   %s\n", vecfs_kernel_name());
	printf("ingest   %.0f rows/s (%zu rows in %.2f s)\n", b->ingest_rate,
	       b->ingest_n, b->st.load_s);
	printf("build    %.2f s\n", b->st.build_s);
	if (b->after_rate > 0)
		printf("ingest   %.0f rows/s after the build (%zu rows in %.2f s, into "
		       "generation %llu: delta postings; no compaction, no rebalance)\n",
		       b->after_rate, b->ds.base.n - b->ingest_n, b->after_s,
		       (unsigned long long)b->st.gen);
	printf("store    %.1f MB\n", (double)b->store_bytes / (1024.0 * 1024.0));
	printf("\n%6s %9s %10s %9s %9s %8s %13s %13s %13s %10s %9s\n", "nprobe",
	       "recall@10", "QPS", "p50_us", "p99_us", "xExact", "pass1_scored",
	       "pass1_pruned", "pass2_scored", "reranked", "clusters");
	fflush(stdout);
}

/* A setting's name: its nprobe, rTARGET, or exact. */
static void setting_label(const struct measure *m, char *np, size_t cap)
{
	if (m->target > 0)
		snprintf(np, cap, "r%g", m->target);
	else if (m->nprobe)
		snprintf(np, cap, "%u", m->nprobe);
	else
		snprintf(np, cap, "exact");
}

static void print_row(const struct bench *b, const struct measure *m)
{
	char np[16];

	setting_label(m, np, sizeof np);
	printf("%6s %9.4f %10.1f %9.1f %9.1f %8.2f %13.1f %13.1f %13.1f %10.1f %9.1f\n",
	       np, m->recall, m->qps, m->p50_us, m->p99_us,
	       b->exact_qps > 0 ? m->qps / b->exact_qps : 0, m->pass1_scored,
	       m->pass1_pruned, m->pass2_scored, m->reranked, m->clusters);
	if (b->opt->batch && m->nprobe)
		printf("%6s %9.4f %10.1f %9.2f\n", "", m->batch_recall, m->batch_qps,
		       m->qps > 0 ? m->batch_qps / m->qps : 0);
	fflush(stdout);
}

static void json_row(const struct bench *b, const struct measure *m)
{
	printf("{\"mode\":\"%s\",\"dataset\":",
	       m->target > 0 ? "recall" : m->nprobe ? "ivf" : "exact");
	tool_json_string(b->ds.name);
	printf(",\"nprobe\":%u", m->nprobe);
	if (m->target > 0)
		tool_json_num("recall_target", m->target, 4);
	tool_json_num("clusters_probed", m->clusters, 2);
	tool_json_num("recall_at_10", m->recall, 4);
	tool_json_num("qps", m->qps, 1);
	tool_json_num("p50_us", m->p50_us, 1);
	tool_json_num("p99_us", m->p99_us, 1);
	tool_json_num("build_s", b->st.build_s, 3);
	printf(",\"code_bytes_per_vector\":%llu", (unsigned long long)b->code_bytes);
	tool_json_num("exact_qps", b->exact_qps, 1);
	printf(",\"n\":%zu,\"dim\":%u,\"metric\":\"%s\",\"queries\":%zu,\"k\":%u",
	       b->ds.base.n, b->ds.base.dim, vecfs_metric_name(b->ds.metric), b->nq,
	       b->opt->k);
	printf(",\"passes\":%u", b->opt->passes);
	printf(",\"nlist\":%u,\"bits\":%u,\"refine\":%u,\"kernel\":",
	       b->gen.nlist, b->gen.bits,
	       b->opt->refine ? b->opt->refine : b->cfg.refine);
	tool_json_string(vecfs_kernel_name());
	tool_json_num("ingest_rows_per_s", b->ingest_rate, 0);
	if (b->after_rate > 0)
		tool_json_num("ingest_after_build_rows_per_s", b->after_rate, 0);
	printf(",\"store_bytes\":%llu", (unsigned long long)b->store_bytes);
	tool_json_num("pass1_scored", m->pass1_scored, 1);
	tool_json_num("pass1_pruned", m->pass1_pruned, 1);
	tool_json_num("pass2_scored", m->pass2_scored, 1);
	tool_json_num("reranked", m->reranked, 1);
	if (b->opt->batch && m->nprobe) {
		printf(",\"batch\":%zu", b->opt->batch);
		tool_json_num("batch_recall_at_10", m->batch_recall, 4);
		tool_json_num("batch_qps", m->batch_qps, 1);
	}
	printf("}\n");
	fflush(stdout);
}

static void report(struct bench *b, const struct measure *m)
{
	if (b->npts < sizeof b->pts / sizeof b->pts[0]) {
		setting_label(m, b->pts[b->npts].label, sizeof b->pts[b->npts].label);
		b->pts[b->npts].recall = m->recall;
		b->pts[b->npts].qps = m->qps;
		b->npts++;
	}
	if (b->opt->ds.json)
		json_row(b, m);
	else
		print_row(b, m);
}

/* ---------------------------------------------------------------- --memory-cap */

/* The cap in bytes (MiB, or a share of the store's size), the cgroup made
 * and this process moved into it. */
static int cap_start(struct bench *b)
{
	const struct options *o = b->opt;
	vecfs_stats st;
	int rc;
	if ((rc = vecfs_stats_get(b->st.v, &st)))
		return tool_fail(rc, NULL, "vecfs_stats_get");
	b->store_bytes = st.store_bytes;
	b->cap_bytes = o->cap_pct ? st.store_bytes / 100 * o->cap_pct : o->cap_mb << 20;
	if ((rc = memcap_make(&b->cap, PROG, b->cap_bytes)))
		return rc;
	if ((rc = memcap_enter(&b->cap, getpid())))
		return tool_fail(rc, NULL, "move into the memory cgroup %s", b->cap.dir);
	return 0;
}

/* The store closed (its pages unmapped), the page cache dropped, the store
 * opened again: what the next pass reads comes from disk. */
static int cap_cold(struct bench *b)
{
	char err[ERRLEN] = "";
	int rc;
	vecfs_close(b->st.v);
	b->st.v = NULL;
	if ((rc = memcap_drop_caches()))
		return tool_fail(rc, NULL, "drop the page cache (/proc/sys/vm/drop_caches)");
	if ((rc = vecfs_open(b->st.dir, &b->st.v, err, sizeof err)))
		return tool_fail(rc, err, "vecfs_open %s", b->st.dir);
	return 0;
}

/* One setting under the cap: a cold pass, then the fastest of
 * opt->passes warm passes; the same with --batch. */
static int cap_measure(struct bench *b, const vecfs_query_opts *qo, struct measure *m)
{
	vecfs_explain sum;
	uint64_t ns;
	double rec;
	int rc;
	if ((rc = cap_cold(b)) || (rc = time_pass(b, qo, b->lat_ns, &ns, &rec, &sum)))
		return rc;
	m->cold_qps = ns ? (double)b->nq * 1e9 / (double)ns : 0;
	m->cold_recall = rec / (double)b->nq;
	m->cold_pages = (double)sum.pages_read / (double)b->nq;
	struct options warm = *b->opt;
	const struct options *o = b->opt;
	warm.have_warmup = 1;
	warm.warmup = 0;
	b->opt = &warm;
	rc = measure_setting(b, qo, m);
	b->opt = o;
	if (rc)
		return rc;
	if (o->batch) {
		if ((rc = cap_cold(b)) ||
		    (rc = batch_pass(b, qo, &m->batch_cold_qps, &m->batch_cold_recall,
				     &m->batch_cold_pages)))
			return rc;
		if ((rc = measure_batch_fastest(b, qo, o->passes, m)))
			return rc;
	}
	m->peak = memcap_peak(&b->cap);
	return 0;
}

static void cap_header(const struct bench *b)
{
	printf("dataset  %s (%s), %zu queries, k %u\n", b->ds.name, b->opt->ds.dir, b->nq, b->opt->k);
	printf("memory   capped at %.1f MB (%.0f%% of the store's %.1f MB): cgroup %s\n",
	       (double)b->cap_bytes / 1048576.0,
	       b->store_bytes ? 100.0 * (double)b->cap_bytes / (double)b->store_bytes : 0,
	       (double)b->store_bytes / 1048576.0, b->cap.dir);
	printf("timing   the page cache dropped and the store opened again, a cold pass, "
	       "then the fastest of %u warm passes\n", b->opt->passes);
	printf("\n%6s %6s %9s %10s %10s %10s %10s %9s %8s\n", "nprobe", "calls", "recall@10",
	       "cold_QPS", "warm_QPS", "cold_pages", "warm_pages", "reranked", "peak_MB");
	fflush(stdout);
}

static void cap_row(const struct bench *b, const struct measure *m)
{
	char np[16];
	setting_label(m, np, sizeof np);
	printf("%6s %6s %9.4f %10.1f %10.1f %10.2f %10.2f %9.1f %8.1f\n", np, "1",
	       m->recall, m->cold_qps, m->qps, m->cold_pages, m->pages, m->reranked,
	       (double)m->peak / 1048576.0);
	if (b->opt->batch)
		printf("%6s %6zu %9.4f %10.1f %10.1f %10.2f %10.2f\n", np, b->opt->batch,
		       m->batch_recall, m->batch_cold_qps, m->batch_qps, m->batch_cold_pages,
		       m->batch_pages);
	if (m->cold_recall != m->recall || (b->opt->batch && m->batch_cold_recall != m->batch_recall))
		printf("%6s (cold recall %.4f, batch %.4f)\n", "", m->cold_recall,
		       m->batch_cold_recall);
	fflush(stdout);
}

static void cap_json(const struct bench *b, const struct measure *m)
{
	printf("{\"mode\":\"memory_cap\",\"dataset\":");
	tool_json_string(b->ds.name);
	printf(",\"nprobe\":%u,\"cap_bytes\":%llu,\"store_bytes\":%llu", m->nprobe,
	       (unsigned long long)b->cap_bytes, (unsigned long long)b->store_bytes);
	if (m->target > 0)
		tool_json_num("recall_target", m->target, 4);
	tool_json_num("recall_at_10", m->recall, 4);
	tool_json_num("cold_recall_at_10", m->cold_recall, 4);
	tool_json_num("cold_qps", m->cold_qps, 1);
	tool_json_num("qps", m->qps, 1);
	tool_json_num("cold_pages_read", m->cold_pages, 2);
	tool_json_num("pages_read", m->pages, 2);
	tool_json_num("reranked", m->reranked, 1);
	printf(",\"passes\":%u,\"peak_bytes\":%llu", b->opt->passes,
	       (unsigned long long)m->peak);
	if (b->opt->batch) {
		printf(",\"batch\":%zu", b->opt->batch);
		tool_json_num("batch_recall_at_10", m->batch_recall, 4);
		tool_json_num("batch_cold_qps", m->batch_cold_qps, 1);
		tool_json_num("batch_qps", m->batch_qps, 1);
		tool_json_num("batch_cold_pages_read", m->batch_cold_pages, 2);
		tool_json_num("batch_pages_read", m->batch_pages, 2);
	}
	printf("}\n");
	fflush(stdout);
}

/* --memory-cap: each setting under the cap (no exact scan). */
static int cap_measure_all(struct bench *b)
{
	const struct options *o = b->opt;
	int rc;
	if ((rc = cap_start(b)))
		return rc;
	if (!o->ds.json)
		cap_header(b);
	for (size_t i = 0; i < o->n_nprobe + o->n_recall; i++) {
		vecfs_query_opts qo = { .k = o->k, .refine = o->refine };
		struct measure m = { 0 };
		if (i < o->n_nprobe)
			qo.nprobe = o->nprobe[i];
		else
			qo.recall = o->recall[i - o->n_nprobe];
		if ((rc = cap_measure(b, &qo, &m)))
			return rc;
		if (o->ds.json)
			cap_json(b, &m);
		else
			cap_row(b, &m);
	}
	return 0;
}

/* ---------------------------------------------------------------- main */

static int measure_all(struct bench *b)
{
	const struct options *o = b->opt;
	vecfs_query_opts qo = { .k = o->k, .exact = 1 };
	struct measure m;
	int rc;

	b->lat_ns = calloc(b->nq, sizeof *b->lat_ns);
	b->hit_ids = calloc(o->k, sizeof *b->hit_ids);
	if (!b->lat_ns || !b->hit_ids)
		return tool_fail(-ENOMEM, NULL, "measure");
	if (o->cap_mb || o->cap_pct)
		return cap_measure_all(b);
	if (!o->ds.json)
		print_header(b);
	if (!o->ds.json && o->batch)
		printf("%6s %9s %10s %9s   (--batch %zu: %zu queries a call)\n", "", "batch_rec",
		       "batch_QPS", "xSingle", o->batch, o->batch);
	size_t all = b->nq, ne = o->exact_queries ? o->exact_queries : 200;
	b->nq = ne < all ? ne : all;
	rc = measure_setting(b, &qo, &m);
	b->nq = all;
	if (rc)
		return rc;
	b->exact_qps = m.qps;
	report(b, &m);
	/* the nprobe values, then the recall targets */
	for (size_t i = 0; i < o->n_nprobe + o->n_recall; i++) {
		qo = (vecfs_query_opts){ .k = o->k, .refine = o->refine };
		if (i < o->n_nprobe)
			qo.nprobe = o->nprobe[i];
		else
			qo.recall = o->recall[i - o->n_nprobe];
		if ((rc = measure_setting(b, &qo, &m)))
			return rc;
		if (o->batch && (rc = measure_batch(b, &qo, &m)))
			return rc;
		report(b, &m);
	}
	return 0;
}

/* ---------------------------------------------------------------- --plot */

/* gnuplot on PATH: 0, or -ENOENT with a message. */
static int gnuplot_found(void)
{
	const char *path = getenv("PATH");
	char dir[PATH_MAX];
	for (const char *p = path ? path : ""; *p;) {
		const char *e = strchr(p, ':');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n && n + 9 < sizeof dir) {
			memcpy(dir, p, n);
			memcpy(dir + n, "/gnuplot", 9);
			if (access(dir, X_OK) == 0)
				return 0;
		}
		p += n + (e != NULL);
	}
	fprintf(stderr, PROG ": --plot needs gnuplot, which is not on PATH "
		"(Debian: apt-get install gnuplot-nox)\n");
	return -ENOENT;
}

/* s as a single-quoted gnuplot string */
static void gp_string(FILE *g, const char *s)
{
	fputc('\'', g);
	for (; *s; s++)
		if (*s == '\'')
			fputs("''", g);
		else if (*s != '\n')
			fputc(*s, g);
	fputc('\'', g);
}

/* recall@10 (x) against QPS (y, log scale) of every setting, each point
 * named, into opt->plot as a PNG. */
static int draw_plot(const struct bench *b)
{
	char title[320];
	struct sigaction ign = { .sa_handler = SIG_IGN }, old;
	FILE *g;

	sigaction(SIGPIPE, &ign, &old); /* a gnuplot that dies: an error, not a death */
	if (!(g = popen("gnuplot", "w"))) {
		sigaction(SIGPIPE, &old, NULL);
		return tool_fail(-errno, NULL, "run gnuplot");
	}
	fprintf(g, "set terminal pngcairo noenhanced size 900,600\nset output ");
	gp_string(g, b->opt->plot);
	snprintf(title, sizeof title, "%s: recall@%u against QPS", b->ds.name, b->opt->k);
	fprintf(g, "\nset title ");
	gp_string(g, title);
	fputc('\n', g);
	fprintf(g, "set xlabel 'recall@%u'\nset ylabel 'queries per second'\n"
		   "set logscale y\nset grid\nset key off\nset xrange [*:1.02]\n"
		   "$d << EOD\n", b->opt->k);
	for (size_t i = 0; i < b->npts; i++)
		fprintf(g, "%.6f %.3f %s\n", b->pts[i].recall,
			b->pts[i].qps > 0 ? b->pts[i].qps : 1e-3, b->pts[i].label);
	fprintf(g, "EOD\nplot $d using 1:2 with points pt 7, "
		   "$d using 1:2:3 with labels offset 0,1\n");
	int st = pclose(g);
	sigaction(SIGPIPE, &old, NULL);
	if (st != 0) {
		fprintf(stderr, PROG ": gnuplot failed (status %d) drawing %s\n", st,
			b->opt->plot);
		return -EIO;
	}
	return 0;
}

/* --reuse: open a kept store and use its active generation. */
static int reuse_store(struct bench *b)
{
	char err[ERRLEN] = "";
	int rc;

	snprintf(b->st.dir, sizeof b->st.dir, "%s", b->opt->reuse);
	if ((rc = vecfs_open(b->st.dir, &b->st.v, err, sizeof err)))
		return tool_fail(rc, err, "vecfs_open %s", b->st.dir);
	if ((rc = vecfs_config_get(b->st.v, &b->cfg)))
		return tool_fail(rc, NULL, "vecfs_config_get");
	b->st.gen = vecfs_active(b->st.v);
	if (!b->st.gen)
		return tool_fail(-ENOENT, "no active generation", "--reuse %s", b->st.dir);
	if ((rc = gen_load(b)))
		return rc;
	return 0;
}

/* --served: what the store's sampler says of N queries served at the
 * defaults, against their measured recall. */
static int served_estimate(struct bench *b)
{
	char err[ERRLEN] = "";
	vecfs_query_opts qo = { .k = b->opt->k };
	size_t n = b->opt->served < b->nq ? b->opt->served : b->nq;
	double sum = 0, t0 = tool_now_ns() / 1e9;
	vecfs_stats st;
	int rc;

	vecfs_close(b->st.v);
	if ((rc = vecfs_open(b->st.dir, &b->st.v, err, sizeof err)))
		return tool_fail(rc, err, "vecfs_open %s", b->st.dir);
	for (size_t i = 0; i < n; i++) {
		vecfs_results *r;
		double rec;
		if ((rc = vecfs_search(b->st.v, (const float *)b->ds.query.data + i * b->ds.query.dim, 1, b->ds.query.dim, &qo,
				       &r, err, sizeof err)))
			return tool_fail(rc, err, "vecfs_search");
		rc = query_recall(b, i, r, &rec);
		vecfs_results_free(r);
		if (rc)
			return rc;
		sum += rec;
	}
	uint64_t last = 0;
	double since = tool_now_ns() / 1e9;
	for (;;) {
		if ((rc = vecfs_stats_get(b->st.v, &st)))
			return tool_fail(rc, NULL, "vecfs_stats_get");
		double now = tool_now_ns() / 1e9;
		if (st.recall_samples != last) {
			last = st.recall_samples;
			since = now;
		}
		if (st.recall_samples >= 100 || now - since > 60 || now - t0 > 600 ||
		    tool_interrupted())
			break;
		struct timespec ts = { 0, 200 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	double truth = sum / (double)n;
	printf("served   %zu queries at the defaults: recall@%u %.4f; stats: recall_estimate "
	       "%.4f [%.4f, %.4f] over %llu samples (%.1f s after the last query), "
	       "difference %+.4f\n", n, b->opt->k, truth, st.recall_estimate, st.recall_low,
	       st.recall_high, (unsigned long long)st.recall_samples,
	       tool_now_ns() / 1e9 - t0, st.recall_estimate - truth);
	return 0;
}

static int bench_run(struct bench *b)
{
	int rc;

	if (b->opt->plot && (rc = gnuplot_found()))
		return rc;
	if ((rc = load_dataset(b)))
		return rc;
	if (b->opt->reuse)
		rc = reuse_store(b);
	else if (!(rc = open_store(b)) && !(rc = ingest(b)) && !(rc = build(b)) &&
		 b->opt->after_build)
		rc = ingest_after_build(b);
	if (!rc)
		rc = measure_all(b);
	if (!rc && b->opt->plot)
		rc = draw_plot(b);
	if (!rc && b->opt->served)
		rc = served_estimate(b);
	return rc;
}

static void bench_free(struct bench *b)
{
	memcap_remove(&b->cap, getpid());
	ds_store_close(&b->st, b->opt->ds.keep);
	ds_data_free(&b->ds);
	free(b->gt.data);
	free(b->lat_ns);
	free(b->hit_ids);
}

/* ---------------------------------------------------------------- --mount */

/*
 * The same figures through a live mount: a temporary directory holds store/
 * and mnt/, `vecfs store mnt` mounts it, and config, ingest/, ctl and
 * query/b/in|out are used as any program would use them.  Then the mount
 * goes away (always: also after an error or a signal) and the library opens
 * the same store and is measured at the same settings.
 *
 * The daemon forks away from the command that starts it; this process makes
 * itself a child subreaper first, so the daemon becomes its child and its
 * exit can be waited for.  A thread samples the daemon's memory while data
 * goes in and while it builds; if a signal arrives while the main thread is
 * blocked in a long file operation (a commit, a build), the thread asks the
 * daemon to stop (SIGTERM cancels its build), so the run can end promptly.
 */

#define MNT_WRITE ((size_t)1 << 20) /* bytes per write() into ingest/ */
#define SAMPLE_NS 100000000ull      /* memory sampling period: 100 ms */
#define STOP_AFTER_NS 1000000000ull /* a signal not acted on for 1 s */
#define DAEMON_EXIT_S 30            /* seconds to exit after the unmount */
#define SESSION "b"                 /* the query session: query/b/ */

/* sampled phases: each ingest file, the build */
enum { PH_NONE = -1, PH_INGEST = 0, PH_INGEST2 = 1, PH_BUILD = 2, PH_COUNT = 3 };

/* What a round's QPS figures are of (struct mnt's qps_of). */
enum { Q_FS, Q_HELD, Q_LIB, Q_CALL, Q_BATCH, Q_LIB_BATCH, Q_BATCH_BIN, Q_COUNT };

/* The library's figure a way of the mount is compared with. */
static int lib_way(int w)
{
	return w == Q_BATCH || w == Q_BATCH_BIN ? Q_LIB_BATCH : Q_LIB;
}

struct mnt {
	char tmp[PATH_MAX];      /* holds store/ and mnt/ */
	char store[PATH_MAX];
	char dir[PATH_MAX];      /* the mount point */
	char vecfs[PATH_MAX];    /* the daemon binary, canonical */
	char qin[PATH_MAX], qout[PATH_MAX], qstats[PATH_MAX];
	int tmp_made;
	int launched;            /* unmount and wait at the end */
	int still_mounted;       /* every unmount failed: keep tmp */
	pid_t daemon;            /* 0 = not found */
	int stopped;             /* SIGTERM sent to it after a signal */
	/* the sampling thread */
	pthread_t th;
	int th_running, sync_made;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, phase;
	uint64_t rss_kb[PH_COUNT], anon_kb[PH_COUNT]; /* peaks of each phase */
	int sampled[PH_COUNT];
	/* results */
	size_t ingest_n[2];      /* rows of each ingest file; [1] = 0: one file */
	double ingest_s[2];      /* open to close */
	double commit_s[2];      /* of which in close() */
	/* --ingest-files: the files of the second half */
	double file_p50_s, file_max_s;
	uint64_t maint_compactions, maint_rebalances; /* from the first file until idle */
	double maint_wait_s;     /* from the last file until maintenance was idle */
	size_t build_rows;
	double build_s;
	uint64_t gen_id;
	uint64_t delta_postings, unindexed;       /* the library's view */
	uint64_t fs_deltas, fs_unindexed;         /* stats before the mount's queries */
	int no_compaction, no_rebalance;          /* turned off in config */
	int have_compactions;                     /* stats has `compactions` */
	uint64_t compactions[2];                  /* before and after them */
	struct measure fs[MAX_NPROBE], lib[MAX_NPROBE];
	struct measure held[MAX_NPROBE];          /* descriptors held open */
	struct measure call[MAX_NPROBE];          /* the query call (an ioctl) */
	double qps_of[MAX_ROUNDS][MAX_NPROBE][Q_COUNT]; /* per round (Q_): fs, held, lib, call,
						   * and with --batch the mount's and
						   * the library's batches, and the
						   * mount's in .fvecs rows */
	double rt_of[MAX_ROUNDS][MAX_NPROBE][2]; /* per round: the GETATTR round trip
						  * measured after the held queries
						  * [0] and after the calls [1] */
	unsigned rounds_done;
	/* query traffic */
	int hin, hout;           /* held descriptors of in and out; -1: none */
	int hcall;               /* in, held for the query call; -1: none */
	char *cbuf;              /* the query call's buffer, VECFS_CALL_MAX bytes */
	int timing;              /* add each step's time of a held query to step_ns */
	uint64_t step_ns[2];     /* pwrite in (runs the query), pread out */
	char *vtext;             /* every query vector as one text line */
	char *bin;               /* --batch: a batch's queries as .fvecs rows */
	size_t *voff;            /* nq + 1 offsets into vtext */
	char *req;               /* one write of query/b/in */
	char *out;               /* one read of query/b/out */
	size_t outcap;
};

static int mnt_path(const struct mnt *m, const char *rel, char *buf)
{
	return ds_join_path(buf, PATH_MAX, m->dir, rel);
}

/* ------------------------------------------------ small file helpers */

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* The whole of an open file into *buf (grown as needed, NUL-terminated). */
/* Read fd to its end into *buf (grown as needed, NUL-terminated): with
 * read(), or with pread() from offset 0 when `from0` (a held descriptor of
 * out shows the latest query's results from offset 0). */
static int read_to_end(int fd, int from0, char **buf, size_t *cap, size_t *len)
{
	size_t n = 0;

	for (;;) {
		ssize_t r;

		if (*cap - n < 4096 + 1) {
			size_t nc = *cap ? *cap * 2 : 65536;
			char *nb = realloc(*buf, nc);

			if (!nb)
				return -ENOMEM;
			*buf = nb;
			*cap = nc;
		}
		r = from0 ? pread(fd, *buf + n, *cap - n - 1, (off_t)n)
			  : read(fd, *buf + n, *cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		n += (size_t)r;
	}
	(*buf)[n] = '\0';
	*len = n;
	return 0;
}

static int read_fd(int fd, char **buf, size_t *cap, size_t *len)
{
	return read_to_end(fd, 0, buf, cap, len);
}

static int read_path(const char *path, char **buf, size_t *len)
{
	size_t cap = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	*buf = NULL;
	if (fd < 0)
		return -errno;
	rc = read_fd(fd, buf, &cap, len);
	if (close(fd) && !rc)
		rc = -errno;
	if (rc) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

/* The number of a `key = value` line of text such as stats. */
static int kv_parse(const char *text, const char *key, uint64_t *out)
{
	size_t kl = strlen(key);
	const char *line;
	int rc = -ENOENT;

	for (line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		const char *v = line + kl;
		char *end;

		if (strncmp(line, key, kl) != 0)
			continue;
		while (*v == ' ' || *v == '\t')
			v++;
		if (*v++ != '=')
			continue;
		while (*v == ' ' || *v == '\t')
			v++;
		if (!isdigit((unsigned char)*v))
			break;
		errno = 0;
		*out = strtoull(v, &end, 10);
		rc = errno || (*end && *end != '\n') ? -EINVAL : 0;
		break;
	}
	return rc;
}

/* The number of a `key = value` line of a file such as stats. */
static int kv_get(const char *path, const char *key, uint64_t *out)
{
	size_t len;
	char *text;
	int rc = read_path(path, &text, &len);

	if (rc)
		return rc;
	rc = kv_parse(text, key, out);
	free(text);
	return rc;
}

/* "errors says: <its last line>", the daemon's reason for a failure. */
static void last_error(const struct mnt *m, char *out, size_t cap)
{
	char path[PATH_MAX], *text, *end, *start;
	size_t len;

	*out = '\0';
	if (mnt_path(m, "errors", path) || read_path(path, &text, &len))
		return;
	end = text + len;
	while (end > text && (end[-1] == '\n' || end[-1] == '\r'))
		end--;
	*end = '\0';
	start = strrchr(text, '\n');
	start = start ? start + 1 : text;
	if (*start)
		snprintf(out, cap, "errors says: %s", start);
	free(text);
}

/* A failed operation on the mount: errno, and the daemon's errors line. */
static int fail_mnt(const struct mnt *m, int rc, const char *what)
{
	char why[512];

	if (tool_interrupted())
		return tool_report_interrupt();
	last_error(m, why, sizeof why);
	return tool_fail(rc, why, "%s", what);
}

/* Write a whole text to a file of the tree in one write(), then close(). */
static int write_text(const struct mnt *m, const char *rel, const char *text,
		      size_t len)
{
	char path[PATH_MAX], what[PATH_MAX + 16];
	int fd, rc;

	if ((rc = mnt_path(m, rel, path)))
		return rc;
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0) {
		snprintf(what, sizeof what, "open %s", path);
		return fail_mnt(m, -errno, what);
	}
	ssize_t w = write(fd, text, len);

	if (w != (ssize_t)len) {
		rc = w < 0 ? -errno : -EIO;
		close(fd);
		snprintf(what, sizeof what, "write %s", path);
		return fail_mnt(m, rc, what);
	}
	if (close(fd)) {
		snprintf(what, sizeof what, "close %s", path);
		return fail_mnt(m, -errno, what);
	}
	return 0;
}

/* ------------------------------------------------ processes */

/* Run a program in its own process group (a terminal's ^C goes to this
 * process only) with the signal mask of a fresh process; its exit status,
 * 128 + the signal that ended it, or a negative errno. */
static int run_prog(char *const argv[])
{
	sigset_t none;
	int st;
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		setpgid(0, 0);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execvp(argv[0], argv);
		fprintf(stderr, PROG ": cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

/* 1 when dir is a mount point in /proc/self/mountinfo (it lists a dead
 * FUSE mount too, which stat() cannot look at). */
static int mount_listed(const char *dir)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *p, mp[PATH_MAX];
	size_t cap = 0;
	int found = 0;

	if (!f)
		return 0;
	while (!found && getline(&line, &cap, f) > 0) {
		size_t n = 0;

		p = line;
		for (int field = 0; field < 4 && p; field++) {
			p = strchr(p, ' ');
			p = p ? p + 1 : NULL;
		}
		if (!p)
			continue;
		/* the mount point, with space, tab, newline, \ as \ooo */
		while (*p && *p != ' ' && n + 1 < sizeof mp) {
			if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' &&
			    p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
				mp[n++] = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
				p += 4;
			} else {
				mp[n++] = *p++;
			}
		}
		mp[n] = '\0';
		found = strcmp(mp, dir) == 0;
	}
	free(line);
	fclose(f);
	return found;
}

/* The parent pid of a process; -1 if it is gone. */
static pid_t proc_ppid(pid_t pid, char *state)
{
	char path[64], buf[512], *p;
	int ppid = -1, fd;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may hold anything */
	if (!p || sscanf(p + 1, " %c %d", state, &ppid) != 2)
		return -1;
	return (pid_t)ppid;
}

/* Does process pid run the daemon binary with the mount point as an
 * argument? */
static int is_our_daemon(const struct mnt *m, pid_t pid)
{
	char path[64], exe[PATH_MAX], args[8192];
	ssize_t n;
	size_t dl = strlen(" (deleted)");
	int fd, match = 0;

	snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
	n = readlink(path, exe, sizeof exe - 1);
	if (n < 0)
		return 0;
	exe[n] = '\0';
	if ((size_t)n > dl && strcmp(exe + n - dl, " (deleted)") == 0)
		exe[n - dl] = '\0'; /* rebuilt while it runs */
	if (strcmp(exe, m->vecfs) != 0)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, args, sizeof args - 1);
	close(fd);
	if (n <= 0)
		return 0;
	args[n] = '\0';
	for (char *a = args; a < args + n; a += strlen(a) + 1)
		if (strcmp(a, m->dir) == 0)
			match = 1;
	return match;
}

/* The daemon serving the mount: a process of the vecfs binary with the
 * mount point on its command line; our own child (as subreaper) first. */
static pid_t find_daemon(const struct mnt *m)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t self = getpid(), other = 0, found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char state;
		pid_t pid;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid = (pid_t)atoi(e->d_name);
		if (pid == self || !is_our_daemon(m, pid))
			continue;
		if (proc_ppid(pid, &state) == self)
			found = pid;
		else if (!other)
			other = pid;
	}
	closedir(d);
	return found ? found : other;
}

/* Wait for the daemon to exit after the unmount; SIGTERM, then SIGKILL
 * if it does not. */
static void wait_daemon(struct mnt *m)
{
	pid_t pid = m->daemon;
	uint64_t t0 = tool_now_ns(), limit = (uint64_t)DAEMON_EXIT_S * 1000000000u;
	int sent = 0;

	while (pid) {
		struct timespec nap = { 0, 10000000 };
		char state = 0;
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		uint64_t t = tool_now_ns() - t0;

		if (r == pid) {
			if (WIFSIGNALED(st) && !sent && !m->stopped)
				fprintf(stderr, PROG ": the daemon (pid %d) died of signal %d\n",
					(int)pid, WTERMSIG(st));
			else if (WIFEXITED(st) && WEXITSTATUS(st))
				fprintf(stderr, PROG ": the daemon (pid %d) exited with status %d\n",
					(int)pid, WEXITSTATUS(st));
			break;
		}
		if (r < 0 && errno != EINTR &&
		    (errno != ECHILD || proc_ppid(pid, &state) < 0 || state == 'Z'))
			break; /* not our child, and gone */
		if (sent == 0 && t > limit) {
			fprintf(stderr, PROG ": the daemon (pid %d) still runs %d s after "
				"the unmount; sending SIGTERM\n", (int)pid, DAEMON_EXIT_S);
			kill(pid, SIGTERM);
			sent = 1;
		} else if (sent == 1 && t > limit + 10000000000ull) {
			fprintf(stderr, PROG ": the daemon (pid %d) ignores SIGTERM; "
				"sending SIGKILL\n", (int)pid);
			kill(pid, SIGKILL);
			sent = 2;
		} else if (sent == 2 && t > limit + 20000000000ull) {
			fprintf(stderr, PROG ": the daemon (pid %d) does not exit\n", (int)pid);
			break;
		}
		nanosleep(&nap, NULL);
	}
	m->daemon = 0;
}

/* ------------------------------------------------ memory sampling */

static int read_mem_kb(pid_t pid, uint64_t *rss, uint64_t *anon)
{
	char path[64], line[256];
	FILE *f;
	int got = 0;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (got != 3 && fgets(line, sizeof line, f)) {
		unsigned long long kb;

		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
			*rss = kb;
			got |= 1;
		} else if (sscanf(line, "RssAnon: %llu kB", &kb) == 1) {
			*anon = kb;
			got |= 2;
		}
	}
	fclose(f);
	return got == 3 ? 0 : -ENOENT;
}

/* With m->mu held. */
static void sample_locked(struct mnt *m)
{
	uint64_t rss, anon;
	int ph = m->phase;

	if (ph == PH_NONE || !m->daemon || read_mem_kb(m->daemon, &rss, &anon))
		return;
	if (rss > m->rss_kb[ph])
		m->rss_kb[ph] = rss;
	if (anon > m->anon_kb[ph])
		m->anon_kb[ph] = anon;
	m->sampled[ph] = 1;
}

/* Start or end a sampled phase, with a sample at each edge. */
static void phase_set(struct mnt *m, int ph)
{
	if (!m->sync_made)
		return;
	pthread_mutex_lock(&m->mu);
	sample_locked(m);
	m->phase = ph;
	sample_locked(m);
	pthread_mutex_unlock(&m->mu);
}

static void *sampler(void *arg)
{
	struct mnt *m = arg;
	uint64_t next = tool_now_ns(), sig_at = 0;

	pthread_mutex_lock(&m->mu);
	while (!m->stop) {
		struct timespec ts;

		next += SAMPLE_NS;
		ts.tv_sec = (time_t)(next / 1000000000u);
		ts.tv_nsec = (long)(next % 1000000000u);
		while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0)
			;
		if (m->stop)
			break;
		sample_locked(m);
		if (!m->stopped && tool_interrupted()) {
			uint64_t t = tool_now_ns();

			if (!sig_at) {
				sig_at = t;
			} else if (t - sig_at > STOP_AFTER_NS && m->daemon) {
				kill(m->daemon, SIGTERM); /* cancels a build */
				m->stopped = 1;
			}
		}
		if (tool_now_ns() > next + SAMPLE_NS)
			next = tool_now_ns(); /* fell behind: no burst of samples */
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

static int sampler_start(struct mnt *m)
{
	pthread_condattr_t ca;
	int rc;

	if (m->sync_made) { /* from an earlier round */
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
		m->sync_made = 0;
	}
	if (pthread_condattr_init(&ca) ||
	    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
	    pthread_cond_init(&m->cv, &ca)) {
		pthread_condattr_destroy(&ca);
		return tool_fail(-ENOMEM, NULL, "sampling thread");
	}
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&m->mu, NULL);
	m->sync_made = 1;
	m->phase = PH_NONE;
	m->stop = 0;     /* from an earlier round */
	m->stopped = 0;
	rc = pthread_create(&m->th, NULL, sampler, m);
	if (rc)
		return tool_fail(-rc, NULL, "sampling thread");
	m->th_running = 1;
	return 0;
}

static void sampler_stop(struct mnt *m)
{
	if (!m->th_running)
		return;
	pthread_mutex_lock(&m->mu);
	m->stop = 1;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->th, NULL);
	m->th_running = 0;
}

/* ------------------------------------------------ mount and unmount */

/* --vecfs PATH, else vecfs in the directory of argv[0] (of this
 * executable when argv[0] has no directory). */
static int find_vecfs(const struct options *o, struct mnt *m)
{
	char self[PATH_MAX], cand[PATH_MAX + 8];
	const char *slash;

	if (o->vecfs_bin) {
		snprintf(cand, sizeof cand, "%s", o->vecfs_bin);
	} else {
		slash = strrchr(o->argv0, '/');
		if (slash) {
			snprintf(cand, sizeof cand, "%.*s/vecfs",
				 (int)(slash - o->argv0), o->argv0);
		} else {
			ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

			if (n < 0)
				return tool_fail(-errno, NULL, "readlink /proc/self/exe");
			self[n] = '\0';
			*strrchr(self, '/') = '\0';
			snprintf(cand, sizeof cand, "%s/vecfs", self);
		}
	}
	if (!realpath(cand, m->vecfs))
		return tool_fail(-errno, o->vecfs_bin ? NULL : "(give the daemon with --vecfs)",
			    "daemon %s", cand);
	if (access(m->vecfs, X_OK))
		return tool_fail(-errno, NULL, "daemon %s", m->vecfs);
	return 0;
}

static int make_tmp(struct mnt *m)
{
	const char *tmp = getenv("TMPDIR");
	char t[PATH_MAX];

	if (!tmp || !*tmp)
		tmp = "/tmp";
	if ((size_t)snprintf(t, sizeof t, "%s/" PROG ".XXXXXX", tmp) >= sizeof t)
		return tool_fail(-ENAMETOOLONG, NULL, "temporary directory in %s", tmp);
	if (!mkdtemp(t))
		return tool_fail(-errno, NULL, "mkdtemp %s", t);
	/* canonical, so that it matches the kernel's mount table */
	if (!realpath(t, m->tmp)) {
		int e = errno;

		rmdir(t);
		return tool_fail(-e, NULL, "realpath %s", t);
	}
	m->tmp_made = 1;
	if (ds_join_path(m->store, sizeof m->store, m->tmp, "store") ||
	    ds_join_path(m->dir, sizeof m->dir, m->tmp, "mnt"))
		return -ENAMETOOLONG;
	if (mkdir(m->store, 0755))
		return tool_fail(-errno, NULL, "mkdir %s", m->store);
	if (mkdir(m->dir, 0755))
		return tool_fail(-errno, NULL, "mkdir %s", m->dir);
	return 0;
}

/* `vecfs STORE MNT` returns once the mount is usable (or has failed, with
 * its reason on stderr). */
static int mnt_launch(struct mnt *m);

static int mnt_start(struct bench *b, struct mnt *m)
{
	int rc;

	if ((rc = find_vecfs(b->opt, m)) || (rc = make_tmp(m)))
		return rc;
	if (mnt_path(m, "query/" SESSION "/in", m->qin) ||
	    mnt_path(m, "query/" SESSION "/out", m->qout) ||
	    mnt_path(m, "query/" SESSION "/stats", m->qstats))
		return -ENAMETOOLONG;
	return mnt_launch(m);
}

/* Start the daemon on the store (again, for a later round) and open the
 * query session. */
static int mnt_launch(struct mnt *m)
{
	char *argv[] = { m->vecfs, m->store, m->dir, NULL };
	char path[PATH_MAX];
	int st, rc;

	/* the daemon, orphaned by its launcher, becomes our child */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
		fprintf(stderr, PROG ": cannot become a subreaper (%s); the daemon's "
			"exit is polled\n", strerror(errno));
	m->launched = 1;
	st = run_prog(argv);
	if (st < 0)
		return tool_fail(st, NULL, "start %s", m->vecfs);
	if (st) {
		fprintf(stderr, PROG ": the daemon did not mount: `%s %s %s` "
			"exited with status %d\n", m->vecfs, m->store, m->dir, st);
		return -EIO;
	}
	if (!mount_listed(m->dir))
		return tool_fail(-EIO, "not in /proc/self/mountinfo", "mount %s", m->dir);
	m->daemon = find_daemon(m);
	if (!m->daemon)
		fprintf(stderr, PROG ": cannot find the daemon's process; "
			"no memory figures\n");
	if ((rc = sampler_start(m)))
		return rc;
	if ((rc = mnt_path(m, "query/" SESSION, path)))
		return rc;
	if (mkdir(path, 0755) && errno != EEXIST)
		return fail_mnt(m, -errno, "mkdir query/" SESSION);
	return 0;
}

static void mnt_close_held(struct mnt *m)
{
	if (m->hin >= 0)
		close(m->hin);
	if (m->hout >= 0)
		close(m->hout);
	if (m->hcall >= 0)
		close(m->hcall);
	m->hin = m->hout = m->hcall = -1;
}

/* Unmount (fusermount3 -u, else -uz) and wait for the daemon to exit.
 * Runs after every start, whatever happened. */
static int mnt_stop(struct mnt *m)
{
	char *u[] = { "fusermount3", "-u", m->dir, NULL };
	char *uz[] = { "fusermount3", "-uz", m->dir, NULL };
	int rc = 0;

	sampler_stop(m);
	mnt_close_held(m);
	if (!m->launched)
		return 0;
	m->launched = 0;
	if (mount_listed(m->dir)) {
		if (run_prog(u) != 0 || mount_listed(m->dir)) {
			fprintf(stderr, PROG ": fusermount3 -u %s failed; detaching it "
				"with -uz\n", m->dir);
			run_prog(uz);
			if (mount_listed(m->dir)) {
				m->still_mounted = 1;
				rc = tool_fail(-EBUSY, NULL, "unmount %s", m->dir);
			}
		}
	}
	if (!m->daemon)
		m->daemon = find_daemon(m);
	wait_daemon(m);
	return rc;
}

static void mnt_free(struct mnt *m, int keep)
{
	free(m->vtext);
	free(m->bin);
	free(m->voff);
	free(m->req);
	free(m->out);
	free(m->cbuf);
	if (m->sync_made) {
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
	}
	if (!m->tmp_made)
		return;
	if (m->still_mounted)
		fprintf(stderr, PROG ": %s is still mounted; left %s\n", m->dir, m->tmp);
	else if (keep)
		fprintf(stderr, PROG ": kept store %s\n", m->store);
	else
		tool_remove_tree(m->tmp);
}

/* ------------------------------------------------ config, ingest, build */

/* Nothing runs in the background while the figures are taken: no build
 * (auto_build = 0), and where the daemon has them, no automatic compaction
 * or rebalance, which would change the index under the mount's queries (the
 * library then measures a different one).  Delta postings stay until the
 * end, for both. */
/* Config lines that turn the daemon's automatic compaction and
 * rebalancing off (where it has them), appended to text at *n. */
static void maint_off_text(struct mnt *m, const char *config, char *text, size_t cap, int *n)
{
	uint64_t x;

	if (kv_get(config, "compact_deltas", &x) == 0) {
		*n += snprintf(text + *n, cap - (size_t)*n, "compact_deltas = %u\n", UINT32_MAX);
		m->no_compaction = 1;
	}
	if (kv_get(config, "rebalance_ratio", &x) == 0) {
		*n += snprintf(text + *n, cap - (size_t)*n, "rebalance_ratio = 0\n");
		m->no_rebalance = 1;
	}
}

static int mnt_config(struct bench *b, struct mnt *m)
{
	const struct options *o = b->opt;
	char text[512], path[PATH_MAX];
	int rc, n = snprintf(text, sizeof text, "auto_build = 0\ndim = %u\nmetric = %s\n",
			     b->ds.base.dim, vecfs_metric_name(b->ds.metric));

	if ((rc = mnt_path(m, "config", path)))
		return rc;
	if (!o->files)
		maint_off_text(m, path, text, sizeof text, &n);

	if (o->bits)
		n += snprintf(text + n, sizeof text - (size_t)n, "bits = %u\n", o->bits);
	if (o->nlist)
		n += snprintf(text + n, sizeof text - (size_t)n, "nlist = %u\n", o->nlist);
	if (o->refine)
		n += snprintf(text + n, sizeof text - (size_t)n, "refine = %u\n", o->refine);
	return write_text(m, "config", text, (size_t)n);
}

/* The store must hold `want` records after an ingest. */
static int mnt_check_records(struct mnt *m, uint64_t want)
{
	char path[PATH_MAX], detail[96];
	uint64_t have = 0;
	int rc;

	if ((rc = mnt_path(m, "stats", path)))
		return rc;
	if ((rc = kv_get(path, "records", &have)))
		return fail_mnt(m, rc, "read records from stats");
	if (have != want) {
		snprintf(detail, sizeof detail, "%llu records, %llu expected",
			 (unsigned long long)have, (unsigned long long)want);
		return tool_fail(-EPROTO, detail, "ingest through the mount");
	}
	return 0;
}

/* Base rows [first, first + n) as one fvecs file in ingest/, written in
 * MNT_WRITE pieces (the bytes of DIR/base.fvecs, made from the rows in
 * memory), then closed: the close commits it.  Timed from open to close. */
static int mnt_ingest(struct bench *b, struct mnt *m, int part, const char *name,
		      size_t first, size_t n)
{
	const uint32_t dim = b->ds.base.dim;
	const size_t row_bytes = 4 + 4 * (size_t)dim;
	const size_t per_write = MNT_WRITE / row_bytes ? MNT_WRITE / row_bytes : 1;
	const int32_t d32 = (int32_t)dim;
	struct tool_progress p;
	char path[PATH_MAX], rel[64], what[PATH_MAX + 32], phase[24];
	unsigned char *buf;
	uint64_t t0, t_close;
	int fd, rc = 0;

	snprintf(rel, sizeof rel, "ingest/%s", name);
	if ((rc = mnt_path(m, rel, path)))
		return rc;
	buf = malloc(per_write * row_bytes);
	if (!buf)
		return tool_fail(-ENOMEM, NULL, "ingest");
	snprintf(phase, sizeof phase, "%s", name);
	tool_progress_init(&p, "mount ingest", "rows");
	phase_set(m, part ? PH_INGEST2 : PH_INGEST);
	t0 = tool_now_ns();
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(what, sizeof what, "create %s", path);
		rc = fail_mnt(m, -errno, what);
		goto out;
	}
	for (size_t done = 0; done < n;) {
		size_t cnt = n - done < per_write ? n - done : per_write;

		for (size_t j = 0; j < cnt; j++) {
			unsigned char *row = buf + j * row_bytes;

			memcpy(row, &d32, 4);
			memcpy(row + 4, (const float *)b->ds.base.data +
			       (first + done + j) * dim, 4 * (size_t)dim);
		}
		if (tool_interrupted()) {
			unlink(path); /* abandoned: nothing of it is committed */
			close(fd);
			tool_progress_end(&p);
			rc = tool_report_interrupt();
			goto out;
		}
		if ((rc = write_all(fd, buf, cnt * row_bytes))) {
			close(fd);
			tool_progress_end(&p);
			snprintf(what, sizeof what, "write %s (rows %zu..)", path,
				 first + done);
			rc = fail_mnt(m, rc, what);
			goto out;
		}
		done += cnt;
		tool_progress_show(&p, phase, done, n);
	}
	tool_progress_show(&p, phase, n, n);
	t_close = tool_now_ns();
	if (close(fd)) {
		rc = -errno;
		tool_progress_end(&p);
		snprintf(what, sizeof what, "close %s (the commit)", path);
		rc = fail_mnt(m, rc, what);
		goto out;
	}
	m->ingest_s[part] = (double)(tool_now_ns() - t0) / 1e9;
	m->commit_s[part] = (double)(tool_now_ns() - t_close) / 1e9;
	m->ingest_n[part] = n;
	tool_progress_end(&p);
out:
	phase_set(m, PH_NONE);
	free(buf);
	return rc ? rc : mnt_check_records(m, first + n);
}

/* `build` into ctl: its write returns when the generation is active. */
static int mnt_build(struct mnt *m, size_t rows)
{
	static const char cmd[] = "build\n";
	char path[PATH_MAX];
	uint64_t t0, gen = 0;
	int rc;

	fprintf(stderr, "mount build: %zu rows through ctl\n", rows);
	phase_set(m, PH_BUILD);
	t0 = tool_now_ns();
	rc = write_text(m, "ctl", cmd, sizeof cmd - 1);
	m->build_s = (double)(tool_now_ns() - t0) / 1e9;
	phase_set(m, PH_NONE);
	if (rc)
		return rc;
	fprintf(stderr, "mount build: done in %.2f s\n", m->build_s);
	m->build_rows = rows;
	if ((rc = mnt_path(m, "stats", path)))
		return rc;
	if ((rc = kv_get(path, "active", &gen)) || !gen)
		return fail_mnt(m, rc ? rc : -EPROTO, "no active generation after the build");
	m->gen_id = gen;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The daemon's stats, one read of them: compactions and rebalances so far,
 * and whether maintenance is idle. */
static int maint_state(struct mnt *m, uint64_t *compactions, uint64_t *rebalances, int *idle)
{
	char path[PATH_MAX], *text = NULL;
	size_t len;
	int rc;

	if ((rc = mnt_path(m, "stats", path)))
		return rc;
	if ((rc = read_path(path, &text, &len)))
		return fail_mnt(m, rc, "read stats");
	if ((rc = kv_parse(text, "compactions", compactions)) ||
	    (rc = kv_parse(text, "rebalances", rebalances))) {
		free(text);
		return fail_mnt(m, rc, "stats: compactions, rebalances");
	}
	*idle = strstr(text, "\nmaintenance = idle\n") != NULL;
	free(text);
	return 0;
}

/* --ingest-files: rows [first, first + n) as opt->files files, maintenance
 * on; then wait until it is idle and turn it off (the queries measure a
 * steady index), and take the active generation, which a rebalance may
 * have replaced. */
static int mnt_ingest_files(struct bench *b, struct mnt *m, size_t first, size_t n)
{
	size_t files = b->opt->files < n ? b->opt->files : n;
	double *secs = calloc(files, sizeof *secs), total = 0, commit = 0;
	uint64_t c0, r0, c1, r1, t0, gen = 0;
	char name[64], text[256], path[PATH_MAX];
	int idle, len = 0, rc;

	if (!secs)
		return tool_fail(-ENOMEM, NULL, "--ingest-files");
	if ((rc = maint_state(m, &c0, &r0, &idle)))
		goto out;
	for (size_t f = 0; f < files; f++) {
		size_t a = first + n * f / files, e = first + n * (f + 1) / files;

		snprintf(name, sizeof name, "base.2.%03zu.fvecs", f);
		if ((rc = mnt_ingest(b, m, 1, name, a, e - a)))
			goto out;
		secs[f] = m->ingest_s[1];
		total += m->ingest_s[1];
		commit += m->commit_s[1];
	}
	if ((rc = maint_state(m, &c1, &r1, &idle)))
		goto out;
	t0 = tool_now_ns();
	fprintf(stderr, "mount ingest: waiting for maintenance to finish\n");
	for (int i = 0; !idle && i < 6000; i++) {
		usleep(100000);
		if (tool_interrupted()) {
			rc = tool_report_interrupt();
			goto out;
		}
		if ((rc = maint_state(m, &c1, &r1, &idle)))
			goto out;
	}
	m->maint_wait_s = (double)(tool_now_ns() - t0) / 1e9;
	m->maint_compactions = c1 - c0;
	m->maint_rebalances = r1 - r0;
	if (!idle) {
		rc = fail_mnt(m, -ETIMEDOUT, "maintenance still running 600 s after the ingest");
		goto out;
	}
	if ((rc = mnt_path(m, "config", path)))
		goto out;
	maint_off_text(m, path, text, sizeof text, &len);
	if (len && (rc = write_text(m, "config", text, (size_t)len)))
		goto out;
	if ((rc = mnt_path(m, "stats", path)))
		goto out;
	if ((rc = kv_get(path, "active", &gen)) || !gen) {
		rc = fail_mnt(m, rc ? rc : -EPROTO, "no active generation after the ingest");
		goto out;
	}
	m->gen_id = gen;
	qsort(secs, files, sizeof *secs, cmp_double);
	m->file_p50_s = secs[(files - 1) / 2];
	m->file_max_s = secs[files - 1];
	m->ingest_n[1] = n;
	m->ingest_s[1] = total;
	m->commit_s[1] = commit;
out:
	free(secs);
	return rc;
}

static int mnt_load(struct bench *b, struct mnt *m)
{
	size_t n = b->ds.base.n, half = n / 2;
	int rc;

	if ((rc = mnt_config(b, m)))
		return rc;
	if (!b->opt->after_build)
		return (rc = mnt_ingest(b, m, 0, "base.fvecs", 0, n)) ? rc :
			mnt_build(m, n);
	if (half == 0)
		return tool_fail(-EINVAL, "it needs at least 2 base rows",
			    "--ingest-after-build");
	if ((rc = mnt_ingest(b, m, 0, "base.1.fvecs", 0, half)) ||
	    (rc = mnt_build(m, half)))
		return rc;
	if (b->opt->files)
		return mnt_ingest_files(b, m, half, n - half);
	return mnt_ingest(b, m, 1, "base.2.fvecs", half, n - half);
}

/* ------------------------------------------------ queries */

/* Every query vector as a text line: "%.9g" numbers, spaces, "\n". */
static int mnt_prepare_queries(struct bench *b, struct mnt *m)
{
	const uint32_t dim = b->ds.query.dim;
	const size_t line_max = (size_t)dim * 17 + 1;
	size_t pos = 0;

	m->vtext = malloc(b->nq * line_max + 1);
	m->voff = malloc((b->nq + 1) * sizeof *m->voff);
	m->req = malloc(line_max + 128);
	if (!m->vtext || !m->voff || !m->req)
		return tool_fail(-ENOMEM, NULL, "query texts");
	for (size_t i = 0; i < b->nq; i++) {
		const float *q = (const float *)b->ds.query.data + i * dim;

		m->voff[i] = pos;
		for (uint32_t j = 0; j < dim; j++)
			pos += (size_t)snprintf(m->vtext + pos, 17, j ? " %.9g" : "%.9g",
						(double)q[j]);
		m->vtext[pos++] = '\n';
	}
	m->voff[b->nq] = pos;
	return 0;
}

/* One line of out, KEY<TAB>DISTANCE, with KEY a row index: 0 or -EPROTO. */
static int parse_out_line(const char *p, const char *nl, uint64_t *id)
{
	const char *tab = memchr(p, '\t', (size_t)(nl - p));
	char *dend;

	if (!tab || tab == p)
		return -EPROTO;
	*id = 0;
	for (const char *c = p; c < tab; c++) {
		if (!isdigit((unsigned char)*c) || *id > (UINT64_MAX - 9) / 10)
			return -EPROTO;
		*id = *id * 10 + (uint64_t)(*c - '0');
	}
	strtod(tab + 1, &dend);
	return dend == tab + 1 || dend != nl ? -EPROTO : 0;
}

/* The first query's results in out (text, NUL-terminated) as row ids in
 * b->hit_ids, at most k of them. */
static int parse_out(struct bench *b, const char *text, size_t len, size_t qi,
		     size_t *cnt)
{
	const char *p = text, *end = text + len;
	size_t n = 0;

	while (p < end && *p != '\n' && n < b->opt->k) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		if (!nl)
			nl = end;
		if (parse_out_line(p, nl, &b->hit_ids[n]))
			return tool_fail(-EPROTO, "expected KEY<TAB>DISTANCE with a row index",
				    "query %zu: out line '%.*s'", qi,
				    (int)(nl - p > 60 ? 60 : nl - p), p);
		n++;
		p = nl + 1;
	}
	*cnt = n;
	return 0;
}

/* One query: open in, write the options line and the vector, close (the
 * query runs), open out, read it, close.  *ns: all of that. */
static int mnt_query(struct bench *b, struct mnt *m, size_t qi, size_t optlen,
		     uint64_t *ns, size_t *cnt)
{
	size_t vlen = m->voff[qi + 1] - m->voff[qi], len = optlen + vlen, outlen = 0;
	char what[64];
	uint64_t t0;
	int fd, rc;

	memcpy(m->req + optlen, m->vtext + m->voff[qi], vlen);
	t0 = tool_now_ns();
	fd = open(m->qin, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0) {
		snprintf(what, sizeof what, "query %zu: open in", qi);
		return fail_mnt(m, -errno, what);
	}
	if ((rc = write_all(fd, m->req, len))) {
		close(fd);
		snprintf(what, sizeof what, "query %zu: write in", qi);
		return fail_mnt(m, rc, what);
	}
	if (close(fd)) {
		snprintf(what, sizeof what, "query %zu: close in (the search)", qi);
		return fail_mnt(m, -errno, what);
	}
	fd = open(m->qout, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(what, sizeof what, "query %zu: open out", qi);
		return fail_mnt(m, -errno, what);
	}
	rc = read_fd(fd, &m->out, &m->outcap, &outlen);
	if (close(fd) && !rc)
		rc = -errno;
	*ns = tool_now_ns() - t0;
	if (rc) {
		snprintf(what, sizeof what, "query %zu: read out", qi);
		return fail_mnt(m, rc, what);
	}
	if (outlen == 0)
		return fail_mnt(m, -EPROTO, "query: out is empty");
	return parse_out(b, m->out, outlen, qi, cnt);
}

/* One query the way a program looping over queries does it with both
 * descriptors held open, one kernel round trip a query: in is opened with
 * O_DSYNC, so a pwrite() of the whole request at offset 0 runs it and
 * returns its errno; then pread() of out from offset 0 to the end. */
static int mnt_query_held(struct bench *b, struct mnt *m, size_t qi, size_t optlen,
			  uint64_t *ns, size_t *cnt)
{
	size_t vlen = m->voff[qi + 1] - m->voff[qi], len = optlen + vlen, outlen = 0;
	char what[64];
	uint64_t t0;
	ssize_t w;
	int rc;

	if (m->hin < 0 &&
	    (m->hin = open(m->qin, O_WRONLY | O_TRUNC | O_DSYNC | O_CLOEXEC)) < 0)
		return fail_mnt(m, -errno, "open in (held)");
	if (m->hout < 0 && (m->hout = open(m->qout, O_RDONLY | O_CLOEXEC)) < 0)
		return fail_mnt(m, -errno, "open out (held)");
	memcpy(m->req + optlen, m->vtext + m->voff[qi], vlen);
	t0 = tool_now_ns();
	w = pwrite(m->hin, m->req, len, 0);
	if (w != (ssize_t)len) {
		snprintf(what, sizeof what, "query %zu: pwrite in (the search)", qi);
		return fail_mnt(m, w < 0 ? -errno : -EIO, what);
	}
	uint64_t t1 = tool_now_ns();
	rc = read_to_end(m->hout, 1, &m->out, &m->outcap, &outlen);
	*ns = tool_now_ns() - t0;
	if (m->timing) {
		m->step_ns[0] += t1 - t0;
		m->step_ns[1] += t0 + *ns - t1;
	}
	if (rc) {
		snprintf(what, sizeof what, "query %zu: pread out", qi);
		return fail_mnt(m, rc, what);
	}
	if (outlen == 0)
		return fail_mnt(m, -EPROTO, "query: out is empty");
	return parse_out(b, m->out, outlen, qi, cnt);
}

#define CALL_SKIP 1 /* the query call does not take these queries: not measured */

/* One query as one system call: the query call, an ioctl() of in
 * (VECFS_IOC_QUERY) whose buffer holds the request going in and out's
 * text coming back.  Its size: room for the request and for k results of
 * about 64 bytes (keys here are row numbers), the whole VECFS_CALL_MAX
 * again when they did not fit (ERANGE); CALL_SKIP when even that is too
 * short. */
static int mnt_query_call(struct bench *b, struct mnt *m, size_t qi, size_t optlen,
			  uint64_t *ns, size_t *cnt)
{
	size_t vlen = m->voff[qi + 1] - m->voff[qi], len = optlen + vlen;
	size_t size = 4 + len > 64 * (size_t)b->opt->k + 256 ? 4 + len : 64 * (size_t)b->opt->k + 256;
	uint32_t n = htole32((uint32_t)len);
	char what[64];
	int r;

	if (4 + len > VECFS_CALL_MAX)
		return CALL_SKIP; /* (longer than the call takes) */
	if (m->hcall < 0 && (m->hcall = open(m->qin, O_RDONLY | O_CLOEXEC)) < 0)
		return fail_mnt(m, -errno, "open in (the query call)");
	if (!m->cbuf && !(m->cbuf = malloc(VECFS_CALL_MAX)))
		return fail_mnt(m, -ENOMEM, "the query call's buffer");
	if (size > VECFS_CALL_MAX)
		size = VECFS_CALL_MAX;
	uint64_t t0 = tool_now_ns();
	for (;;) {
		memcpy(m->cbuf, &n, 4);
		memcpy(m->cbuf + 4, m->req, optlen);
		memcpy(m->cbuf + 4 + optlen, m->vtext + m->voff[qi], vlen);
		r = ioctl(m->hcall, VECFS_IOC_QUERY(size), m->cbuf);
		if (r >= 0 || errno != ERANGE || size == VECFS_CALL_MAX)
			break;
		size = VECFS_CALL_MAX;
	}
	*ns = tool_now_ns() - t0;
	if (r < 0 && errno == ERANGE)
		return CALL_SKIP; /* results longer than the call takes */
	if (r < 0) {
		snprintf(what, sizeof what, "query %zu: the query call (ioctl of in)", qi);
		return fail_mnt(m, -errno, what);
	}
	if (r == 0)
		return fail_mnt(m, -EPROTO, "query: the query call returned no results");
	return parse_out(b, m->cbuf, (size_t)r, qi, cnt);
}

/* The session's stats must say the query ran as asked. */
static int mnt_check_query_stats(const struct mnt *m, uint32_t nprobe, uint32_t k)
{
	uint64_t gen = 0, np = 0, kk = 0;
	char detail[160];
	int rc;

	if ((rc = kv_get(m->qstats, "generation", &gen)) ||
	    (rc = kv_get(m->qstats, "nprobe", &np)) ||
	    (rc = kv_get(m->qstats, "k", &kk)))
		return fail_mnt(m, rc, "read query/" SESSION "/stats");
	if (gen != m->gen_id || np != nprobe || kk != k) {
		snprintf(detail, sizeof detail, "generation %llu, nprobe %llu, k %llu; "
			 "asked for %llu, %u, %u", (unsigned long long)gen,
			 (unsigned long long)np, (unsigned long long)kk,
			 (unsigned long long)m->gen_id, nprobe, k);
		return tool_fail(-EPROTO, detail, "query/" SESSION "/stats");
	}
	return 0;
}

/* The floor of a query through the mount: one kernel round trip, timed
 * as n fstat()s of the held in (a GETATTR each: in's attributes are not
 * cached).  *us: the mean. */
static int getattr_floor(struct mnt *m, size_t n, double *us)
{
	struct stat st;
	uint64_t t0 = tool_now_ns();

	for (size_t i = 0; i < n; i++)
		if (fstat(m->hin, &st))
			return fail_mnt(m, -errno, "fstat in (the GETATTR floor)");
	*us = (double)(tool_now_ns() - t0) / 1e3 / (double)(n ? n : 1);
	return 0;
}

/* The results of queries from .. from + n - 1, one block each in out
 * (an empty line between two), added to *recall_sum. */
static int parse_out_batch(struct bench *b, const char *text, size_t len, size_t from,
			   size_t n, double *recall_sum)
{
	const char *p = text, *end = text + len;

	for (size_t i = 0; i < n; i++) {
		size_t cnt = 0;

		if (i) {
			if (p >= end || *p != '\n')
				return tool_fail(-EPROTO, "expected an empty line between two queries",
						 "batch: query %zu of out", from + i);
			p++;
		}
		while (p < end && *p != '\n') {
			const char *nl = memchr(p, '\n', (size_t)(end - p));

			if (!nl)
				nl = end;
			if (cnt < b->opt->k && parse_out_line(p, nl, &b->hit_ids[cnt]) == 0)
				cnt++;
			else if (cnt < b->opt->k)
				return tool_fail(-EPROTO, "expected KEY<TAB>DISTANCE with a row index",
						 "batch: query %zu of out", from + i);
			p = nl + 1;
		}
		*recall_sum += recall_of(b, from + i, cnt);
	}
	return 0;
}

/* Queries from .. from + n - 1 as .fvecs rows into m->bin; their length. */
static size_t bin_rows(const struct bench *b, struct mnt *m, size_t from, size_t n)
{
	uint32_t dim = b->ds.query.dim;
	size_t row = 4 + sizeof(float) * dim;
	for (size_t i = 0; i < n; i++) {
		memcpy(m->bin + i * row, &dim, 4);
		memcpy(m->bin + i * row + 4, (const float *)b->ds.query.data + (from + i) * dim,
		       sizeof(float) * dim);
	}
	return n * row;
}

/* --batch through the mount: the queries opt->batch to an input, written
 * with one pwritev() at offset 0 of a held in (plain: the close of a dup()
 * runs it), out read to the end; QPS over the time of all of that, one
 * pass over the queries.  bin: the input is .fvecs rows (no option line:
 * the config's settings), else text lines after opts. */
static int mnt_batch_pass(struct bench *b, struct mnt *m, const char *opts,
			  size_t optlen, int bin, struct measure *out)
{
	size_t per = b->opt->batch, outlen = 0;
	uint64_t total_ns = 0;
	double recall_sum = 0;
	int fd, rc = 0;

	if (bin) {
		optlen = 0;
		if (!m->bin && !(m->bin = malloc(per * (4 + sizeof(float) * b->ds.query.dim))))
			return fail_mnt(m, -ENOMEM, "the batches' .fvecs rows");
	}

	if ((fd = open(m->qin, O_WRONLY | O_TRUNC | O_CLOEXEC)) < 0)
		return fail_mnt(m, -errno, "open in (batches)");
	for (size_t from = 0; from < b->nq && rc == 0; from += per) {
		size_t n = b->nq - from < per ? b->nq - from : per, done = 0;
		size_t vlen = bin ? bin_rows(b, m, from, n) : m->voff[from + n] - m->voff[from];
		const char *vsrc = bin ? m->bin : m->vtext + m->voff[from];
		size_t len = optlen + vlen;
		char what[64];

		if (tool_interrupted()) {
			rc = tool_report_interrupt();
			break;
		}
		uint64_t t0 = tool_now_ns();
		while (done < len) {
			struct iovec iov[2] = {
				{ (char *)opts + (done < optlen ? done : optlen),
				  done < optlen ? optlen - done : 0 },
				{ (char *)vsrc + (done > optlen ? done - optlen : 0),
				  vlen - (done > optlen ? done - optlen : 0) },
			};
			ssize_t w = pwritev(fd, iov, 2, (off_t)done);

			if (w <= 0) {
				snprintf(what, sizeof what, "batch from query %zu: pwrite in", from);
				rc = fail_mnt(m, w < 0 ? -errno : -EIO, what);
				break;
			}
			done += (size_t)w;
		}
		if (rc)
			break;
		int d = dup(fd);
		if (d < 0 || close(d)) {
			snprintf(what, sizeof what, "batch from query %zu: close (the search)", from);
			rc = fail_mnt(m, -errno, what);
			break;
		}
		if (m->hout < 0 && (m->hout = open(m->qout, O_RDONLY | O_CLOEXEC)) < 0) {
			rc = fail_mnt(m, -errno, "open out (held)");
			break;
		}
		rc = read_to_end(m->hout, 1, &m->out, &m->outcap, &outlen);
		total_ns += tool_now_ns() - t0;
		if (rc) {
			snprintf(what, sizeof what, "batch from query %zu: read out", from);
			rc = fail_mnt(m, rc, what);
			break;
		}
		rc = parse_out_batch(b, m->out, outlen, from, n, &recall_sum);
	}
	close(fd);
	if (rc)
		return rc;
	out->batch_recall = recall_sum / (double)b->nq;
	out->batch_qps = total_ns ? (double)b->nq * 1e9 / (double)total_ns : 0;
	return 0;
}

/* The fastest of MNT_BATCH_PASSES passes of mnt_batch_pass() in text, and
 * with bin, as many in .fvecs rows, alternated (bin_qps, bin_recall). */
static int mnt_measure_batch(struct bench *b, struct mnt *m, const char *opts,
			     size_t optlen, int bin, struct measure *out)
{
	struct measure t = *out;
	int rc;

	out->bin_qps = out->bin_recall = NAN;
	for (int p = 0; p < MNT_BATCH_PASSES; p++)
		for (int w = 0; w <= bin; w++) {
			if ((rc = mnt_batch_pass(b, m, opts, optlen, w, &t)))
				return rc;
			double *q = w ? &out->bin_qps : &out->batch_qps;
			double *r = w ? &out->bin_recall : &out->batch_recall;
			if (p == 0 || t.batch_qps > *q) {
				*q = t.batch_qps;
				*r = t.batch_recall;
			}
		}
	return 0;
}

/* Whether the mount's session, given .fvecs rows and so no option line,
 * searches as asked: at the defaults (nprobe 0, no refine) with the k the
 * config has. */
static int bin_batches_alike(struct mnt *m, uint32_t nprobe, const struct options *o)
{
	char path[PATH_MAX];
	uint64_t k = 0;
	return nprobe == 0 && !o->refine && mnt_path(m, "config", path) == 0 &&
	       kv_get(path, "k", &k) == 0 && k == o->k;
}

enum { WAY_PLAIN, WAY_HELD, WAY_CALL };

/* rc of a query: CALL_SKIP leaves the query call's figures NaN (0), any
 * other is returned. */
static int call_skipped(uint32_t nprobe, int rc, struct measure *out)
{
	if (rc != CALL_SKIP)
		return rc;
	fprintf(stderr, "nprobe %u: a request or its results are longer than the query call "
		"takes (%d bytes): not measured that way\n", nprobe, VECFS_CALL_MAX);
	*out = (struct measure){.nprobe = nprobe, .recall = NAN, .qps = NAN, .p50_us = NAN,
				.p99_us = NAN, .getattr_us = NAN};
	return 0;
}

/* Warm up, then time every query once at this nprobe through the mount,
 * one way (WAY_). */
static int mnt_measure(struct bench *b, struct mnt *m, uint32_t nprobe, int way,
		       struct measure *out)
{
	int (*query)(struct bench *, struct mnt *, size_t, size_t, uint64_t *, size_t *) =
		way == WAY_CALL ? mnt_query_call : way == WAY_HELD ? mnt_query_held : mnt_query;
	int held = way == WAY_HELD;
	const struct options *o = b->opt;
	size_t want = o->have_warmup ? o->warmup : b->nq;
	size_t nwarm = b->nq < want ? b->nq : want, cnt;
	struct tool_progress p;
	char phase[32];
	uint64_t total_ns = 0, ns;
	double recall_sum = 0;
	int optlen, rc;

	optlen = nprobe ? snprintf(m->req, 128, "nprobe=%u k=%u", nprobe, o->k)
			: snprintf(m->req, 128, "k=%u", o->k); /* the defaults */
	if (o->refine)
		optlen += snprintf(m->req + optlen, 128 - (size_t)optlen, " refine=%u",
				   o->refine);
	m->req[optlen++] = '\n';
	tool_progress_init(&p, way == WAY_CALL ? "mount queries, call" : held ? "mount queries, held"
						  : "mount queries", "queries");
	snprintf(phase, sizeof phase, "nprobe %u warm-up", nprobe);
	for (size_t i = 0; i < nwarm; i++) {
		if ((i & 63) == 0 && tool_interrupted()) {
			tool_progress_end(&p);
			return tool_report_interrupt();
		}
		if ((rc = query(b, m, i, (size_t)optlen, &ns, &cnt))) {
			tool_progress_end(&p);
			return call_skipped(nprobe, rc, out);
		}
		tool_progress_show(&p, phase, i + 1, nwarm);
	}
	snprintf(phase, sizeof phase, "nprobe %u", nprobe);
	memset(m->step_ns, 0, sizeof m->step_ns);
	m->timing = held;
	for (size_t i = 0; i < b->nq; i++) {
		if ((i & 63) == 0 && tool_interrupted()) {
			tool_progress_end(&p);
			return tool_report_interrupt();
		}
		if ((rc = query(b, m, i, (size_t)optlen, &ns, &cnt))) {
			tool_progress_end(&p);
			return call_skipped(nprobe, rc, out);
		}
		b->lat_ns[i] = ns;
		total_ns += ns;
		recall_sum += recall_of(b, i, cnt);
		tool_progress_show(&p, phase, i + 1, b->nq);
	}
	tool_progress_end(&p);
	m->timing = 0;
	/* (the query call leaves the session's files as they were) */
	if (way != WAY_CALL && (rc = mnt_check_query_stats(m, nprobe, o->k)))
		return rc;
	qsort(b->lat_ns, b->nq, sizeof *b->lat_ns, tool_cmp_u64);
	*out = (struct measure){ .nprobe = nprobe };
	out->recall = recall_sum / (double)b->nq;
	out->qps = total_ns ? (double)b->nq * 1e9 / (double)total_ns : 0;
	out->p50_us = percentile_us(b->lat_ns, b->nq, 50);
	out->p99_us = percentile_us(b->lat_ns, b->nq, 99);
	if (held) {
		out->write_us = (double)m->step_ns[0] / 1e3 / (double)b->nq;
		out->read_us = (double)m->step_ns[1] / 1e3 / (double)b->nq;
	}
	if (way != WAY_PLAIN && (rc = getattr_floor(m, b->nq, &out->getattr_us)))
		return rc;
	if (way == WAY_PLAIN && o->batch)
		return mnt_measure_batch(b, m, m->req, (size_t)optlen,
					 bin_batches_alike(m, nprobe, o), out);
	return 0;
}

static int mnt_queries(struct bench *b, struct mnt *m)
{
	char path[PATH_MAX];
	int rc;

	/* what the queries will see; background work in the daemon (e.g. a
	 * compaction after the ingest) shows as a change of `compactions` */
	if ((rc = mnt_path(m, "stats", path)))
		return rc;
	if ((rc = kv_get(path, "delta_postings", &m->fs_deltas)) ||
	    (rc = kv_get(path, "unindexed", &m->fs_unindexed)))
		return fail_mnt(m, rc, "read stats");
	m->have_compactions = kv_get(path, "compactions", &m->compactions[0]) == 0;
	rc = m->vtext ? 0 : mnt_prepare_queries(b, m);
	for (size_t i = 0; !rc && i < b->opt->n_nprobe; i++) {
		rc = mnt_measure(b, m, b->opt->nprobe[i], WAY_PLAIN, &m->fs[i]);
		if (!rc)
			rc = mnt_measure(b, m, b->opt->nprobe[i], WAY_HELD, &m->held[i]);
		if (!rc)
			rc = mnt_measure(b, m, b->opt->nprobe[i], WAY_CALL, &m->call[i]);
	}
	mnt_close_held(m);
	if (!rc && m->have_compactions)
		m->have_compactions = kv_get(path, "compactions", &m->compactions[1]) == 0;
	return rc;
}

/* ------------------------------------------------ the library, same store */

static int lib_measure(struct bench *b, struct mnt *m)
{
	const struct options *o = b->opt;
	char err[ERRLEN] = "";
	vecfs_stats st;
	int rc;

	snprintf(b->st.dir, sizeof b->st.dir, "%s", m->store);
	if ((rc = vecfs_open(b->st.dir, &b->st.v, err, sizeof err)))
		return tool_fail(rc, err, "vecfs_open %s", b->st.dir);
	if ((rc = vecfs_config_get(b->st.v, &b->cfg)))
		return tool_fail(rc, NULL, "vecfs_config_get");
	b->st.gen = vecfs_active(b->st.v);
	if (b->st.gen != m->gen_id)
		return tool_fail(-EPROTO, "the active generation changed",
			    "generation %llu, the mount built %llu",
			    (unsigned long long)b->st.gen, (unsigned long long)m->gen_id);
	if ((rc = gen_load(b)))
		return rc;
	if ((rc = vecfs_stats_get(b->st.v, &st)))
		return tool_fail(rc, NULL, "vecfs_stats_get");
	b->store_bytes = st.store_bytes;
	m->delta_postings = st.delta_postings;
	m->unindexed = st.unindexed;
	if ((rc = check_ingested(b)))
		return rc;
	for (size_t i = 0; i < o->n_nprobe; i++) {
		vecfs_query_opts qo = { .k = o->k, .nprobe = o->nprobe[i],
					.refine = o->refine };

		fprintf(stderr, "library queries: nprobe %u\n", o->nprobe[i]);
		if ((rc = measure_setting(b, &qo, &m->lib[i])))
			return rc;
		if (o->batch && (rc = measure_batch_fastest(b, &qo, MNT_BATCH_PASSES, &m->lib[i])))
			return rc;
	}
	return 0;
}

/* ------------------------------------------------ output */

static double ingest_rate(const struct mnt *m, int part)
{
	return m->ingest_s[part] > 0 ? (double)m->ingest_n[part] / m->ingest_s[part] : 0;
}

static double added_us(const struct measure *fs, const struct measure *lib)
{
	return fs->qps > 0 && lib->qps > 0 ? 1e6 / fs->qps - 1e6 / lib->qps : NAN;
}

/* The peak over both ingest files. */
static void ingest_peak(const struct mnt *m, int *sampled, uint64_t *rss,
			uint64_t *anon)
{
	*sampled = m->sampled[PH_INGEST] || m->sampled[PH_INGEST2];
	*rss = m->rss_kb[PH_INGEST] > m->rss_kb[PH_INGEST2] ?
	       m->rss_kb[PH_INGEST] : m->rss_kb[PH_INGEST2];
	*anon = m->anon_kb[PH_INGEST] > m->anon_kb[PH_INGEST2] ?
		m->anon_kb[PH_INGEST] : m->anon_kb[PH_INGEST2];
}

static void print_mem(int sampled, uint64_t rss, uint64_t anon)
{
	if (sampled)
		printf("daemon RSS peak %.1f MB (anon %.1f MB)",
		       (double)rss / 1024.0, (double)anon / 1024.0);
	else
		printf("daemon RSS not sampled");
}

static void print_phase_mem(const struct mnt *m, int ph)
{
	print_mem(m->sampled[ph], m->rss_kb[ph], m->anon_kb[ph]);
}

static void mnt_print_header(const struct bench *b, const struct mnt *m)
{
	const struct options *o = b->opt;

	printf("dataset  %s (%s)\n", b->ds.name, o->ds.dir);
	printf("vectors  N %zu, dim %u, metric %s (%s), queries %zu, k %u\n",
	       b->ds.base.n, b->ds.base.dim, vecfs_metric_name(b->ds.metric),
	       b->ds.metric_from, b->nq, o->k);
	printf("mount    %s on %s\n", m->vecfs, m->dir);
	printf("index    generation %llu: nlist %u, bits %u, refine %u, "
	       "covers %llu, code %llu bytes/vector\n",
	       (unsigned long long)b->st.gen, b->gen.nlist, b->gen.bits,
	       o->refine ? o->refine : b->cfg.refine,
	       (unsigned long long)b->gen.covered,
	       (unsigned long long)b->code_bytes);
	printf("         unindexed records, delta postings: %llu, %llu before the "
	       "mount's queries; %llu, %llu for the library's\n",
	       (unsigned long long)m->fs_unindexed, (unsigned long long)m->fs_deltas,
	       (unsigned long long)m->unindexed,
	       (unsigned long long)m->delta_postings);
	if (m->have_compactions && m->compactions[1] != m->compactions[0])
		printf("         the daemon ran %llu compactions during the mount's "
		       "queries\n", (unsigned long long)(m->compactions[1] -
							  m->compactions[0]));
	printf("config   auto_build = 0%s%s\n",
	       m->no_compaction ? ", compact_deltas = 4294967295" : "",
	       m->no_rebalance ? ", rebalance_ratio = 0" : "");
	printf("kernel   %s\n", vecfs_kernel_name());
	for (int part = 0; part < 2 && m->ingest_n[part]; part++) {
		printf("%s %.0f rows/s (%zu rows in %.2f s, %.2f s of it in close(): ",
		       part ? "        " : "ingest  ", ingest_rate(m, part),
		       m->ingest_n[part], m->ingest_s[part], m->commit_s[part]);
		if (!m->ingest_n[1])
			printf("one file)\n         ");
		else if (part == 0)
			printf("first file, no generation)\n         ");
		else if (!b->opt->files)
			printf("second file, into generation %llu)\n         ",
			       (unsigned long long)m->gen_id);
		else
			printf("%zu files, into the generation, automatic maintenance on)\n"
			       "         a file's write to close: p50 %.3f s, max %.3f s; maintenance "
			       "idle %.1f s after the last\n         file, %llu compactions and %llu "
			       "rebalances since the first; active now: generation %llu\n         ",
			       b->opt->files, m->file_p50_s, m->file_max_s, m->maint_wait_s,
			       (unsigned long long)m->maint_compactions,
			       (unsigned long long)m->maint_rebalances,
			       (unsigned long long)m->gen_id);
		print_phase_mem(m, part ? PH_INGEST2 : PH_INGEST);
		printf("\n");
	}
	printf("build    %.2f s through ctl (%zu rows), ", m->build_s, m->build_rows);
	print_phase_mem(m, PH_BUILD);
	printf("\n");
	printf("store    %.1f MB\n", (double)b->store_bytes / (1024.0 * 1024.0));
	printf("queries  one client; through the mount a query is open(in), one "
	       "write(), close(),\n         open(out), read() to the end, "
	       "close(); held: both descriptors stay\n         open, in with O_DSYNC: "
	       "a pwrite() at offset 0 of in runs the query,\n         pread() of out "
	       "from 0 to the end; the library: one vecfs_search\n");
	printf("\n%6s | %-40s | %-36s | %-30s |\n", "", "through the mount",
	       "held descriptors", "library, same store");
	printf("%6s | %9s %10s %9s %9s | %9s %7s %8s %9s | %9s %10s %9s |\n",
	       "nprobe", "recall@10", "QPS", "p50_us", "p99_us", "recall@10", "QPS",
	       "p50_us", "ratio", "recall@10", "QPS", "p50_us");
}

static double qps_ratio(const struct measure *a, const struct measure *b)
{
	return b->qps > 0 ? a->qps / b->qps : NAN;
}

static void mnt_print_row(const struct measure *fs, const struct measure *held,
			  const struct measure *call, const struct measure *lib, size_t batch)
{
	printf("%6u | %9.4f %10.1f %9.1f %9.1f | %9.4f %7.1f %8.1f %9.3f | %9.4f %10.1f %9.1f |\n",
	       fs->nprobe, fs->recall, fs->qps, fs->p50_us, fs->p99_us, held->recall,
	       held->qps, held->p50_us, qps_ratio(held, lib), lib->recall, lib->qps,
	       lib->p50_us);
	printf("%6s   ratio to the library: %.3f (adds %.1f us a query); held "
	       "descriptors: %.3f (adds %.1f us)\n", "", qps_ratio(fs, lib),
	       added_us(fs, lib), qps_ratio(held, lib), added_us(held, lib));
	printf("%6s   held, mean us: pwrite in (runs the query) %.1f, pread out %.1f; "
	       "a GETATTR round trip %.1f:\n%6s   held adds %.2f round trips to the "
	       "library's latency\n", "", held->write_us, held->read_us, held->getattr_us, "",
	       added_us(held, lib) / held->getattr_us);
	printf("%6s   the query call: recall@10 %.4f, QPS %.1f, p50 %.1f us, ratio %.3f (adds "
	       "%.1f us);\n%6s   a GETATTR round trip %.1f: it adds %.2f round trips to the "
	       "library's latency\n", "", call->recall, call->qps, call->p50_us,
	       qps_ratio(call, lib), added_us(call, lib), "", call->getattr_us,
	       added_us(call, lib) / call->getattr_us);
	if (batch)
		printf("%6s   %zu queries an input: recall@10 %.4f, QPS %.1f through the "
		       "mount, %.1f the library's\n%6s   (%zu to a vecfs_search): ratio %.3f\n",
		       "", batch, fs->batch_recall, fs->batch_qps, lib->batch_qps, "", batch,
		       lib->batch_qps > 0 ? fs->batch_qps / lib->batch_qps : NAN);
	if (batch && fs->bin_qps > 0)
		printf("%6s   the same as .fvecs rows: recall@10 %.4f, QPS %.1f, ratio %.3f\n",
		       "", fs->bin_recall, fs->bin_qps,
		       lib->batch_qps > 0 ? fs->bin_qps / lib->batch_qps : NAN);
}

static void json_kb(const char *key, int sampled, uint64_t kb)
{
	if (sampled)
		printf(",\"%s\":%llu", key, (unsigned long long)kb);
	else
		printf(",\"%s\":null", key);
}

/* The median of r[0..n) (n > 0; r is sorted: an insertion sort, a few
 * values). */
static double median_of(double *r, unsigned n)
{
	for (unsigned a = 1; a < n; a++)
		for (unsigned c = a; c > 0 && r[c - 1] > r[c]; c--) {
			double t = r[c];

			r[c] = r[c - 1];
			r[c - 1] = t;
		}
	return n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
}

/* Over the rounds, setting i: the median of the rounds' ratios of way w
 * (a Q_ index) to the library's QPS (Q_LIB; Q_LIB_BATCH for the batches), and
 * the pooled ratio (the library's time for all queries of all rounds over
 * the mount's). */
static void round_ratios(const struct mnt *m, size_t i, int w, double *median,
			 double *pooled)
{
	double r[MAX_ROUNDS], t_lib = 0, t_fs = 0;
	int l = lib_way(w);
	unsigned n = 0;

	for (unsigned k = 0; k < m->rounds_done; k++) {
		const double *q = m->qps_of[k][i];

		if (!(q[l] > 0) || !(q[w] > 0))
			continue; /* no figure: not in the median */
		r[n++] = q[w] / q[l];
		t_lib += 1 / q[l];
		t_fs += 1 / q[w];
	}
	if (n == 0) {
		*median = *pooled = NAN;
		return;
	}
	*median = median_of(r, n);
	*pooled = t_lib / t_fs;
}

/* Round k, setting i: the microseconds way w (Q_HELD or Q_CALL) adds to
 * the library's mean latency (NaN without both figures), and in *rt the
 * GETATTR round trip measured after it. */
static double round_added_us(const struct mnt *m, unsigned k, size_t i, int w, double *rt)
{
	const double *q = m->qps_of[k][i];

	*rt = m->rt_of[k][i][w == Q_CALL];
	return q[Q_LIB] > 0 && q[w] > 0 ? 1e6 / q[w] - 1e6 / q[Q_LIB] : NAN;
}

/* Over the rounds, setting i: the round trips way w adds, each round's
 * over its own round trip: their median, and pooled (the added time of
 * all rounds over their round trips' sum). */
static void round_added_rt(const struct mnt *m, size_t i, int w, double *median,
			   double *pooled)
{
	double r[MAX_ROUNDS], added = 0, rt = 0;
	unsigned n = 0;

	for (unsigned k = 0; k < m->rounds_done; k++) {
		double g, a = round_added_us(m, k, i, w, &g);

		if (!(a == a) || !(g > 0))
			continue;
		r[n++] = a / g;
		added += a;
		rt += g;
	}
	if (n == 0) {
		*median = *pooled = NAN;
		return;
	}
	*median = median_of(r, n);
	*pooled = added / rt;
}

/* round_ratios() of way w as JSON: PREFIXratio_median, PREFIXratio_pooled. */
static void json_round_ratios(const struct mnt *m, size_t i, int w, const char *prefix)
{
	char key[48];
	double med, pooled;

	round_ratios(m, i, w, &med, &pooled);
	snprintf(key, sizeof key, "%sratio_median", prefix);
	tool_json_num(key, med, 4);
	snprintf(key, sizeof key, "%sratio_pooled", prefix);
	tool_json_num(key, pooled, 4);
}

static void mnt_json_row(const struct bench *b, const struct mnt *m, size_t i)
{
	const struct measure *fs = &m->fs[i], *held = &m->held[i], *lib = &m->lib[i];
	const struct measure *call = &m->call[i];
	int sampled;
	uint64_t rss, anon;

	printf("{\"mode\":\"mount\",\"dataset\":");
	tool_json_string(b->ds.name);
	printf(",\"nprobe\":%u", fs->nprobe);
	tool_json_num("recall_at_10", fs->recall, 4);
	tool_json_num("qps", fs->qps, 1);
	tool_json_num("library_qps", lib->qps, 1);
	tool_json_num("ratio", qps_ratio(fs, lib), 4);
	tool_json_num("held_recall_at_10", held->recall, 4);
	tool_json_num("held_qps", held->qps, 1);
	tool_json_num("held_p50_us", held->p50_us, 1);
	tool_json_num("held_ratio", qps_ratio(held, lib), 4);
	tool_json_num("held_write_us", held->write_us, 1);
	tool_json_num("held_read_us", held->read_us, 1);
	tool_json_num("getattr_us", held->getattr_us, 1);
	tool_json_num("held_added_rt", added_us(held, lib) / held->getattr_us, 3);
	tool_json_num("call_recall_at_10", call->recall, 4);
	tool_json_num("call_qps", call->qps, 1);
	tool_json_num("call_p50_us", call->p50_us, 1);
	tool_json_num("call_ratio", qps_ratio(call, lib), 4);
	tool_json_num("call_getattr_us", call->getattr_us, 1);
	tool_json_num("call_added_rt", added_us(call, lib) / call->getattr_us, 3);
	if (b->opt->batch) {
		printf(",\"batch\":%zu", b->opt->batch);
		tool_json_num("batch_recall_at_10", fs->batch_recall, 4);
		tool_json_num("batch_qps", fs->batch_qps, 1);
		tool_json_num("library_batch_qps", lib->batch_qps, 1);
		tool_json_num("batch_ratio", lib->batch_qps > 0 ? fs->batch_qps / lib->batch_qps
							   : NAN, 4);
		tool_json_num("batch_fvecs_recall_at_10", fs->bin_recall, 4);
		tool_json_num("batch_fvecs_qps", fs->bin_qps, 1);
		tool_json_num("batch_fvecs_ratio", lib->batch_qps > 0 ? fs->bin_qps / lib->batch_qps
								 : NAN, 4);
	}
	printf(",\"rounds\":%u", m->rounds_done);
	json_round_ratios(m, i, Q_FS, "");
	json_round_ratios(m, i, Q_HELD, "held_");
	json_round_ratios(m, i, Q_CALL, "call_");
	double med, pooled;
	round_added_rt(m, i, Q_HELD, &med, &pooled);
	tool_json_num("held_added_rt_median", med, 3);
	tool_json_num("held_added_rt_pooled", pooled, 3);
	round_added_rt(m, i, Q_CALL, &med, &pooled);
	tool_json_num("call_added_rt_median", med, 3);
	tool_json_num("call_added_rt_pooled", pooled, 3);
	if (b->opt->batch) {
		json_round_ratios(m, i, Q_BATCH, "batch_");
		json_round_ratios(m, i, Q_BATCH_BIN, "batch_fvecs_");
	}
	tool_json_num("p50_us", fs->p50_us, 1);
	tool_json_num("p99_us", fs->p99_us, 1);
	tool_json_num("library_recall_at_10", lib->recall, 4);
	tool_json_num("library_p50_us", lib->p50_us, 1);
	tool_json_num("library_p99_us", lib->p99_us, 1);
	tool_json_num("added_us", added_us(fs, lib), 1);
	tool_json_num("ingest_rows_per_s", ingest_rate(m, 0), 0);
	tool_json_num("ingest_after_build_rows_per_s",
		 m->ingest_n[1] ? ingest_rate(m, 1) : NAN, 0);
	if (b->opt->files) {
		printf(",\"ingest_files\":%zu", b->opt->files);
		tool_json_num("ingest_file_p50_s", m->file_p50_s, 4);
		tool_json_num("ingest_file_max_s", m->file_max_s, 4);
		printf(",\"ingest_compactions\":%llu,\"ingest_rebalances\":%llu",
		       (unsigned long long)m->maint_compactions,
		       (unsigned long long)m->maint_rebalances);
		tool_json_num("maintenance_wait_s", m->maint_wait_s, 2);
	}
	ingest_peak(m, &sampled, &rss, &anon);
	json_kb("ingest_rss_peak_kb", sampled, rss);
	json_kb("ingest_rss_anon_peak_kb", sampled, anon);
	tool_json_num("build_s", m->build_s, 3);
	printf(",\"build_rows\":%zu", m->build_rows);
	json_kb("build_rss_peak_kb", m->sampled[PH_BUILD], m->rss_kb[PH_BUILD]);
	json_kb("build_rss_anon_peak_kb", m->sampled[PH_BUILD], m->anon_kb[PH_BUILD]);
	printf(",\"unindexed\":%llu,\"mount_unindexed\":%llu,"
	       "\"mount_delta_postings\":%llu", (unsigned long long)m->unindexed,
	       (unsigned long long)m->fs_unindexed, (unsigned long long)m->fs_deltas);
	if (m->have_compactions)
		printf(",\"compactions_during_mount_queries\":%llu",
		       (unsigned long long)(m->compactions[1] - m->compactions[0]));
	else
		printf(",\"compactions_during_mount_queries\":null");
	printf(",\"n\":%zu,\"dim\":%u,\"metric\":\"%s\",\"queries\":%zu,\"k\":%u",
	       b->ds.base.n, b->ds.base.dim, vecfs_metric_name(b->ds.metric), b->nq,
	       b->opt->k);
	printf(",\"nlist\":%u,\"bits\":%u,\"refine\":%u,\"delta_postings\":%llu"
	       ",\"kernel\":", b->gen.nlist, b->gen.bits,
	       b->opt->refine ? b->opt->refine : b->cfg.refine,
	       (unsigned long long)m->delta_postings);
	tool_json_string(vecfs_kernel_name());
	printf(",\"store_bytes\":%llu}\n", (unsigned long long)b->store_bytes);
}

static void print_rounds(const struct bench *b, const struct mnt *m)
{
	printf("\nrounds   %u (the table above is the last), each: queries through "
	       "the mount\n         (mounted again), then the library; ratios to the "
	       "library, round by round:\n", m->rounds_done);
	for (size_t i = 0; i < b->opt->n_nprobe; i++) {
		static const int ways[] = { Q_CALL, Q_HELD, Q_FS, Q_BATCH, Q_BATCH_BIN };
		static const char *const names[] = { "call", "held", "open/close", "batches",
						     "batches, .fvecs" };

		for (int row = 0; row < 3 + 2 * !!b->opt->batch; row++) {
			int w = ways[row], l = lib_way(w);
			if (w == Q_BATCH_BIN && !(m->qps_of[m->rounds_done - 1][i][w] > 0))
				continue; /* not measured at this setting */
			double med, pooled;

			round_ratios(m, i, w, &med, &pooled);
			printf("%6u   %-10s", b->opt->nprobe[i], names[row]);
			for (unsigned k = 0; k < m->rounds_done; k++)
				printf(" %.3f", m->qps_of[k][i][l] > 0 ?
				       m->qps_of[k][i][w] / m->qps_of[k][i][l] : NAN);
			printf("; median %.3f, pooled %.3f\n", med, pooled);
			if (w != Q_CALL && w != Q_HELD)
				continue;
			round_added_rt(m, i, w, &med, &pooled);
			printf("%6s   %-10s", "", "  adds RT");
			for (unsigned k = 0; k < m->rounds_done; k++) {
				double g, a = round_added_us(m, k, i, w, &g);
				printf(" %.2f", a / g);
			}
			printf("; median %.2f, pooled %.2f\n", med, pooled);
		}
	}
}

static void mnt_report(const struct bench *b, const struct mnt *m)
{
	if (!b->opt->ds.json)
		mnt_print_header(b, m);
	for (size_t i = 0; i < b->opt->n_nprobe; i++) {
		if (b->opt->ds.json)
			mnt_json_row(b, m, i);
		else
			mnt_print_row(&m->fs[i], &m->held[i], &m->call[i], &m->lib[i], b->opt->batch);
	}
	if (!b->opt->ds.json && m->rounds_done > 1)
		print_rounds(b, m);
	fflush(stdout);
}

static int mount_run(struct bench *b, struct mnt *m)
{
	int rc, stop_rc;

	if ((rc = load_dataset(b)))
		return rc;
	b->lat_ns = calloc(b->nq, sizeof *b->lat_ns);
	b->hit_ids = calloc(b->opt->k, sizeof *b->hit_ids);
	if (!b->lat_ns || !b->hit_ids)
		return tool_fail(-ENOMEM, NULL, "measure");
	rc = mnt_start(b, m);
	if (!rc)
		rc = mnt_load(b, m);
	for (unsigned r = 0; !rc && r < b->opt->rounds; r++) {
		if (r > 0) {
			fprintf(stderr, "round %u of %u\n", r + 1, b->opt->rounds);
			rc = mnt_launch(m);
		}
		if (!rc)
			rc = mnt_queries(b, m);
		stop_rc = mnt_stop(m);
		if (!rc)
			rc = stop_rc;
		if (!rc && tool_interrupted())
			rc = tool_report_interrupt();
		if (!rc)
			rc = lib_measure(b, m);
		if (b->st.v) { /* the next round mounts the store again */
			vecfs_close(b->st.v);
			b->st.v = NULL;
		}
		for (size_t i = 0; !rc && i < b->opt->n_nprobe; i++) {
			m->qps_of[r][i][Q_FS] = m->fs[i].qps;
			m->qps_of[r][i][Q_HELD] = m->held[i].qps;
			m->qps_of[r][i][Q_LIB] = m->lib[i].qps;
			m->qps_of[r][i][Q_CALL] = m->call[i].qps;
			m->qps_of[r][i][Q_BATCH] = m->fs[i].batch_qps;
			m->qps_of[r][i][Q_LIB_BATCH] = m->lib[i].batch_qps;
			m->qps_of[r][i][Q_BATCH_BIN] = m->fs[i].bin_qps;
			m->rt_of[r][i][0] = m->held[i].getattr_us;
			m->rt_of[r][i][1] = m->call[i].getattr_us;
		}
		if (!rc)
			m->rounds_done = r + 1;
	}
	if (rc)
		return rc;
	mnt_report(b, m);
	return 0;
}

/* The run, --mount's or the library's alone: exit status 1 on an error. */
static int bench_main(void *opt)
{
	struct bench b = { .opt = opt };
	struct mnt m = { .hin = -1, .hout = -1, .hcall = -1 };
	int rc;

	if (b.opt->mount) {
		rc = mount_run(&b, &m);
		mnt_stop(&m); /* done already unless it failed early */
		bench_free(&b);
		mnt_free(&m, b.opt->ds.keep);
	} else {
		rc = bench_run(&b);
		bench_free(&b);
	}
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct tool_main tool = { PROG, usage_text, 1, parse_args, bench_main };
	static struct options opt;

	return tool_main(argc, argv, &tool, &opt, &opt.ds.help);
}
