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
#include <unistd.h>

#include "daemon.h"
#include "errors.h"
#include "number.h"

/* ---------------------------------------------------------------- build progress */

static pthread_mutex_t prog_mu = PTHREAD_MUTEX_INITIALIZER;
static int prog_running;
static char prog_phase[32];
static int prog_pct;

static int on_progress(void *arg, const char *phase, int pct)
{
	fs_mount *m = arg;
	pthread_mutex_lock(&prog_mu);
	snprintf(prog_phase, sizeof prog_phase, "%s", phase);
	prog_pct = pct;
	pthread_mutex_unlock(&prog_mu);
	return m->stopping; /* cancels the build when the daemon stops */
}

int build_progress(char *phase, size_t cap, int *pct)
{
	pthread_mutex_lock(&prog_mu);
	int r = prog_running;
	if (r) {
		snprintf(phase, cap, "%s", prog_phase[0] ? prog_phase : "waiting");
		*pct = prog_pct;
	}
	pthread_mutex_unlock(&prog_mu);
	return r;
}

/* build, build stage and rebalance: a new generation, with progress */
static int run_build(fs_mount *m, const char *what, int activate, int rebalance)
{
	char err[300] = "";
	uint64_t gen = 0;
	pthread_mutex_lock(&prog_mu);
	prog_running++;
	prog_phase[0] = 0;
	prog_pct = 0;
	pthread_mutex_unlock(&prog_mu);
	int rc = rebalance ? vecfs_rebalance(m->store, activate, &gen, on_progress, m, err,
					     sizeof err)
			   : vecfs_build(m->store, activate, &gen, on_progress, m, err, sizeof err);
	pthread_mutex_lock(&prog_mu);
	prog_running--;
	pthread_mutex_unlock(&prog_mu);
	if (rc) {
		const char *why = err[0] ? err : strerror(-rc);
		if (rc == -ENOENT && !err[0])
			why = "there are no records to build from";
		size_t wl = strlen(what);
		if (!strncmp(why, what, wl) && !strncmp(why + wl, ": ", 2))
			why += wl + 2;
		else if (!strncmp(why, "build: ", 7))
			why += 7;
		errlog("ctl: %s: %s", what, why);
	}
	return rc;
}

static int run_compact(fs_mount *m)
{
	char err[300] = "";
	int rc = vecfs_compact(m->store, NULL, err, sizeof err);
	if (rc) {
		const char *why = err[0] ? err : strerror(-rc);
		if (!strncmp(why, "compact: ", 9))
			why += 9;
		errlog("ctl: compact: %s", why);
	}
	return rc;
}

int ctl_exec(fs_mount *m, const char *line, size_t n)
{
	const char *s = line;
	trim(&s, &n);
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
		errlog("ctl: unknown command '%.60s...' (commands: build, build stage, compact, rebalance, verify)", s);
		return -EINVAL;
	}
	if (!strcmp(cmd, "build"))
		return run_build(m, "build", 1, 0);
	if (!strcmp(cmd, "build stage"))
		return run_build(m, "build stage", 0, 0);
	if (!strcmp(cmd, "rebalance"))
		return run_build(m, "rebalance", 1, 1);
	if (!strcmp(cmd, "compact"))
		return run_compact(m);
	if (!strcmp(cmd, "verify")) {
		char msg[512] = "";
		int rc = vecfs_verify(m->store, msg, sizeof msg);
		if (msg[0])
			errlog("%s", msg);
		else if (rc)
			errlog("verify: failed: %s", strerror(-rc));
		return rc;
	}
	errlog("ctl: unknown command '%s' (commands: build, build stage, compact, rebalance, verify)", cmd);
	return -EINVAL;
}

/* ---------------------------------------------------------------- backup */

int backup_open(fs_mount *m)
{
	int fd = -1;
#ifdef O_TMPFILE
	fd = open(m->store_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
	if (fd < 0) {
		const char *td = getenv("TMPDIR");
		char path[4096];
		snprintf(path, sizeof path, "%s/vecfs-backup.XXXXXX", td && td[0] ? td : "/tmp");
		fd = mkstemp(path);
		if (fd < 0) {
			int e = errno;
			errlog("backup: cannot create a temporary file: %s", strerror(e));
			return -e;
		}
		unlink(path);
	}
	int rc = vecfs_backup(m->store, fd);
	if (rc) {
		errlog("backup: %s", strerror(-rc));
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
