/*
 * vecfs.h - the public interface of the vecfs library (engine + layout).
 *
 * A store is one directory holding one LMDB environment.  It keeps records
 * (key -> float32 vector + optional payload) and immutable index generations
 * (IVF centroids + RaBitQ posting blocks).  Searches use the active
 * generation; rows it does not cover are scanned exactly, so results are
 * correct whichever generation is active.
 *
 * Conventions: functions return 0 or a negative errno.  Where a function takes
 * `char *err, size_t errlen`, a one-line human-readable reason is written
 * there on failure (may be NULL).  All functions are thread-safe on one
 * `vecfs` handle unless noted.  Handles share no state: everything hangs
 * off the handle, but for what the process settles once (the CPU kernels
 * used, the CPUs jobs run on).
 */
#ifndef VECFS_H
#define VECFS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VECFS_VERSION "0.1.0"

#define VECFS_KEY_MAX 255           /* bytes of a record key */
#define VECFS_PAYLOAD_MAX (64 << 10) /* bytes of a record payload */
#define VECFS_DIM_MAX 16384

typedef struct vecfs vecfs;

typedef enum { VECFS_L2 = 0, VECFS_COSINE = 1, VECFS_DOT = 2 } vecfs_metric;

const char *vecfs_metric_name(vecfs_metric m);
int vecfs_metric_parse(const char *s, vecfs_metric *out); /* 0 / -EINVAL */

/* ---------------------------------------------------------------- numbers */

/* A float32 as "%.9g" in the C locale (reads back to the same float), into
 * out (cap >= 32 for every float): returns its length. */
int vecfs_format_float(char *out, size_t cap, float f);
/* A finite float32 as "%.8e" (reads back to the same float): always
 * VECFS_FLOAT_E_LEN bytes, one more with a minus sign (-0 included), and
 * a NUL; out holds 24 bytes.  Returns its length. */
#define VECFS_FLOAT_E_LEN 14
int vecfs_format_float_e(char *out, float f);
/* The n bytes at s as a decimal unsigned integer (digits only, no sign) up
 * to max: 0, -EINVAL, or -ERANGE past max. */
int vecfs_parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out);
/* The n bytes at s as one float32 token, as strtof() reads it in the C
 * locale, rounded correctly however long: -EINVAL for anything but one
 * whole number token, -ERANGE on overflow, -ENOMEM when a long token
 * cannot be copied. */
int vecfs_parse_float(const char *s, size_t n, float *out);

/* ---------------------------------------------------------------- store */

/* Open (creating if missing) the store in directory `dir`.  Fails with
 * -EBUSY if another handle or process holds the store open. */
int vecfs_open(const char *dir, vecfs **out, char *err, size_t errlen);
/* Open an existing store to read it as it is, also while a daemon has it
 * mounted (each read is one consistent snapshot): no recovery, no
 * maintenance, nothing written; writes fail with -EROFS. */
int vecfs_open_readonly(const char *dir, vecfs **out, char *err, size_t errlen);
/* Not thread-safe: no other call on v may be running (a search, a
 * vecfs_parallel() among them) or start. */
void vecfs_close(vecfs *v);
/* The CPUs v's work may run on at once (1: the caller's alone): those the
 * program started on (its affinity, as taskset or a container's cpuset
 * sets it), at most 16. */
int vecfs_cpus(const vecfs *v);
/* Run fn on each of n arguments at once (args: n of arg_size bytes; more
 * than 16 in rounds of 16): the first on the caller's thread, the others on threads v
 * keeps one to a CPU, each taking work from callers on the other CPUs (or
 * on threads started for the call, when none is free).  Returns when all
 * are done.  For a program's own work beside the library's: the daemon
 * parses a long query input in pieces this way.  "At once" is not promised
 * (a thread that cannot start leaves its argument to the caller, after the
 * first; more than 16 run in rounds): one fn must never wait for another. */
void vecfs_parallel(vecfs *v, void (*fn)(void *arg), void *args, size_t arg_size, int n);

/* ---------------------------------------------------------------- config */

/* The settings, one row each, in the order `config` shows them.  A new
 * setting is one row here (and the code that reads its field): its field
 * of vecfs_config, default, bounds, parsing, rendering, stored form, the
 * key list of error messages and the README's table follow from the row.
 *
 * X(slot, name, TYPE, default, min, max, meaning)
 *   slot: where the store keeps it (stable: never reuse or renumber one)
 *   TYPE: U32 or U64 (integers in min..max), OFF32 (0 = never, else
 *         min..max), RATIO (a number in (min, max]), METRIC (l2, cosine,
 *         dot) */
