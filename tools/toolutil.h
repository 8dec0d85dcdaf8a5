/*
 * Helpers shared by the command-line tools: error messages, option parsing,
 * signal polling, timing, progress lines, removing a directory tree and
 * JSON output.
 */
#ifndef VECFS_TOOLUTIL_H
#define VECFS_TOOLUTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* The program name that starts every message, and a function run before an
 * error is printed (e.g. to end a progress line; may be NULL). */
void tool_init(const char *prog, void (*before_error)(void));

/* With --version as the first argument: print "<prog> VERSION" (the
 * library's VECFS_VERSION) and return the exit status; else -1. */
int tool_version(int argc, char **argv);

/* Print "<prog>: <what>: <strerror(-rc)>[: <detail>]" and return rc. */
int tool_fail(int rc, const char *detail, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Print "<prog>: <fmt with arg>" and a hint to --help; return -EINVAL. */
int tool_usage_error(const char *fmt, const char *arg);

/* A decimal number in [min, max]; no sign, no trailing characters. */
int tool_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* One option of a tool: its name, whether it takes a value, its id. */
struct tool_opt {
	const char *name;
	int has_arg;
	int id;
};

/* Apply one option (val is NULL for one without a value); non-zero when
 * the value is bad. */
typedef int (*tool_apply_fn)(void *ctx, const struct tool_opt *spec,
			     const char *val);

/* Parse argv: "--opt value" and "--opt=value" of `table`, each handed to
 * `apply`; the one other argument is the dataset directory, stored in *dir
 * and required unless *help was set.  0 or -EINVAL, after a message on
 * stderr. */
int tool_parse_args(int argc, char **argv, const struct tool_opt *table,
		    size_t n, tool_apply_fn apply, void *ctx, const char **dir,
		    const int *help);

/* Options of several tables: each option is looked up in the tables in
 * turn and handed to the apply of the table that has it. */
struct tool_opt_set {
	const struct tool_opt *table;
	size_t n;
	tool_apply_fn apply;
	void *ctx;
};
int tool_parse_sets(int argc, char **argv, const struct tool_opt_set *sets, size_t nsets,
		    const char **dir, const int *help);

/* A tool's main(): its name (tool_init(prog)), --version, parse(argc,
 * argv, opt) (non-zero: a bad command line, exit status bad_usage), *help
 * (usage on stdout, 0), then run(opt) with SIGINT, SIGTERM and SIGHUP
 * blocked and polled (tool_interrupted()): its exit status, but a tool
 * interrupted dies of the signal once run returned. */
struct tool_main {
	const char *prog;
	const char *usage;
	int bad_usage;
	int (*parse)(int argc, char **argv, void *opt);
	int (*run)(void *opt);
};
int tool_main(int argc, char **argv, const struct tool_main *t, void *opt, const int *help);

/* Print "<prog>: <fmt ...>" and a newline on stderr. */
void tool_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* SIGINT, SIGTERM and SIGHUP are blocked and polled. */
void tool_block_signals(sigset_t *set);
int tool_interrupted(void);
/* Print "<prog>: interrupted" and return -EINTR. */
int tool_report_interrupt(void);

uint64_t tool_now_ns(void);
double tool_seconds_since(uint64_t t0);
void tool_sleep_ns(uint64_t ns);

/* Progress of a long step on stderr.  On a terminal: one line rewritten
 * in place (at most 10 times a second), `LABEL: PHASE [#####.....]  45%
 * 12,345 UNIT/s  ETA 0:12`.  Otherwise (a log, a pipe): a plain line at
 * each phase and every 10%, `LABEL: PHASE 40% (12,345 UNIT/s, ETA 0:12)`.
 * The rate and ETA count from the start of the phase; without a UNIT
 * (done is a percentage then) only the ETA is shown.  An error message
 * (tool_fail) first ends an open terminal line. */
struct tool_progress {
	const char *label;
	const char *unit;   /* "rows", "queries"; NULL: done/total only */
	char phase[32];
	uint64_t phase_ns;  /* when the phase started */
	uint64_t shown_ns;  /* when the line was last written */
	int pct;            /* last shown */
	int width;          /* of the terminal line */
	int shown;
};
void tool_progress_init(struct tool_progress *p, const char *label, const char *unit);
/* done of total in PHASE (NULL or "": none). */
void tool_progress_show(struct tool_progress *p, const char *phase, uint64_t done,
			uint64_t total);
/* End the terminal line. */
void tool_progress_end(struct tool_progress *p);

/* qsort comparison of uint64_t values. */
int tool_cmp_u64(const void *a, const void *b);

/* Remove a directory and everything below it (not crossing mounts);
 * a failure is reported on stderr. */
void tool_remove_tree(const char *dir);

/* The directory of a store the tool makes, in dir (cap bytes): `path`
 * (--store; made here, it must not exist yet), or when path is NULL a new
 * temporary directory $TMPDIR/<prog>[.<label>].XXXXXX (/tmp without
 * TMPDIR), *is_temp then set.  0, or the error (reported). */
int tool_store_dir(char *dir, size_t cap, const char *path, const char *label, int *is_temp);

/* A vecfs_build() progress function: shows the phase on the struct
 * tool_progress arg; non-zero (the build stops) once interrupted. */
int tool_build_progress(void *arg, const char *phase, int pct);

/* A JSON string, and ",\"key\":x" with `decimals` decimals (null if not
 * finite), on stdout. */
void tool_json_string(const char *s);
void tool_json_num(const char *key, double x, int decimals);

#endif
