/* Helpers shared by the command-line tools; see toolutil.h. */
#include "toolutil.h"

#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vecfs.h"

static const char *prog_name = "";
static void (*error_hook)(void);

void tool_init(const char *prog, void (*before_error)(void))
{
	prog_name = prog;
	error_hook = before_error;
}

int tool_version(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--version"))
		return -1;
	printf("%s %s\n", prog_name, VECFS_VERSION);
	return fflush(stdout) ? 1 : 0;
}

static int progress_open; /* a terminal progress line lacks its newline */

static void progress_break(void)
{
	if (progress_open)
		fputc('\n', stderr);
	progress_open = 0;
}

static void error_prefix(void)
{
	progress_break();
	if (error_hook)
		error_hook();
	fprintf(stderr, "%s: ", prog_name);
}

int tool_fail(int rc, const char *detail, const char *fmt, ...)
{
	va_list ap;

	error_prefix();
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s", strerror(rc < 0 ? -rc : rc));
	if (detail && *detail)
		fprintf(stderr, ": %s", detail);
	fputc('\n', stderr);
	return rc;
}

int tool_usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", prog_name);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(try %s --help)\n", prog_name);
	return -EINVAL;
}

/* ---------------------------------------------------------------- options */

int tool_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
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

static const struct tool_opt *find_opt(const struct tool_opt *table, size_t n,
				       const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(table[i].name) == len &&
		    memcmp(table[i].name, name, len) == 0)
			return &table[i];
	return NULL;
}

int tool_parse_args(int argc, char **argv, const struct tool_opt *table,
		    size_t n, tool_apply_fn apply, void *ctx, const char **dir,
		    const int *help)
{
	const struct tool_opt_set set = { table, n, apply, ctx };

	return tool_parse_sets(argc, argv, &set, 1, dir, help);
}

int tool_parse_sets(int argc, char **argv, const struct tool_opt_set *sets, size_t nsets,
		    const char **dir, const int *help)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *val = NULL, *eq;
		const struct tool_opt *spec = NULL;
		const struct tool_opt_set *set;
		size_t len;

		if (arg[0] != '-' || arg[1] == '\0') {
			if (*dir)
				return tool_usage_error("unexpected argument '%s'", arg);
			*dir = arg;
			continue;
		}
		eq = strchr(arg, '=');
		len = eq ? (size_t)(eq - arg) : strlen(arg);
		for (set = sets; set < sets + nsets; set++)
			if ((spec = find_opt(set->table, set->n, arg, len)) != NULL)
				break;
		if (!spec)
			return tool_usage_error("unknown option '%s'", arg);
		if (spec->has_arg) {
			if (eq)
				val = eq + 1;
			else if (i + 1 < argc)
				val = argv[++i];
			else
				return tool_usage_error("%s needs a value", spec->name);
		} else if (eq) {
			return tool_usage_error("%s takes no value", spec->name);
		}
		if (set->apply(set->ctx, spec, val)) {
			fprintf(stderr, "%s: bad value for %s: '%s'\n", prog_name,
				spec->name, val);
			return -EINVAL;
		}
	}
	if (!*dir && !*help)
		return tool_usage_error("%s", "missing dataset directory DIR");
	return 0;
}

/* ---------------------------------------------------------------- main */

int tool_main(int argc, char **argv, const struct tool_main *t, void *opt, const int *help)
{
	sigset_t sigs;
	int vs, status;

	tool_init(t->prog, NULL);
	vs = tool_version(argc, argv);
	if (vs >= 0)
		return vs;
	if (t->parse(argc, argv, opt))
		return t->bad_usage;
	if (*help) {
		fputs(t->usage, stdout);
		return 0;
	}
	tool_block_signals(&sigs);
	status = t->run(opt);
	if (tool_interrupted())
		sigprocmask(SIG_UNBLOCK, &sigs, NULL); /* dies of the signal */
	return status;
}

void tool_say(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---------------------------------------------------------------- signals */

void tool_block_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigprocmask(SIG_BLOCK, set, NULL);
}

int tool_interrupted(void)
{
	sigset_t p;

	if (sigpending(&p))
		return 0;
	return sigismember(&p, SIGINT) == 1 || sigismember(&p, SIGTERM) == 1 ||
	       sigismember(&p, SIGHUP) == 1;
}

int tool_report_interrupt(void)
{
	error_prefix();
	fputs("interrupted\n", stderr);
	return -EINTR;
}

/* ---------------------------------------------------------------- time */

uint64_t tool_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double tool_seconds_since(uint64_t t0)
{
	return (double)(tool_now_ns() - t0) / 1e9;
}

void tool_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int tool_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- progress */

void tool_progress_init(struct tool_progress *p, const char *label, const char *unit)
{
	memset(p, 0, sizeof *p);
	p->label = label;
	p->unit = unit;
	p->pct = -1;
	p->phase_ns = tool_now_ns();
}

/* n with thousands separators */
static void grouped(char *out, size_t cap, uint64_t n)
{
	char d[24];
	int len = snprintf(d, sizeof d, "%llu", (unsigned long long)n), o = 0;
	for (int i = 0; i < len && (size_t)o + 2 < cap; i++) {
		if (i && (len - i) % 3 == 0)
			out[o++] = ',';
		out[o++] = d[i];
	}
	out[o] = 0;
}