#define VECFS_SETTINGS(X)                                                                        \
	X(0, dim, U32, 0, 0, VECFS_DIM_MAX,                                                      \
	  "vector dimension, 1–16384; 0 = unset, fixed by the first ingest")                     \
	X(1, metric, METRIC, VECFS_L2, 0, 2,                                                     \
	  "`l2` (squared Euclidean), `cosine` (1 − cos) or `dot` (−dot)")                        \
	X(2, nlist, U32, 0, 0, 1000000,                                                          \
	  "IVF clusters of the next build, up to 1000000; 0 = chosen from the number of "       \
	  "records (about √N)")                                                                  \
	X(3, bits, U32, 4, 1, 8, "RaBitQ bits per dimension of the next build, 1–8")            \
	X(4, nprobe, U32, 0, 0, UINT32_MAX,                                                      \
	  "query default: clusters probed; 0 = chosen per query to reach `recall_target`")       \
	X(5, recall_target, RATIO, 0.95, 0, 1,                                                   \
	  "query default: the mean recall@k a query aims at, in (0, 1]")                         \
	X(6, k, U32, 10, 1, 100000, "query default: results per query, 1–100000")               \
	X(7, refine, U32, 10, 1, 1000, "query default: re-rank candidates per result, 1–1000")  \
	X(8, auto_build, U64, 10000, 0, UINT64_MAX,                                              \
	  "build the first generation in the background once this many records exist; "        \
	  "0 = never")                                                                           \
	X(9, compact_deltas, U32, 128, 1, UINT32_MAX,                                            \
	  "delta postings in one cluster that start a compaction in the background")            \
	X(10, keep_generations, U32, 1, 0, 1000,                                                 \
	  "generations kept besides the active one, up to 1000; a build removes older ones")    \
	X(11, rebalance_ratio, OFF32, 3, 2, 1000,                                                \
	  "largest/mean cluster size above which a background compaction is followed by a "     \
	  "rebalance; 0 = never, else 2–1000")

#define VECFS_SETTING_CTYPE_U32 uint32_t
#define VECFS_SETTING_CTYPE_U64 uint64_t
#define VECFS_SETTING_CTYPE_OFF32 uint32_t
#define VECFS_SETTING_CTYPE_RATIO float
#define VECFS_SETTING_CTYPE_METRIC vecfs_metric

typedef struct vecfs_config {
#define VECFS_SETTING_FIELD_(slot, name, type, def, lo, hi, meaning)                             \
	VECFS_SETTING_CTYPE_##type name;
	VECFS_SETTINGS(VECFS_SETTING_FIELD_)
#undef VECFS_SETTING_FIELD_
	uint64_t seed;           /* rotation / sampling seed for the next build */
} vecfs_config;

typedef enum {
	VECFS_SETTING_U32, VECFS_SETTING_U64, VECFS_SETTING_OFF32, VECFS_SETTING_RATIO,
	VECFS_SETTING_METRIC
} vecfs_setting_type;

/* A row of VECFS_SETTINGS, to read and write settings by name. */
typedef struct vecfs_setting {
	const char *name;
	vecfs_setting_type type;
	unsigned slot;
	size_t offset;           /* of its field in vecfs_config */
	double def, min, max;
	const char *meaning;
} vecfs_setting;

/* The rows, in order; *n their number. */
const vecfs_setting *vecfs_settings(size_t *n);
/* The row named by the len bytes at name, or NULL. */
const vecfs_setting *vecfs_setting_find(const char *name, size_t len);
/* The names of all settings, ", " between them (for error messages). */
const char *vecfs_setting_names(void);
/* What the setting takes, in words ("1–8", "a number in (0, 1]", ...). */
const char *vecfs_setting_values(const vecfs_setting *st, char *buf, size_t cap);
/* The len bytes at text as the value of st, into c: 0, or -EINVAL when
 * they are not one of the values st takes. */
int vecfs_setting_parse(const vecfs_setting *st, const char *text, size_t len, vecfs_config *c);
/* st's value in c as `config` shows it, NUL-terminated: its length. */
int vecfs_setting_format(const vecfs_setting *st, const vecfs_config *c, char *out, size_t cap);

void vecfs_config_defaults(vecfs_config *c);
int vecfs_config_get(vecfs *v, vecfs_config *out);
/* Replace the configuration.  -EINVAL for bad values, -EBUSY when dim or
 * metric would change while records exist.  Persistent. */
int vecfs_config_set(vecfs *v, const vecfs_config *c, char *err, size_t errlen);

/* ---------------------------------------------------------------- writes */

typedef struct vecfs_row {
	const char *key;      /* NULL: a key is assigned from the store counter */
	size_t keylen;
	const float *vec;     /* dim floats */
	const void *payload;  /* optional, may be NULL */
	size_t payload_len;
} vecfs_row;

/* 1 when text[0..len) is UTF-8 as keys must be (no overlong form, no
 * surrogate, nothing past U+10FFFF), else 0. */
int vecfs_utf8_valid(const char *text, size_t len);

/* Validate one row against the store (dimension given or configured, finite
 * values, non-zero under cosine, key syntax, payload size).  `dim` is the
 * number of floats in row->vec.  Returns 0 or -EINVAL with a reason. */
int vecfs_row_check(vecfs *v, const vecfs_row *row, uint32_t dim, char *err,
		    size_t errlen);
/* The same check against a configuration read before (vecfs_config_get()),
 * without a read of the store: for the rows of a file, one after another. */
int vecfs_row_check_config(const vecfs_config *c, const vecfs_row *row, uint32_t dim,
			   char *err, size_t errlen);

