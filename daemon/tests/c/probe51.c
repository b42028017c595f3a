/* probe51: calls libsanlock 5.1 functions and prints their results, one line each.
 * Built in a sid chroot against libsanlock-dev 5.1.1. SANLOCK_RUN_DIR picks the daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <poll.h>
#include <time.h>
#include <sanlock.h>
#include <sanlock_admin.h>
#include <sanlock_resource.h>
#include <sanlock_rv.h>

static void set_ls(struct sanlk_lockspace *ls, const char *name, uint64_t host_id,
                   const char *path, uint64_t off)
{
	memset(ls, 0, sizeof(*ls));
	strncpy(ls->name, name, SANLK_NAME_LEN);
	ls->host_id = host_id;
	strncpy(ls->host_id_disk.path, path, SANLK_PATH_LEN - 1);
	ls->host_id_disk.offset = off;
}

static struct sanlk_resource *mk_res(const char *ls, const char *name, const char *path,
				     uint64_t off)
{
	struct sanlk_resource *r = calloc(1, sizeof(*r) + sizeof(struct sanlk_disk));
	strncpy(r->lockspace_name, ls, SANLK_NAME_LEN);
	strncpy(r->name, name, SANLK_NAME_LEN);
	r->num_disks = 1;
	strncpy(r->disks[0].path, path, SANLK_PATH_LEN - 1);
	r->disks[0].offset = off;
	return r;
}

static void usage(void)
{
	fprintf(stderr,
		"probe51 read_ls PATH OFF\n"
		"probe51 read_res PATH OFF\n"
		"probe51 read_ls_host LS HOST_ID PATH OFF\n"
		"probe51 init_ls_host LS HOST_ID PATH OFF GEN TS FLAGS [IO_TIMEOUT]\n"
		"probe51 write_ls LS PATH OFF FLAGS LSFLAGS\n"
		"probe51 get_hosts LS HOST_ID FLAGS\n"
		"probe51 set_host LS PATH OFF HOST_ID GEN\n"
		"probe51 acquire2 LS RES PATH OFF FLAGS [RESFLAGS]  (registers, acquires; holds\n"
		"         PROBE_HOLD_S seconds or until the daemon goes away)\n"
		);
	exit(2);
}

int main(int argc, char **argv)
{
	struct sanlk_lockspace ls;
	int rv;
	if (argc < 2)
		usage();
	const char *op = argv[1];
	if (!strcmp(op, "read_ls") && argc == 4) {
		uint32_t io = 0;
		set_ls(&ls, "", 0, argv[2], strtoull(argv[3], NULL, 0));
		rv = sanlock_read_lockspace(&ls, 0, &io);
		printf("read_ls rv=%d name=%.48s host_id=%llu flags=0x%x io_timeout=%u\n", rv,
		       ls.name, (unsigned long long)ls.host_id, ls.flags, io);
	} else if (!strcmp(op, "read_res") && argc == 4) {
		struct sanlk_resource *r = mk_res("", "", argv[2], strtoull(argv[3], NULL, 0));
		rv = sanlock_read_resource(r, 0);
		printf("read_res rv=%d ls=%.48s name=%.48s lver=%llu flags=0x%x\n", rv,
		       r->lockspace_name, r->name, (unsigned long long)r->lver, r->flags);
	} else if (!strcmp(op, "read_ls_host") && argc == 6) {
		struct sanlk_host hs;
		uint32_t io = 0;
		memset(&hs, 0, sizeof(hs));
		set_ls(&ls, argv[2], strtoull(argv[3], NULL, 0), argv[4],
		       strtoull(argv[5], NULL, 0));
		rv = sanlock_read_lockspace_host(&ls, 0, &io, &hs);
		printf("read_ls_host rv=%d ls_flags=0x%x io_timeout=%u host_id=%llu gen=%llu "
		       "timestamp=%llu host_io_timeout=%u host_flags=0x%x\n",
		       rv, ls.flags, io, (unsigned long long)hs.host_id,
		       (unsigned long long)hs.generation, (unsigned long long)hs.timestamp,
		       hs.io_timeout, hs.flags);
	} else if (!strcmp(op, "init_ls_host") && (argc == 9 || argc == 10)) {
		set_ls(&ls, argv[2], strtoull(argv[3], NULL, 0), argv[4],
		       strtoull(argv[5], NULL, 0));
		rv = sanlock_init_lockspace_host(&ls, "probe51host", strtoull(argv[6], NULL, 0),
						 strtoull(argv[7], NULL, 0),
						 strtoul(argv[8], NULL, 0),
						 argc == 10 ? strtoul(argv[9], NULL, 0) : 0);
		printf("init_ls_host rv=%d\n", rv);
	} else if (!strcmp(op, "write_ls") && argc == 7) {
		set_ls(&ls, argv[2], 0, argv[3], strtoull(argv[4], NULL, 0));
		ls.flags = strtoul(argv[6], NULL, 0);
		rv = sanlock_write_lockspace(&ls, 0, strtoul(argv[5], NULL, 0), 0);
		printf("write_ls rv=%d\n", rv);
	} else if (!strcmp(op, "get_hosts") && argc == 5) {
		struct sanlk_host *hss = NULL;
		int n = 0, i;
		rv = sanlock_get_hosts(argv[2], strtoull(argv[3], NULL, 0), &hss, &n,
				       strtoul(argv[4], NULL, 0));
		printf("get_hosts rv=%d count=%d", rv, n);
		for (i = 0; i < n; i++)
		{
			printf(" [id=%llu gen=%llu state=%u", (unsigned long long)hss[i].host_id,
			       (unsigned long long)hss[i].generation, hss[i].flags & SANLK_HOST_MASK);
			if (hss[i].flags & ~SANLK_HOST_MASK)
				printf(" flags=0x%x", hss[i].flags);
			printf("]");
		}
		printf("\n");
		free(hss);
	} else if (!strcmp(op, "set_host") && argc == 7) {
		struct sanlk_host hs;
		memset(&hs, 0, sizeof(hs));
		set_ls(&ls, argv[2], 0, argv[3], strtoull(argv[4], NULL, 0));
		hs.host_id = strtoull(argv[5], NULL, 0);
		hs.generation = strtoull(argv[6], NULL, 0);
		rv = sanlock_set_host(&ls, SANLK_SET_HOST_DEAD_EXT, 0, 0, &hs);
		printf("set_host rv=%d\n", rv);
	} else if (!strcmp(op, "acquire2") && argc >= 7) {
		struct sanlk_resource *r = mk_res(argv[2], argv[3], argv[4],
						  strtoull(argv[5], NULL, 0));
		struct sanlk_host owner;
		char *owner_name = NULL;
		if (argc > 7)
			r->flags = strtoul(argv[7], NULL, 0);
		memset(&owner, 0, sizeof(owner));
		int sock = sanlock_register();
		if (sock < 0) {
			printf("acquire2 register rv=%d\n", sock);
			return 1;
		}
		rv = sanlock_acquire2(sock, -1, strtoul(argv[6], NULL, 0), r, NULL, &owner,
				      &owner_name);
		printf("acquire2 rv=%d owner_id=%llu owner_gen=%llu owner_ts=%llu owner_flags=0x%x "
		       "owner_name=%s\n", rv, (unsigned long long)owner.host_id,
		       (unsigned long long)owner.generation, (unsigned long long)owner.timestamp,
		       owner.flags, owner_name ? owner_name : "(null)");
		fflush(stdout);
		/* Hold for PROBE_HOLD_S seconds, or until the daemon closes our registered
		 * connection (it died): the lease goes with the connection either way. */
		if (rv == 0 && getenv("PROBE_HOLD_S")) {
			time_t end = time(NULL) + atoi(getenv("PROBE_HOLD_S"));
			struct pollfd pfd = { .fd = sock, .events = POLLIN };
			while (time(NULL) < end) {
				if (poll(&pfd, 1, 1000) > 0 && pfd.revents)
					break;
			}
		}
	} else {
		usage();
	}
	return 0;
}
