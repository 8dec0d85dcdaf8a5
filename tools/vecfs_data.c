/*
 * vecfs-data - synthetic data sets for vecfs, and recall of query results.
 *
 * Generate mode writes a clustered Gaussian mixture in TEXMEX format:
 *   DIR/base.fvecs   N rows (or DIR/base.npy with --format npy)
 *   DIR/query.fvecs  Q fresh points from the same mixture
 *   DIR/gt.ivecs     the exact top-K base rows of each query (brute force)
 *   DIR/query.txt    with --text: the queries as text, one vector a line
 *   DIR/README.md    how the set was made; its `metric:` line is read by
 *                    vecfs-bench
 *
 * The mixture: C centres uniform in [-1,1]^D times 10; each cluster has its
 * own scale, uniform in [0.5,1.5] times --spread, and a Zipf-like share of
 * the points (weight 1/(c+1)).  A point is its centre plus scale times a
 * standard normal vector.  Everything follows from --seed through our own
 * PRNG (splitmix64 seeding xoshiro256**) and Box-Muller, so a seed gives the
 * same files on every machine; the base rows, the queries and the centres
 * use separate streams, so changing --n leaves the queries alone.
 *
 * Recall mode (--recall OUT GT) scores a query/ID/out file of vecfs (KEY TAB
 * DISTANCE lines, one empty line between queries, keys are base row
 * numbers) against a gt.ivecs file.
 *
 * Files are written under a temporary name and renamed into place once
 * complete, so a failed run leaves no partial file behind.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "toolutil.h"

#define PROG "vecfs-data"
#define CHUNK_ROWS 4096        /* rows generated and written at a time */
#define MAX_DIM (1u << 20)
#define MAX_GT 100000
#define MAX_THREADS 256
#define ZIPF_EXPONENT 1.0

static const char usage_text[] =
	"usage: " PROG " --n N --d D [options] --out DIR\n"
	"       " PROG " --recall OUT GT [--k K]\n"
	"\n"
	"Generate a clustered Gaussian data set in DIR (created if missing):\n"
	"DIR/base.fvecs (N rows), DIR/query.fvecs (Q rows, fresh points from the\n"
	"same mixture), DIR/gt.ivecs (the exact top-K base rows of each query,\n"
	"ids counted from 0, by brute force) and DIR/README.md, which says how\n"
	"the set was made (vecfs-bench DIR reads its metric from there).\n"
	"\n"
	"options:\n"
	"  --n N               base vectors (required)\n"
	"  --d D               dimension (required)\n"
	"  --clusters C        mixture components (default 64)\n"
	"  --spread S          scale of the clusters (default 1.0); each cluster\n"
	"                      draws its own scale in [0.5, 1.5] x S around a\n"
	"                      centre in [-10, 10]^D; cluster sizes are Zipf-like\n"
	"  --seed X            PRNG seed (default 1); same seed, same files\n"
	"  --queries Q         query vectors (default 0)\n"
	"  --gt K              ground truth: top-K ids per query (default 10 when\n"
	"                      --queries is given; 0 = no gt.ivecs)\n"
	"  --metric M          l2 (squared Euclidean), cosine or dot, for the\n"
	"                      ground truth (default l2)\n"
	"  --normalize         scale every vector to unit length\n"
	"  --format F          fvecs (default) or npy: DIR/base.npy, a 2-D\n"
	"                      little-endian float32 array (NPY 1.0) instead\n"
	"  --text              also write DIR/query.txt: one query a line, numbers\n"
	"                      separated by spaces (for query/ID/in)\n"
	"  --threads T         threads for the ground truth (default 2)\n"
	"  --quiet             print nothing on success\n"
	"  --out DIR           output directory (required)\n"
	"\n"
	"recall mode:\n"
	"  --recall OUT GT     read OUT, a vecfs query/ID/out file (KEY<TAB>DISTANCE\n"
	"                      lines, an empty line between queries, keys are base\n"
	"                      row numbers), and GT, a gt.ivecs file; print the\n"
	"                      mean recall@K over the queries in OUT (the first\n"
	"                      queries of GT), as `recall@K = R (Q queries)`\n"
	"  --k K               K for recall (default 10)\n"
	"  --help              show this help\n";

