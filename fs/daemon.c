/*
 * fs/daemon.c - making and unmaking the daemon's context: each module's
 * init and fini, in order.
 */
#include "daemon.h"

#include <errno.h>
#include <string.h>
#include <time.h>

int daemon_init(fs_daemon *dm, const char *store_dir, unsigned max_sessions,
		size_t query_input_bytes)
{
	memset(dm, 0, sizeof *dm);
	dm->fuse = fc_new();
	if (!dm->fuse)
		return -ENOMEM;
	dm->store_dir = store_dir;
	dm->max_sessions = max_sessions;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	dm->mount_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	dm->query_input.max = query_input_bytes;
	dm->ingest_max = (size_t)INGEST_BUFFER_MB_DEFAULT << 20;
	pthread_mutex_init(&dm->query_input.mu, NULL);
	dm->query_results.max = QUERY_RESULTS_DEFAULT;
	pthread_mutex_init(&dm->query_results.mu, NULL);
	dm->query_output.max = (size_t)QUERY_OUTPUT_MB_DEFAULT << 20;
	pthread_mutex_init(&dm->query_output.mu, NULL);
	dm->reads.max = (size_t)READ_BUFFER_MB_DEFAULT << 20;
	pthread_mutex_init(&dm->reads.mu, NULL);
	errors_init(&dm->errors);
	control_init(dm);
	out_cache_init(dm);
	if (tree_init(dm) != 0 || ahead_init(dm) != 0) {
		daemon_fini(dm);
		return -ENOMEM;
	}
	return 0;
}

void daemon_fini(fs_daemon *dm)
{
	ahead_fini(dm);
	tree_destroy(dm);
	out_cache_fini(dm);
	control_fini(dm);
	errors_fini(&dm->errors);
	pthread_mutex_destroy(&dm->query_input.mu);
	pthread_mutex_destroy(&dm->query_results.mu);
	pthread_mutex_destroy(&dm->query_output.mu);
	pthread_mutex_destroy(&dm->reads.mu);
	fc_free(dm->fuse);
	dm->fuse = NULL;
}