/* ---------------------------------------------------------------- codecs: files of rows
 *
 * The ingest formats, parsed incrementally: bytes are fed in pieces split
 * anywhere, and each row is handed to a callback as soon as it is
 * complete.  No I/O, no store: what the rows become is the caller's.  A
 * text line longer than VECFS_ROWS_LINE_MAX fails; memory is asked of the
 * caller (mem) before it grows, so a caller can count it against a budget.
 *   CSV, TSV, TXT  a line a row: the key (or "key" double-quoted, "" a
 *                  quote inside), then the numbers; .csv commas (else
 *                  tabs), .tsv tabs (else commas), .txt commas (else
 *                  blanks); blank and # lines skipped
 *   KEYS           a key a line (whole, or double-quoted), and at most
 *                  one filter= line (`delete`)
 *   JSONL          {"key": "...", "vector": [...], "payload": any}
 *   FVECS, BVECS   int32 dim, then dim float32 (bytes); no keys
 *   NPY            a C-order 2-D '<f4' or '<f8' array (.npy 1.0-3.0)
 * Lines (text) and rows (binary) are numbered from 1; a UTF-8 byte order
 * mark opens a text's first line. */
typedef enum {
	VECFS_ROWS_CSV, VECFS_ROWS_TSV, VECFS_ROWS_TXT, VECFS_ROWS_KEYS, VECFS_ROWS_JSONL,
	VECFS_ROWS_FVECS, VECFS_ROWS_BVECS, VECFS_ROWS_NPY
} vecfs_rows_format;
#define VECFS_ROWS_LINE_MAX ((size_t)4 << 20)       /* bytes of a text line */
#define VECFS_ROWS_NPY_HEADER_MAX ((size_t)1 << 20) /* bytes of an .npy header */

/* The format a file name's extension names (.csv .tsv .txt .jsonl .ndjson
 * .fvecs .bvecs .npy), or -1. */
int vecfs_rows_format_of(const char *name);

typedef struct vecfs_parsed_row {
	uint64_t where;          /* its line (text) or row (binary) number */
	const char *key;         /* decoded; NULL: none (binary formats) */
	size_t keylen;
	const float *vec;        /* dim floats (KEYS: NULL, 0) */
	uint32_t dim;
	const char *payload;     /* JSONL: the "payload" value's text; KEYS: a
				  * filter= line's filter */
	size_t payload_len;
	int numeric_key;         /* delimited text: an unquoted key that reads
				  * as a number */
	int filter;              /* KEYS: the filter= line */
} vecfs_parsed_row;

/* A complete row: 0 to go on, else a negative errno that stops the feed
 * (and is returned by it). */
typedef int (*vecfs_rows_fn)(void *arg, const vecfs_parsed_row *row);
/* delta > 0: bytes the parser is about to allocate, 0 to allow, non-zero
 * to refuse (the feed then fails with -ENOMEM); delta < 0: bytes freed. */
typedef int (*vecfs_rows_mem_fn)(void *arg, int64_t delta);

typedef struct vecfs_rows vecfs_rows;
/* mem may be NULL (no limit but the line's). */
vecfs_rows *vecfs_rows_new(vecfs_rows_format fmt, vecfs_rows_fn emit, vecfs_rows_mem_fn mem,
			   void *arg);
/* The next len bytes: 0, the callback's failure, or -EINVAL (a bad row,
 * header or line; -E2BIG: JSON nested too deeply), -ENOMEM: then
 * vecfs_rows_error() says why.  After a failure the parser is dead. */
int vecfs_rows_feed(vecfs_rows *r, const void *buf, size_t len);
/* The end of what was fed so far: a last line without its newline is a
 * row, a partial binary row or header is truncated (-EINVAL). */
int vecfs_rows_end(vecfs_rows *r);
/* Why the parser failed (NULL: it did not, or its callback did), and the
 * line or row number it is about in *where (0: the file as a whole). */
const char *vecfs_rows_error(const vecfs_rows *r, uint64_t *where);
/* Binary rows of another dimension than dim fail at their header, "(the
 * store's dim)" or "(the dimension of the file's first row)" said. */
void vecfs_rows_expect_dim(vecfs_rows *r, uint32_t dim, int from_store);
/* Rows handed to the callback so far. */
uint64_t vecfs_rows_count(const vecfs_rows *r);
/* Free the buffers between rows (at a line's or row's end), keeping the
 * place: the next feed goes on where this one ended (KEYS: a filter= line
 * may come again, as after a commit). */
void vecfs_rows_release(vecfs_rows *r);
/* From the start again: nothing fed. */
void vecfs_rows_reset(vecfs_rows *r);
void vecfs_rows_free(vecfs_rows *r);

/* Commit `n` rows atomically and durably (upsert; within a batch the last row
 * for a key wins).  If the dimension is unset it is fixed to `dim`.  With an
 * active generation each row becomes a delta posting in its nearest cluster
 * and is searchable at once.  On any bad row nothing is committed and
 * `*bad_row` (if not NULL) is its index. */
int vecfs_put(vecfs *v, const vecfs_row *rows, size_t n, uint32_t dim,
	      size_t *bad_row, char *err, size_t errlen);

/* As vecfs_put, but a key given in two rows of the batch fails it:
 * -EINVAL, nothing committed, *bad_row the second of its rows and
 * *first_row the first (each may be NULL). */
int vecfs_put_unique(vecfs *v, const vecfs_row *rows, size_t n, uint32_t dim,
		     size_t *bad_row, size_t *first_row, char *err, size_t errlen);