/* ---------------------------------------------------------------- errors */

static void die(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void usage_die(const char *fmt, const char *arg)
{
	fputs(PROG ": ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\n(try " PROG " --help)\n", stderr);
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

/* a*b, exiting if it overflows size_t */
static size_t mul_size(size_t a, size_t b)
{
	if (b && a > SIZE_MAX / b)
		die("data set too large for this machine");
	return a * b;
}

/* ---------------------------------------------------------------- PRNG */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

typedef struct rng {
	uint64_t s[4];
	int have_spare;
	double spare;
} rng;

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256**, seeded from (seed, stream) through splitmix64 */
static void rng_init(rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t sm = seed ^ (stream * 0xd1b54a32d192ed03ULL);

	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&sm);
	r->have_spare = 0;
	r->spare = 0.0;
}

static uint64_t rng_next(rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

/* uniform in [0, 1) */
static double rng_unit(rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* standard normal, Box-Muller (both values used) */
static double rng_gauss(rng *r)
{
	if (r->have_spare) {
		r->have_spare = 0;
		return r->spare;
	}
	double u1 = ((double)(rng_next(r) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
	double u2 = rng_unit(r);
	double rad = sqrt(-2.0 * log(u1));
	double ang = 6.283185307179586476925 * u2;

	r->spare = rad * sin(ang);
	r->have_spare = 1;
	return rad * cos(ang);
}

enum { STREAM_MODEL = 1, STREAM_BASE = 2, STREAM_QUERY = 3 };

/* ---------------------------------------------------------------- options */

typedef enum { METRIC_L2, METRIC_COSINE, METRIC_DOT } metric_t;

struct options {
	uint64_t n, d, clusters, queries, gt, seed, threads, k;
	double spread;
	metric_t metric;
	int have_n, have_d, have_gt, normalize, npy, text, quiet, help;
	const char *out;
	const char *recall_out, *recall_gt;
};

static uint64_t parse_uint(const char *name, const char *s, uint64_t min, uint64_t max)
{
	char *end;
	unsigned long long x;

	if (!isdigit((unsigned char)*s))
		usage_die("bad value for %s", name);
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end || x < min || x > max) {
		fprintf(stderr, PROG ": %s must be an integer in [%llu, %llu], not '%s'\n",
			name, (unsigned long long)min, (unsigned long long)max, s);
		exit(1);
	}
	return x;
}

static double parse_positive(const char *name, const char *s)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(s, &end);
	if (errno || end == s || *end || !(x > 0.0) || !isfinite(x)) {
		fprintf(stderr, PROG ": %s must be a positive number, not '%s'\n", name, s);
		exit(1);
	}
	return x;
}

static const char *metric_name(metric_t m)
{
	return m == METRIC_L2 ? "l2" : m == METRIC_COSINE ? "cosine" : "dot";
}

/* The value of option argv[*i] ("--opt value" or "--opt=value"). */
static const char *opt_value(int argc, char **argv, int *i, const char *eq, const char *name)
{
	if (eq)
		return eq + 1;
	if (*i + 1 >= argc)
		usage_die("%s needs a value", name);
	return argv[++*i];
}

static void parse_args(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof *o);
	o->clusters = 64;
	o->spread = 1.0;
	o->seed = 1;
	o->threads = 2;
	o->k = 10;
	o->metric = METRIC_L2;

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		char name[32];

		if (len >= sizeof name)
			usage_die("unknown option '%s'", arg);
		memcpy(name, arg, len);
		name[len] = '\0';

#define IS(s) (strcmp(name, (s)) == 0)
#define VAL() opt_value(argc, argv, &i, eq, name)
		if (IS("--help") || IS("-h")) {
			o->help = 1;
		} else if (IS("--n")) {
			o->n = parse_uint(name, VAL(), 1, UINT32_MAX);
			o->have_n = 1;
		} else if (IS("--d")) {
			o->d = parse_uint(name, VAL(), 1, MAX_DIM);
			o->have_d = 1;
		} else if (IS("--clusters")) {
			o->clusters = parse_uint(name, VAL(), 1, 1u << 24);
		} else if (IS("--spread")) {
			o->spread = parse_positive(name, VAL());
		} else if (IS("--seed")) {
			o->seed = parse_uint(name, VAL(), 0, UINT64_MAX);
		} else if (IS("--queries")) {
			o->queries = parse_uint(name, VAL(), 0, UINT32_MAX);
		} else if (IS("--gt")) {
			o->gt = parse_uint(name, VAL(), 0, MAX_GT);
			o->have_gt = 1;
		} else if (IS("--metric")) {
			const char *v = VAL();
			if (strcmp(v, "l2") == 0)
				o->metric = METRIC_L2;
			else if (strcmp(v, "cosine") == 0)
				o->metric = METRIC_COSINE;
			else if (strcmp(v, "dot") == 0)
				o->metric = METRIC_DOT;
			else
				usage_die("--metric must be l2, cosine or dot, not '%s'", v);
		} else if (IS("--normalize")) {
			o->normalize = 1;
		} else if (IS("--format")) {
			const char *v = VAL();
			if (strcmp(v, "npy") == 0)
				o->npy = 1;
			else if (strcmp(v, "fvecs") == 0)
				o->npy = 0;
			else
				usage_die("--format must be fvecs or npy, not '%s'", v);
		} else if (IS("--text")) {
			o->text = 1;
		} else if (IS("--threads")) {
			o->threads = parse_uint(name, VAL(), 1, MAX_THREADS);
		} else if (IS("--quiet")) {
			o->quiet = 1;
		} else if (IS("--out")) {
			o->out = VAL();
			if (!*o->out)
				usage_die("%s", "--out needs a directory");
		} else if (IS("--recall")) {
			if (eq)
				usage_die("%s", "--recall takes two arguments: OUT GT");
			if (i + 2 >= argc)
				usage_die("%s", "--recall needs two arguments: OUT GT");
			o->recall_out = argv[++i];
			o->recall_gt = argv[++i];
		} else if (IS("--k")) {
			o->k = parse_uint(name, VAL(), 1, MAX_GT);
		} else {
			usage_die("unknown argument '%s'", arg);
		}
		if (eq && (IS("--help") || IS("-h") || IS("--normalize") ||
			   IS("--text") || IS("--quiet")))
			usage_die("%s takes no value", name);
#undef IS
#undef VAL
	}
	if (o->help || o->recall_out)
		return;
	if (!o->have_n)
		usage_die("%s", "--n N is required");
	if (!o->have_d)
		usage_die("%s", "--d D is required");
	if (!o->out)
		usage_die("%s", "--out DIR is required");
	if (!o->have_gt)
		o->gt = o->queries ? 10 : 0;
	if (o->gt && !o->queries)
		usage_die("%s", "--gt needs --queries");
	if (o->gt > o->n) {
		fprintf(stderr, PROG ": --gt %llu is more than the %llu base rows\n",
			(unsigned long long)o->gt, (unsigned long long)o->n);
		exit(1);
	}
}

/* ---------------------------------------------------------------- output files */

typedef struct outfile {
	char *path;  /* final name */
	char *tmp;   /* written here, renamed at the end */
	FILE *f;
} outfile;

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = xmalloc(n);

	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

static void out_open(outfile *of, const char *dir, const char *name)
{
	char tmpname[64];

	snprintf(tmpname, sizeof tmpname, ".%s.tmp%ld", name, (long)getpid());
	of->path = join(dir, name);
	of->tmp = join(dir, tmpname);
	of->f = fopen(of->tmp, "wb");
	if (!of->f)
		die("%s: %s", of->tmp, strerror(errno));
	setvbuf(of->f, NULL, _IOFBF, 1 << 20);
}

static void out_write(outfile *of, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, of->f) != n) {
		int e = errno;
		fclose(of->f);
		unlink(of->tmp);
		die("%s: write: %s", of->tmp, strerror(e ? e : EIO));
	}
}

