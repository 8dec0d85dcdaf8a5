/*
 * vecfs-bench - recall and speed of vecfs on a dataset in TEXMEX format.
 *
 * Reads DIR/base.fvecs, DIR/query.fvecs and DIR/gt.ivecs, loads the base
 * vectors into a fresh store, builds one generation, then measures an exact
 * scan and an index search for each --nprobe value.  Every query is one
 * vecfs_search call on one thread.  Keys are assigned by the store in order
 * ("0", "1", ...), so a hit's key is the base row index, which is the id the
 * ground truth uses.
 */
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vecfs.h"

#define PROG "vecfs-bench"
#define BATCH_ROWS 10000   /* rows per vecfs_put */
#define RECALL_AT 10       /* ground-truth ids a query is scored against */
#define MAX_NPROBE 64      /* values in one --nprobe list */
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
	"  --nprobe LIST           comma-separated nprobe values (default 4,8,16,32,64)\n"
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
	"  --help                  show this help\n"
	"\n"
	"recall@10 is the share of the first 10 ground-truth ids found among the\n"
	"returned keys.  QPS is queries divided by the time spent in vecfs_search;\n"
	"p50_us and p99_us are per-query latencies; xExact is QPS over the exact\n"
	"scan's QPS.  The temporary store is made under $TMPDIR (or /tmp) and\n"
	"removed at exit.\n";

static const uint32_t default_nprobe[] = { 4, 8, 16, 32, 64 };

/* ---------------------------------------------------------------- options */

struct options {
	const char *dir;
	const char *store;       /* NULL: temporary */
	int have_metric;
	vecfs_metric metric;
	uint32_t nprobe[MAX_NPROBE];
	size_t n_nprobe;
	uint32_t bits, refine, nlist; /* 0 = library default */
	uint32_t k;
	size_t queries;          /* 0 = all */
	size_t exact_queries;    /* queries timed for the exact scan */
	const char *reuse;       /* an existing store to query as it is */
	size_t warmup;           /* untimed queries before each setting */
	int have_warmup;
	int json, keep, help;
};

enum opt_id {
	OPT_METRIC, OPT_NPROBE, OPT_BITS, OPT_REFINE, OPT_NLIST, OPT_K,
	OPT_QUERIES, OPT_EXACTQ, OPT_REUSE, OPT_WARMUP, OPT_STORE, OPT_JSON, OPT_KEEP, OPT_HELP
};

struct opt_spec {
	const char *name;
	int has_arg;
	enum opt_id id;
};

static const struct opt_spec opt_table[] = {
	{ "--metric", 1, OPT_METRIC },   { "--nprobe", 1, OPT_NPROBE },
	{ "--bits", 1, OPT_BITS },       { "--refine", 1, OPT_REFINE },
	{ "--nlist", 1, OPT_NLIST },     { "--k", 1, OPT_K },
	{ "--queries", 1, OPT_QUERIES }, { "--store", 1, OPT_STORE },
	{ "--exact-queries", 1, OPT_EXACTQ }, { "--reuse", 1, OPT_REUSE },
	{ "--warmup", 1, OPT_WARMUP },
	{ "--json", 0, OPT_JSON },       { "--keep", 0, OPT_KEEP },
	{ "--help", 0, OPT_HELP },       { "-h", 0, OPT_HELP },
};

/* Print "vecfs-bench: <what>: <strerror(-rc)>[: <err>]" and return rc. */
static int fail(int rc, const char *err, const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s", strerror(rc < 0 ? -rc : rc));
	if (err && *err)
		fprintf(stderr, ": %s", err);
	fputc('\n', stderr);
	return rc;
}

static int usage_error(const char *fmt, const char *arg)
{
	fputs(PROG ": ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\n(try " PROG " --help)\n", stderr);
	return -EINVAL;
}

/* A decimal number in [min, max]; no sign, no trailing characters. */
static int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end || x < min || x > max)
		return -EINVAL;
	*out = x;
	return 0;
}

static int parse_u32(const char *s, uint32_t min, uint32_t *out)
{
	uint64_t x;

	if (parse_uint(s, min, UINT32_MAX, &x))
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
		if (parse_u32(item, 1, &o->nprobe[n]))
			return -EINVAL;
		n++;
		if (s[len] == '\0')
			break;
		s += len + 1;
	}
	o->n_nprobe = n;
	return 0;
}

