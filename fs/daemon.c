/*
 * fs/daemon.c - making and unmaking the daemon's context: each module's
 * init and fini, in order.
 */
#include "daemon.h"

#include <errno.h>
#include <string.h>
#include <time.h>

int fs_daemon_init(fs_daemon *dm, const char *store_dir, unsigned max_sessions,
		size_t query_input_bytes)
{
	memset(dm, 0, sizeof *dm);
	dm->fuse = fs_fc_new();
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
	fs_errors_init(&dm->errors);
	fs_control_init(dm);
	fs_out_cache_init(dm);
	if (fs_tree_init(dm) != 0 || fs_ahead_init(dm) != 0) {
		fs_daemon_fini(dm);
		return -ENOMEM;
	}
	return 0;
}

void fs_daemon_fini(fs_daemon *dm)
{
	fs_ahead_fini(dm);
	fs_tree_destroy(dm);
	fs_out_cache_fini(dm);
	fs_control_fini(dm);
	fs_errors_fini(&dm->errors);
	pthread_mutex_destroy(&dm->query_input.mu);
	pthread_mutex_destroy(&dm->query_results.mu);
	pthread_mutex_destroy(&dm->query_output.mu);
	pthread_mutex_destroy(&dm->reads.mu);
	fs_fc_free(dm->fuse);
	dm->fuse = NULL;
}