/* Flush, sync, close and rename into place. */
static void out_close(outfile *of)
{
	int e = 0;

	if (fflush(of->f) != 0 || ferror(of->f))
		e = errno ? errno : EIO;
	else if (fsync(fileno(of->f)) != 0 && errno != EINVAL && errno != EROFS)
		e = errno;
	if (fclose(of->f) != 0 && !e)
		e = errno ? errno : EIO;
	of->f = NULL;
	if (e) {
		unlink(of->tmp);
		die("%s: %s", of->tmp, strerror(e));
	}
	if (rename(of->tmp, of->path) != 0) {
		e = errno;
		unlink(of->tmp);
		die("%s: rename to %s: %s", of->tmp, of->path, strerror(e));
	}
	free(of->tmp);
	of->tmp = NULL;
}

static void put_le32(unsigned char *p, uint32_t x)
{
	p[0] = (unsigned char)x;
	p[1] = (unsigned char)(x >> 8);
	p[2] = (unsigned char)(x >> 16);
	p[3] = (unsigned char)(x >> 24);
}

static uint32_t get_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint32_t float_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

/* rows x d floats as little-endian float32, each row led by an int32 d when
 * `fvecs` is set; buf holds at least rows * (d + 1) * 4 bytes */
static void write_rows(outfile *of, const float *v, size_t rows, size_t d,
		       int fvecs, unsigned char *buf)
{
	unsigned char *p = buf;

	for (size_t r = 0; r < rows; r++) {
		if (fvecs) {
			put_le32(p, (uint32_t)d);
			p += 4;
		}
		for (size_t j = 0; j < d; j++, p += 4)
			put_le32(p, float_bits(v[r * d + j]));
	}
	out_write(of, buf, (size_t)(p - buf));
}