static int apply_opt(struct options *o, const struct opt_spec *spec,
		     const char *val)
{
	uint64_t q;
	int bad = 0;

	switch (spec->id) {
	case OPT_METRIC:
		bad = vecfs_metric_parse(val, &o->metric) != 0;
		o->have_metric = 1;
		break;
	case OPT_NPROBE:
		bad = parse_nprobe_list(val, o) != 0;
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
	case OPT_QUERIES:
		bad = parse_uint(val, 1, SIZE_MAX, &q) != 0;
		o->queries = (size_t)q;
		break;
	case OPT_WARMUP:
		bad = parse_uint(val, 0, SIZE_MAX, &q) != 0;
		o->warmup = (size_t)q;
		o->have_warmup = 1;
		break;
	case OPT_REUSE:
		bad = *val == '\0';
		o->reuse = val;
		break;
	case OPT_EXACTQ:
		bad = parse_uint(val, 1, SIZE_MAX, &q) != 0;
		o->exact_queries = (size_t)q;
		break;
	case OPT_STORE:
		bad = *val == '\0';
		o->store = val;
		break;
	case OPT_JSON:
		o->json = 1;
		break;
	case OPT_KEEP:
		o->keep = 1;
		break;
	case OPT_HELP:
		o->help = 1;
		break;
	}
	if (bad) {
		fprintf(stderr, PROG ": bad value for %s: '%s'\n", spec->name, val);
		return -EINVAL;
	}
	return 0;
}

static const struct opt_spec *find_opt(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof opt_table / sizeof opt_table[0]; i++)
		if (strlen(opt_table[i].name) == len &&
		    memcmp(opt_table[i].name, name, len) == 0)
			return &opt_table[i];
	return NULL;
}

/* Accepts "--opt value" and "--opt=value"; the one other argument is DIR. */
static int parse_args(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof *o);
	o->k = 10;
	memcpy(o->nprobe, default_nprobe, sizeof default_nprobe);
	o->n_nprobe = sizeof default_nprobe / sizeof default_nprobe[0];

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *val = NULL, *eq;
		const struct opt_spec *spec;
		size_t len;
		int rc;

		if (arg[0] != '-' || arg[1] == '\0') {
			if (o->dir)
				return usage_error("unexpected argument '%s'", arg);
			o->dir = arg;
			continue;
		}
		eq = strchr(arg, '=');
		len = eq ? (size_t)(eq - arg) : strlen(arg);
		spec = find_opt(arg, len);
		if (!spec)
			return usage_error("unknown option '%s'", arg);
		if (spec->has_arg) {
			if (eq)
				val = eq + 1;
			else if (i + 1 < argc)
				val = argv[++i];
			else
				return usage_error("%s needs a value", spec->name);
		} else if (eq) {
			return usage_error("%s takes no value", spec->name);
		}
		rc = apply_opt(o, spec, val);
		if (rc)
			return rc;
	}
	if (!o->dir && !o->help)
		return usage_error("%s", "missing dataset directory DIR");
	return 0;
}

/* ---------------------------------------------------------------- signals */

/* SIGINT, SIGTERM and SIGHUP are blocked and polled, so an interrupted run
 * still closes the store and removes its temporary directory. */
static void block_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigprocmask(SIG_BLOCK, set, NULL);
}

static int interrupted(void)
{
	sigset_t p;

	if (sigpending(&p))
		return 0;
	return sigismember(&p, SIGINT) == 1 || sigismember(&p, SIGTERM) == 1 ||
	       sigismember(&p, SIGHUP) == 1;
}

static int report_interrupt(void)
{
	fputs(PROG ": interrupted\n", stderr);
	return -EINTR;
}

/* ---------------------------------------------------------------- progress */

/* One status line on stderr, rewritten in place with \r when it changes. */
struct progress {
	const char *label;
	char phase[32];
	int pct;
	int width;
	int shown;
};

