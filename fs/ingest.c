/*
 * fs/ingest.c - files written into ingest/ (.csv/.tsv/.txt, .jsonl/.ndjson,
 * .fvecs, .bvecs, .npy) and `delete`.
 *
 * Bytes arrive in write() pieces split anywhere, each at the end of what
 * was written before, and go to the library's parser of the format
 * (vecfs_rows_*).  Each row it completes is checked at once, so a
 * malformed row fails the write() that completes it.  Good rows wait in a
 * batch of the library (vecfs_batch_*, spooled to a temporary file)
 * committed at the close of a process that
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
#include "sbuf.h"

/* the parsers' formats; F_DELETE: the root's `delete` file, keys a line */
enum {
	F_DELETE = VECFS_ROWS_KEYS,
	F_JSONL = VECFS_ROWS_JSONL,
	F_NPY = VECFS_ROWS_NPY,
};

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
	vecfs_rows *rows;  /* the format's parser */
	int over;          /* the parser's memory passed the budget */
	sbuf filter;       /* delete: the text of its filter= line */
	size_t filter_charged; /* of the budget, by filter */
	uint64_t filter_line; /* delete: that line's number; 0: none */
	/* spool */
	vecfs_batch *batch; /* the rows (delete: keys) since the last commit;
			     * NULL until the first row */
	int batch_charged; /* its write buffer counts against the budget */
	size_t n;          /* rows spooled */
	uint64_t committed; /* rows committed by earlier flushes */
};

int fs_ingest_format_of(const char *name)
{
	return vecfs_rows_format_of(name);
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

int fs_ingest_format_staged(const char *name)
{
	size_t n = strlen(name);
	if (n <= 5 || strcmp(name + n - 5, ".part"))
		return fs_ingest_format_of(name);
	char *base = strndup(name, n - 5);
	if (!base)
		return -1;
	int f = fs_ingest_format_of(base);
	free(base);
	return f;
}

int fs_ingest_is_staged(const char *name)
{
	size_t n = strlen(name);
	return n > 5 && !strcmp(name + n - 5, ".part") && fs_ingest_format_staged(name) >= 0;
}

ingest *fs_ingest_new_delete(fs_daemon *dm, uint64_t opener)
{
	return fs_ingest_new(dm, "delete", F_DELETE, opener);
}

static int rows_row(void *arg, const vecfs_parsed_row *r);
static int rows_mem(void *arg, int64_t delta);

ingest *fs_ingest_new(fs_daemon *dm, const char *name, int format, uint64_t opener)
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
	in->rows = vecfs_rows_new(format, rows_row, rows_mem, in);
	if (!in->rows) {
		free(in->path);
		free(in->name);
		free(in);
		return NULL;
	}
	pthread_mutex_init(&in->mu, NULL);
	in->fmt = format;
	in->staged = in->defer = fs_ingest_is_staged(name);
	in->opener = opener;
	return in;
}

static void spool_clear(ingest *in);
static void filter_drop(ingest *in);

/* Give back every buffer of a file that committed, failed or was
 * removed: a done file that the kernel still remembers costs nothing. */
static void settle(ingest *in)
{
	spool_clear(in);
	vecfs_rows_release(in->rows);
	filter_drop(in);
}

