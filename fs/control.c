/*
 * fs/control.c - the `ctl` commands (build, build stage, compact,
 * rebalance, verify) and the `backup` stream.
 */
#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "errors.h"
#include "text.h"

/* ---------------------------------------------------------------- build progress */

void fs_control_init(fs_daemon *dm)
{
	memset(&dm->build, 0, sizeof dm->build);
	pthread_mutex_init(&dm->build.mu, NULL);
}

void fs_control_fini(fs_daemon *dm)
{
	pthread_mutex_destroy(&dm->build.mu);
}

static void salvage_lost(void *arg, const char *key, size_t keylen)
{
	fs_errlog(&((fs_daemon *)arg)->errors, "salvage: lost record %.*s", (int)keylen, key);
}

static void build_skipped(void *arg, const char *key, size_t keylen)
{
	fs_errlog(&((fs_daemon *)arg)->errors,
	       "build: record %.*s fails its checksum: left out (ctl salvage removes it)",
	       (int)keylen, key);
}

static void store_notice(void *arg, const char *line)
{
	fs_errlog(&((fs_daemon *)arg)->errors, "%s", line);
}

void fs_control_store_opened(fs_daemon *dm)
{
	int rc = fs_errors_attach(&dm->errors, dm->store_dir);
	if (rc)
		fs_errlog_err(&dm->errors, rc, "errors: cannot keep the log in %s/errors: %s (it is kept in memory)",
			   dm->store_dir, strerror(-rc));
	vecfs_set_lost_fn(dm->store, build_skipped, dm);
	vecfs_set_notice_fn(dm->store, store_notice, dm);
}

static int on_progress(void *arg, const char *phase, int pct)
{
	fs_daemon *dm = arg;
	build_state *b = &dm->build;
	pthread_mutex_lock(&b->mu);
	snprintf(b->phase, sizeof b->phase, "%s", phase);
	b->pct = pct;
	pthread_mutex_unlock(&b->mu);
	return atomic_load(&dm->stopping); /* cancels the build when the daemon stops */
}

int fs_build_progress(fs_daemon *dm, char *phase, size_t cap, int *pct)
{
	build_state *b = &dm->build;
	pthread_mutex_lock(&b->mu);
	int r = b->running;
	if (r) {
		snprintf(phase, cap, "%s", b->phase[0] ? b->phase : "waiting");
		*pct = b->pct;
	}
	pthread_mutex_unlock(&b->mu);
	return r;
}

/* build, build stage and rebalance: a new generation, with progress */
static int run_build(fs_daemon *dm, const char *what, int activate, int rebalance)
{
	char err[300] = "";
	uint64_t gen = 0;
	build_state *b = &dm->build;
	pthread_mutex_lock(&b->mu);
	b->running++;
	b->phase[0] = 0;
	b->pct = 0;
	pthread_mutex_unlock(&b->mu);
	int rc = rebalance ? vecfs_rebalance(dm->store, activate, &gen, on_progress, dm, err,
					     sizeof err)
			   : vecfs_build(dm->store, activate, &gen, on_progress, dm, err, sizeof err);
	pthread_mutex_lock(&b->mu);
	b->running--;
	pthread_mutex_unlock(&b->mu);
	if (rc) {
		const char *why = err[0] ? err : strerror(-rc);
		if (rc == -ENOENT && !err[0])
			why = "there are no records to build from";
		size_t wl = strlen(what);
		if (!strncmp(why, what, wl) && !strncmp(why + wl, ": ", 2))
			why += wl + 2;
		else if (!strncmp(why, "build: ", 7))
			why += 7;
		fs_errlog_err(&dm->errors, rc, "ctl: %s: %s", what, why);
	}
	return rc;
}

static int run_compact(fs_daemon *dm)
{
	char err[300] = "";
	int rc = vecfs_compact(dm->store, NULL, err, sizeof err);
	if (rc) {
		const char *why = err[0] ? err : strerror(-rc);
		if (!strncmp(why, "compact: ", 9))
			why += 9;
		fs_errlog_err(&dm->errors, rc, "ctl: compact: %s", why);
	}
	return rc;
}

static int run_verify(fs_daemon *dm)
{
	char msg[512] = "";
	int rc = vecfs_verify(dm->store, msg, sizeof msg);
	if (msg[0])
		fs_errlog(&dm->errors, "%s", msg);
	else if (rc)
		fs_errlog_err(&dm->errors, rc, "verify: failed: %s", strerror(-rc));
	return rc;
}

static int run_salvage(fs_daemon *dm)
{
	vecfs_salvage_info si;
	char err[256] = "";
	int rc = vecfs_salvage(dm->store, salvage_lost, dm, &si, err, sizeof err);
	if (rc)
		fs_errlog_err(&dm->errors, rc, "%s", err);
	else
		fs_errlog(&dm->errors, "salvage: %llu damaged record(s) removed, %llu key(s) lost, "
		       "%llu key(s) restored, %llu generation(s) dropped, %llu record(s) "
		       "posted again",
		       (unsigned long long)si.records_dropped, (unsigned long long)si.keys_lost,
		       (unsigned long long)si.keys_restored,
		       (unsigned long long)si.generations_dropped,
		       (unsigned long long)si.postings_repaired);
	/* the active generation dropped: the index is derived from the
	 * records again, as a build would (unless builds are manual) */
	vecfs_config c;
	vecfs_stats st;
	if (rc || !si.generations_dropped || vecfs_active(dm->store) ||
	    vecfs_config_get(dm->store, &c) || vecfs_stats_get(dm->store, &st) ||
	    st.records == 0)
		return rc;
	if (c.auto_build == 0) {
		fs_errlog(&dm->errors, "salvage: no generation is active now (auto_build = 0): "
		       "echo build > ctl makes one; meanwhile every query scans exactly");
		return 0;
	}
	fs_errlog(&dm->errors, "salvage: no generation is active now: building a new one");
	return run_build(dm, "salvage", 1, 0);
}

