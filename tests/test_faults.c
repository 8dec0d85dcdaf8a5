/*
 * test_faults.c - the store under failures: a reader process killed while
 * it holds a snapshot of a store another process writes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "testutil.h"

/* ------------------------------------------------------------ dead readers */

/* The child's part (this binary run as `hold-read DIR FD`): open the store
 * read-only, begin a read, say so on FD and wait to be killed. */
static int hold_read(const char *dir, int fd)
{
	vecfs *v;
	vf_txn *txn;
	char err[256];
	if (vecfs_open_readonly(dir, &v, err, sizeof err) ||
	    vf_read_begin(v->store, &txn))
		return 1;
	if (write(fd, "r", 1) != 1)
		return 1;
	for (;;)
		pause();
}

/* A process that holds a read of dir, started and killed with SIGKILL. */
static void kill_reader(const char *dir)
{
	int p[2];
	char fdarg[16], c;
	assert_int_equal(pipe(p), 0);
	snprintf(fdarg, sizeof fdarg, "%d", p[1]);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		execl("/proc/self/exe", "test_faults", "hold-read", dir, fdarg, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	kill(pid, SIGKILL);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
}

/* Rewrites of the same keys after a reader died with a snapshot: the file
 * stays bounded (the dead reader's slot is cleared while the store is
 * open, not only at the next open). */
static void test_dead_reader_released(void **state)
{
	fixture *f = *state;
	const uint32_t d = 64;
	const size_t n = 2000;
	vecfs *v = fx_open(f, NULL);
	set_config(v, d, VECFS_L2);
	dataset ds;
	ds_make(&ds, 11, n, d, 8);
	put_range(v, ds.x, 0, n, d, "k");
	kill_reader(f->dir);
	for (int i = 0; i < 3; i++)
		put_range(v, ds.x, 0, n, d, "k");
	uint64_t base = vf_store_bytes(v->store);
	for (int i = 0; i < 30; i++)
		put_range(v, ds.x, 0, n, d, "k");
	uint64_t end = vf_store_bytes(v->store);
	/* a rewrite puts about n * (24 + 4 d) bytes of records on new pages;
	 * with the snapshot pinned, none of the old ones would be reused */
	uint64_t one = n * (24 + 4 * d);
	print_message("data file %llu -> %llu bytes over 30 rewrites of %llu\n",
		      (unsigned long long)base, (unsigned long long)end,
		      (unsigned long long)one);
	assert_true(end - base < 8 * one);
	ds_free(&ds);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "hold-read"))
		return hold_read(argv[2], atoi(argv[3]));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dead_reader_released, fx_setup,
						fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