/* NPY 1.0 header of an (n, d) '<f4' array, C order, padded so the data
 * starts on a 64-byte boundary */
static void write_npy_header(outfile *of, uint64_t n, uint64_t d)
{
	char dict[160];
	unsigned char head[256];
	int len = snprintf(dict, sizeof dict,
			   "{'descr': '<f4', 'fortran_order': False, 'shape': (%llu, %llu), }",
			   (unsigned long long)n, (unsigned long long)d);
	size_t total = 10 + (size_t)len + 1; /* magic, version, length, dict, \n */
	size_t padded = (total + 63) / 64 * 64;
	size_t hlen = padded - 10;

	memcpy(head, "\x93NUMPY\x01\x00", 8);
	head[8] = (unsigned char)(hlen & 0xff);
	head[9] = (unsigned char)(hlen >> 8);
	memcpy(head + 10, dict, (size_t)len);
	memset(head + 10 + len, ' ', padded - total);
	head[padded - 1] = '\n';
	out_write(of, head, padded);
}

/* ---------------------------------------------------------------- the mixture */

typedef struct model {
	size_t d, c;
	float *centre;   /* c x d */
	double *scale;   /* c */
	double *cdf;     /* c, cumulative share, cdf[c-1] = 1 */
	int normalize;
} model;

static void model_init(model *m, const struct options *o)
{
	rng r;
	double sum = 0.0;

	m->d = o->d;
	m->c = o->clusters;
	m->normalize = o->normalize;
	m->centre = xmalloc(mul_size(mul_size(m->c, m->d), sizeof(float)));
	m->scale = xmalloc(mul_size(m->c, sizeof(double)));
	m->cdf = xmalloc(mul_size(m->c, sizeof(double)));
	rng_init(&r, o->seed, STREAM_MODEL);
	for (size_t i = 0; i < m->c * m->d; i++)
		m->centre[i] = (float)(10.0 * (2.0 * rng_unit(&r) - 1.0));
	for (size_t c = 0; c < m->c; c++) {
		m->scale[c] = o->spread * (0.5 + rng_unit(&r));
		sum += 1.0 / pow((double)(c + 1), ZIPF_EXPONENT);
		m->cdf[c] = sum;
	}
	for (size_t c = 0; c < m->c; c++)
		m->cdf[c] /= sum;
	m->cdf[m->c - 1] = 1.0;
}

static void model_free(model *m)
{
	free(m->centre);
	free(m->scale);
	free(m->cdf);
}

