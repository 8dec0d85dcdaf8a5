/*
 * vecfs-inspect - look into a store without mounting it: a backup, a copy,
 * a store after a crash, or one a daemon serves right now.
 *
 * The store is opened read-only (but for salvage) (vecfs_open_readonly): nothing in it is
 * written, recovered or maintained, and a daemon that has it mounted goes
 * on serving (LMDB lets readers of other processes in; each command reads
 * one consistent snapshot).  Commands:
 *
 *   summary            (the default) counts, settings and generations
 *   verify             the check of `ctl verify`, one line; exit 1 when it
 *                      finds a problem
 *   generations        one line a generation
 *   clusters [GEN]     one line a cluster of GEN (default: the active one)
 *   keys               every live key, one a line, in key order
 *   get KEY            the vector of KEY as records/KEY shows it
 *   search FILE        the query in FILE (as a mount's query/ID/in takes
 *                      it; - for stdin), answered as query/ID/out
 *   salvage            the repair of `ctl salvage` (vecfs_salvage): opens
 *                      the store for writing, so only when no daemon holds
 *                      it (EBUSY otherwise); one line a lost key, one line
 *                      of what it did, then verify's line
 *
 * Exit status: 0, 1 (verify found a problem, or KEY does not exist), 2 (bad
 * usage, or the store cannot be read).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toolutil.h"

#define QUERY_INPUT_MAX ((size_t)256 << 20) /* as one query/ID/in of a mount */
#include "vecfs.h"

#define PROG "vecfs-inspect"
#define ERRLEN 512
#define MAX_GENS 1024

static const char usage_text[] =
	"usage: " PROG " STORE [COMMAND [ARG]]\n"
	"\n"
	"Read a vecfs store without mounting it (also while a daemon serves it):\n"
	"nothing is written.  Commands:\n"
	"  summary          counts, settings and generations (the default)\n"
	"  verify           the check of `ctl verify`; exit status 1 on a problem\n"
	"  generations      one line a generation\n"
	"  clusters [GEN]   one line a cluster of generation GEN (default: active)\n"
	"  keys             every live key, one a line\n"
	"  get KEY          the vector of KEY, as records/KEY shows it\n"
	"  search FILE      run the query in FILE (- for stdin), written as a\n"
	"                   mount's query/ID/in takes it: option lines (k=, nprobe=,\n"
	"                   recall=, refine=, mode=) and one vector a line, or\n"
	"                   fvecs rows; print KEY<TAB>DISTANCE as query/ID/out\n"
	"  salvage          remove what fails its checksums, as `ctl salvage` does;\n"
	"                   writes, so only when no daemon holds the store\n"
	"\n"
	"Exit status: 0; 1 when verify finds a problem or KEY does not exist;\n"
	"2 on bad usage, a bad query FILE or a store that cannot be read.\n";

/* "vecfs-inspect: what: <strerror>", and the exit status of an error */
static int fail(int rc, const char *what)
{
	tool_fail(rc, NULL, "%s", what);
	return 2;
}

static const char *state_name(vecfs_gen_state s)
{
	return s == VECFS_GEN_READY ? "ready" : s == VECFS_GEN_BUILDING ? "building" : "failed";
}

/* One line of a generation. */
static void print_gen(const vecfs_gen_info *g, uint64_t active)
{
	printf("generation %" PRIu64 ": %s%s, nlist %u, bits %u, covers %" PRIu64
	       ", delta postings %" PRIu64 ", tombstones %" PRIu64 ", built in %.2f s",
	       g->id, state_name(g->state), g->id == active ? ", active" : "", g->nlist, g->bits,
	       g->covered, g->delta_postings, g->tombstones, g->build_seconds);
	if (g->parent)
		printf(", from %" PRIu64, g->parent);
	if (g->state == VECFS_GEN_BUILDING)
		printf(", %s %u%%", g->phase, g->phase_pct);
	putchar('\n');
}

static int list_generations(vecfs *v)
{
	uint64_t ids[MAX_GENS];
	size_t n;
	int rc = vecfs_gen_list(v, ids, MAX_GENS, &n);
	if (rc)
		return fail(rc, "generations");
	uint64_t active = vecfs_active(v);
	for (size_t i = 0; i < n && i < MAX_GENS; i++) {
		vecfs_gen_info g;
		if ((rc = vecfs_gen_info_get(v, ids[i], &g)) == 0)
			print_gen(&g, active);
		else if (rc != -ENOENT) /* removed since it was listed */
			return fail(rc, "generation");
	}
	return 0;
}