/* A large write, committed atomically: rows are validated as they are
 * added and spooled, encoded, into an unlinked temporary file in the
 * store's directory (else in $TMPDIR, else /tmp) through a write buffer of
 * VECFS_BATCH_BUF bytes, made at the first row: that buffer is all the
 * memory a batch holds, whatever its size.  Nothing is visible until
 * vecfs_batch_commit, which maps the file and commits all rows as
 * vecfs_put does (a later row for a key wins; VECFS_BATCH_UNIQUE: as
 * vecfs_put_unique), in one durable transaction.  A batch not committed
 * leaves nothing behind; a spool file left by a crash is removed when the
 * store is next opened for writing.  A batch of VECFS_BATCH_DELETE holds
 * keys (dim 0: of each row only its key is read) and commits as
 * vecfs_delete_many. */
typedef struct vecfs_batch vecfs_batch;
#define VECFS_BATCH_BUF ((size_t)256 << 10)
#define VECFS_BATCH_UNIQUE 1u /* a key given in two rows fails the commit */
#define VECFS_BATCH_DELETE 2u /* rows are keys to delete */
int vecfs_batch_begin(vecfs *v, uint32_t dim, unsigned flags, vecfs_batch **out);
/* Each row is checked (vecfs_row_check; a delete batch: its key) and
 * spooled with a tag: tags[i], or (tags NULL) its number in the batch,
 * from 1; a failed commit names its row by that tag.  -EINVAL with a
 * reason (and *bad_row, the index within this call) for a bad row: the
 * rows before it in this call are kept, the batch stays usable.  A failed
 * write of the spool (-ENOSPC for a full disk or quota) fails this call
 * and every later one, and the commit. */
int vecfs_batch_add(vecfs_batch *b, const vecfs_row *rows, const uint64_t *tags, size_t n,
		    size_t *bad_row, char *err, size_t errlen);
uint64_t vecfs_batch_rows(const vecfs_batch *b);
/* A delete batch: also delete what this filter (a search's) matches. */
int vecfs_batch_filter(vecfs_batch *b, const char *filter, size_t len);
/* What a commit did, or where it failed: `row`, the tag of the row that
 * failed it (0: no row did); a key given twice in a VECFS_BATCH_UNIQUE
 * batch: `first`, the tag of its first row, and the key. */
typedef struct vecfs_batch_result {
	uint64_t row, first;
	char key[VECFS_KEY_MAX + 1];
	size_t keylen;
	uint64_t deleted; /* a delete batch: records deleted */
} vecfs_batch_result;
/* Commits and frees the batch (also on failure); res may be NULL. */
int vecfs_batch_commit(vecfs_batch *b, vecfs_batch_result *res, char *err, size_t errlen);
void vecfs_batch_abort(vecfs_batch *b);

/* Delete one record durably.  -ENOENT if missing. */
int vecfs_delete(vecfs *v, const char *key, size_t keylen);

/* 1 when key[0..len) is a key as records may have (1-255 bytes of UTF-8
 * without '/', NUL, tab or newline, not "." or ".."), else 0. */
int vecfs_key_valid(const char *key, size_t len);

typedef struct vecfs_key {
	const char *key;
	size_t len;
} vecfs_key;
/* Delete, in one atomic and durable commit, the records of the n keys
 * (keys that do not exist are skipped) and, when filter is not NULL, every
 * live record whose payload matches it (a search's filter; "{}" matches
 * every record).  *deleted (may be NULL): the records deleted.  -EINVAL or
 * -E2BIG for a bad filter, with a reason, nothing deleted. */
int vecfs_delete_many(vecfs *v, const vecfs_key *keys, size_t n, const char *filter,
		      size_t filter_len, uint64_t *deleted, char *err, size_t errlen);

/* Read one record: copies up to `cap` floats into `vec` and sets `*dim`.
 * -ENOENT if missing.  Payload, if wanted, is copied into `payload`
 * (capacity `pcap`, may be NULL) and its length into `*plen`. */
int vecfs_get(vecfs *v, const char *key, size_t keylen, float *vec,
	      uint32_t cap, uint32_t *dim, void *payload, size_t pcap,
	      size_t *plen);

/* Iterate live keys in key order, starting after `after` (NULL = first).
 * Calls fn for each key until it returns non-zero (which stops and is
 * returned) or `max` keys were given. */
typedef int (*vecfs_key_fn)(void *arg, const char *key, size_t keylen);
int vecfs_keys(vecfs *v, const char *after, size_t afterlen, size_t max,
	       vecfs_key_fn fn, void *arg);

/* ---------------------------------------------------------------- search */

#define VECFS_K_MAX 100000     /* results a query asks for */
#define VECFS_REFINE_MAX 1000  /* re-rank candidates per result */

/* A query's options, one row each, as an options line of `in` names them
 * (`k=10 nprobe=0 recall=0.95 refine=10 mode=exact filter={...}`).  A new
 * option is one row here (and the code that reads its field): its field of
 * vecfs_query_opts, parsing (vecfs_query_opts_parse), its bounds and the
 * option list of error messages follow from the row.
 *
 * X(name, field, TYPE, min, max, meaning)
 *   TYPE: COUNT (an integer in min..max; 0 = the config's), AUTO (0 =
 *         chosen per query, else min..max; sets auto_nprobe), RATIO (a
 *         number in (min, max]), MODE (ann or exact), FILTER (JSON to the
 *         end of the line; the field points into the parsed line) */