/* One point of the mixture into out[0..d). */
static void model_point(const model *m, rng *r, float *out)
{
	for (;;) {
		double u = rng_unit(r);
		size_t lo = 0, hi = m->c - 1;

		while (lo < hi) { /* first cluster with cdf > u */
			size_t mid = lo + (hi - lo) / 2;
			if (m->cdf[mid] > u)
				hi = mid;
			else
				lo = mid + 1;
		}
		const float *ctr = m->centre + lo * m->d;
		double s = m->scale[lo], norm2 = 0.0;

		for (size_t j = 0; j < m->d; j++) {
			out[j] = (float)(ctr[j] + s * rng_gauss(r));
			norm2 += (double)out[j] * out[j];
		}
		if (!m->normalize)
			return;
		if (norm2 > 0.0 && isfinite(norm2)) {
			double inv = 1.0 / sqrt(norm2);
			for (size_t j = 0; j < m->d; j++)
				out[j] = (float)(out[j] * inv);
			return;
		}
		/* a zero vector cannot be normalised: draw again */
	}
}

/* ---------------------------------------------------------------- ground truth */

typedef struct gt_job {
	const float *base, *query;
	const double *bnorm;   /* base norms, cosine only */
	size_t n, nq, d, k;
	metric_t metric;
	size_t first, step;    /* queries first, first+step, ... */
	int32_t *ids;          /* nq x k */
} gt_job;

typedef struct cand {
	double dist;
	uint32_t id;
} cand;

/* Distances in double, four partial sums (independent chains run in
 * parallel on the FPU); the sum order is fixed, so results are too. */
static double distance(const gt_job *j, const float *q, double qnorm, size_t row)
{
	const float *x = j->base + row * j->d;
	double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
	size_t t = 0, d = j->d;

	if (j->metric == METRIC_L2) {
		for (; t + 4 <= d; t += 4) {
			double e0 = (double)q[t] - x[t], e1 = (double)q[t + 1] - x[t + 1];
			double e2 = (double)q[t + 2] - x[t + 2], e3 = (double)q[t + 3] - x[t + 3];
			a0 += e0 * e0;
			a1 += e1 * e1;
			a2 += e2 * e2;
			a3 += e3 * e3;
		}
		for (; t < d; t++) {
			double e = (double)q[t] - x[t];
			a0 += e * e;
		}
		return (a0 + a1) + (a2 + a3);
	}
	for (; t + 4 <= d; t += 4) {
		a0 += (double)q[t] * x[t];
		a1 += (double)q[t + 1] * x[t + 1];
		a2 += (double)q[t + 2] * x[t + 2];
		a3 += (double)q[t + 3] * x[t + 3];
	}
	for (; t < d; t++)
		a0 += (double)q[t] * x[t];
	double dot = (a0 + a1) + (a2 + a3);
	if (j->metric == METRIC_DOT)
		return -dot;
	double den = qnorm * j->bnorm[row];
	return den > 0.0 ? 1.0 - dot / den : 1.0;
}

static void *gt_worker(void *arg)
{
	gt_job *j = arg;
	cand *best = xmalloc(mul_size(j->k, sizeof(cand)));

	for (size_t qi = j->first; qi < j->nq; qi += j->step) {
		const float *q = j->query + qi * j->d;
		double qnorm = 0.0;
		size_t have = 0;

		if (j->metric == METRIC_COSINE) {
			for (size_t t = 0; t < j->d; t++)
				qnorm += (double)q[t] * q[t];
			qnorm = sqrt(qnorm);
		}
		/* best[0..have) sorted by (dist, id); rows come in id order, so
		 * a row only enters with a strictly smaller distance */
		for (size_t row = 0; row < j->n; row++) {
			double dd = distance(j, q, qnorm, row);
			size_t pos;

			if (have == j->k && !(dd < best[have - 1].dist))
				continue;
			pos = have < j->k ? have++ : have - 1;
			while (pos > 0 && best[pos - 1].dist > dd) {
				best[pos] = best[pos - 1];
				pos--;
			}
			best[pos].dist = dd;
			best[pos].id = (uint32_t)row;
		}
		for (size_t t = 0; t < j->k; t++)
			j->ids[qi * j->k + t] = (int32_t)best[t].id;
	}
	free(best);
	return NULL;
}