static int summary(vecfs *v, const char *dir)
{
	vecfs_stats st;
	vecfs_config c;
	int rc;
	if ((rc = vecfs_stats_get(v, &st)))
		return fail(rc, "stats");
	if ((rc = vecfs_config_get(v, &c)))
		return fail(rc, "config");
	printf("store = %s\n", dir);
	printf("dim = %u\nmetric = %s\n", st.dim, vecfs_metric_name(st.metric));
	printf("records = %" PRIu64 "\ndeleted = %" PRIu64 "\nnext_key = %" PRIu64 "\n",
	       st.records, st.deleted, st.next_key);
	printf("store_bytes = %" PRIu64 "\n", st.store_bytes);
	if (st.active)
		printf("active = %" PRIu64 "\n", st.active);
	else
		printf("active = none\n");
	printf("generations = %" PRIu64 "\nunindexed = %" PRIu64 "\ndelta_postings = %" PRIu64
	       "\n",
	       st.generations, st.unindexed, st.delta_postings);
	size_t n;
	const vecfs_setting *rows = vecfs_settings(&n);
	printf("config:");
	for (size_t i = 0; i < n; i++) {
		char value[32];
		vecfs_setting_format(&rows[i], &c, value, sizeof value);
		printf("%s %s %s", i ? "," : "", rows[i].name, value);
	}
	printf("\n");
	return list_generations(v);
}

static int verify(vecfs *v)
{
	char msg[ERRLEN] = "";
	int rc = vecfs_verify(v, msg, sizeof msg);
	if (msg[0])
		puts(msg);
	else if (rc)
		return fail(rc, "verify");
	return rc ? 1 : 0;
}

static void print_lost(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	printf("lost %.*s\n", (int)keylen, key);
}

static int salvage(vecfs *v)
{
	vecfs_salvage_info si;
	char err[ERRLEN] = "";
	int rc = vecfs_salvage(v, print_lost, NULL, &si, err, sizeof err);
	if (rc) {
		fprintf(stderr, PROG ": %s\n", err[0] ? err : strerror(-rc));
		return 2;
	}
	printf("salvage: %" PRIu64 " damaged record(s) removed, %" PRIu64 " key(s) lost, %" PRIu64
	       " key(s) restored, %" PRIu64 " generation(s) dropped, %" PRIu64
	       " record(s) posted again\n",
	       si.records_dropped, si.keys_lost, si.keys_restored, si.generations_dropped,
	       si.postings_repaired);
	if (si.generations_dropped && !vecfs_active(v))
		printf("salvage: no generation is active now: every query scans exactly until "
		       "a build (echo build > MNT/ctl once mounted)\n");
	return verify(v);
}

static int clusters(vecfs *v, const char *arg)
{
	uint64_t gen = vecfs_active(v);
	if (arg && tool_parse_uint(arg, 0, UINT64_MAX, &gen)) {
		fprintf(stderr, PROG ": clusters: '%s' is not a generation number\n", arg);
		return 2;
	}
	if (!gen) {
		fprintf(stderr, PROG ": clusters: the store has no active generation; name one\n");
		return 2;
	}
	vecfs_cluster_info *ci = NULL;
	uint32_t n = 0;
	int rc = vecfs_gen_clusters(v, gen, &ci, &n);
	if (rc == -ENOENT) {
		fprintf(stderr, PROG ": clusters: no generation %" PRIu64 "\n", gen);
		return 2;
	}
	if (rc)
		return fail(rc, "clusters");
	for (uint32_t i = 0; i < n; i++)
		printf("cluster %u: vectors %" PRIu64 ", blocks %u, deltas %" PRIu64
		       ", tombstones %" PRIu64 "\n",
		       ci[i].id, ci[i].vectors, ci[i].blocks, ci[i].deltas, ci[i].tombstones);
	free(ci);
	return 0;
}

static int put_key(void *arg, const char *key, size_t keylen)
{
	(void)arg;
	fwrite(key, 1, keylen, stdout);
	putchar('\n');
	return 0;
}

static int keys(vecfs *v)
{
	int rc = vecfs_keys(v, NULL, 0, SIZE_MAX, put_key, NULL);
	return rc ? fail(rc, "keys") : 0;
}

static int get(vecfs *v, const char *key)
{
	float vec[VECFS_DIM_MAX];
	uint32_t dim = 0;
	int rc = vecfs_get(v, key, strlen(key), vec, VECFS_DIM_MAX, &dim, NULL, 0, NULL);
	if (rc == -ENOENT) {
		fprintf(stderr, PROG ": get: no record '%s'\n", key);
		return 1;
	}
	if (rc)
		return fail(rc, "get");
	/* as records/KEY: each number to round-trip float32, single spaces */
	for (uint32_t i = 0; i < dim; i++)
		printf(i ? " %.9g" : "%.9g", (double)vec[i]);
	putchar('\n');
	return 0;
}