static void progress_show(struct progress *p, const char *phase, int pct)
{
	int w;

	if (!phase)
		phase = "";
	if (p->shown && p->pct == pct &&
	    strncmp(p->phase, phase, sizeof p->phase - 1) == 0)
		return;
	snprintf(p->phase, sizeof p->phase, "%s", phase);
	p->pct = pct;
	w = fprintf(stderr, "\r%s: %s%s%d%%", p->label, p->phase,
		    *p->phase ? " " : "", pct);
	if (w < p->width)
		fprintf(stderr, "%*s", p->width - w, "");
	else
		p->width = w;
	fflush(stderr);
	p->shown = 1;
}

static void progress_end(struct progress *p)
{
	if (p->shown)
		fputc('\n', stderr);
	p->shown = 0;
	p->width = 0;
}

static int build_progress(void *arg, const char *phase, int pct)
{
	progress_show(arg, phase, pct);
	return interrupted(); /* non-zero cancels the build */
}

/* ---------------------------------------------------------------- time */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- datasets */

/* Rows of a .fvecs or .ivecs file: n rows of dim 4-byte values. */
struct vecs {
	size_t n;
	uint32_t dim;
	void *data;
};

static int join_path(char *buf, size_t cap, const char *dir, const char *name)
{
	if ((size_t)snprintf(buf, cap, "%s/%s", dir, name) >= cap)
		return fail(-ENAMETOOLONG, NULL, "%s/%s", dir, name);
	return 0;
}

static int read_rows(FILE *f, const char *path, struct vecs *m)
{
	unsigned char *out = m->data;
	size_t row_bytes = (size_t)m->dim * 4;
	char detail[64];

	for (size_t i = 0; i < m->n; i++) {
		int32_t d;

		if (fread(&d, 4, 1, f) != 1 ||
		    fread(out + i * row_bytes, 4, m->dim, f) != m->dim) {
			if (ferror(f))
				return fail(-EIO, NULL, "read %s", path);
			snprintf(detail, sizeof detail, "row %zu is truncated", i);
			return fail(-EINVAL, detail, "read %s", path);
		}
		if (d != (int32_t)m->dim) {
			snprintf(detail, sizeof detail,
				 "row %zu has dimension %d, not %u", i, (int)d, m->dim);
			return fail(-EINVAL, detail, "read %s", path);
		}
	}
	return 0;
}

/* Load at most `limit` rows (0 = all) of a TEXMEX file. */
static int load_vecs(const char *path, size_t limit, struct vecs *m)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	int32_t d;
	size_t row_bytes;
	char detail[96];
	int rc;

	if (!f)
		return fail(-errno, NULL, "open %s", path);
	if (fstat(fileno(f), &st)) {
		rc = fail(-errno, NULL, "stat %s", path);
		goto out;
	}
	if (fread(&d, 4, 1, f) != 1 || d < 1 || d > VECFS_DIM_MAX) {
		rc = fail(-EINVAL, "no valid first row", "read %s", path);
		goto out;
	}
	row_bytes = 4 + 4 * (size_t)d;
	if ((uint64_t)st.st_size % row_bytes) {
		snprintf(detail, sizeof detail,
			 "size %lld is not a multiple of the row size %zu",
			 (long long)st.st_size, row_bytes);
		rc = fail(-EINVAL, detail, "read %s", path);
		goto out;
	}
	m->dim = (uint32_t)d;
	m->n = (size_t)((uint64_t)st.st_size / row_bytes);
	if (limit && m->n > limit)
		m->n = limit;
	m->data = malloc(m->n * (size_t)m->dim * 4);
	if (!m->data) {
		rc = fail(-ENOMEM, NULL, "load %s", path);
		goto out;
	}
	rewind(f);
	rc = read_rows(f, path, m);
out:
	fclose(f);
	return rc;
}

/* The first `metric:` line of DIR/README.md naming a known metric, e.g.
 * "metric: cosine" or "- **metric:** l2 (squared Euclidean)".  1 if found. */
