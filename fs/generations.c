/*
 * fs/generations.c - the files of generations/<gen>/ (meta,
 * centroids.fvecs, clusters, progress) and activation through the
 * `active` symlink.
 */
#include "generations.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "daemon.h"
#include "errors.h"

/* The recall calibration of a ready generation, for k = 10: the fixed
 * nprobe each target needed on its sample queries, and the clusters the
 * per-query choice probed on average. */
static void recall_lines(vecfs *v, uint64_t gen, sbuf *b)
{
	vecfs_recall_row rows[32];
	size_t n;
	uint32_t nq;
	if (vecfs_gen_recall_table(v, gen, 10, rows, 32, &n, &nq))
		return;
	fs_sb_printf(b, "calibration_queries = %u\n", nq);
	fs_sb_adds(b, "nprobe_for_recall =");
	for (size_t i = 0; i < n; i++)
		fs_sb_printf(b, " %g:%u", rows[i].target, rows[i].nprobe);
	fs_sb_adds(b, "\nclusters_for_recall =");
	for (size_t i = 0; i < n; i++)
		fs_sb_printf(b, " %g:%.1f", rows[i].target, rows[i].clusters);
	fs_sb_adds(b, "\n");
}

static const char *state_name(vecfs_gen_state s)
{
	switch (s) {
	case VECFS_GEN_BUILDING: return "building";
	case VECFS_GEN_READY: return "ready";
	case VECFS_GEN_FAILED: return "failed";
	}
	return "unknown";
}

int fs_gen_parse_name(const char *name, uint64_t *gen)
{
	size_t n = strlen(name);
	if (n == 0 || n > 20 || (name[0] == '0'))
		return -ENOENT;
	if (vecfs_parse_uint(name, n, UINT64_MAX, gen) || *gen == 0)
		return -ENOENT;
	return 0;
}

int fs_gen_exists(vecfs *v, uint64_t gen)
{
	vecfs_gen_info gi;
	return vecfs_gen_info_get(v, gen, &gi) == 0;
}

static void progress_line(fs_daemon *dm, const vecfs_gen_info *gi, sbuf *b)
{
	char phase[32];
	int pct;
	if (gi->state == VECFS_GEN_READY)
		fs_sb_adds(b, "done 100%\n");
	else if (gi->state == VECFS_GEN_FAILED)
		fs_sb_printf(b, "failed %u%%\n", gi->phase_pct);
	else if (fs_build_progress(dm, phase, sizeof phase, &pct))
		fs_sb_printf(b, "%s %d%%\n", phase, pct);
	else
		fs_sb_printf(b, "%s %u%%\n", gi->phase[0] ? gi->phase : "building", gi->phase_pct);
}

int fs_gen_render(fs_daemon *dm, uint64_t gen, int which, sbuf *b)
{
	vecfs *v = dm->store;
	vecfs_gen_info gi;
	int rc = vecfs_gen_info_get(v, gen, &gi);
	if (rc)
		return rc;
	switch (which) {
	case GF_META:
		fs_sb_printf(b, "id = %llu\n", (unsigned long long)gi.id);
		fs_sb_printf(b, "state = %s\n", state_name(gi.state));
		fs_sb_printf(b, "created = %llu\n", (unsigned long long)gi.created);
		fs_sb_printf(b, "records = %llu\n", (unsigned long long)gi.covered);
		fs_sb_printf(b, "nlist = %u\n", gi.nlist);
		fs_sb_printf(b, "bits = %u\n", gi.bits);
		fs_sb_printf(b, "dim = %u\n", gi.dim);
		fs_sb_printf(b, "padded_dim = %u\n", gi.pdim);
		fs_sb_printf(b, "first_pass_table = %s\n", gi.query_table ? "query" : "cluster");
		fs_sb_printf(b, "metric = %s\n", vecfs_metric_name(gi.metric));
		fs_sb_printf(b, "rotation_seed = %llu\n", (unsigned long long)gi.seed);
		fs_sb_printf(b, "build_seconds = %.3f\n", gi.build_seconds);
		if (gi.parent)
			fs_sb_printf(b, "parent = %llu\n", (unsigned long long)gi.parent);
		else
			fs_sb_adds(b, "parent = none\n");
		fs_sb_printf(b, "delta_postings = %llu\n", (unsigned long long)gi.delta_postings);
		fs_sb_printf(b, "tombstones = %llu\n", (unsigned long long)gi.tombstones);
		if (gi.state == VECFS_GEN_READY)
			recall_lines(v, gen, b);
		fs_sb_adds(b, "progress = ");
		progress_line(dm, &gi, b);
		break;
	case GF_PROGRESS:
		progress_line(dm, &gi, b);
		break;
	case GF_CENTROIDS: {
		float *c = NULL;
		uint32_t nl = 0, dim = 0;
		if (gi.state != VECFS_GEN_READY)
			return 0;
		if ((rc = vecfs_gen_centroids(v, gen, &c, &nl, &dim)))
			return rc;
		if (fs_sb_reserve(b, (size_t)nl * (4 + 4 * (size_t)dim))) {
			free(c);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < nl; i++) {
			int32_t d = (int32_t)dim;
			fs_sb_add(b, &d, 4);
			fs_sb_add(b, c + (size_t)i * dim, 4 * (size_t)dim);
		}
		free(c);
		break;
	}
	case GF_CLUSTERS: {
		vecfs_cluster_info *ci = NULL;
		uint32_t n = 0;
		if ((rc = vecfs_gen_clusters(v, gen, &ci, &n)))
			return rc;
		fs_sb_adds(b, "# cluster\tvectors\tposting_blocks\tdelta_postings\ttombstones\n");
		for (uint32_t i = 0; i < n; i++)
			fs_sb_printf(b, "%u\t%llu\t%u\t%llu\t%llu\n", ci[i].id,
				  (unsigned long long)ci[i].vectors, ci[i].blocks,
				  (unsigned long long)ci[i].deltas, (unsigned long long)ci[i].tombstones);
		free(ci);
		break;
	}
	}
	return b->oom ? -ENOMEM : 0;
}

int64_t fs_gen_file_size(fs_daemon *dm, uint64_t gen, int which)
{
	vecfs *v = dm->store;
	if (which == GF_CENTROIDS) {
		vecfs_gen_info gi;
		int rc = vecfs_gen_info_get(v, gen, &gi);
		if (rc)
			return rc;
		if (gi.state != VECFS_GEN_READY)
			return 0;
		return (int64_t)gi.nlist * (4 + 4 * (int64_t)gi.dim);
	}
	sbuf b;
	fs_sb_init(&b);
	int rc = fs_gen_render(dm, gen, which, &b);
	int64_t n = rc ? rc : (int64_t)b.len;
	fs_sb_free(&b);
	return n;
}

int fs_gen_parse_target(const char *target, uint64_t *gen)
{
	char buf[512];
	snprintf(buf, sizeof buf, "%s", target);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = 0;
	const char *base = strrchr(buf, '/');
	base = base ? base + 1 : buf;
	return fs_gen_parse_name(base, gen);
}

int fs_gen_activate_target(fs_daemon *dm, const char *target, const char *how)
{
	uint64_t gen;
	char err[256] = "";
	if (fs_gen_parse_target(target, &gen)) {
		fs_errlog(&dm->errors, "generations/active: %s %s: no such generation", how, target);
		return -ENOENT;
	}
	int rc = vecfs_activate(dm->store, gen, err, sizeof err);
	if (rc)
		fs_errlog_err(&dm->errors, rc, "generations/active: %s %s: %s", how, target, err[0] ? err : strerror(-rc));
	return rc;
}
