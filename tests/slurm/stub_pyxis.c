/*
 * Test-only stand-in for the pyxis SPANK plugin (NOT pyxis; it runs no container).
 *
 * Why it exists: pyxis cannot be installed on the test machine, but the Slurm/plugstack wiring that
 * ClusterKit generates can be proven with real Slurm daemons and a plugin that behaves like pyxis at
 * the SPANK boundary:
 *   - it accepts only the plugstack arguments pyxis knows and rejects any other (pyxis fails on
 *     unknown options, which would break every job with a `required` line);
 *   - it registers --container-image/--container-mounts/--container-workdir/--container-name in
 *     slurm_spank_init (srun always; sbatch/salloc only when sbatch_support=1, like pyxis);
 *   - it appends what it saw (plugstack argv per context, option values) to STUB_RECORD_FILE, a path
 *     fixed at compile time (-DSTUB_RECORD_FILE="...") because slurmstepd does not pass the job's
 *     environment to plugins during init.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#ifndef STUB_RECORD_FILE
#error "compile with -DSTUB_RECORD_FILE=\"/path/to/record.log\""
#endif

SPANK_PLUGIN(stub_pyxis, 1);

/* The real pyxis carries "pyxis: version vX.Y.Z" (pyxis_slurmd.c logs it at slurmd start); ClusterKit's
 * head node reads it from the .so to write only options that pyxis knows. The stub claims the newest
 * vendored pyxis, so these wiring tests may configure every option ClusterKit can write. */
__attribute__((used)) static const char stub_version_marker[] = "pyxis: version v0.24.0";

enum { OPT_IMAGE = 1, OPT_MOUNTS, OPT_WORKDIR, OPT_NAME };

static int sbatch_support = 1;

static const char *context_name(void)
{
	switch (spank_context()) {
	case S_CTX_LOCAL: return "local";
	case S_CTX_REMOTE: return "remote";
	case S_CTX_ALLOCATOR: return "allocator";
	case S_CTX_SLURMD: return "slurmd";
	case S_CTX_JOB_SCRIPT: return "job_script";
	default: return "error";
	}
}

/* One line per event, appended atomically (O_APPEND, single write) so concurrent steps never interleave. */
static void record(const char *fmt, ...)
{
	char line[4096];
	int len, fd;
	va_list ap;

	len = snprintf(line, sizeof(line), "pid=%ld context=%s ", (long)getpid(), context_name());
	va_start(ap, fmt);
	len += vsnprintf(line + len, sizeof(line) - len - 1, fmt, ap);
	va_end(ap);
	if (len > (int)sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	fd = open(STUB_RECORD_FILE, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, len) < 0)
		slurm_error("stub_pyxis: cannot write %s: %s", STUB_RECORD_FILE, strerror(errno));
	close(fd);
}

static int option_cb(int val, const char *optarg, int remote)
{
	static const char *names[] = { "", "container-image", "container-mounts", "container-workdir",
				       "container-name" };

	if (val < OPT_IMAGE || val > OPT_NAME)
		return -1;
	/* pyxis#127: a path must start with / or ./ to be a file and not a registry reference. */
	if (val == OPT_IMAGE && (optarg == NULL || optarg[0] == '\0'))
		return -1;
	record("option %s=%s remote=%d", names[val], optarg ? optarg : "", remote);
	return 0;
}

static struct spank_option options[] = {
	{ "container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH", "[stub_pyxis] image to use", 1, OPT_IMAGE,
	  option_cb },
	{ "container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]", "[stub_pyxis] bind mounts", 1, OPT_MOUNTS,
	  option_cb },
	{ "container-workdir", "PATH", "[stub_pyxis] working directory", 1, OPT_WORKDIR, option_cb },
	{ "container-name", "NAME", "[stub_pyxis] container name", 1, OPT_NAME, option_cb },
	SPANK_OPTIONS_TABLE_END
};

static int is_bool(const char *v)
{
	return !strcmp(v, "0") || !strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "false");
}

/* Accept exactly pyxis's plugstack arguments (runtime_path, execute_entrypoint, container_scope,
 * sbatch_support, use_enroot_load, importer, use_squashfuse) with pyxis's value rules. */
static int check_arg(const char *arg)
{
	const char *eq = strchr(arg, '=');
	size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
	const char *v = eq ? eq + 1 : "";

	if (!eq)
		return -1;
	if (klen == 12 && !strncmp(arg, "runtime_path", klen))
		return v[0] == '/' ? 0 : -1;
	if (klen == 15 && !strncmp(arg, "container_scope", klen))
		return (!strcmp(v, "job") || !strcmp(v, "global")) ? 0 : -1;
	if (klen == 14 && !strncmp(arg, "sbatch_support", klen)) {
		if (!is_bool(v))
			return -1;
		sbatch_support = !strcmp(v, "1") || !strcmp(v, "true");
		return 0;
	}
	if ((klen == 18 && !strncmp(arg, "execute_entrypoint", klen)) ||
	    (klen == 15 && !strncmp(arg, "use_enroot_load", klen)) ||
	    (klen == 14 && !strncmp(arg, "use_squashfuse", klen)))
		return is_bool(v) ? 0 : -1;
	if (klen == 8 && !strncmp(arg, "importer", klen))
		return v[0] == '/' ? 0 : -1;
	return -1;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char args[2048] = "";
	size_t used = 0;
	spank_context_t ctx = spank_context();
	int i;

	for (i = 0; i < ac; i++) {
		if (check_arg(av[i]) != 0) {
			slurm_error("stub_pyxis: unknown or invalid plugstack argument: %s", av[i]);
			record("init rejected=%s", av[i]);
			return -1;
		}
		used += snprintf(args + used, sizeof(args) - used, "%s%s", i ? " " : "", av[i]);
		if (used >= sizeof(args))
			break;
	}
	record("init argc=%d argv=%s", ac, args);

	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
		return 0;
	if (ctx == S_CTX_ALLOCATOR && !sbatch_support)
		return 0;
	for (i = 0; options[i].name != NULL; i++) {
		if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS) {
			slurm_error("stub_pyxis: cannot register --%s", options[i].name);
			return -1;
		}
	}
	return 0;
}