static int readme_metric(const char *dir, vecfs_metric *out)
{
	char path[PATH_MAX], line[1024];
	FILE *f;
	int found = 0;

	if ((size_t)snprintf(path, sizeof path, "%s/README.md", dir) >= sizeof path)
		return 0;
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (!found && fgets(line, sizeof line, f)) {
		const char *p = strcasestr(line, "metric:");
		char word[16];
		size_t n = 0;

		if (!p)
			continue;
		p += strlen("metric:");
		while (*p && strchr(" \t*`_\"'", *p))
			p++;
		while (isalnum((unsigned char)*p) && n + 1 < sizeof word)
			word[n++] = (char)tolower((unsigned char)*p++);
		word[n] = '\0';
		found = n > 0 && vecfs_metric_parse(word, out) == 0;
	}
	fclose(f);
	return found;
}

/* ---------------------------------------------------------------- the run */

/* One measured setting; nprobe 0 is the exact scan. */
struct measure {
	uint32_t nprobe;
	double recall, qps, p50_us, p99_us;
	double pass1_scored, pass1_pruned, pass2_scored, reranked; /* per query */
};

struct bench {
	const struct options *opt;
	char name[256];           /* dataset: last component of DIR */
	vecfs_metric metric;
	const char *metric_from;
	struct vecs base, query, gt;
	size_t nq;
	vecfs *v;
	char store[PATH_MAX];
	int store_is_temp;
	vecfs_config cfg;         /* as stored after setup */
	uint64_t gen_id;
	vecfs_gen_info gen;
	double ingest_s, ingest_rate, build_s;
	uint64_t code_bytes, store_bytes;
	double exact_qps;
	uint64_t *lat_ns;         /* nq latencies of the current setting */
	uint64_t *hit_ids;        /* k parsed keys of one result */
};

static void dataset_name(const char *dir, char *out, size_t cap)
{
	size_t end = strlen(dir), start;

	while (end > 1 && dir[end - 1] == '/')
		end--;
	start = end;
	while (start > 0 && dir[start - 1] != '/')
		start--;
	if (end - start >= cap)
		end = start + cap - 1;
	memcpy(out, dir + start, end - start);
	out[end - start] = '\0';
}

static int load_dataset(struct bench *b)
{
	const struct options *o = b->opt;
	char path[PATH_MAX];
	char detail[96];
	int rc;

	dataset_name(o->dir, b->name, sizeof b->name);
	if (o->have_metric) {
		b->metric = o->metric;
		b->metric_from = "--metric";
	} else if (readme_metric(o->dir, &b->metric)) {
		b->metric_from = "README.md";
	} else {
		b->metric = VECFS_L2;
		b->metric_from = "default";
	}

	if ((rc = join_path(path, sizeof path, o->dir, "base.fvecs")) ||
	    (rc = load_vecs(path, 0, &b->base)))
		return rc;
	if ((rc = join_path(path, sizeof path, o->dir, "query.fvecs")) ||
	    (rc = load_vecs(path, o->queries, &b->query)))
		return rc;
	if (b->query.dim != b->base.dim) {
		snprintf(detail, sizeof detail, "queries have dimension %u, base %u",
			 b->query.dim, b->base.dim);
		return fail(-EINVAL, detail, "load %s", path);
	}
	b->nq = b->query.n;
	if ((rc = join_path(path, sizeof path, o->dir, "gt.ivecs")) ||
	    (rc = load_vecs(path, b->nq, &b->gt)))
		return rc;
	if (b->gt.n < b->nq) {
		snprintf(detail, sizeof detail, "%zu rows for %zu queries",
			 b->gt.n, b->nq);
		return fail(-EINVAL, detail, "load %s", path);
	}
	return 0;
}

/* Create the store directory: --store PATH (must not exist) or mkdtemp. */
static int make_store_dir(struct bench *b)
{
	const char *tmp = getenv("TMPDIR");

	if (b->opt->store) {
		if ((size_t)snprintf(b->store, sizeof b->store, "%s",
				     b->opt->store) >= sizeof b->store)
			return fail(-ENAMETOOLONG, NULL, "--store %s", b->opt->store);
		if (mkdir(b->store, 0755)) {
			int e = errno;

			return fail(-e, e == EEXIST ? "it must not exist" : NULL,
				    "--store %s", b->store);
		}
		return 0;
	}
	if (!tmp || !*tmp)
		tmp = "/tmp";
	if ((size_t)snprintf(b->store, sizeof b->store, "%s/" PROG ".XXXXXX",
			     tmp) >= sizeof b->store)
		return fail(-ENAMETOOLONG, NULL, "temporary directory in %s", tmp);
	if (!mkdtemp(b->store))
		return fail(-errno, NULL, "mkdtemp %s", b->store);
	b->store_is_temp = 1;
	return 0;
}

