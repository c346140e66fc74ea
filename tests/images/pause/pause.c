/* Minimal pod sandbox ("pause") process for the native test image.
 * Sleeps until SIGTERM or SIGINT (then exits 0), reaps any children it inherits.
 * Build: gcc -static -O2 -o pause pause.c */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) { (void)sig; stop = 1; }

static void on_child(int sig) {
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(int argc, char **argv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        printf("pause (containerd-shim-spin-v2 tests)\n");
        fflush(stdout);
    }
    while (!stop) {
        pause();
    }
    return 0;
}