#define VECFS_QUERY_OPTIONS(X)                                                                   \
	X(k, k, COUNT, 1, VECFS_K_MAX, "results per query")                                      \
	X(nprobe, nprobe, AUTO, 0, UINT32_MAX, "clusters probed; 0 = chosen per query")          \
	X(refine, refine, COUNT, 1, VECFS_REFINE_MAX, "re-rank candidates per result")           \
	X(recall, recall, RATIO, 0, 1, "the mean recall@k the query aims at")                    \
	X(mode, exact, MODE, 0, 1, "ann (the index) or exact (every record)")                    \
	X(filter, filter, FILTER, 0, 0, "only records whose payload matches this JSON filter")

#define VECFS_QUERY_FIELD_COUNT(f) uint32_t f;
#define VECFS_QUERY_FIELD_AUTO(f) uint32_t f;
#define VECFS_QUERY_FIELD_RATIO(f) float f;
#define VECFS_QUERY_FIELD_MODE(f) int f;
#define VECFS_QUERY_FIELD_FILTER(f) const char *f; size_t f##_len;

typedef struct vecfs_query_opts {
	/* k, refine: 0 = config default; nprobe: 0 = config default (which
	 * may be 0: chosen per query to reach the recall target); recall: in
	 * (0, 1], 0 = the config's (an nprobe given here wins over it); exact:
	 * 1 = scan every live record (mode=exact); filter: NULL, or a JSON
	 * filter on payloads (README.md), -EINVAL when malformed, -E2BIG past
	 * its limits */
#define VECFS_QUERY_FIELD_(name, field, type, lo, hi, meaning) VECFS_QUERY_FIELD_##type(field)
	VECFS_QUERY_OPTIONS(VECFS_QUERY_FIELD_)
#undef VECFS_QUERY_FIELD_
	int auto_nprobe;  /* 1 = nprobe chosen per query (to reach `recall` or
			   * the config's recall_target) whatever the
			   * config's nprobe */
	int uncounted;    /* 1 = not in the store's query counts and latencies
			   * (stats) unless vecfs_search_count() adds it */
} vecfs_query_opts;

/* One options line (name=value tokens between spaces, tabs or commas; a
 * filter= runs to the end of the line) of n bytes at s into o, over what o
 * holds: 0, or -EINVAL with why (the option and the values it takes). */
int vecfs_query_opts_parse(const char *s, size_t n, vecfs_query_opts *o, char *why, size_t wl);
/* One line of a query's text input (a mount's query/ID/in): blank or a
 * `#` comment: 0; options (a '=' in it): parsed into o (its filter may
 * point into s), 1; a vector (numbers separated by spaces, tabs or commas,
 * optionally in [ ]): its *dim numbers in vec (VECFS_DIM_MAX floats), 2.
 * -EINVAL (a number that is not one, or not finite, too many of them, a
 * '[' not closed) or -ENOMEM, with why. */
int vecfs_query_line_parse(const char *s, size_t n, vecfs_query_opts *o, float *vec,
			   uint32_t *dim, char *why, size_t wl);
/* Binary query input: 1 when the whole of buf[0..len) is .fvecs rows of
 * one dimension (*dim, *rows; their vectors copied to out, rows x dim
 * floats, when out is not NULL), else 0. */
int vecfs_fvecs_rows(const void *buf, size_t len, uint32_t *dim, size_t *rows, float *out);
/* The names of the options, ", " between them (for error messages). */
const char *vecfs_query_opt_names(void);

/* A query's whole input as query/ID/in takes it, gathered line by line
 * (text) or at once (binary rows): its options, its vectors and, of text,
 * the line each came from, so that a failure found later names its line.
 * Zero it to start; vecfs_query_input_free() ends it. */
typedef struct vecfs_query_input {
	vecfs_query_opts opts; /* the option lines' (opts.filter: `filter`) */
	float *vecs;           /* nq x dim */
	size_t nq;
	uint32_t dim;
	uint32_t want_dim;     /* set by the caller, 0: any; else the first
				* vector must have this many numbers */
	unsigned lines;        /* text lines taken; after a failure, its line */
	unsigned filter_line;  /* the line of the filter taken (0: none) */
	unsigned *vline;       /* the line of each vector; NULL for binary rows */
	char *filter;          /* the filter's text, NUL-terminated */
	size_t cap;            /* vectors vecs (and vline) have room for */
	unsigned opt_lines;    /* option lines taken (filter= among them) */
} vecfs_query_input;

/* Each line of buf[0..len) (the last may lack its newline) taken in turn,
 * as vecfs_query_line_parse() reads it, after what qi holds: 0, or
 * -EINVAL (or -ENOMEM) with why, qi->lines then naming the line (qi keeps
 * what the lines before it gave). */
int vecfs_query_input_text(vecfs_query_input *qi, const char *buf, size_t len, char *why,
			   size_t wl);
/* Binary input: 1 when the whole of buf[0..len) is .fvecs rows of one
 * dimension (then they are qi's vectors, in place of any), 0 when it is
 * not, -ENOMEM. */
int vecfs_query_input_fvecs(vecfs_query_input *qi, const void *buf, size_t len);
/* A whole input into a zeroed qi (but for want_dim): binary rows, else
 * text; at least one vector (-EINVAL "no query vector" otherwise).  0, or
 * -errno with why and *line the line of text at fault (0: none). */