static int32_t *ground_truth(const float *base, size_t n, const float *query,
			     size_t nq, size_t d, size_t k, metric_t metric,
			     size_t threads)
{
	int32_t *ids = xmalloc(mul_size(mul_size(nq, k), sizeof(int32_t)));
	double *bnorm = NULL;
	gt_job jobs[MAX_THREADS];
	pthread_t th[MAX_THREADS];

	if (metric == METRIC_COSINE) {
		bnorm = xmalloc(mul_size(n, sizeof(double)));
		for (size_t r = 0; r < n; r++) {
			double s = 0.0;
			for (size_t t = 0; t < d; t++)
				s += (double)base[r * d + t] * base[r * d + t];
			bnorm[r] = sqrt(s);
		}
	}
	if (threads > nq)
		threads = nq;
	for (size_t t = 0; t < threads; t++) {
		jobs[t] = (gt_job){ .base = base, .query = query, .bnorm = bnorm,
				    .n = n, .nq = nq, .d = d, .k = k,
				    .metric = metric, .first = t, .step = threads,
				    .ids = ids };
	}
	/* threads 1.. run on their own; a job whose thread could not start
	 * runs here after job 0 */
	int started[MAX_THREADS] = { 0 };
	for (size_t t = 1; t < threads; t++)
		started[t] = pthread_create(&th[t], NULL, gt_worker, &jobs[t]) == 0;
	gt_worker(&jobs[0]);
	for (size_t t = 1; t < threads; t++) {
		if (started[t])
			pthread_join(th[t], NULL);
		else
			gt_worker(&jobs[t]);
	}
	free(bnorm);
	return ids;
}

/* ---------------------------------------------------------------- generate */

static void make_dir(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0777) == 0)
		return;
	if (errno != EEXIST)
		die("%s: %s", dir, strerror(errno));
	if (stat(dir, &st) != 0)
		die("%s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		die("%s: not a directory", dir);
}

static void write_text_row(outfile *of, const float *v, size_t d)
{
	char num[32];

	for (size_t j = 0; j < d; j++) {
		int len = snprintf(num, sizeof num, j ? " %.9g" : "%.9g", (double)v[j]);
		out_write(of, num, (size_t)len);
	}
	out_write(of, "\n", 1);
}

/* DIR/README.md: what the files are and how they were made; its `metric:`
 * line tells vecfs-bench which metric the ground truth uses. */
static void write_readme(const struct options *o, const model *m)
{
	outfile of;
	char text[2048];
	int len;

	len = snprintf(text, sizeof text,
		"# A synthetic data set made by vecfs-data\n"
		"\n"
		"- command: `vecfs-data --n %llu --d %llu --clusters %zu --spread %g --seed %llu"
		" --queries %llu --gt %llu --metric %s%s%s`\n"
		"- base: %s, %llu x %llu float32\n"
		"- queries: %s\n"
		"- ground truth: %s\n"
		"- metric: %s\n"
		"- mixture: %zu Gaussian clusters, centres uniform in [-10, 10]^%llu,"
		" per-cluster scale in [0.5, 1.5] x %g, cluster shares 1/(c+1)%s\n",
		(unsigned long long)o->n, (unsigned long long)o->d, m->c, o->spread,
		(unsigned long long)o->seed, (unsigned long long)o->queries,
		(unsigned long long)o->gt, metric_name(o->metric),
		o->normalize ? " --normalize" : "", o->npy ? " --format npy" : "",
		o->npy ? "base.npy" : "base.fvecs", (unsigned long long)o->n,
		(unsigned long long)o->d,
		o->queries ? (o->text ? "query.fvecs and query.txt" : "query.fvecs") : "none",
		o->gt ? "gt.ivecs, exact top-k base row ids (from 0) per query" : "none",
		metric_name(o->metric), m->c, (unsigned long long)o->d, o->spread,
		o->normalize ? "; every vector scaled to unit length" : "");
	if (len < 0 || (size_t)len >= sizeof text)
		die("README.md: text too long");
	out_open(&of, o->out, "README.md");
	out_write(&of, text, (size_t)len);
	out_close(&of);
	free(of.path);
}

