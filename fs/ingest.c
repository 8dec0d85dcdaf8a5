/*
 * fs/ingest.c - files written into ingest/: incremental parsers for
 * .csv/.tsv/.txt, .jsonl/.ndjson, .fvecs, .bvecs and .npy.
 *
 * Bytes arrive in write() pieces split anywhere, each at the end of what
 * was written before.  Each row is parsed and checked
 * as soon as it is complete, so a malformed row fails the write() that
 * completes it.  Good rows wait in a batch of the library (vecfs_batch_*,
 * spooled to a temporary file) committed at the close of a process that
 * wrote (told by the FUSE lock owner of its writes and of its FLUSH), which
 * commits them atomically.  A staged file (NAME.EXT.part) never commits at
 * a close: its errors wait, silent, for the rename that commits it.  The
 * buffers of all open files count against one budget of the daemon.
 */
#include "ingest.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "errors.h"
#include "number.h"
#include "sbuf.h"

/* F_DELETE: the root's `delete` file, keys a line, read as text */
enum { F_CSV, F_TSV, F_TXT, F_DELETE, F_JSONL, F_FVECS, F_BVECS, F_NPY };

#define LINE_MAX_BYTES ((size_t)4 << 20)
#define NPY_HEADER_MAX ((size_t)1 << 20)
#define LINE_KEEP ((size_t)64 << 10) /* a line buffer larger is freed after its line */
#define OWNERS_MAX 64  /* writers told apart; past it any close is a writer's */

struct ingest {
	pthread_mutex_t mu;
	fs_daemon *dm;     /* where the rows go */
	char *name;
	char *path;        /* as errors lines name it: ingest/NAME, or delete */
	int fmt;
	uint32_t dim;      /* the file's dimension; 0 until known */
	vecfs_config cfg;  /* the store's, read with dim: what rows are checked
			    * against as they come (the commit checks again) */
	int dim_from_store;
	int numeric_keys;  /* delimited text: every row's key reads as a number */
	uint64_t written;  /* bytes written */
	int dirty;         /* bytes written since the last commit */
	int failed, cancelled, done;
	int fail_rc;       /* failed: the first failure's errno (negative),
			    * which every later write and close returns */
	int staged;        /* NAME.EXT.part: commits at its rename only */
	int defer;         /* staged: errors wait for the rename */
	char *why;         /* staged: the errors line its failure waits to give */
	int told;          /* staged: that line was given (at a rename that kept it) */
	int kept;          /* staged: kept by a failed rename with flags (1), then
			    * by the plain one after it (2) */
	uint64_t owners[OWNERS_MAX]; /* lock owners that wrote since the last commit */
	size_t nowners;    /* OWNERS_MAX + 1: more than were told apart */
	uint64_t opener;   /* pid of the process that made the file */
	size_t charged;    /* bytes of the budget held */
	size_t line_charged; /* of which the capacity of line and npy_hdr */
	/* text formats */
	sbuf line;
	uint64_t lineno;   /* lines completed */
	sbuf key;          /* decoded JSON key */
	sbuf filter;       /* delete: the text of its filter= line */
	uint64_t filter_line; /* delete: that line's number; 0: none */
	/* binary formats */
	uint8_t *row;
	size_t rowlen, rowneed;
	uint64_t rowno;    /* rows completed */
	int npy_stage;     /* 0: magic and length, 1: header, 2: data */
	int npy_f8;        /* '<f8': float64 values, converted to float32 */
	size_t npy_hlen;
	uint64_t npy_rows;
	sbuf npy_hdr;
	/* spool */
	vecfs_batch *batch; /* the rows (delete: keys) since the last commit;
			     * NULL until the first row */
	int batch_charged; /* its write buffer counts against the budget */
	size_t n;          /* rows spooled */
	uint64_t committed; /* rows committed by earlier flushes */
	float *tmp;        /* VECFS_DIM_MAX floats */
};

int ingest_format_of(const char *name)
{
	static const struct {
		const char *ext;
		int fmt;
	} ends[] = {
		{".csv", F_CSV},     {".tsv", F_TSV},     {".txt", F_TXT},     {".jsonl", F_JSONL},
		{".ndjson", F_JSONL}, {".fvecs", F_FVECS}, {".bvecs", F_BVECS}, {".npy", F_NPY},
	};
	size_t n = strlen(name);
	for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
		size_t e = strlen(ends[i].ext);
		if (n > e && !strcmp(name + n - e, ends[i].ext))
			return ends[i].fmt;
	}
	return -1;
}

/* Count n bytes more against the daemon's ingest budget: 0, or -ENOMEM. */
static int budget_take(ingest *in, size_t n)
{
	fs_daemon *dm = in->dm;
	size_t used = atomic_load(&dm->ingest_used);
	do {
		if (used + n > dm->ingest_max || used + n < used)
			return -ENOMEM;
	} while (!atomic_compare_exchange_weak(&dm->ingest_used, &used, used + n));
	in->charged += n;
	return 0;
}

static void budget_give(ingest *in, size_t n)
{
	atomic_fetch_sub(&in->dm->ingest_used, n);
	in->charged -= n;
}

static const char *budget_why(ingest *in, char *buf, size_t cap)
{
	snprintf(buf, cap, "the buffers of the files being ingested would pass %zu MiB "
		 "(-o ingest_buffer_mb); close some", in->dm->ingest_max >> 20);
	return buf;
}

int ingest_format_staged(const char *name)
{
	size_t n = strlen(name);
	if (n <= 5 || strcmp(name + n - 5, ".part"))
		return ingest_format_of(name);
	char *base = strndup(name, n - 5);
	if (!base)
		return -1;
	int f = ingest_format_of(base);
	free(base);
	return f;
}

int ingest_is_staged(const char *name)
{
	size_t n = strlen(name);
	return n > 5 && !strcmp(name + n - 5, ".part") && ingest_format_staged(name) >= 0;
}

ingest *ingest_new_delete(fs_daemon *dm, uint64_t opener)
{
	return ingest_new(dm, "delete", F_DELETE, opener);
}

ingest *ingest_new(fs_daemon *dm, const char *name, int format, uint64_t opener)
{
	ingest *in = calloc(1, sizeof *in);
	if (!in)
		return NULL;
	in->dm = dm;
	in->name = strdup(name);
	if (!in->name || asprintf(&in->path, format == F_DELETE ? "%s" : "ingest/%s", name) < 0) {
		free(in->name);
		free(in);
		return NULL;
	}
	pthread_mutex_init(&in->mu, NULL);
	in->fmt = format;
	in->rowneed = format == F_NPY ? 0 : 4;
	in->staged = in->defer = ingest_is_staged(name);
	in->opener = opener;
	return in;
}

static void spool_clear(ingest *in);
static void line_drop(ingest *in);

/* The binary row buffer: the longest row of the format (.npy: float64). */
static size_t row_size(const ingest *in)
{
	if (in->fmt == F_NPY)
		return (size_t)8 * VECFS_DIM_MAX;
	if (in->fmt == F_FVECS || in->fmt == F_BVECS)
		return 4 + (size_t)4 * VECFS_DIM_MAX;
	return 0;
}