int vecfs_query_input_parse(vecfs_query_input *qi, const void *buf, size_t len, unsigned *line,
			    char *why, size_t wl);
/* The lines src took (from a zeroed input, want_dim 0), text that
 * follows the lines dst took, taken as if dst had taken them itself:
 * 1 when they were (dst holds src's vectors after its own, their lines
 * counted on from dst's), 0 when dst must take that text itself for the
 * same outcome (src took an option line, or its vectors are not of the
 * dimension dst wants, or dst or src holds binary rows), -ENOMEM (dst as it
 * was).  src is left as it was.  So text may be parsed in pieces at once
 * and joined in order. */
int vecfs_query_input_append(vecfs_query_input *dst, const vecfs_query_input *src);
/* *dst (uninitialised) a copy of src, its own memory: 0 or -ENOMEM (dst
 * then holds nothing to free). */
int vecfs_query_input_copy(vecfs_query_input *dst, const vecfs_query_input *src);
/* The line of text input a search's failure (why) is about: the filter's
 * line for the filter's, a vector's for "query N ..."; 0 when none is
 * known (binary rows: "query N" names the row itself). */
unsigned vecfs_query_input_line_of(const vecfs_query_input *qi, const char *why);
void vecfs_query_input_free(vecfs_query_input *qi);

typedef struct vecfs_explain {
	uint64_t generation;       /* 0 = none (exact scan) */
	uint64_t clusters_probed;
	uint64_t pass1_scored;     /* postings scored on sign planes */
	uint64_t pass1_pruned;     /* dropped by the pass-1 bound */
	uint64_t pass2_scored;     /* survivors scored with extra planes */
	uint64_t pass2_pruned;
	uint64_t reranked;         /* exact distances computed on candidates */
	uint64_t delta_scanned;    /* delta postings scored */
	uint64_t uncovered_scanned;/* rows not covered by the generation, exact */
	uint64_t stale_skipped;    /* superseded or deleted postings skipped */
	uint64_t pages_read;       /* pages of the store the search waited to read
				      from disk: the major page faults of the
				      threads that searched, while they did
				      (pages read ahead of time are not in it;
				      a search under 50 us does not count,
				      and a thread's faults since it last
				      counted go to its next search that
				      does: an approximate count) */
	uint64_t filter_passed;    /* live records that matched the filter */
	uint64_t filter_tested;    /* payloads tested to find them: those the
				      payload index gave, or every live record;
				      0 when an earlier query's set was kept */
	uint64_t micros;
	uint32_t k, nprobe, refine;/* as run: the options, or the config's defaults */
	float recall_target;       /* the target the probing aimed at; 0 when a
				      fixed nprobe was used */
} vecfs_explain;

typedef struct vecfs_hit {
	const char *key;   /* NUL-terminated, owned by the result set */
	size_t keylen;
	float distance;    /* exact distance under the metric */
	const void *payload;
	size_t payload_len;
} vecfs_hit;

typedef struct vecfs_results {
	size_t nq;            /* query vectors */
	size_t *count;        /* count[i]: hits of query i */
	vecfs_hit **hits;     /* hits[i][0..count[i]) in rank order */
	vecfs_explain explain;/* summed over the batch */
	uint64_t generation;  /* generation used, 0 = none */
	uint64_t snapshot;    /* the version of the store searched */
} vecfs_results;

/* Run `nq` queries of `dim` floats each on one snapshot and one generation.
 * Returns min(k, live records) hits per query.  -EINVAL on a dimension
 * mismatch or a bad value. */
int vecfs_search(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		 const vecfs_query_opts *opts, vecfs_results **out, char *err,
		 size_t errlen);
void vecfs_results_free(vecfs_results *r);
/* The store's version now: it changes with every committed write (also
 * maintenance's).  While it equals r->snapshot, the same search again
 * would find what r holds. */
uint64_t vecfs_snapshot(vecfs *v);
/* Count an `uncounted` search in the store's stats after all. */
void vecfs_search_count(vecfs *v, const vecfs_results *r);

/* ---------------------------------------------------------------- generations */

typedef enum {
	VECFS_GEN_BUILDING = 0,
	VECFS_GEN_READY = 1,
	VECFS_GEN_FAILED = 2
} vecfs_gen_state;

typedef struct vecfs_gen_info {
	uint64_t id;
	vecfs_gen_state state;
	uint64_t created;        /* unix seconds */
	uint64_t covered;        /* records covered by its posting blocks */
	uint32_t nlist;
	uint32_t bits;
	uint32_t dim;
	uint32_t pdim;           /* dimensions its codes have: dim padded to a
				  * multiple of 64 (a power of two in
				  * generations built before 2026-12) */
	uint32_t query_table;    /* 1: its first-pass look-up table is built
				  * once a query (generations built since
				  * 2026-12-05); 0: once a cluster probed */
	vecfs_metric metric;
	uint64_t seed;
	double build_seconds;
	uint64_t parent;         /* generation active when it was built, 0 = none */
	uint64_t delta_postings; /* live delta postings not yet compacted */
	uint64_t tombstones;
	uint32_t phase_pct;      /* progress while building */
	char phase[32];          /* "sample", "train", "encode", "publish",
				  * "catch-up", "done" */
} vecfs_gen_info;

