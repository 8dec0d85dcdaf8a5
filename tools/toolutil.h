/*
 * Helpers shared by the command-line tools: error messages, option parsing,
 * signal polling, timing, removing a directory tree and JSON output.
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

/* SIGINT, SIGTERM and SIGHUP are blocked and polled. */
void tool_block_signals(sigset_t *set);
int tool_interrupted(void);
/* Print "<prog>: interrupted" and return -EINTR. */
int tool_report_interrupt(void);

uint64_t tool_now_ns(void);
double tool_seconds_since(uint64_t t0);
void tool_sleep_ns(uint64_t ns);

/* qsort comparison of uint64_t values. */
int tool_cmp_u64(const void *a, const void *b);

/* Remove a directory and everything below it (not crossing mounts);
 * a failure is reported on stderr. */
void tool_remove_tree(const char *dir);

/* A JSON string, and ",\"key\":x" with `decimals` decimals (null if not
 * finite), on stdout. */
void tool_json_string(const char *s);
void tool_json_num(const char *key, double x, int decimals);

#endif