/* FILE (or stdin for "-") whole, up to QUERY_INPUT_MAX bytes: 0 or 2. */
static int read_input(const char *path, char **buf, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	size_t cap = 1 << 16, n = 0;
	char *b = NULL;
	if (!f)
		return fail(-errno, path);
	for (;;) {
		char *nb = n == 0 || n == cap ? realloc(b, cap = n ? cap * 2 : cap) : b;
		if (!nb) {
			free(b);
			b = NULL;
			fail(-ENOMEM, path);
			break;
		}
		b = nb;
		size_t r = fread(b + n, 1, cap - n, f);
		n += r;
		if (n > QUERY_INPUT_MAX) {
			fprintf(stderr, PROG ": %s: more than %zu MiB, the bound of one query\n", path,
				QUERY_INPUT_MAX >> 20);
			free(b);
			b = NULL;
			break;
		}
		if (r == 0) {
			if (ferror(f)) {
				fail(-EIO, path);
				free(b);
				b = NULL;
			}
			break;
		}
	}
	if (f != stdin)
		fclose(f);
	*buf = b;
	*len = n;
	return b ? 0 : 2;
}

/* The query of FILE, printed as query/ID/out shows it. */
static int search(vecfs *v, const char *path)
{
	char *buf, why[256], err[ERRLEN] = "";
	size_t len;
	vecfs_query_input qi = {0};
	unsigned line;
	if (read_input(path, &buf, &len))
		return 2;
	int rc = vecfs_query_input_parse(&qi, buf, len, &line, why, sizeof why);
	free(buf);
	if (rc) {
		if (line)
			fprintf(stderr, PROG ": %s: line %u: %s\n", path, line, why[0] ? why : strerror(-rc));
		else
			fprintf(stderr, PROG ": %s: %s\n", path, why[0] ? why : strerror(-rc));
		vecfs_query_input_free(&qi);
		return 2;
	}
	vecfs_results *r = NULL;
	qi.opts.uncounted = 1;
	rc = vecfs_search(v, qi.vecs, qi.nq, qi.dim, &qi.opts, &r, err, sizeof err);
	vecfs_query_input_free(&qi);
	if (rc) {
		fprintf(stderr, PROG ": search: %s\n", err[0] ? err : strerror(-rc));
		return 2;
	}
	for (size_t i = 0; i < r->nq; i++) {
		if (i)
			putchar('\n');
		for (size_t j = 0; j < r->count[i]; j++) {
			fwrite(r->hits[i][j].key, 1, r->hits[i][j].keylen, stdout);
			printf("\t%.9g\n", (double)r->hits[i][j].distance);
		}
	}
	vecfs_results_free(r);
	return 0;
}

int main(int argc, char **argv)
{
	tool_init(PROG, NULL);
	int vs = tool_version(argc, argv);
	if (vs >= 0)
		return vs;
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(usage_text, stdout);
		return 0;
	}
	const char *cmd = argc >= 3 ? argv[2] : "summary";
	int nargs = !strcmp(cmd, "get") || !strcmp(cmd, "search") ? 1 :
		    strcmp(cmd, "clusters") == 0 ? -1 : 0;
	if (argc < 2 || (nargs >= 0 && argc != 3 + nargs && !(argc == 2 && nargs == 0)) ||
	    (nargs < 0 && argc > 4)) {
		fputs(usage_text, stderr);
		return 2;
	}
	static const char *const known[] = { "summary", "verify", "generations", "clusters",
					     "keys", "get", "salvage", "search" };
	size_t k = 0;
	while (k < sizeof known / sizeof *known && strcmp(cmd, known[k]))
		k++;
	if (k == sizeof known / sizeof *known) {
		fprintf(stderr, PROG ": unknown command '%s' (see --help)\n", cmd);
		return 2;
	}
	vecfs *v;
	char err[ERRLEN] = "";
	int rc = vecfs_open_readonly(argv[1], &v, err, sizeof err);
	if (rc == 0 && !strcmp(cmd, "salvage")) { /* a store: now for writing */
		vecfs_close(v);
		rc = vecfs_open(argv[1], &v, err, sizeof err);
	}
	if (rc) {
		fprintf(stderr, PROG ": %s\n", err[0] ? err : strerror(-rc));
		return 2;
	}
	int status;
	if (!strcmp(cmd, "summary"))
		status = summary(v, argv[1]);
	else if (!strcmp(cmd, "verify"))
		status = verify(v);
	else if (!strcmp(cmd, "generations"))
		status = list_generations(v);
	else if (!strcmp(cmd, "clusters"))
		status = clusters(v, argc == 4 ? argv[3] : NULL);
	else if (!strcmp(cmd, "keys"))
		status = keys(v);
	else if (!strcmp(cmd, "salvage"))
		status = salvage(v);
	else if (!strcmp(cmd, "search"))
		status = search(v, argv[3]);
	else
		status = get(v, argv[3]);
	vecfs_close(v);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, PROG ": cannot write the output: %s\n", strerror(errno));
		return 2;
	}
	return status;
}
