/*
 * Stand-in for NVIDIA's pyxis SPANK plugin on the project's local test Slurm.
 *
 * Built and enabled by start.sh (SLURM_LOCAL_FAKE_PYXIS=1):
 *   gcc -O2 -Wall -shared -fPIC -o fake_pyxis.so fake_pyxis.c
 *   echo "optional /path/fake_pyxis.so" > /etc/slurm/plugstack.conf.d/<name>.conf
 *
 * Why: the launcher renders `srun --container-image=... --container-mounts=...
 * --no-container-mount-home ...`. Without pyxis, srun and sbatch reject those
 * flags, so no rendered script could run in tests. This plugin registers the
 * same option names and ignores them: the command runs on the host, without a
 * container. So that tests can still see what a job asked for, each option
 * given reaches the job's tasks as FAKE_PYXIS_<OPTION> (upper case, '-' -> '_'),
 * e.g. FAKE_PYXIS_CONTAINER_IMAGE=nvcr.io/x:1 or FAKE_PYXIS_NO_CONTAINER_MOUNT_HOME=1.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <slurm/spank.h>

SPANK_PLUGIN(fake_pyxis, 1);

#define USAGE "[fake pyxis] accepted; no container is used, the command runs on the host"

/* The pyxis options the launcher or its users may pass; `val` indexes given[]. */
static struct spank_option options[] = {
	{"container-image", "IMAGE", USAGE, 1, 0, NULL},
	{"container-mounts", "SRC:DST[,...]", USAGE, 1, 1, NULL},
	{"container-workdir", "PATH", USAGE, 1, 2, NULL},
	{"container-name", "NAME", USAGE, 1, 3, NULL},
	{"container-save", "PATH", USAGE, 1, 4, NULL},
	{"container-env", "NAME[,...]", USAGE, 1, 5, NULL},
	{"container-mount-home", NULL, USAGE, 0, 6, NULL},
	{"no-container-mount-home", NULL, USAGE, 0, 7, NULL},
	{"container-remap-root", NULL, USAGE, 0, 8, NULL},
	{"no-container-remap-root", NULL, USAGE, 0, 9, NULL},
	{"container-entrypoint", NULL, USAGE, 0, 10, NULL},
	{"no-container-entrypoint", NULL, USAGE, 0, 11, NULL},
	{"container-entrypoint-log", NULL, USAGE, 0, 12, NULL},
	{"container-writable", NULL, USAGE, 0, 13, NULL},
	{"container-readonly", NULL, USAGE, 0, 14, NULL},
	SPANK_OPTIONS_TABLE_END
};

#define N_OPTIONS (sizeof(options) / sizeof(options[0]) - 1)

/* Value of each option given on this step's command line; NULL = not given. */
static char *given[N_OPTIONS];

static int remember(int index, const char *arg, int remote)
{
	(void)remote;
	if (index < 0 || (size_t)index >= N_OPTIONS)
		return -1;
	free(given[index]);
	/* Flags carry no value (NULL locally, "" in slurmstepd); "1" still
	 * tells the job that the flag was set. */
	given[index] = strdup(options[index].has_arg ? (arg != NULL ? arg : "") : "1");
	return given[index] != NULL ? 0 : -1;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	/* Registered in every context (srun, sbatch, slurmstepd): the remote side
	 * only receives option values for options it has registered itself. */
	for (size_t i = 0; i < N_OPTIONS; i++) {
		options[i].cb = remember;
		if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS)
			slurm_error("fake_pyxis: cannot register --%s", options[i].name);
	}
	return 0;
}

/* Runs in slurmstepd just before the tasks start: export what was asked for. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp))
		return 0;
	for (size_t i = 0; i < N_OPTIONS; i++) {
		char name[64] = "FAKE_PYXIS_";
		size_t n = strlen(name);
		if (given[i] == NULL)
			continue;
		for (const char *c = options[i].name; *c != '\0' && n + 1 < sizeof(name); c++)
			name[n++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
		name[n] = '\0';
		spank_setenv(sp, name, given[i], 1);
	}
	return 0;
}
