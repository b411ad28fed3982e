/* The pod sandbox's process: it holds the pod's namespaces open and does nothing else.
 * PID 1 of the sandbox, so it also reaps any orphan that gets reparented to it, and it
 * leaves on SIGTERM or SIGINT (PID 1 has no default signal actions). Built static (no libc
 * in the test image): gcc -static -Os -o pause pause.c */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void leave(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_exit = {.sa_handler = leave};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGTERM, &on_exit, 0);
    sigaction(SIGINT, &on_exit, 0);
    sigaction(SIGCHLD, &on_child, 0);
    for (;;) pause();
}
