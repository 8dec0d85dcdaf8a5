/*
 * tests/fuzz/fuzz_common.c - the temporary store and the split plan.
 */
#include "fuzz_common.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static fs_daemon dm;
static vecfs *store;
static char dir[256];
static uint32_t store_dim;
static uint64_t first_key; /* the assigned-key counter of a fresh store */
static int up;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void store_open(void)
{
	char err[256] = "";
	vecfs_config c;
	if (mkdir(dir, 0700) && errno != EEXIST) {
		perror(dir);
		abort();
	}
	if (vecfs_open(dir, &store, err, sizeof err) || vecfs_config_get(store, &c)) {
		fprintf(stderr, "fuzz: cannot open a store in %s: %s\n", dir, err);
		abort();
	}
	c.dim = store_dim;
	c.auto_build = 0;
	c.compact_deltas = UINT32_MAX;
	c.rebalance_ratio = 0;
	if (vecfs_config_set(store, &c, err, sizeof err)) {
		fprintf(stderr, "fuzz: cannot configure the store: %s\n", err);
		abort();
	}
	vecfs_stats st;
	first_key = vecfs_stats_get(store, &st) == 0 ? st.next_key : 0;
	dm.store = store;
}

static void store_remove(void)
{
	vecfs_close(store);
	store = NULL;
	dm.store = NULL;
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void at_exit(void)
{
	fs_daemon_fini(&dm);
	store_remove();
}

fs_daemon *fz_daemon(uint32_t dim)
{
	if (up)
		return &dm;
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/vecfs-fuzz-XXXXXX", tmp && strlen(tmp) < 200 ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		abort();
	}
	store_dim = dim;
	if (fs_daemon_init(&dm, dir, SESSIONS_DEFAULT, (size_t)QUERY_INPUT_MB_DEFAULT << 20)) {
		fprintf(stderr, "fuzz: daemon_init failed\n");
		abort();
	}
	store_open();
	up = 1;
	atexit(at_exit);
	return &dm;
}

void fz_store_reset(void)
{
	store_remove();
	store_open();
}

void fz_store_reset_if_used(void)
{
	vecfs_stats st;
	if (vecfs_stats_get(store, &st) == 0 && st.records == 0 && st.deleted == 0 &&
	    st.next_key == first_key)
		return;
	store_remove();
	store_open();
}

void fz_split_init(fz_split *s, const uint8_t *in, size_t n)
{
	memset(s, 0, sizeof *s);
	size_t np = n ? in[0] % 8 : 0;
	if (np + 1 > n)
		np = n ? n - 1 : 0;
	s->plan = in + (n ? 1 : 0);
	s->nplan = np;
	s->data = in + (n ? 1 + np : 0);
	s->len = n ? n - 1 - np : 0;
}

const uint8_t *fz_split_next(fz_split *s, size_t *len)
{
	if (s->off >= s->len)
		return NULL;
	size_t left = s->len - s->off, c = left;
	if (s->nplan) {
		c = (size_t)s->plan[s->next++ % s->nplan] + 1;
		if (c > left)
			c = left;
	}
	const uint8_t *p = s->data + s->off;
	s->off += c;
	*len = c;
	return p;
}