void fs_ingest_free(ingest *in)
{
	if (!in)
		return;
	settle(in);
	vecfs_rows_free(in->rows);
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
		fs_errlog_err(&in->dm->errors, rc, "%s: %s%s; %s", in->path, at, why, tail);
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
static int add_row(ingest *in, uint64_t where, const char *key, size_t klen, const float *vec,
		   uint32_t dim, const char *payload, size_t plen, int numeric_key)
{
	if (in->dim == 0) {
		int rc = vecfs_config_get(in->dm->store, &in->cfg);
		if (rc)
			return fail_at(in, rc, where, "cannot read the configuration: %s", strerror(-rc));
		in->dim = in->cfg.dim ? in->cfg.dim : dim;
		in->dim_from_store = in->cfg.dim != 0;
		vecfs_rows_expect_dim(in->rows, in->dim, in->dim_from_store);
	}
	if (dim != in->dim)
		return fail_at(in, -EINVAL, where, "%u numbers, expected %u (%s)%s", dim, in->dim,
			       in->dim_from_store ? "the store's dim" : "the dimension of the file's first row",
			       numeric_key && dim + 1 == in->dim ? "; missing key column?" : "");
	in->numeric_keys = (in->n == 0 || in->numeric_keys) && numeric_key;
	if (key && !vecfs_key_valid(key, klen))
		return bad_key(in, where, key, klen);
	vecfs_row r = {key, klen, vec, payload, plen};
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

/* ---------------------------------------------------------------- delete */

/* The filter= line of `delete`: its text, counted against the budget. */
static int delete_filter(ingest *in, const char *s, size_t n, uint64_t where)
{
	sbuf *b = &in->filter;
	/* the capacity fs_sb_reserve() will give it */
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n + 1)
		cap *= 2;
	if (cap > b->cap) {
		char why[160];
		if (budget_take(in, cap - b->cap))
			return fail_at(in, -ENOMEM, where, "%s", budget_why(in, why, sizeof why));
		in->filter_charged += cap - b->cap;
	}
	fs_sb_add(b, s, n);
	if (b->oom)
		return fail_at(in, -ENOMEM, where, "out of memory");
	in->filter_line = where;
	return 0;
}

static void filter_drop(ingest *in)
{
	fs_sb_free(&in->filter);
	budget_give(in, in->filter_charged);
	in->filter_charged = 0;
	in->filter_line = 0;
}

/* A key of `delete`, spooled as a row without a vector. */
static int delete_key(ingest *in, uint64_t where, const char *key, size_t klen)
{
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
	filter_drop(in);
	return 0;
}

/* ---------------------------------------------------------------- the parser */

/* A row the parser completed: checked and spooled (delete: a key, or its
 * filter). */
static int rows_row(void *arg, const vecfs_parsed_row *r)
{
	ingest *in = arg;
	if (in->fmt == F_DELETE)
		return r->filter ? delete_filter(in, r->payload, r->payload_len, r->where)
				 : delete_key(in, r->where, r->key, r->keylen);
	return add_row(in, r->where, r->key, r->keylen, r->vec, r->dim, r->payload, r->payload_len,
		       r->numeric_key);
}

/* The parser's buffers count against the daemon's ingest budget. */
static int rows_mem(void *arg, int64_t delta)
{
	ingest *in = arg;
	if (delta < 0) {
		budget_give(in, (size_t)-delta);
		return 0;
	}
	if (budget_take(in, (size_t)delta)) {
		in->over = 1;
		return -ENOMEM;
	}
	return 0;
}

/* The parser failed with rc: the file fails with its reason (a row it
 * handed over has failed the file already). */
static int rows_failed(ingest *in, int rc)
{
	uint64_t where;
	char why[160];
	const char *reason = vecfs_rows_error(in->rows, &where);
	if (in->failed)
		return rc;
	if (in->over)
		return fail_at(in, -ENOMEM, where, "%s", budget_why(in, why, sizeof why));
	return fail_at(in, rc, where, "%s", reason ? reason : strerror(-rc));
}

static int feed(ingest *in, const char *buf, size_t len)
{
	in->over = 0;
	int rc = vecfs_rows_feed(in->rows, buf, len);
	return rc ? rows_failed(in, rc) : 0;
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

int fs_ingest_write(ingest *in, const char *buf, size_t len, uint64_t off, uint64_t owner)
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
		if (!in->failed) /* a staged file that failed: its rename tells */
			rc = feed(in, buf, len);
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
	in->over = 0;
	int rc = vecfs_rows_end(in->rows);
	return rc ? rows_failed(in, rc) : 0;
}

int fs_ingest_commit(ingest *in)
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

int fs_ingest_close(ingest *in, uint64_t owner, uint64_t pid)
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
	return wrote ? fs_ingest_commit(in) : 0;
}

void fs_ingest_release(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	int pending = in->dirty && !in->staged;
	if (never_written(in))
		empty_close(in);
	pthread_mutex_unlock(&in->mu);
	if (pending)
		fs_ingest_commit(in);
}

/* A staged file that failed at its rename (in->mu held): its errors line,
 * given once.  A bad file stays after a rename with flags and after the
 * plain rename that comes next (see fs_ingest_rename()); else it is done. */
static int rename_failed(ingest *in, int flags)
{
	if (!in->told) {
		fs_errlog_err(&in->dm->errors, in->fail_rc, "%s",
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

int fs_ingest_rename(ingest *in, int flags)
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

int fs_ingest_staged(ingest *in)
{
	return in->staged;
}

void fs_ingest_truncate(ingest *in)
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
		vecfs_rows_reset(in->rows);
		in->nowners = 0;
	}
	pthread_mutex_unlock(&in->mu);
}

void fs_ingest_cancel(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	in->cancelled = 1;
	in->done = 1;
	settle(in);
	pthread_mutex_unlock(&in->mu);
}

uint64_t fs_ingest_size(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	uint64_t s = in->written;
	pthread_mutex_unlock(&in->mu);
	return s;
}

int fs_ingest_done(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	int d = in->done;
	pthread_mutex_unlock(&in->mu);
	return d;
}

int fs_ingest_pending(ingest *in)
{
	pthread_mutex_lock(&in->mu);
	int d = in->dirty && !in->failed && !in->cancelled;
	pthread_mutex_unlock(&in->mu);
	return d;
}