static int open_store(struct bench *b)
{
	const struct options *o = b->opt;
	char err[ERRLEN] = "";
	vecfs_config c;
	int rc;

	if ((rc = make_store_dir(b)))
		return rc;
	rc = vecfs_open(b->store, &b->v, err, sizeof err);
	if (rc)
		return fail(rc, err, "vecfs_open %s", b->store);
	if ((rc = vecfs_config_get(b->v, &c)))
		return fail(rc, NULL, "vecfs_config_get");
	c.metric = b->metric;
	c.dim = b->base.dim;
	if (o->bits)
		c.bits = o->bits;
	if (o->refine)
		c.refine = o->refine;
	if (o->nlist)
		c.nlist = o->nlist;
	c.auto_build = 0; /* nothing builds in the background */
	rc = vecfs_config_set(b->v, &c, err, sizeof err);
	if (rc)
		return fail(rc, err, "vecfs_config_set");
	if ((rc = vecfs_config_get(b->v, &b->cfg)))
		return fail(rc, NULL, "vecfs_config_get");
	return 0;
}

/* The store must hold exactly the base rows under keys "0".."N-1". */
static int check_ingested(struct bench *b)
{
	vecfs_stats st;
	char detail[128];
	int rc = vecfs_stats_get(b->v, &st);

	if (rc)
		return fail(rc, NULL, "vecfs_stats_get");
	if (st.records != b->base.n || st.next_key != b->base.n) {
		snprintf(detail, sizeof detail,
			 "%llu records and key counter %llu after %zu rows",
			 (unsigned long long)st.records,
			 (unsigned long long)st.next_key, b->base.n);
		return fail(-EPROTO, detail, "ingest");
	}
	return 0;
}

static int ingest(struct bench *b)
{
	const float *base = b->base.data;
	const uint32_t dim = b->base.dim;
	struct progress p = { .label = "ingest" };
	vecfs_row *rows = calloc(BATCH_ROWS, sizeof *rows);
	char err[ERRLEN] = "";
	uint64_t t0;
	int rc = 0;

	if (!rows)
		return fail(-ENOMEM, NULL, "ingest");
	t0 = now_ns();
	for (size_t start = 0; start < b->base.n;) {
		size_t cnt = b->base.n - start, bad = SIZE_MAX;

		if (cnt > BATCH_ROWS)
			cnt = BATCH_ROWS;
		if (interrupted()) {
			progress_end(&p);
			rc = report_interrupt();
			break;
		}
		for (size_t j = 0; j < cnt; j++)
			rows[j] = (vecfs_row){ .vec = base + (start + j) * dim };
		rc = vecfs_put(b->v, rows, cnt, dim, &bad, err, sizeof err);
		if (rc) {
			progress_end(&p);
			if (bad < cnt)
				fail(rc, err, "vecfs_put (base row %zu)", start + bad);
			else
				fail(rc, err, "vecfs_put (base rows %zu..%zu)", start,
				     start + cnt - 1);
			break;
		}
		start += cnt;
		progress_show(&p, "", (int)(start * 100 / b->base.n));
	}
	b->ingest_s = (double)(now_ns() - t0) / 1e9;
	progress_end(&p);
	free(rows);
	if (rc)
		return rc;
	b->ingest_rate = b->ingest_s > 0 ? (double)b->base.n / b->ingest_s : 0;
	return check_ingested(b);
}

/* The library pads vectors to a power of two, at least 64. */
static uint64_t padded_dim(uint32_t dim)
{
	uint64_t p = 64;

	while (p < dim)
		p <<= 1;
	return p;
}