static int generate(const struct options *o)
{
	size_t n = o->n, d = o->d, nq = o->queries, k = o->gt;
	model m;
	rng r;
	outfile of;
	float *chunk, *base = NULL, *query = NULL;
	unsigned char *buf;

	make_dir(o->out);
	model_init(&m, o);
	buf = xmalloc(mul_size(mul_size(CHUNK_ROWS, d + 1), 4));
	chunk = xmalloc(mul_size(mul_size(CHUNK_ROWS, d), sizeof(float)));
	if (k)
		base = xmalloc(mul_size(mul_size(n, d), sizeof(float)));

	/* base rows, streamed; kept in memory only for the ground truth */
	out_open(&of, o->out, o->npy ? "base.npy" : "base.fvecs");
	if (o->npy)
		write_npy_header(&of, n, d);
	rng_init(&r, o->seed, STREAM_BASE);
	for (size_t done = 0; done < n;) {
		size_t rows = n - done < CHUNK_ROWS ? n - done : CHUNK_ROWS;
		float *dst = base ? base + done * d : chunk;

		for (size_t i = 0; i < rows; i++)
			model_point(&m, &r, dst + i * d);
		write_rows(&of, dst, rows, d, !o->npy, buf);
		done += rows;
	}
	out_close(&of);
	if (!o->quiet)
		printf("%s: %zu x %zu float32, %zu clusters, spread %g, seed %llu%s\n",
		       of.path, n, d, m.c, o->spread, (unsigned long long)o->seed,
		       o->normalize ? ", normalized" : "");
	free(of.path);

	if (nq) {
		query = xmalloc(mul_size(mul_size(nq, d), sizeof(float)));
		rng_init(&r, o->seed, STREAM_QUERY);
		for (size_t i = 0; i < nq; i++)
			model_point(&m, &r, query + i * d);
		out_open(&of, o->out, "query.fvecs");
		for (size_t done = 0; done < nq; done += CHUNK_ROWS) {
			size_t rows = nq - done < CHUNK_ROWS ? nq - done : CHUNK_ROWS;
			write_rows(&of, query + done * d, rows, d, 1, buf);
		}
		out_close(&of);
		if (!o->quiet)
			printf("%s: %zu x %zu float32\n", of.path, nq, d);
		free(of.path);
		if (o->text) {
			out_open(&of, o->out, "query.txt");
			for (size_t i = 0; i < nq; i++)
				write_text_row(&of, query + i * d, d);
			out_close(&of);
			if (!o->quiet)
				printf("%s: %zu lines\n", of.path, nq);
			free(of.path);
		}
	}

	if (k) {
		int32_t *ids = ground_truth(base, n, query, nq, d, k, o->metric,
					    (size_t)o->threads);
		unsigned char *row = xmalloc(mul_size(k + 1, 4));

		out_open(&of, o->out, "gt.ivecs");
		for (size_t i = 0; i < nq; i++) {
			put_le32(row, (uint32_t)k);
			for (size_t t = 0; t < k; t++)
				put_le32(row + 4 * (t + 1), (uint32_t)ids[i * k + t]);
			out_write(&of, row, (k + 1) * 4);
		}
		out_close(&of);
		if (!o->quiet)
			printf("%s: top %zu of %zu queries, %s, exact\n", of.path, k,
			       nq, metric_name(o->metric));
		free(of.path);
		free(row);
		free(ids);
	}
	write_readme(o, &m);
	if (!o->quiet && fflush(stdout) != 0)
		die("stdout: %s", strerror(errno));
	free(query);
	free(base);
	free(chunk);
	free(buf);
	model_free(&m);
	return 0;
}

/* ---------------------------------------------------------------- recall */

typedef struct gtfile {
	size_t rows, k;
	int32_t *ids; /* rows x k */
} gtfile;

static void read_gt(const char *path, gtfile *g)
{
	FILE *f = fopen(path, "rb");
	unsigned char hdr[4];
	size_t cap = 0;

	if (!f)
		die("%s: %s", path, strerror(errno));
	g->rows = g->k = 0;
	g->ids = NULL;
	for (;;) {
		size_t got = fread(hdr, 1, 4, f);
		if (got == 0)
			break;
		if (got != 4)
			die("%s: row %zu: truncated", path, g->rows);
		uint32_t k = get_le32(hdr);
		if (k == 0 || k > MAX_GT)
			die("%s: row %zu: bad length %u", path, g->rows, k);
		if (g->rows == 0)
			g->k = k;
		else if (k != g->k)
			die("%s: row %zu: %u ids, earlier rows have %zu", path, g->rows, k, g->k);
		if (g->rows == cap) {
			cap = cap ? cap * 2 : 256;
			int32_t *n = realloc(g->ids, mul_size(mul_size(cap, k), sizeof(int32_t)));
			if (!n)
				die("out of memory");
			g->ids = n;
		}
		unsigned char *raw = (unsigned char *)(g->ids + g->rows * k);
		if (fread(raw, 4, k, f) != k)
			die("%s: row %zu: truncated", path, g->rows);
		for (uint32_t t = 0; t < k; t++) {
			uint32_t u = get_le32(raw + 4 * t);
			memcpy(raw + 4 * t, &u, 4);
		}
		g->rows++;
	}
	if (ferror(f))
		die("%s: read: %s", path, strerror(errno ? errno : EIO));
	fclose(f);
	if (g->rows == 0)
		die("%s: no rows", path);
}

