/*
 * hangfs MOUNTPOINT - a hung mount, for the tests: mounts a FUSE
 * filesystem that no daemon ever answers, which is what a mount whose
 * server is gone (NFS, sshfs) looks like to a process: its stat(), open()
 * and read() block in the kernel.  Prints "ready" once mounted; when its
 * standard input closes (or it gets SIGTERM/SIGINT) it aborts the
 * connection (closing /dev/fuse: the blocked calls fail with ENOTCONN and
 * their processes go on) and detaches the mount.  Needs root and
 * /dev/fuse; exits 77 with one line saying why when it cannot mount.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hangfs MOUNTPOINT\n");
        return 2;
    }
    int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "hangfs: /dev/fuse: %s\n", strerror(errno));
        return 77;
    }
    char opts[128];
    snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
    if (mount("hangfs", argv[1], "fuse.hangfs", MS_NOSUID | MS_NODEV, opts) != 0) {
        fprintf(stderr, "hangfs: mount %s: %s\n", argv[1], strerror(errno));
        return 77;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("ready\n");
    fflush(stdout);
    char c;
    while (!g_stop && read(0, &c, 1) > 0)
        ;      /* never answers /dev/fuse: every request waits */
    close(fd); /* aborts the connection */
    if (umount2(argv[1], MNT_DETACH) != 0)
        fprintf(stderr, "hangfs: umount %s: %s\n", argv[1], strerror(errno));
    return 0;
}