/* "12,345 rows/s" and "ETA 1:02", either empty when unknown */
static void rate_eta(const struct tool_progress *p, uint64_t done, uint64_t total,
		     uint64_t now, char *rate, size_t rcap, char *eta, size_t ecap)
{
	double secs = (double)(now - p->phase_ns) / 1e9;
	rate[0] = eta[0] = 0;
	if (secs < 1e-3 || done == 0)
		return;
	if (p->unit) {
		char n[32];
		grouped(n, sizeof n, (uint64_t)((double)done / secs));
		snprintf(rate, rcap, "%s %s/s", n, p->unit);
	}
	if (done < total) {
		uint64_t left = (uint64_t)(secs * (double)(total - done) / (double)done + 0.5);
		if (left >= 3600)
			snprintf(eta, ecap, "ETA %llu:%02llu:%02llu", (unsigned long long)(left / 3600),
				 (unsigned long long)(left / 60 % 60), (unsigned long long)(left % 60));
		else
			snprintf(eta, ecap, "ETA %llu:%02llu", (unsigned long long)(left / 60),
				 (unsigned long long)(left % 60));
	}
}

void tool_progress_show(struct tool_progress *p, const char *phase, uint64_t done,
			uint64_t total)
{
	uint64_t now = tool_now_ns();
	int tty = isatty(STDERR_FILENO);
	if (!phase)
		phase = "";
	if (done > total)
		done = total;
	int pct = total ? (int)(done * 100 / total) : 100;
	if (strncmp(p->phase, phase, sizeof p->phase - 1)) { /* a new phase */
		snprintf(p->phase, sizeof p->phase, "%s", phase);
		if (p->shown) /* the first phase counts from tool_progress_init() */
			p->phase_ns = now;
	} else if (p->shown && (tty ? (pct == p->pct || now - p->shown_ns < 100000000u) && pct < 100
		       : pct / 10 == p->pct / 10)) {
		return;
	}
	char rate[48], eta[32];
	rate_eta(p, done, total, now, rate, sizeof rate, eta, sizeof eta);
	const char *sp = *p->phase ? " " : "";
	if (tty) {
		char bar[21];
		int fill = pct / 5;
		for (int i = 0; i < 20; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[20] = 0;
		int w = fprintf(stderr, "\r%s: %s%s[%s] %3d%%%s%s%s%s", p->label, p->phase, sp, bar,
				pct, *rate ? "  " : "", rate, *eta ? "  " : "", eta);
		if (w < p->width)
			fprintf(stderr, "%*s", p->width - w, "");
		else
			p->width = w;
		progress_open = 1;
	} else {
		fprintf(stderr, "%s: %s%s%d%%", p->label, p->phase, sp, pct);
		if (*rate || *eta)
			fprintf(stderr, " (%s%s%s)", rate, *rate && *eta ? ", " : "", eta);
		fputc('\n', stderr);
	}
	fflush(stderr);
	p->pct = pct;
	p->shown = 1;
	p->shown_ns = now;
}

void tool_progress_end(struct tool_progress *p)
{
	if (p->shown && isatty(STDERR_FILENO))
		progress_break();
	p->shown = 0;
	p->width = 0;
}

/* ---------------------------------------------------------------- files */

static int remove_entry(const char *path, const struct stat *st, int type,
			struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path) ? errno : 0;
}

void tool_remove_tree(const char *dir)
{
	int rc = nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);

	if (rc)
		tool_fail(-(rc > 0 ? rc : errno), NULL, "remove %s", dir);
}

/* ---------------------------------------------------------------- JSON */

void tool_json_string(const char *s)
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

void tool_json_num(const char *key, double x, int decimals)
{
	if (isfinite(x))
		printf(",\"%s\":%.*f", key, decimals, x);
	else
		printf(",\"%s\":null", key);
}

int tool_store_dir(char *dir, size_t cap, const char *path, const char *label, int *is_temp)
{
	const char *tmp = getenv("TMPDIR");

	if (path) {
		if ((size_t)snprintf(dir, cap, "%s", path) >= cap)
			return tool_fail(-ENAMETOOLONG, NULL, "--store %s", path);
		if (mkdir(dir, 0755)) {
			int e = errno;

			return tool_fail(-e, e == EEXIST ? "it must not exist" : NULL,
				    "--store %s", dir);
		}
		return 0;
	}
	if (!tmp || !*tmp)
		tmp = "/tmp";
	if ((size_t)snprintf(dir, cap, "%s/%s%s%s.XXXXXX", tmp, prog_name, label ? "." : "",
			     label ? label : "") >= cap)
		return tool_fail(-ENAMETOOLONG, NULL, "temporary directory in %s", tmp);
	if (!mkdtemp(dir))
		return tool_fail(-errno, NULL, "mkdtemp %s", dir);
	*is_temp = 1;
	return 0;
}

int tool_build_progress(void *arg, const char *phase, int pct)
{
	tool_progress_show(arg, phase, pct < 0 ? 0 : (uint64_t)pct, 100);
	return tool_interrupted(); /* non-zero cancels the build */
}