static size_t scratch_size(const ingest *in)
{
	return sizeof(float) * (VECFS_DIM_MAX + 1) + row_size(in);
}

/* The row scratch buffers, made at the first write after the file was
 * made or settled: 0, or -ENOMEM (past the budget: *over set). */
static int scratch_get(ingest *in, int *over)
{
	*over = 0;
	if (in->tmp)
		return 0;
	if (budget_take(in, scratch_size(in))) {
		*over = 1;
		return -ENOMEM;
	}
	in->tmp = malloc(sizeof(float) * (VECFS_DIM_MAX + 1));
	if (row_size(in))
		in->row = malloc(row_size(in));
	if (!in->tmp || (row_size(in) && !in->row)) {
		free(in->tmp);
		free(in->row);
		in->tmp = NULL;
		in->row = NULL;
		budget_give(in, scratch_size(in));
		return -ENOMEM;
	}
	return 0;
}

/* Give back every buffer of a file that committed, failed or was
 * removed: a done file that the kernel still remembers costs nothing. */
static void settle(ingest *in)
{
	spool_clear(in);
	line_drop(in);
	sb_free(&in->key);
	sb_free(&in->filter);
	in->filter_line = 0;
	if (in->tmp)
		budget_give(in, scratch_size(in));
	free(in->tmp);
	free(in->row);
	in->tmp = NULL;
	in->row = NULL;
}

void ingest_free(ingest *in)
{
	if (!in)
		return;
	settle(in);
	free(in->why);
	free(in->name);
	free(in->path);
	pthread_mutex_destroy(&in->mu);
	free(in);
}

/* ---------------------------------------------------------------- failures */

static const char *unit(const ingest *in)
{
	return in->fmt <= F_JSONL ? "line" : "row";
}

/* Log "ingest/NAME: line N: why" (or "delete: …"), drop everything, and mark the file dead
 * (a staged file keeps the line for its rename, and its place in ingest/). */