/* Progress callback for builds: phase name and percent (0..100).  A non-zero
 * return aborts the build (it then fails with -ECANCELED and leaves nothing
 * visible but a `failed` generation record). */
typedef int (*vecfs_progress_fn)(void *arg, const char *phase, int pct);

/* Build a generation from the current snapshot; publish it `ready`; flip
 * `active` to it when `activate`.  Writes go on meanwhile: they become its
 * delta postings and tombstones, caught up in steps of their own
 * transactions before the last one publishes it.  Builds never overlap: a
 * second caller waits.  -ENOENT when there are no records. */
int vecfs_build(vecfs *v, int activate, uint64_t *gen_out,
		vecfs_progress_fn progress, void *parg, char *err,
		size_t errlen);

/* The active generation id (0 = none). */
uint64_t vecfs_active(vecfs *v);
/* Make a ready generation active: -ENOENT missing, -EINVAL not ready. */
int vecfs_activate(vecfs *v, uint64_t gen, char *err, size_t errlen);
/* Remove a generation: -EBUSY if active, -ENOENT missing. */
int vecfs_gen_remove(vecfs *v, uint64_t gen);
/* List generation ids in increasing order; *n gets the total count. */
int vecfs_gen_list(vecfs *v, uint64_t *ids, size_t cap, size_t *n);
int vecfs_gen_info_get(vecfs *v, uint64_t gen, vecfs_gen_info *out);
/* How a generation reaches recall targets, as measured when it was built
 * on sample queries drawn from its records (their exact k nearest known):
 * per target, the smallest fixed nprobe that reached it, and the mean
 * clusters the per-query choice (nprobe 0) probed for it. */
typedef struct vecfs_recall_row {
	float target;
	uint32_t nprobe;
	float clusters;
} vecfs_recall_row;
/* Rows for k results (the nearest calibrated k at or above it), *n of
 * them (at most cap); *queries the sample's size.  -ENOENT for a
 * generation built without a calibration. */
int vecfs_gen_recall_table(vecfs *v, uint64_t gen, uint32_t k, vecfs_recall_row *rows,
			   size_t cap, size_t *n, uint32_t *queries);
/* Centroids of a generation: nlist*dim floats (caller frees with free()). */
int vecfs_gen_centroids(vecfs *v, uint64_t gen, float **out, uint32_t *nlist,
			uint32_t *dim);

typedef struct vecfs_cluster_info {
	uint32_t id;
	uint64_t vectors;    /* live postings (blocks + deltas - tombstoned) */
	uint32_t blocks;
	uint64_t deltas;
	uint64_t tombstones;
} vecfs_cluster_info;
/* Per-cluster manifests of a generation (caller frees *out with free()). */
int vecfs_gen_clusters(vecfs *v, uint64_t gen, vecfs_cluster_info **out,
		       uint32_t *n);

/* ---------------------------------------------------------------- maintenance */

/* Fold the active generation's delta postings (and rows it does not cover
 * yet) into packed posting blocks and drop deleted and superseded entries,
 * in steps of about 50 ms, each one transaction (writes waiting for the
 * store go between two steps): running queries keep their snapshot,
 * results do not change.  It folds the changes made up to its start; later
 * ones stay delta postings.  Only clusters with deltas or tombstones are
 * rewritten.  Writes the number of clusters rewritten to *clusters (may be
 * NULL).  -ENOENT without an active generation. */
int vecfs_compact(vecfs *v, uint32_t *clusters, char *err, size_t errlen);

/* A local rebalance of the active generation, published as a new
 * generation whose parent it is, made active when `activate`.  It compacts
 * first; then clusters with more than twice the mean number of vectors
 * (and at least 64) are split by a 2-means on their exact vectors, clusters
 * with under a quarter of the mean are merged into their nearest
 * neighbours, and vectors of the 8 clusters nearest a split that are now
 * nearer a new centroid move there.  Rotation, bits and metric stay the
 * parent's: clusters left alone keep their posting blocks byte for byte,
 * only the clusters that changed are re-encoded.  With nothing to split or
 * merge the new generation is a copy.  Writes made meanwhile are kept.
 * -ENOENT without an active generation. */
int vecfs_rebalance(vecfs *v, int activate, uint64_t *gen_out,
		    vecfs_progress_fn progress, void *parg, char *err, size_t errlen);

/* ---------------------------------------------------------------- checks, stats */

/* Verify every posting block checksum and that postings and records agree.
 * Writes a one-line outcome into msg.  -EIO when something is wrong. */
int vecfs_verify(vecfs *v, char *msg, size_t msglen);