/* A decimal row number, or -1 when the key is not one. */
static long long key_row(const char *s, size_t len)
{
	long long x = 0;

	if (len == 0 || len > 12)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		x = x * 10 + (s[i] - '0');
	}
	return x;
}

/* Score one query's keys against its ground-truth row: hits among the
 * first k keys that are among the first k true ids. */
static size_t score(const long long *keys, size_t nkeys, const int32_t *truth, size_t k)
{
	size_t hits = 0;

	if (nkeys > k)
		nkeys = k;
	for (size_t i = 0; i < nkeys; i++) {
		int dup = 0;
		for (size_t j = 0; j < i; j++)
			dup |= keys[j] == keys[i];
		if (dup || keys[i] < 0)
			continue;
		for (size_t t = 0; t < k; t++)
			if ((long long)truth[t] == keys[i]) {
				hits++;
				break;
			}
	}
	return hits;
}

static int recall(const struct options *o)
{
	gtfile g;
	FILE *f;
	char *line = NULL;
	size_t linecap = 0, lineno = 0, nq = 0, nkeys = 0, hits = 0, short_q = 0;
	size_t k = o->k;
	long long *keys;
	ssize_t len;
	int in_query = 0;

	read_gt(o->recall_gt, &g);
	if (k > g.k)
		die("%s has %zu ids per query, fewer than --k %zu", o->recall_gt, g.k, k);
	keys = xmalloc(mul_size(k, sizeof(long long)));
	f = fopen(o->recall_out, "r");
	if (!f)
		die("%s: %s", o->recall_out, strerror(errno));

	errno = 0;
	while ((len = getline(&line, &linecap, f)) >= 0) {
		lineno++;
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len == 0) { /* the end of a query's results */
			if (in_query) {
				hits += score(keys, nkeys, g.ids + nq * g.k, k);
				short_q += nkeys < k;
				nq++;
			}
			in_query = 0;
			nkeys = 0;
			continue;
		}
		char *tab = memchr(line, '\t', (size_t)len);
		if (!tab)
			die("%s: line %zu: not KEY<TAB>DISTANCE", o->recall_out, lineno);
		if (!in_query && nq == g.rows)
			die("%s: more queries than the %zu rows of %s", o->recall_out,
			    g.rows, o->recall_gt);
		in_query = 1;
		if (nkeys < k)
			keys[nkeys] = key_row(line, (size_t)(tab - line));
		nkeys++;
		errno = 0;
	}
	if (ferror(f))
		die("%s: read: %s", o->recall_out, strerror(errno ? errno : EIO));
	fclose(f);
	free(line);
	if (in_query) {
		hits += score(keys, nkeys, g.ids + nq * g.k, k);
		short_q += nkeys < k;
		nq++;
	}
	if (nq == 0)
		die("%s: no results", o->recall_out);
	printf("recall@%zu = %.4f (%zu queries)\n", k, (double)hits / ((double)nq * (double)k), nq);
	if (short_q)
		printf("note: %zu of the queries returned fewer than %zu results\n", short_q, k);
	if (fflush(stdout) != 0)
		die("stdout: %s", strerror(errno));
	free(keys);
	free(g.ids);
	return 0;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	struct options o;

	tool_init(PROG, NULL);
	int vs = tool_version(argc, argv);
	if (vs >= 0)
		return vs;
	parse_args(argc, argv, &o);
	if (o.help) {
		fputs(usage_text, stdout);
		if (fflush(stdout) != 0)
			die("stdout: %s", strerror(errno));
		return 0;
	}
	if (o.recall_out)
		return recall(&o);
	return generate(&o);
}