static int fail_at(ingest *in, int rc, uint64_t where, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail_at(ingest *in, int rc, uint64_t where, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	char tail[128];
	if (in->fmt == F_DELETE)
		snprintf(tail, sizeof tail, "nothing of it was deleted");
	else if (in->staged)
		snprintf(tail, sizeof tail, "nothing of the staged file was committed");
	else if (in->committed)
		snprintf(tail, sizeof tail,
			 "nothing written since the close that committed %llu rows was committed",
			 (unsigned long long)in->committed);
	else
		snprintf(tail, sizeof tail, "nothing of the file was committed");
	char at[48] = "";
	if (where)
		snprintf(at, sizeof at, "%s %llu: ", unit(in), (unsigned long long)where);
	if (in->defer && rc == -EINVAL) {
		/* bad content of a staged file: told by the rename that would
		 * have committed it */
		if (!in->why && asprintf(&in->why, "%s: %s%s; %s", in->path, at, why, tail) < 0)
			in->why = NULL;
	} else {
		errlog_err(&in->dm->errors, rc, "%s: %s%s; %s", in->path, at, why, tail);
		in->done = 1;
	}
	if (!in->failed)
		in->fail_rc = rc;
	in->failed = 1;
	settle(in);
	return rc;
}

/* ---------------------------------------------------------------- spool */

/* Rows wait in a batch of the library, handed over one by one as they are
 * parsed: vecfs_batch_* spools them to an unlinked temporary file next to
 * the store through a write buffer of VECFS_BATCH_BUF bytes, which counts
 * against the budget from the first row until the commit or the end of the
 * file.  Each row is tagged with its line (or row) in the file, so that a
 * commit that fails names it. */

static void spool_clear(ingest *in)
{
	vecfs_batch_abort(in->batch);
	in->batch = NULL;
	if (in->batch_charged)
		budget_give(in, VECFS_BATCH_BUF);
	in->batch_charged = 0;
	in->n = 0;
}

/* The batch, begun at the first row (charge: its buffer counts): 0, or a
 * failure logged. */
static int spool_begin(ingest *in, uint64_t where, int charge)
{
	char why[160];
	int rc;
	if (in->batch)
		return 0;
	if (charge && budget_take(in, VECFS_BATCH_BUF))
		return fail_at(in, -ENOMEM, where, "%s", budget_why(in, why, sizeof why));
	in->batch_charged = charge;
	/* delimited text gives each key once: a key twice is a mistake (rows
	 * with no key column would collapse into a few records) */
	unsigned flags = in->fmt == F_DELETE ? VECFS_BATCH_DELETE
			 : in->fmt < F_JSONL ? VECFS_BATCH_UNIQUE : 0;
	if ((rc = vecfs_batch_begin(in->dm->store, in->fmt == F_DELETE ? 0 : in->dim, flags,
				    &in->batch))) {
		in->batch = NULL;
		spool_clear(in);
		return fail_at(in, rc, where, "cannot begin the batch: %s", strerror(-rc));
	}
	return 0;
}

/* The library numbers rows within the batch ("row N: why"): the errors
 * line names the file's own line or row instead. */
static const char *row_why(const char *why)
{
	if (!strncmp(why, "row ", 4)) {
		const char *c = strchr(why, ':');
		if (c)
			return c[1] == ' ' ? c + 2 : c + 1;
	}
	return why;
}

/* Hand one row (or key) to the batch: 0, or a failure logged. */
static int spool_row(ingest *in, uint64_t where, const vecfs_row *r)
{
	char err[300] = "";
	int rc = spool_begin(in, where, 1);
	if (rc)
		return rc;
	if ((rc = vecfs_batch_add(in->batch, r, &where, 1, NULL, err, sizeof err)))
		return fail_at(in, rc, where, "%s", err[0] ? row_why(err) : strerror(-rc));
	in->n++;
	return 0;
}

/* ---------------------------------------------------------------- keys */

#define KEY_SHOWN 48 /* bytes of a bad key an errors line shows */

/* What is wrong with a key that vecfs_key_valid() refuses. */
static const char *key_fault(const char *key, size_t klen, char *buf, size_t cap)
{
	if (klen == 0 || klen > VECFS_KEY_MAX)
		snprintf(buf, cap, "%zu bytes", klen);
	else if ((klen == 1 && key[0] == '.') || (klen == 2 && key[0] == '.' && key[1] == '.'))
		snprintf(buf, cap, ". and .. are not keys");
	else if (memchr(key, '/', klen))
		snprintf(buf, cap, "it holds '/'");
	else if (memchr(key, 0, klen))
		snprintf(buf, cap, "it holds NUL");
	else if (memchr(key, '\t', klen))
		snprintf(buf, cap, "it holds a tab");
	else if (memchr(key, '\n', klen))
		snprintf(buf, cap, "it holds a newline");
	else
		snprintf(buf, cap, "not UTF-8");
	return buf;
}

/* A key as an errors line shows it: its first KEY_SHOWN bytes (not cut
 * inside a character), NUL and bytes that are not UTF-8 as \xHH (errlog
 * escapes the other control characters), "..." when cut. */
static const char *key_shown(const char *key, size_t klen, char *buf, size_t cap)
{
	size_t o = 0, i = 0;
	while (i < klen && i < KEY_SHOWN && o + 8 < cap) {
		unsigned char c = (unsigned char)key[i];
		size_t len = 1;
		if (c >= 0x80) {
			len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
			if (i + len > klen || !vecfs_utf8_valid(key + i, len))
				len = 0;
			else if (i + len > KEY_SHOWN)
				break;
		}
		if (c == 0 || len == 0) {
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
			i++;
			continue;
		}
		memcpy(buf + o, key + i, len);
		o += len;
		i += len;
	}
	buf[o] = 0;
	if (i < klen && o + 4 <= cap)
		memcpy(buf + o, "...", 4);
	return buf;
}

/* A bad key: the file fails with an errors line naming it and its fault. */
static int bad_key(ingest *in, uint64_t where, const char *key, size_t klen)
{
	char shown[KEY_SHOWN * 4 + 8], fault[48];
	return fail_at(in, -EINVAL, where,
		       "bad key '%s' (%s): keys are 1-255 bytes of UTF-8 without '/', NUL, tab or "
		       "newline, and not '.' or '..'",
		       key_shown(key, klen, shown, sizeof shown), key_fault(key, klen, fault, sizeof fault));
}

/* Check a complete row and add it to the spool (vecfs_batch_add() checks
 * it against the store's configuration). */
/* numeric_key: the row's key reads as a number (a row of numbers only). */
static int add_row(ingest *in, uint64_t where, const char *key, size_t klen, uint32_t dim,
		   const char *payload, size_t plen, int numeric_key)
{
	if (in->dim == 0) {
		int rc = vecfs_config_get(in->dm->store, &in->cfg);
		if (rc)
			return fail_at(in, rc, where, "cannot read the configuration: %s", strerror(-rc));
		in->dim = in->cfg.dim ? in->cfg.dim : dim;
		in->dim_from_store = in->cfg.dim != 0;
	}
	if (dim != in->dim)
		return fail_at(in, -EINVAL, where, "%u numbers, expected %u (%s)%s", dim, in->dim,
			       in->dim_from_store ? "the store's dim" : "the dimension of the file's first row",
			       numeric_key && dim + 1 == in->dim ? "; missing key column?" : "");
	in->numeric_keys = (in->n == 0 || in->numeric_keys) && numeric_key;
	if (key && !vecfs_key_valid(key, klen))
		return bad_key(in, where, key, klen);
	vecfs_row r = {key, klen, in->tmp, payload, plen};
	return spool_row(in, where, &r);
}

/* Commit the batch: 0, or a failure logged (naming the row that failed
 * it by its line or row in the file). */
static int spool_commit(ingest *in)
{
	char err[512] = "";
	vecfs_batch_result res;
	vecfs_batch *b = in->batch;
	in->batch = NULL;
	int rc = vecfs_batch_commit(b, &res, err, sizeof err);
	if (rc == -EINVAL && res.first)
		/* name the key's lines in the file, not its rows in the batch */
		snprintf(err, sizeof err,
			 "key '%.*s' given twice, on lines %llu and %llu (a key may be given once in a "
			 ".csv, .tsv or .txt file%s)",
			 (int)res.keylen, res.key, (unsigned long long)res.first,
			 (unsigned long long)res.row,
			 in->numeric_keys ? "; these rows look like numbers only, with no key column: keyless "
					    "vectors go in a .npy or .fvecs file, which gets assigned keys"
					  : "");
	if (rc) {
		const char *why = err[0] ? err : strerror(-rc);
		if (in->fmt == F_DELETE) /* a bad filter: its line */
			return fail_at(in, rc, rc == -EINVAL || rc == -E2BIG ? in->filter_line : 0,
				       "%s", why);
		return fail_at(in, rc, res.row, "%s", res.row ? row_why(why) : why);
	}
	if (in->fmt == F_DELETE) {
		atomic_store(&in->dm->last_delete, res.deleted);
		in->committed += res.deleted;
	} else {
		in->committed += in->n;
	}
	spool_clear(in);
	return 0;
}

/* ---------------------------------------------------------------- delimited text */

static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* The separator of a line (or of what follows its quoted key): .csv a
 * comma, else a tab; .tsv a tab, else a comma; .txt a comma; else 0, blanks. */
static char line_sep(int fmt, const char *s, size_t n)
{
	if (fmt == F_TSV)
		return memchr(s, '\t', n) ? '\t' : memchr(s, ',', n) ? ',' : 0;
	return memchr(s, ',', n) ? ',' : fmt == F_CSV && memchr(s, '\t', n) ? '\t' : 0;
}

/* A key double-quoted as in RFC 4180 at s[0] ("" inside is one quote),
 * decoded into in->key; *end: just past the closing quote. */
static int quoted_key(ingest *in, const char *s, size_t n, size_t *end)
{
	uint64_t where = in->lineno;
	size_t i = 1;
	sb_reset(&in->key);
	for (;;) {
		const char *q = memchr(s + i, '"', n - i);
		if (!q)
			return fail_at(in, -EINVAL, where, "the quoted key has no closing quote");
		size_t at = (size_t)(q - s);
		sb_add(&in->key, s + i, at - i);
		if (at + 1 < n && s[at + 1] == '"') {
			sb_add(&in->key, "\"", 1);
			i = at + 2;
			continue;
		}
		*end = at + 1;
		break;
	}
	if (in->key.oom)
		return fail_at(in, -ENOMEM, where, "out of memory");
	if (in->key.len == 0)
		return fail_at(in, -EINVAL, where, "the quoted key \"\" is empty");
	return 0;
}

/* The file's first row, whose first value is not a number: a header
 * (`id,x,y,z`) when no value after it (s[0..n), what follows the field,
 * fields split by sep, or blanks) is a number either. */
static int header_like(const ingest *in, const char *s, size_t n, char sep)
{
	if (in->n || in->committed)
		return 0;
	size_t pos = 0;
	while (pos < n) {
		while (pos < n && (sep ? s[pos] == sep : is_blank(s[pos])))
			pos++;
		size_t st = pos;
		while (pos < n && (sep ? s[pos] != sep : !is_blank(s[pos])))
			pos++;
		const char *f = s + st;
		size_t fl = pos - st;
		float v;
		trim(&f, &fl);
		if (fl && parse_float(f, fl, &v) == 0)
			return 0;
	}
	return 1;
}

static int delim_line(ingest *in, const char *s, size_t n)
{
	uint64_t where = in->lineno;
	const char *key = NULL;
	size_t klen = 0;
	size_t pos = 0;
	int quoted = s[0] == '"';
	if (quoted) {
		int rc = quoted_key(in, s, n, &pos);
		if (rc)
			return rc;
		key = in->key.p;
		klen = in->key.len;
	}
	char sep = line_sep(in->fmt, s + pos, n - pos);
	if (quoted) {
		/* after the closing quote: blanks, then the separator */
		size_t q = pos;
		while (pos < n && is_blank(s[pos]) && s[pos] != sep)
			pos++;
		if (pos == n)
			return fail_at(in, -EINVAL, where, "a key and no numbers (expected KEY then the vector)");
		if (sep ? s[pos] != sep : pos == q)
			return fail_at(in, -EINVAL, where, "text after the closing quote of the key (expected %s)",
				       sep == ',' ? "a comma" : sep ? "a tab" : "a blank");
		if (sep)
			pos++;
	}
	uint32_t cnt = 0;
	unsigned field = quoted;
	while (pos <= n) {
		const char *f;
		size_t fl;
		if (sep) {
			const char *e = memchr(s + pos, sep, n - pos);
			size_t end = e ? (size_t)(e - s) : n;
			f = s + pos;
			fl = end - pos;
			pos = end + 1;
			trim(&f, &fl);
			field++;
			if (fl == 0)
				return fail_at(in, -EINVAL, where, "field %u is empty", field);
		} else {
			while (pos < n && is_blank(s[pos]))
				pos++;
			if (pos >= n)
				break;
			size_t st = pos;
			while (pos < n && !is_blank(s[pos]))
				pos++;
			f = s + st;
			fl = pos - st;
			field++;
		}
		if (!key) {
			key = f;
			klen = fl;
			continue;
		}
		if (cnt >= VECFS_DIM_MAX)
			return fail_at(in, -EINVAL, where, "more than %d numbers", VECFS_DIM_MAX);
		int rc = parse_float(f, fl, &in->tmp[cnt]);
		if (rc == -ENOMEM)
			return fail_at(in, -ENOMEM, where, "out of memory");
		if (rc == -ERANGE)
			return fail_at(in, -EINVAL, where, "value %u '%.*s' overflows float32", cnt + 1,
				       (int)(fl > 40 ? 40 : fl), f);
		if (rc)
			return fail_at(in, -EINVAL, where, "value %u '%.*s' is not a number%s", cnt + 1,
				       (int)(fl > 40 ? 40 : fl), f,
				       cnt == 0 && header_like(in, s + (pos < n ? pos : n), n - (pos < n ? pos : n), sep)
					       ? " (a header? remove it or start it with #)" : "");
		cnt++;
	}
	if (cnt == 0)
		return fail_at(in, -EINVAL, where, "a key and no numbers (expected KEY then the vector)");
	float k;
	int numeric = !quoted && klen <= 64 && parse_float(key, klen, &k) == 0;
	return add_row(in, where, key, klen, cnt, NULL, 0, numeric);
}

/* ---------------------------------------------------------------- JSON lines */

typedef struct jp {
	const char *p, *e;
	char err[160];
	int deep;  /* nested past the limit: a limit, not a malformed line */
} jp;

static void jws(jp *j)
{
	while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n'))
		j->p++;
}

/* After a member or element: 1 when a ',' follows (another one comes), 0
 * when `close` ends the object or array, -1 when neither does. */
static int jnext(jp *j, char close)
{
	jws(j);
	if (j->p < j->e && (*j->p == ',' || *j->p == close))
		return *j->p++ == ',';
	return -1;
}

static int jfail(jp *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jfail(jp *j, const char *fmt, ...)
{
	if (!j->err[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(j->err, sizeof j->err, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int jhex4(jp *j, unsigned *out)
{
	if (j->e - j->p < 4)
		return jfail(j, "truncated \\u escape");
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(j->p[i]);
		if (h < 0)
			return jfail(j, "bad \\u escape");
		v = v * 16 + (unsigned)h;
	}
	j->p += 4;
	*out = v;
	return 0;
}

static void put_utf8(sbuf *b, unsigned cp)
{
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	sb_add(b, u, n);
}

/* A string at j->p (which is '"'); decoded into out when not NULL. */
static int jstring(jp *j, sbuf *out)
{
	j->p++;
	while (j->p < j->e) {
		const char *run = j->p;
		while (j->p < j->e && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20)
			j->p++;
		/* a payload goes into out.json as it is: its strings must be
		 * UTF-8 too, not only the key */
		if (!vecfs_utf8_valid(run, (size_t)(j->p - run)))
			return jfail(j, "a string is not valid UTF-8");
		if (out)
			sb_add(out, run, (size_t)(j->p - run));
		if (j->p >= j->e)
			break;
		char c = *j->p++;
		if (c == '"')
			return 0;
		if (c != '\\')
			return jfail(j, "control character in a string");
		if (j->p >= j->e)
			break;
		c = *j->p++;
		unsigned cp;
		switch (c) {
		case '"': cp = '"'; break;
		case '\\': cp = '\\'; break;
		case '/': cp = '/'; break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if (jhex4(j, &cp))
				return -EINVAL;
			if (cp >= 0xD800 && cp < 0xDC00) {
				unsigned lo;
				if (j->e - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u')
					return jfail(j, "unpaired surrogate in \\u escape");
				j->p += 2;
				if (jhex4(j, &lo))
					return -EINVAL;
				if (lo < 0xDC00 || lo > 0xDFFF)
					return jfail(j, "unpaired surrogate in \\u escape");
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
				return jfail(j, "unpaired surrogate in \\u escape");
			}
			break;
		default:
			return jfail(j, "bad escape '\\%c'", c);
		}
		if (out)
			put_utf8(out, cp);
	}
	return jfail(j, "unterminated string");
}

/* A number: validates JSON grammar, returns the span. */
static int jnumber(jp *j, const char **s, size_t *n)
{
	const char *st = j->p, *p = j->p, *e = j->e;
	if (p < e && *p == '-')
		p++;
	if (p < e && *p == '0')
		p++;
	else if (p < e && *p >= '1' && *p <= '9')
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	else
		return jfail(j, "expected a number");
	if (p < e && *p == '.') {
		p++;
		if (!(p < e && *p >= '0' && *p <= '9'))
			return jfail(j, "bad number");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < e && (*p == '+' || *p == '-'))
			p++;
		if (!(p < e && *p >= '0' && *p <= '9'))
			return jfail(j, "bad number");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	*s = st;
	*n = (size_t)(p - st);
	j->p = p;
	return 0;
}

static int jlit(jp *j, const char *lit)
{
	size_t n = strlen(lit);
	if ((size_t)(j->e - j->p) < n || memcmp(j->p, lit, n))
		return jfail(j, "unexpected character '%c'", *j->p);
	j->p += n;
	return 0;
}

/* Any value (skipped, only validated). */
static int jvalue(jp *j, int depth)
{
	const char *s;
	size_t n;
	if (depth > 256) {
		j->deep = 1;
		return jfail(j, "nested too deeply (more than 256 levels)");
	}
	jws(j);
	if (j->p >= j->e)
		return jfail(j, "unexpected end of line");
	switch (*j->p) {
	case '"':
		return jstring(j, NULL);
	case '{':
		j->p++;
		jws(j);
		if (j->p < j->e && *j->p == '}') {
			j->p++;
			return 0;
		}
		for (;;) {
			jws(j);
			if (j->p >= j->e || *j->p != '"')
				return jfail(j, "expected a member name");
			if (jstring(j, NULL))
				return -EINVAL;
			jws(j);
			if (j->p >= j->e || *j->p != ':')
				return jfail(j, "expected ':'");
			j->p++;
			if (jvalue(j, depth + 1))
				return -EINVAL;
			int more = jnext(j, '}');
			if (more < 0)
				return jfail(j, "expected ',' or '}'");
			if (!more)
				return 0;
		}
	case '[':
		j->p++;
		jws(j);
		if (j->p < j->e && *j->p == ']') {
			j->p++;
			return 0;
		}
		for (;;) {
			if (jvalue(j, depth + 1))
				return -EINVAL;
			int more = jnext(j, ']');
			if (more < 0)
				return jfail(j, "expected ',' or ']'");
			if (!more)
				return 0;
		}
	case 't':
		return jlit(j, "true");
	case 'f':
		return jlit(j, "false");
	case 'n':
		return jlit(j, "null");
	default:
		return jnumber(j, &s, &n);
	}
}

static int json_line(ingest *in, const char *s, size_t n)
{
	uint64_t where = in->lineno;
	jp j = {s, s + n, "", 0};
	sbuf name;
	int have_key = 0, have_vec = 0, have_pay = 0;
	uint32_t cnt = 0;
	const char *payload = NULL;
	size_t plen = 0;
	int rc = 0;
	sb_init(&name);
	sb_reset(&in->key);
	jws(&j);
	if (j.p >= j.e || *j.p != '{') {
		rc = jfail(&j, "expected a JSON object");
		goto out;
	}
	j.p++;
	jws(&j);
	if (j.p < j.e && *j.p == '}') {
		j.p++;
		goto done;
	}
	for (;;) {
		jws(&j);
		if (j.p >= j.e || *j.p != '"') {
			rc = jfail(&j, "expected a member name");
			goto out;
		}
		sb_reset(&name);
		if ((rc = jstring(&j, &name)))
			goto out;
		jws(&j);
		if (j.p >= j.e || *j.p != ':') {
			rc = jfail(&j, "expected ':'");
			goto out;
		}
		j.p++;
		jws(&j);
		/* a member given twice: which one is meant is not known (JSON
		 * readers differ), so the line is refused */
		int *seen = name.len == 3 && !memcmp(name.p, "key", 3) ? &have_key :
			    name.len == 6 && !memcmp(name.p, "vector", 6) ? &have_vec :
			    name.len == 7 && !memcmp(name.p, "payload", 7) ? &have_pay : NULL;
		if (seen && *seen) {
			rc = jfail(&j, "\"%.*s\" given twice", (int)name.len, name.p);
			goto out;
		}
		if (name.len == 3 && !memcmp(name.p, "key", 3)) {
			if (j.p >= j.e || *j.p != '"') {
				rc = jfail(&j, "\"key\" is not a string");
				goto out;
			}
			sb_reset(&in->key);
			if ((rc = jstring(&j, &in->key)))
				goto out;
			have_key = 1;
		} else if (name.len == 6 && !memcmp(name.p, "vector", 6)) {
			if (j.p >= j.e || *j.p != '[') {
				rc = jfail(&j, "\"vector\" is not an array");
				goto out;
			}
			j.p++;
			cnt = 0;
			jws(&j);
			if (j.p < j.e && *j.p == ']') {
				j.p++;
			} else {
				for (;;) {
					const char *ns;
					size_t nl;
					jws(&j);
					if (j.p < j.e && (*j.p == '-' || (*j.p >= '0' && *j.p <= '9'))) {
						if ((rc = jnumber(&j, &ns, &nl)))
							goto out;
					} else {
						rc = jfail(&j, "element %u of \"vector\" is not a number", cnt + 1);
						goto out;
					}
					if (cnt >= VECFS_DIM_MAX) {
						rc = jfail(&j, "more than %d numbers in \"vector\"", VECFS_DIM_MAX);
						goto out;
					}
					int fr = parse_float(ns, nl, &in->tmp[cnt]);
					if (fr == -ENOMEM) {
						rc = fail_at(in, -ENOMEM, where, "out of memory");
						goto out;
					}
					if (fr == -ERANGE) {
						rc = jfail(&j, "element %u of \"vector\" (%.*s) overflows float32",
							   cnt + 1, (int)(nl > 40 ? 40 : nl), ns);
						goto out;
					}
					if (fr) {
						rc = jfail(&j, "element %u of \"vector\" is not a number", cnt + 1);
						goto out;
					}
					cnt++;
					int more = jnext(&j, ']');
					if (more < 0) {
						rc = jfail(&j, "expected ',' or ']' in \"vector\"");
						goto out;
					}
					if (!more)
						break;
				}
			}
			have_vec = 1;
		} else if (name.len == 7 && !memcmp(name.p, "payload", 7)) {
			const char *st = j.p;
			if ((rc = jvalue(&j, 0)))
				goto out;
			payload = st;
			plen = (size_t)(j.p - st);
			have_pay = 1;
		} else {
			if ((rc = jvalue(&j, 0)))
				goto out;
		}
		int more = jnext(&j, '}');
		if (more < 0) {
			rc = jfail(&j, "expected ',' or '}'");
			goto out;
		}
		if (!more)
			break;
	}
done:
	jws(&j);
	if (j.p != j.e) {
		rc = jfail(&j, "text after the object");
		goto out;
	}
	if (!have_key) {
		rc = jfail(&j, "no \"key\"");
		goto out;
	}
	if (!have_vec || cnt == 0) {
		rc = jfail(&j, "no \"vector\" (or an empty one)");
		goto out;
	}
out:
	sb_free(&name);
	if (rc) {
		if (j.deep)
			return fail_at(in, -E2BIG, where, "%s", j.err);
		if (!strncmp(j.err, "no \"", 4) || strstr(j.err, "\"vector\"") || strstr(j.err, "\"key\"") ||
		    strstr(j.err, " given twice"))
			return fail_at(in, -EINVAL, where, "%s", j.err);
		if (j.p >= j.e)
			return fail_at(in, -EINVAL, where, "malformed JSON: %s at the end of the line", j.err);
		return fail_at(in, -EINVAL, where, "malformed JSON: %s at column %zu", j.err,
			       (size_t)(j.p - s) + 1);
	}
	if (in->key.oom)
		return fail_at(in, -ENOMEM, where, "out of memory");
	return add_row(in, where, in->key.p ? in->key.p : "", in->key.len, cnt, payload, plen, 0);
}

/* ---------------------------------------------------------------- delete */

static int buf_add(ingest *in, sbuf *b, const void *p, size_t n, uint64_t where);

/* A line of `delete`: a key (the whole line, or double-quoted as in a
 * .csv file), or the one filter= line; blank lines are skipped.  Keys are
 * spooled as rows without vectors. */
static int delete_line(ingest *in, const char *s, size_t n)
{
	uint64_t where = in->lineno;
	if (n && s[n - 1] == '\r')
		n--;
	size_t b = 0;
	while (b < n && is_blank(s[b]))
		b++;
	if (b == n)
		return 0;
	if (n >= 7 && !memcmp(s, "filter=", 7)) {
		if (in->filter_line)
			return fail_at(in, -EINVAL, where, "a second filter= line (line %llu has one): at most one",
				       (unsigned long long)in->filter_line);
		in->filter_line = where;
		return buf_add(in, &in->filter, s + 7, n - 7, where);
	}
	const char *key = s;
	size_t klen = n;
	if (s[0] == '"') {
		size_t end;
		int rc = quoted_key(in, s, n, &end);
		if (rc)
			return rc;
		while (end < n && is_blank(s[end]))
			end++;
		if (end < n)
			return fail_at(in, -EINVAL, where, "text after the closing quote of the key");
		key = in->key.p;
		klen = in->key.len;
	}
	if (!vecfs_key_valid(key, klen))
		return bad_key(in, where, key, klen);
	vecfs_row r = {key, klen, NULL, NULL, 0};
	return spool_row(in, where, &r);
}

/* Delete the spooled keys and what the filter matches, in one commit. */
static int delete_commit(ingest *in)
{
	/* a filter alone: a batch without rows, so without a buffer */
	int rc = spool_begin(in, 0, 0);
	if (rc)
		return rc;
	if (in->filter_line && (rc = vecfs_batch_filter(in->batch, in->filter.p, in->filter.len)))
		return fail_at(in, rc, in->filter_line, "%s", strerror(-rc));
	if ((rc = spool_commit(in)))
		return rc;
	sb_free(&in->filter);
	in->filter_line = 0;
	return 0;
}

/* ---------------------------------------------------------------- text lines */

static int delete_line(ingest *in, const char *s, size_t n);

static int text_line(ingest *in, const char *s, size_t n)
{
	/* a UTF-8 byte order mark opens the text, not its first key */
	if (++in->lineno == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
		s += 3;
		n -= 3;
	}
	if (in->fmt == F_DELETE)
		return delete_line(in, s, n);
	const char *t = s;
	size_t tn = n;
	trim(&t, &tn);
	if (tn == 0)
		return 0;
	if (in->fmt == F_JSONL)
		return json_line(in, t, tn);
	if (t[0] == '#')
		return 0;
	return delim_line(in, t, tn);
}

/* Add n bytes to a buffer of the file (the partial line, the .npy header),
 * counting its growth against the budget. */
static int buf_add(ingest *in, sbuf *b, const void *p, size_t n, uint64_t where)
{
	/* the capacity sb_reserve() will give it */
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n + 1)
		cap *= 2;
	if (cap > b->cap) {
		char why[160];
		if (budget_take(in, cap - b->cap))
			return fail_at(in, -ENOMEM, where, "%s", budget_why(in, why, sizeof why));
		in->line_charged += cap - b->cap;
	}
	sb_add(b, p, n);
	if (b->oom)
		return fail_at(in, -ENOMEM, where, "out of memory");
	return 0;
}

/* Free the buffers buf_add() grew (a line done, the file dead). */
static void line_drop(ingest *in)
{
	sb_free(&in->line);
	sb_free(&in->npy_hdr);
	budget_give(in, in->line_charged);
	in->line_charged = 0;
}

static int text_feed(ingest *in, const char *p, size_t n)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		if (in->line.len + take > LINE_MAX_BYTES)
			return fail_at(in, -EINVAL, in->lineno + 1, "longer than %zu bytes",
				       LINE_MAX_BYTES);
		if (!nl)
			return buf_add(in, &in->line, p, take, in->lineno + 1);
		int rc;
		if (in->line.len) {
			if ((rc = buf_add(in, &in->line, p, take, in->lineno + 1)))
				return rc;
			rc = text_line(in, in->line.p, in->line.len);
			if (in->line_charged > LINE_KEEP)
				line_drop(in);
			else
				sb_reset(&in->line);
		} else {
			rc = text_line(in, p, take);
		}
		if (rc)
			return rc;
		p += take + 1;
		n -= take + 1;
	}
	return 0;
}

/* ---------------------------------------------------------------- binary rows */

static uint32_t rd_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float rd_lef32(const uint8_t *p)
{
	uint32_t u = rd_le32(p);
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static double rd_lef64(const uint8_t *p)
{
	uint64_t u = (uint64_t)rd_le32(p) | (uint64_t)rd_le32(p + 4) << 32;
	double d;
	memcpy(&d, &u, 8);
	return d;
}

static int npy_dict(ingest *in, char *buf);

/* Parse the python-literal header dict of an .npy file. */
static int npy_header(ingest *in, const char *h, size_t n)
{
	char *buf = strndup(h, n);
	if (!buf)
		return fail_at(in, -ENOMEM, 0, "out of memory");
	int rc = npy_dict(in, buf);
	free(buf);
	return rc;
}

/* The header dict, NUL-terminated. */
static int npy_dict(ingest *in, char *buf)
{
	char *d = strstr(buf, "'descr'");
	char *fo = strstr(buf, "'fortran_order'");
	char *sh = strstr(buf, "'shape'");
	if (!d || !fo || !sh || buf[0] != '{')
		return fail_at(in, -EINVAL, 0, "not an .npy header (no descr, fortran_order and shape)");
	/* a key given twice: which one numpy would take is not ours to guess */
	const char *twice = strstr(d + 1, "'descr'") ? "descr" :
			    strstr(fo + 1, "'fortran_order'") ? "fortran_order" :
			    strstr(sh + 1, "'shape'") ? "shape" : NULL;
	if (twice)
		return fail_at(in, -EINVAL, 0, "'%s' given twice in the .npy header", twice);
	d = strchr(d + 7, ':');
	if (!d)
		return fail_at(in, -EINVAL, 0, "bad .npy header");
	d++;
	while (*d == ' ')
		d++;
	in->npy_f8 = !strncmp(d, "'<f8'", 5) || !strncmp(d, "\"<f8\"", 5);
	if (!in->npy_f8 && strncmp(d, "'<f4'", 5) && strncmp(d, "\"<f4\"", 5)) {
		char *e = strchr(d, ',');
		int l = e ? (int)(e - d) : 10;
		return fail_at(in, -EINVAL, 0,
			       "dtype %.*s: expected little-endian float32 ('<f4') or float64 ('<f8')", l, d);
	}
	fo = strchr(fo + 15, ':');
	if (!fo)
		return fail_at(in, -EINVAL, 0, "bad .npy header");
	fo++;
	while (*fo == ' ')
		fo++;
	if (!strncmp(fo, "True", 4))
		return fail_at(in, -EINVAL, 0, "fortran_order is True: expected a C-order array");
	if (strncmp(fo, "False", 5))
		return fail_at(in, -EINVAL, 0, "bad fortran_order in the .npy header");
	sh = strchr(sh + 7, '(');
	if (!sh)
		return fail_at(in, -EINVAL, 0, "bad shape in the .npy header");
	sh++;
	uint64_t dims[3];
	int nd = 0;
	for (;;) {
		while (*sh == ' ')
			sh++;
		if (*sh == ')')
			break;
		char *e;
		if (*sh < '0' || *sh > '9')
			return fail_at(in, -EINVAL, 0, "bad shape in the .npy header");
		errno = 0;
		unsigned long long v = strtoull(sh, &e, 10);
		if (errno == ERANGE)
			return fail_at(in, -EINVAL, 0, "shape value %.24s... is too large", sh);
		if (nd < 3)
			dims[nd] = v;
		nd++;
		sh = e;
		while (*sh == ' ' || *sh == 'L')
			sh++;
		if (*sh == ',')
			sh++;
		else if (*sh != ')')
			return fail_at(in, -EINVAL, 0, "bad shape in the .npy header");
	}
	if (nd != 2)
		return fail_at(in, -EINVAL, 0, "shape has %d dimensions: expected a 2-D array (rows, dim)", nd);
	if (dims[1] == 0 || dims[1] > VECFS_DIM_MAX)
		return fail_at(in, -EINVAL, 0, "dimension %llu is out of range 1..%d",
			       (unsigned long long)dims[1], VECFS_DIM_MAX);
	in->npy_rows = dims[0];
	in->rowneed = (size_t)dims[1] * (in->npy_f8 ? 8 : 4);
	in->npy_stage = 2;
	return 0;
}

static int npy_feed_header(ingest *in, const uint8_t **pp, size_t *np)
{
	const uint8_t *p = *pp;
	size_t n = *np;
	while (n && in->npy_stage < 2) {
		size_t want = in->npy_stage == 0 ? 10 : in->npy_hlen;
		if (in->npy_stage == 0 && in->npy_hdr.len >= 8 && (unsigned char)in->npy_hdr.p[6] >= 2)
			want = 12;
		size_t take = want > in->npy_hdr.len ? want - in->npy_hdr.len : 0;
		if (take > n)
			take = n;
		int rc = buf_add(in, &in->npy_hdr, p, take, 0);
		if (rc) {
			*pp = p;
			*np = n;
			return rc;
		}
		p += take;
		n -= take;
		if (in->npy_hdr.len >= 6 && memcmp(in->npy_hdr.p, "\x93NUMPY", 6)) {
			*pp = p;
			*np = n;
			return fail_at(in, -EINVAL, 0, "not an .npy file (no \\x93NUMPY magic)");
		}
		if (in->npy_hdr.len < want)
			continue;
		if (in->npy_stage == 0) {
			const uint8_t *h = (const uint8_t *)in->npy_hdr.p;
			unsigned major = h[6];
			size_t hl;
			if (major == 1) {
				hl = (size_t)h[8] | (size_t)h[9] << 8;
				in->npy_hlen = 10 + hl;
			} else if (major == 2 || major == 3) {
				if (in->npy_hdr.len < 12)
					continue;
				hl = rd_le32(h + 8);
				in->npy_hlen = 12 + hl;
			} else {
				*pp = p;
				*np = n;
				return fail_at(in, -EINVAL, 0, ".npy format version %u is not supported", major);
			}
			if (hl > NPY_HEADER_MAX) {
				*pp = p;
				*np = n;
				return fail_at(in, -EINVAL, 0, ".npy header of %zu bytes is too long", hl);
			}
			in->npy_stage = 1;
		} else {
			size_t off = (unsigned char)in->npy_hdr.p[6] == 1 ? 10 : 12;
			int hrc = npy_header(in, in->npy_hdr.p + off, in->npy_hdr.len - off);
			if (hrc == 0)
				line_drop(in);
			*pp = p;
			*np = n;
			return hrc;
		}
	}
	*pp = p;
	*np = n;
	return 0;
}

static int bin_row_done(ingest *in)
{
	uint64_t where = ++in->rowno;
	uint32_t dim;
	if (in->fmt == F_NPY) {
		dim = (uint32_t)(in->rowneed / (in->npy_f8 ? 8 : 4));
		if (where > in->npy_rows)
			return fail_at(in, -EINVAL, where, "data beyond the %llu rows the header declares",
				       (unsigned long long)in->npy_rows);
		for (uint32_t i = 0; i < dim && !in->npy_f8; i++)
			in->tmp[i] = rd_lef32(in->row + 4 * i);
		for (uint32_t i = 0; i < dim && in->npy_f8; i++) {
			double v = rd_lef64(in->row + 8 * i);
			in->tmp[i] = (float)v;
			/* NaN and ±Inf pass on to the row check, which names them */
			if (isfinite(v) && isinf(in->tmp[i]))
				return fail_at(in, -EINVAL, where, "value %u (%g) overflows float32", i + 1, v);
		}
	} else if (in->fmt == F_FVECS) {
		dim = rd_le32(in->row);
		for (uint32_t i = 0; i < dim; i++)
			in->tmp[i] = rd_lef32(in->row + 4 + 4 * i);
	} else {
		dim = rd_le32(in->row);
		for (uint32_t i = 0; i < dim; i++)
			in->tmp[i] = (float)in->row[4 + i];
	}
	return add_row(in, where, NULL, 0, dim, NULL, 0, 0);
}

static int bin_feed(ingest *in, const uint8_t *p, size_t n)
{
	int rc;
	if (in->fmt == F_NPY && in->npy_stage < 2) {
		if ((rc = npy_feed_header(in, &p, &n)))
			return rc;
	}
	while (n) {
		size_t take = in->rowneed - in->rowlen;
		if (take > n)
			take = n;
		memcpy(in->row + in->rowlen, p, take);
		in->rowlen += take;
		p += take;
		n -= take;
		if (in->rowlen < in->rowneed)
			break;
		if (in->fmt != F_NPY && in->rowneed == 4) {
			int32_t d = (int32_t)rd_le32(in->row);
			if (d <= 0 || d > VECFS_DIM_MAX)
				return fail_at(in, -EINVAL, in->rowno + 1, "dimension %d is out of range 1..%d",
					       d, VECFS_DIM_MAX);
			if (in->dim && (uint32_t)d != in->dim)
				return fail_at(in, -EINVAL, in->rowno + 1, "dimension %d, expected %u (%s)", d,
					       in->dim,
					       in->dim_from_store ? "the store's dim" : "the dimension of the file's first row");
			in->rowneed = 4 + (size_t)d * (in->fmt == F_FVECS ? 4 : 1);
			continue;
		}
		if ((rc = bin_row_done(in)))
			return rc;
		in->rowlen = 0;
		if (in->fmt != F_NPY)
			in->rowneed = 4;
	}
	return 0;
}

/* ---------------------------------------------------------------- interface */

static void owner_add(ingest *in, uint64_t owner)
{
	for (size_t i = 0; i < in->nowners && i < OWNERS_MAX; i++)
		if (in->owners[i] == owner)
			return;
	if (in->nowners < OWNERS_MAX)
		in->owners[in->nowners] = owner;
	if (in->nowners <= OWNERS_MAX)
		in->nowners++;
}

static int owner_wrote(const ingest *in, uint64_t owner)
{
	if (in->nowners > OWNERS_MAX)
		return 1;
	for (size_t i = 0; i < in->nowners; i++)
		if (in->owners[i] == owner)
			return 1;
	return 0;
}

int ingest_write(ingest *in, const char *buf, size_t len, uint64_t off, uint64_t owner)
{
	int rc = 0;
	pthread_mutex_lock(&in->mu);
	if (in->cancelled) {
		pthread_mutex_unlock(&in->mu);
		return 0;
	}
	if (in->failed && in->done) {
		pthread_mutex_unlock(&in->mu);
		return in->fail_rc;
	}
	if (off != in->written) {
		in->defer = 0; /* a staged file too fails here and now */
		rc = fail_at(in, -EINVAL, 0, "a write at offset %llu, but the file holds %llu bytes: "
			     "writes append at its end", (unsigned long long)off,
			     (unsigned long long)in->written);
	} else if (len) {
		in->written += len;
		in->dirty = 1;
		owner_add(in, owner);
		int over;
		char why[160];
		if (in->failed)
			; /* a staged file that failed: its rename tells */
		else if ((rc = scratch_get(in, &over)))
			rc = fail_at(in, rc, 0, "%s", over ? budget_why(in, why, sizeof why) : "out of memory");
		else if (in->fmt <= F_JSONL)
			rc = text_feed(in, buf, len);
		else
			rc = bin_feed(in, (const uint8_t *)buf, len);
		if (in->failed && !in->done)
			rc = 0; /* failed, and waits for its rename */
	}
	pthread_mutex_unlock(&in->mu);
	return rc;
}

/* End of the data written so far: the trailing partial line is a last line,
 * a partial binary row is a truncated one. */
static int finish(ingest *in)
{
	int rc;
	if (in->fmt <= F_JSONL) {
		if (in->line.len) {
			rc = text_line(in, in->line.p, in->line.len);
			sb_reset(&in->line);
			return rc;
		}
		return 0;
	}
	if (in->fmt == F_NPY) {
		if (in->npy_stage < 2)
			return fail_at(in, -EINVAL, 0, "truncated .npy header (%zu bytes)", in->npy_hdr.len);
		if (in->rowlen)
			return fail_at(in, -EINVAL, in->rowno + 1, "truncated: %zu of %zu bytes", in->rowlen,
				       in->rowneed);
		if (in->rowno < in->npy_rows)
			return fail_at(in, -EINVAL, in->rowno + 1,
				       "truncated: the header declares %llu rows, the file holds %llu",
				       (unsigned long long)in->npy_rows, (unsigned long long)in->rowno);
		return 0;
	}
	if (in->rowlen)
		return fail_at(in, -EINVAL, in->rowno + 1, "truncated: %zu of %zu bytes", in->rowlen,
			       in->rowneed);
	return 0;
}

int ingest_commit(ingest *in)
{
	int rc;
	pthread_mutex_lock(&in->mu);
	if (in->cancelled || (!in->dirty && !in->failed)) {
		pthread_mutex_unlock(&in->mu);
		return 0;
	}
	if (in->failed) {
		pthread_mutex_unlock(&in->mu);
		return in->fail_rc;
	}
	in->dirty = 0;
	in->nowners = 0;
	if ((rc = finish(in))) {
		pthread_mutex_unlock(&in->mu);
		return rc;
	}
	if (in->fmt == F_DELETE ? (in->n || in->filter_line) && (rc = delete_commit(in))
				: in->n && (rc = spool_commit(in))) {
		pthread_mutex_unlock(&in->mu);
		return rc;
	}
	in->done = 1;
	settle(in);
	pthread_mutex_unlock(&in->mu);
	return 0;
}

/* A file closed with nothing ever written (in->mu held): zero rows, but
 * an .npy file needs its header. */
static int empty_close(ingest *in)
{
	in->done = 1;
	if (in->fmt == F_NPY)
		return fail_at(in, -EINVAL, 0, "empty: an .npy file holds at least its header");
	return 0;
}

static int never_written(const ingest *in)
{
	return !in->written && !in->committed && !in->failed && !in->cancelled && !in->done && !in->staged;
}

int ingest_close(ingest *in, uint64_t owner, uint64_t pid)
{
	pthread_mutex_lock(&in->mu);
	if (in->staged || in->cancelled) {
		pthread_mutex_unlock(&in->mu);
		return 0;
	}
	if (never_written(in) && pid == in->opener) {
		/* maybe its creator closing a descriptor it dup'ed (a shell's
		 * redirection) before the command writes: the file stays, and
		 * its last close (RELEASE) makes it an empty file */
		int rc = in->fmt == F_NPY ? -EINVAL : 0;
		pthread_mutex_unlock(&in->mu);
		return rc;
	}
	int wrote = owner_wrote(in, owner);
	pthread_mutex_unlock(&in->mu);
	return wrote ? ingest_commit(in) : 0;
}

void ingest_release(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	int pending = in->dirty && !in->staged;
	if (never_written(in))
		empty_close(in);
	pthread_mutex_unlock(&in->mu);
	if (pending)
		ingest_commit(in);
}

/* A staged file that failed at its rename (in->mu held): its errors line,
 * given once.  A bad file stays after a rename with flags and after the
 * plain rename that comes next (see ingest_rename()); else it is done. */
static int rename_failed(ingest *in, int flags)
{
	if (!in->told) {
		errlog_err(&in->dm->errors, in->fail_rc, "%s",
			   in->why ? in->why : "ingest: a staged file failed");
		in->told = 1;
	}
	int keep = in->fail_rc == -EINVAL && (flags || in->kept == 1);
	in->kept = !keep ? 0 : flags ? 1 : 2;
	if (!keep) {
		in->done = 1;
		settle(in);
	}
	return in->fail_rc;
}

int ingest_rename(ingest *in, int flags)
{
	int rc = 0;
	pthread_mutex_lock(&in->mu);
	if (!in->staged || in->cancelled || in->done) {
		pthread_mutex_unlock(&in->mu);
		return -ENOENT;
	}
	/* bad content found now waits in in->why as well: rename_failed()
	 * tells it, once */
	if (!in->failed) {
		in->dirty = 0;
		if ((rc = finish(in)) == 0 && in->n)
			rc = spool_commit(in);
	}
	if (in->failed && !in->done) {
		rc = rename_failed(in, flags);
		pthread_mutex_unlock(&in->mu);
		return rc;
	}
	in->done = 1;
	settle(in);
	pthread_mutex_unlock(&in->mu);
	return rc;
}

int ingest_staged(ingest *in)
{
	return in->staged;
}

void ingest_truncate(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	if (in->staged && !in->done && in->written) {
		settle(in);
		free(in->why);
		in->why = NULL;
		in->written = 0;
		in->dirty = in->failed = in->fail_rc = in->told = in->kept = 0;
		in->defer = 1;
		in->dim = 0;
		in->dim_from_store = 0;
		in->lineno = in->rowno = 0;
		in->rowlen = 0;
		in->rowneed = in->fmt == F_NPY ? 0 : 4;
		in->npy_stage = 0;
		in->npy_hlen = 0;
		in->npy_rows = 0;
		in->nowners = 0;
	}
	pthread_mutex_unlock(&in->mu);
}

void ingest_cancel(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	in->cancelled = 1;
	in->done = 1;
	settle(in);
	pthread_mutex_unlock(&in->mu);
}

uint64_t ingest_size(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	uint64_t s = in->written;
	pthread_mutex_unlock(&in->mu);
	return s;
}

int ingest_done(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	int d = in->done;
	pthread_mutex_unlock(&in->mu);
	return d;
}

int ingest_pending(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	int d = in->dirty && !in->failed && !in->cancelled;
	pthread_mutex_unlock(&in->mu);
	return d;
}
