/*
 * layout/io.c - the allocation and file-open table, set to the real calls.
 */
#include "io.h"

#include <fcntl.h>
#include <stdlib.h>

static int real_open(const char *path, int flags, mode_t mode)
{
	return open(path, flags, mode);
}

static const vf_io real_io = {
	.malloc = malloc,
	.calloc = calloc,
	.realloc = realloc,
	.open = real_open,
};

vf_io vf_io_ops = {
	.malloc = malloc,
	.calloc = calloc,
	.realloc = realloc,
	.open = real_open,
};

void vf_io_reset(void)
{
	vf_io_ops = real_io;
}