static int run_build_active(fs_daemon *dm) { return run_build(dm, "build", 1, 0); }
static int run_build_stage(fs_daemon *dm) { return run_build(dm, "build stage", 0, 0); }
static int run_rebalance(fs_daemon *dm) { return run_build(dm, "rebalance", 1, 1); }

/* The commands: a row each, in the order reading ctl lists them. */
static const struct ctl_command {
	const char *name;
	int (*run)(fs_daemon *dm);
	int builds; /* its progress is the build's */
} commands[CTL_COMMANDS] = {
	{"build", run_build_active, 1}, {"build stage", run_build_stage, 1},
	{"compact", run_compact, 0},    {"rebalance", run_rebalance, 1},
	{"verify", run_verify, 0},      {"salvage", run_salvage, 0},
};

#define COMMAND_LIST "build, build stage, compact, rebalance, verify, salvage"

int fs_ctl_exec(fs_daemon *dm, const char *line, size_t n)
{
	const char *s = line;
	fs_trim(&s, &n);
	if (n == 0 || s[0] == '#')
		return 0;
	/* collapse the words: "build   stage" == "build stage" */
	char cmd[128];
	size_t cl = 0;
	for (size_t i = 0; i < n && cl < sizeof cmd - 1; i++) {
		char c = s[i] == '\t' ? ' ' : s[i];
		if (c == ' ' && cl && cmd[cl - 1] == ' ')
			continue;
		cmd[cl++] = c;
	}
	cmd[cl] = 0;
	if (n >= sizeof cmd - 1) {
		fs_errlog(&dm->errors, "ctl: unknown command '%.60s...' (commands: " COMMAND_LIST ")", s);
		return -EINVAL;
	}
	for (int i = 0; i < CTL_COMMANDS; i++) {
		if (strcmp(cmd, commands[i].name))
			continue;
		ctl_last *l = &dm->build.last[i];
		pthread_mutex_lock(&dm->build.mu);
		l->running++;
		pthread_mutex_unlock(&dm->build.mu);
		int rc = commands[i].run(dm);
		pthread_mutex_lock(&dm->build.mu);
		l->running--;
		l->ran = 1;
		l->rc = rc;
		l->when = time(NULL);
		pthread_mutex_unlock(&dm->build.mu);
		return rc;
	}
	fs_errlog(&dm->errors, "ctl: unknown command '%s' (commands: " COMMAND_LIST ")", cmd);
	return -EINVAL;
}

int fs_ctl_render(fs_daemon *dm, sbuf *b)
{
	char phase[32], when[32];
	int pct;
	fs_sb_adds(b, "# commands, one a line: " COMMAND_LIST "\n");
	int building = fs_build_progress(dm, phase, sizeof phase, &pct);
	pthread_mutex_lock(&dm->build.mu);
	for (int i = 0; i < CTL_COMMANDS; i++) {
		const ctl_last *l = &dm->build.last[i];
		struct tm tm;
		fs_sb_printf(b, "%s: ", commands[i].name);
		if (l->running && commands[i].builds && building)
			fs_sb_printf(b, "running %d%% (%s)\n", pct, phase);
		else if (l->running)
			fs_sb_adds(b, "running\n");
		else if (!l->ran)
			fs_sb_adds(b, "not run since the mount\n");
		else {
			gmtime_r(&l->when, &tm);
			strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
			if (l->rc)
				fs_sb_printf(b, "failed %s: %s\n", when, strerror(-l->rc));
			else
				fs_sb_printf(b, "ok %s\n", when);
		}
	}
	pthread_mutex_unlock(&dm->build.mu);
	return b->oom ? -ENOMEM : 0;
}

/* ---------------------------------------------------------------- backup */

/* A temporary file next to the store (its disk has room for a copy),
 * else in TMPDIR, filled by fill() and positioned at 0; or -errno with an
 * errors line naming `what`. */
static int snapshot_open(fs_daemon *dm, const char *what, int (*fill)(vecfs *v, int fd))
{
	int fd = -1;
#ifdef O_TMPFILE
	fd = open(dm->store_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
	if (fd < 0) {
		const char *td = getenv("TMPDIR");
		char path[4096];
		snprintf(path, sizeof path, "%s/vecfs-%s.XXXXXX", td && td[0] ? td : "/tmp", what);
		fd = mkstemp(path);
		if (fd < 0) {
			int e = errno;
			fs_errlog_err(&dm->errors, e, "%s: cannot create a temporary file: %s", what, strerror(e));
			return -e;
		}
		unlink(path);
	}
	int rc = fill(dm->store, fd);
	if (rc) {
		fs_errlog_err(&dm->errors, rc, "%s: %s", what, strerror(-rc));
		close(fd);
		return rc;
	}
	if (lseek(fd, 0, SEEK_SET) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

int fs_backup_open(fs_daemon *dm)
{
	return snapshot_open(dm, "backup", vecfs_backup);
}

static int export_fill(vecfs *v, int fd)
{
	uint64_t bytes;
	return vecfs_export(v, fd, &bytes);
}

int fs_export_open(fs_daemon *dm)
{
	return snapshot_open(dm, "export.jsonl", export_fill);
}
