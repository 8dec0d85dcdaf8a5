/*
 * tools/memcap.c - a memory cap for a measurement (memcap.h).
 */
#include "memcap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MEMCG_ROOT "/sys/fs/cgroup/memory"

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t n = strlen(text);
	ssize_t w = write(fd, text, n);
	int rc = w == (ssize_t)n ? 0 : w < 0 ? -errno : -EIO;
	if (close(fd) && rc == 0)
		rc = -errno;
	return rc;
}

static int write_in(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return write_file(path, text);
}

/* The cgroups an earlier run left (killed: the kernel's OOM killer ends a
 * run whose cap is below what it must hold), removed when empty. */
static void remove_stale(const char *prog)
{
	DIR *d = opendir(MEMCG_ROOT);
	struct dirent *e;
	size_t n = strlen(prog);
	while (d && (e = readdir(d)))
		if (strncmp(e->d_name, prog, n) == 0 && e->d_name[n] == '.') {
			char path[512];
			snprintf(path, sizeof path, MEMCG_ROOT "/%s", e->d_name);
			rmdir(path); /* (fails while a process is in it) */
		}
	if (d)
		closedir(d);
}

int memcap_make(struct memcap *c, const char *prog, uint64_t bytes)
{
	struct stat st;
	char num[32];
	int rc;
	c->dir[0] = 0;
	if (stat(MEMCG_ROOT "/memory.limit_in_bytes", &st)) {
		fprintf(stderr, "%s: a memory cap needs the cgroup-v1 memory controller at "
			MEMCG_ROOT " (%s)\n", prog, strerror(errno));
		return -ENOTSUP;
	}
	remove_stale(prog);
	char dir[sizeof c->dir];
	snprintf(dir, sizeof dir, MEMCG_ROOT "/%s.%ld", prog, (long)getpid());
	if (mkdir(dir, 0755)) {
		rc = -errno;
		fprintf(stderr, "%s: cannot make the memory cgroup %s: %s\n", prog, dir,
			strerror(-rc));
		return rc;
	}
	snprintf(c->dir, sizeof c->dir, "%s", dir);
	snprintf(num, sizeof num, "%llu", (unsigned long long)bytes);
	if ((rc = write_in(dir, "memory.limit_in_bytes", num))) {
		fprintf(stderr, "%s: cannot cap %s at %s bytes: %s\n", prog, dir, num,
			strerror(-rc));
		memcap_remove(c, 0);
		return rc;
	}
	return 0;
}

int memcap_enter(struct memcap *c, pid_t pid)
{
	char num[32];
	snprintf(num, sizeof num, "%ld", (long)pid);
	return write_in(c->dir, "cgroup.procs", num);
}

int memcap_leave(struct memcap *c, pid_t pid)
{
	char num[32];
	snprintf(num, sizeof num, "%ld", (long)pid);
	return write_in(MEMCG_ROOT, "cgroup.procs", num);
}

uint64_t memcap_peak(const struct memcap *c)
{
	char path[512];
	unsigned long long v = 0;
	snprintf(path, sizeof path, "%s/memory.max_usage_in_bytes", c->dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

void memcap_remove(struct memcap *c, pid_t pid)
{
	if (!c->dir[0])
		return;
	if (pid)
		memcap_leave(c, pid);
	/* any other process still in it goes back too */
	char path[512];
	snprintf(path, sizeof path, "%s/cgroup.procs", c->dir);
	FILE *f = fopen(path, "re");
	long p;
	while (f && fscanf(f, "%ld", &p) == 1)
		memcap_leave(c, (pid_t)p);
	if (f)
		fclose(f);
	rmdir(c->dir);
	c->dir[0] = 0;
}

int memcap_drop_caches(void)
{
	sync();
	return write_file("/proc/sys/vm/drop_caches", "3");
}