static int build(struct bench *b)
{
	struct progress p = { .label = "build" };
	char err[ERRLEN] = "";
	vecfs_stats st;
	uint64_t t0;
	int rc;

	t0 = now_ns();
	rc = vecfs_build(b->v, 1, &b->gen_id, build_progress, &p, err, sizeof err);
	b->build_s = (double)(now_ns() - t0) / 1e9;
	progress_end(&p);
	if (rc)
		return interrupted() ? report_interrupt() : fail(rc, err, "vecfs_build");
	if ((rc = vecfs_gen_info_get(b->v, b->gen_id, &b->gen)))
		return fail(rc, NULL, "vecfs_gen_info_get %llu",
			    (unsigned long long)b->gen_id);
	if (b->gen.state != VECFS_GEN_READY || vecfs_active(b->v) != b->gen_id)
		return fail(-EPROTO, "not ready and active after the build",
			    "generation %llu", (unsigned long long)b->gen_id);
	/* bits planes plus the sign copy the first pass reads */
	b->code_bytes = (uint64_t)(b->gen.bits + 1) * padded_dim(b->gen.dim) / 8;
	if ((rc = vecfs_stats_get(b->v, &st)))
		return fail(rc, NULL, "vecfs_stats_get");
	b->store_bytes = st.store_bytes;
	return 0;
}

/* A hit's key as a row index: decimal digits only. */
static int parse_key(const vecfs_hit *h, uint64_t *out)
{
	uint64_t x = 0;

	if (!h->key || h->keylen == 0)
		return -EINVAL;
	for (size_t i = 0; i < h->keylen; i++) {
		unsigned d = (unsigned char)h->key[i] - '0';

		if (d > 9 || x > (UINT64_MAX - d) / 10)
			return -EINVAL;
		x = x * 10 + d;
	}
	*out = x;
	return 0;
}

/* Share of the first RECALL_AT ground-truth ids of query qi among the hits. */
static int query_recall(struct bench *b, size_t qi, const vecfs_results *r,
			double *out)
{
	const int32_t *gt = (const int32_t *)b->gt.data + qi * b->gt.dim;
	size_t want = b->gt.dim < RECALL_AT ? b->gt.dim : RECALL_AT;
	size_t cnt = r->nq ? r->count[0] : 0, found = 0;

	if (cnt > b->opt->k)
		cnt = b->opt->k;
	for (size_t j = 0; j < cnt; j++)
		if (parse_key(&r->hits[0][j], &b->hit_ids[j]))
			return fail(-EPROTO, r->hits[0][j].key,
				    "query %zu: hit key is not a row index", qi);
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
	*out = (double)found / (double)want;
	return 0;
}

static int search_one(struct bench *b, size_t qi, const vecfs_query_opts *qo,
		      vecfs_results **r)
{
	const float *q = (const float *)b->query.data + qi * b->query.dim;
	char err[ERRLEN] = "";
	int rc = vecfs_search(b->v, q, 1, b->query.dim, qo, r, err, sizeof err);

	if (rc)
		return fail(rc, err, "vecfs_search (query %zu)", qi);
	return 0;
}