typedef struct vecfs_stats {
	uint32_t dim;
	vecfs_metric metric;
	uint64_t records;        /* live */
	uint64_t deleted;        /* deletes since the store was made */
	uint64_t generations;
	uint64_t active;         /* 0 = none */
	uint64_t unindexed;      /* live records not in active's packed blocks:
				    in delta postings or scanned exactly */
	uint64_t delta_postings; /* in the active generation */
	uint64_t store_bytes;    /* in use (the file keeps freed pages for reuse) */
	uint64_t ingest_rows;
	uint64_t queries;
	uint64_t p50_us, p99_us;
	uint64_t pages_read;     /* summed over the queries counted in `queries`
				    (vecfs_explain's pages_read) */
	uint64_t next_key;       /* the assigned-key counter */
	uint64_t compactions;    /* compactions run (automatic and asked for) */
	uint64_t rebalances;
	double cluster_imbalance;/* largest / mean live vectors per cluster */
	int maintenance;         /* 1 while a compaction or rebalance is due or
				    running in the background */
	/* the recall@k of the ANN queries served (on a generation), from a
	 * share of them run again exactly in the background on the same
	 * snapshot, at most 5% of one CPU, at the lowest priority */
	double recall_estimate;  /* < 0: no sample yet */
	uint64_t recall_samples; /* queries it rests on (the latest 500 at most) */
	double recall_low, recall_high; /* its 95% interval (Wilson) */
} vecfs_stats;
int vecfs_stats_get(vecfs *v, vecfs_stats *out);

/* Repair a store whose values fail their checksums (a flipped bit on disk;
 * vecfs_verify() names them), in one transaction: a record that fails its
 * checksum is removed as a delete removes one (its postings become stale)
 * and its key reported lost through `lost` (may be NULL); a key entry that
 * names a missing record or one of another key is removed, and an intact
 * record whose key entry is gone gets it back; a ready generation with a
 * posting block, delta posting, tombstone or manifest that fails its
 * checks is removed (when it was the active one, none is active: every
 * row is scanned exactly until the next build).  Afterwards vecfs_verify()
 * passes unless LMDB's own pages are damaged (then restore a backup). */
typedef struct vecfs_salvage_info {
	uint64_t records_dropped;     /* records that failed their checksum */
	uint64_t keys_lost;           /* keys whose record was dropped or missing */
	uint64_t keys_restored;       /* key entries made again from intact records */
	uint64_t generations_dropped;
	uint64_t postings_repaired;   /* records whose postings disagreed with
				       * them (another version or key, a missing
				       * record, a record posted twice): posted
				       * again from the record */
} vecfs_salvage_info;
typedef void (*vecfs_lost_fn)(void *arg, const char *key, size_t keylen);
int vecfs_salvage(vecfs *v, vecfs_lost_fn lost, void *arg, vecfs_salvage_info *info,
		  char *err, size_t errlen);

/* Where records that fail their checksum are reported when an operation
 * skips them (a build leaves them out of its generation rather than
 * fail): one call each, with the key as far as it can be read (keylen 0
 * when it cannot).  fn NULL: not reported.  Salvage removes them. */
void vecfs_set_lost_fn(vecfs *v, vecfs_lost_fn fn, void *arg);
/* A line the owner of the store should hear about (for an error log):
 * e.g. the recall of served queries fell below recall_target.  Called
 * from a background thread; set it before queries run. */
typedef void (*vecfs_notice_fn)(void *arg, const char *line);
void vecfs_set_notice_fn(vecfs *v, vecfs_notice_fn fn, void *arg);

/* Stream a consistent compacted copy of the store (an LMDB data.mdb) to fd. */
int vecfs_backup(vecfs *v, int fd);

/* Every live record as a JSON line, in key order, from one snapshot, to
 * fd: {"key":"…","vector":[…],"payload":…} (the payload as stored, only
 * where there is one; each number as vecfs_format_float_e() prints it).
 * *bytes: the bytes written.  -EIO when a record fails its checksum. */
int vecfs_export(vecfs *v, int fd, uint64_t *bytes);

/* What file tools see of a store without reading it whole. */
typedef struct vecfs_attrs {
	uint64_t created_ns;   /* nanoseconds since the epoch: the store made (or
				  first opened by a version that keeps times) */
	uint64_t config_ns;    /* the last change of the configuration */
	uint64_t records_ns;   /* the last commit that wrote or deleted records */
	uint64_t gens_ns;      /* the last build, removal or flip of a generation */
	uint64_t export_bytes; /* what vecfs_export() would write now */
	uint64_t backup_bytes; /* what vecfs_backup() would write now */
} vecfs_attrs;
int vecfs_attrs_get(vecfs *v, vecfs_attrs *out);
/* When the current version of a record was committed (ns since the
 * epoch).  -ENOENT when there is no such record. */
int vecfs_record_time(vecfs *v, const char *key, size_t keylen, uint64_t *ns);

/* Which scan kernels are in use ("avx2", "scalar"); for reports. */
const char *vecfs_kernel_name(void);

/* ---------------------------------------------------------------- the mount's query call */
/* The ioctl() of a mount's query/ID/in that runs one input and answers in
 * the caller's buffer, one system call a query (README, "One system call a
 * query"): `size` bytes (VECFS_CALL_MIN..VECFS_CALL_MAX) hold, going in, a
 * 4-byte little-endian length n and then n bytes of input as `in` takes
 * it; coming back, the results as `out` shows them, from the buffer's
 * start.  ioctl() returns their length, or -1 with errno (ERANGE: they do
 * not fit in size bytes).  Nothing else of the session changes. */
#define VECFS_CALL_MIN 8
#define VECFS_CALL_MAX 16383 /* the most an ioctl number can say */
#define VECFS_IOC_QUERY(size) \
	((unsigned)(3u << 30 | (unsigned)(size) << 16 | (unsigned)'v' << 8 | 1u))

#ifdef __cplusplus
}
#endif
#endif