static int warm_up(struct bench *b, const vecfs_query_opts *qo)
{
	size_t want = b->opt->have_warmup ? b->opt->warmup : b->nq;
	size_t n = b->nq < want ? b->nq : want;

	for (size_t i = 0; i < n; i++) {
		vecfs_results *r;
		int rc = search_one(b, i, qo, &r);

		if (rc)
			return rc;
		vecfs_results_free(r);
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
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
}

/* Warm up, then time every query once with these options. */
static int measure_setting(struct bench *b, const vecfs_query_opts *qo,
			   struct measure *m)
{
	vecfs_explain sum = { 0 };
	uint64_t total_ns = 0;
	double recall_sum = 0;
	int rc;

	if ((rc = warm_up(b, qo)))
		return rc;
	for (size_t i = 0; i < b->nq; i++) {
		vecfs_results *r;
		double recall = 0;
		uint64_t t0;

		if ((i & 63) == 0 && interrupted())
			return report_interrupt();
		t0 = now_ns();
		rc = search_one(b, i, qo, &r);
		b->lat_ns[i] = now_ns() - t0;
		if (rc)
			return rc;
		total_ns += b->lat_ns[i];
		rc = query_recall(b, i, r, &recall);
		add_explain(&sum, &r->explain);
		vecfs_results_free(r);
		if (rc)
			return rc;
		recall_sum += recall;
	}
	qsort(b->lat_ns, b->nq, sizeof *b->lat_ns, cmp_u64);
	m->nprobe = qo->exact ? 0 : qo->nprobe;
	m->recall = recall_sum / (double)b->nq;
	m->qps = total_ns ? (double)b->nq * 1e9 / (double)total_ns : 0;
	m->p50_us = percentile_us(b->lat_ns, b->nq, 50);
	m->p99_us = percentile_us(b->lat_ns, b->nq, 99);
	m->pass1_scored = (double)sum.pass1_scored / (double)b->nq;
	m->pass1_pruned = (double)sum.pass1_pruned / (double)b->nq;
	m->pass2_scored = (double)sum.pass2_scored / (double)b->nq;
	m->reranked = (double)sum.reranked / (double)b->nq;
	return 0;
}

/* ---------------------------------------------------------------- output */

static void print_header(const struct bench *b)
{
	const struct options *o = b->opt;

	printf("dataset  %s (%s)\n", b->name, o->dir);
	printf("vectors  N %zu, dim %u, metric %s (%s), queries %zu, k %u\n",
	       b->base.n, b->base.dim, vecfs_metric_name(b->metric),
	       b->metric_from, b->nq, o->k);
	printf("index    generation %llu: nlist %u, bits %u, refine %u, "
	       "covers %llu, code %llu bytes/vector\n",
	       (unsigned long long)b->gen_id, b->gen.nlist, b->gen.bits,
	       o->refine ? o->refine : b->cfg.refine,
	       (unsigned long long)b->gen.covered,
	       (unsigned long long)b->code_bytes);
	printf("kernel   %s\n", vecfs_kernel_name());
	printf("ingest   %.0f rows/s (%zu rows in %.2f s)\n", b->ingest_rate,
	       b->base.n, b->ingest_s);
	printf("build    %.2f s\n", b->build_s);
	printf("store    %.1f MB\n", (double)b->store_bytes / (1024.0 * 1024.0));
	printf("\n%6s %9s %10s %9s %9s %8s %13s %13s %13s %10s\n", "nprobe",
	       "recall@10", "QPS", "p50_us", "p99_us", "xExact", "pass1_scored",
	       "pass1_pruned", "pass2_scored", "reranked");
	fflush(stdout);
}

static void print_row(const struct bench *b, const struct measure *m)
{
	char np[16];

	if (m->nprobe)
		snprintf(np, sizeof np, "%u", m->nprobe);
	else
		snprintf(np, sizeof np, "exact");
	printf("%6s %9.4f %10.1f %9.1f %9.1f %8.2f %13.1f %13.1f %13.1f %10.1f\n",
	       np, m->recall, m->qps, m->p50_us, m->p99_us,
	       b->exact_qps > 0 ? m->qps / b->exact_qps : 0, m->pass1_scored,
	       m->pass1_pruned, m->pass2_scored, m->reranked);
	fflush(stdout);
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_num(const char *key, double x, int decimals)
{
	if (isfinite(x))
		printf(",\"%s\":%.*f", key, decimals, x);
	else
		printf(",\"%s\":null", key);
}

static void json_row(const struct bench *b, const struct measure *m)
{
	printf("{\"mode\":\"%s\",\"dataset\":", m->nprobe ? "ivf" : "exact");
	json_string(b->name);
	printf(",\"nprobe\":%u", m->nprobe);
	json_num("recall_at_10", m->recall, 4);
	json_num("qps", m->qps, 1);
	json_num("p50_us", m->p50_us, 1);
	json_num("p99_us", m->p99_us, 1);
	json_num("build_s", b->build_s, 3);
	printf(",\"code_bytes_per_vector\":%llu", (unsigned long long)b->code_bytes);
	json_num("exact_qps", b->exact_qps, 1);
	printf(",\"n\":%zu,\"dim\":%u,\"metric\":\"%s\",\"queries\":%zu,\"k\":%u",
	       b->base.n, b->base.dim, vecfs_metric_name(b->metric), b->nq,
	       b->opt->k);
	printf(",\"nlist\":%u,\"bits\":%u,\"refine\":%u,\"kernel\":",
	       b->gen.nlist, b->gen.bits,
	       b->opt->refine ? b->opt->refine : b->cfg.refine);
	json_string(vecfs_kernel_name());
	json_num("ingest_rows_per_s", b->ingest_rate, 0);
	printf(",\"store_bytes\":%llu", (unsigned long long)b->store_bytes);
	json_num("pass1_scored", m->pass1_scored, 1);
	json_num("pass1_pruned", m->pass1_pruned, 1);
	json_num("pass2_scored", m->pass2_scored, 1);
	json_num("reranked", m->reranked, 1);
	printf("}\n");
	fflush(stdout);
}

static void report(const struct bench *b, const struct measure *m)
{
	if (b->opt->json)
		json_row(b, m);
	else
		print_row(b, m);
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
		return fail(-ENOMEM, NULL, "measure");
	if (!o->json)
		print_header(b);
	size_t all = b->nq, ne = o->exact_queries ? o->exact_queries : 200;
	b->nq = ne < all ? ne : all;
	rc = measure_setting(b, &qo, &m);
	b->nq = all;
	if (rc)
		return rc;
	b->exact_qps = m.qps;
	report(b, &m);
	for (size_t i = 0; i < o->n_nprobe; i++) {
		qo = (vecfs_query_opts){ .k = o->k, .nprobe = o->nprobe[i],
					 .refine = o->refine };
		if ((rc = measure_setting(b, &qo, &m)))
			return rc;
		report(b, &m);
	}
	return 0;
}

/* --reuse: open a kept store and use its active generation. */
static int reuse_store(struct bench *b)
{
	char err[ERRLEN] = "";
	int rc;

	snprintf(b->store, sizeof b->store, "%s", b->opt->reuse);
	if ((rc = vecfs_open(b->store, &b->v, err, sizeof err)))
		return fail(rc, err, "vecfs_open %s", b->store);
	if ((rc = vecfs_config_get(b->v, &b->cfg)))
		return fail(rc, NULL, "vecfs_config_get");
	b->gen_id = vecfs_active(b->v);
	if (!b->gen_id)
		return fail(-ENOENT, "no active generation", "--reuse %s", b->store);
	if ((rc = vecfs_gen_info_get(b->v, b->gen_id, &b->gen)))
		return fail(rc, NULL, "vecfs_gen_info_get");
	b->code_bytes = (uint64_t)(b->gen.bits + 1) * padded_dim(b->gen.dim) / 8;
	return 0;
}

static int bench_run(struct bench *b)
{
	int rc;

	if ((rc = load_dataset(b)))
		return rc;
	if (b->opt->reuse)
		rc = reuse_store(b);
	else if (!(rc = open_store(b)) && !(rc = ingest(b)))
		rc = build(b);
	return rc ? rc : measure_all(b);
}

static int remove_entry(const char *path, const struct stat *st, int type,
			struct FTW *ftw)
{
	return remove(path) ? errno : 0;
}

static void remove_tree(const char *dir)
{
	int rc = nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);

	if (rc)
		fail(-(rc > 0 ? rc : errno), NULL, "remove %s", dir);
}

static void bench_free(struct bench *b)
{
	if (b->v)
		vecfs_close(b->v);
	if (b->store_is_temp) {
		if (b->opt->keep)
			fprintf(stderr, PROG ": kept store %s\n", b->store);
		else
			remove_tree(b->store);
	}
	free(b->base.data);
	free(b->query.data);
	free(b->gt.data);
	free(b->lat_ns);
	free(b->hit_ids);
}

int main(int argc, char **argv)
{
	struct options opt;
	struct bench b = { 0 };
	sigset_t sigs;
	int rc;

	if (parse_args(argc, argv, &opt))
		return 1;
	if (opt.help) {
		fputs(usage_text, stdout);
		return 0;
	}
	block_signals(&sigs);
	b.opt = &opt;
	rc = bench_run(&b);
	bench_free(&b);
	if (interrupted())
		sigprocmask(SIG_UNBLOCK, &sigs, NULL); /* dies of the signal */
	return rc ? 1 : 0;
}
