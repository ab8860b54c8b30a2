/*
 * A small HTTP server like the one of the SO_REUSEPORT + TCP_CORK article, for ck's examples,
 * tests and `cargo xtask bench cork`:
 *   - one connection at a time per process: accept, then answer its requests (keep-alive)
 *     until the client closes it, then accept the next;
 *   - every response is four small write()s (status line, headers, blank line, body), the
 *     pattern that meets Nagle's algorithm; with CORK=1 they are corked (TCP_CORK) and leave
 *     as one segment when the cork is pulled; with NODELAY=1 Nagle is off (TCP_NODELAY) and
 *     each write leaves at once as a segment of its own;
 *   - its socket: fd 3 when started by `ck run` (socket activation, LISTEN_FDS), else it binds
 *     PORT itself (as under `ck run --adopt`);
 *   - FORK=N: the process forks N children that each serve (each binds its own socket when it
 *     binds at all: the article's SO_REUSEPORT mode), and waits for them.
 * The body is `slot=S pid=P` like ck's demo worker.
 *
 * Build: cc -O2 -o cork-server examples/cork-server.c
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int cork, nodelay;

static int open_listener(void) {
    const char *fds = getenv("LISTEN_FDS");
    if (fds && atoi(fds) >= 1) return 3;
    const char *port = getenv("PORT");
    if (!port) {
        fprintf(stderr, "cork-server: neither LISTEN_FDS nor PORT is set\n");
        exit(2);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (getenv("REUSEPORT")) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 1024) < 0) {
        perror("cork-server: bind/listen");
        exit(1);
    }
    return fd;
}

static void set_cork(int fd, int on) {
    if (cork) setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
}

/* Reads until the end of a request head; 0 when the client closed. */
static int read_request(int fd) {
    char buf[4096];
    size_t used = 0;
    for (;;) {
        ssize_t n = read(fd, buf + used, sizeof buf - 1 - used);
        if (n <= 0) return 0;
        used += (size_t)n;
        buf[used] = 0;
        if (strstr(buf, "\r\n\r\n")) return 1;
        if (used >= sizeof buf - 1) used = 0;
    }
}

static void serve(int listener) {
    char body[64], headers[128];
    const char *slot = getenv("CK_SLOT");
    int body_len = snprintf(body, sizeof body, "slot=%s pid=%d\n", slot ? slot : "0", getpid());
    int headers_len = snprintf(headers, sizeof headers,
                               "Content-Type: text/plain\r\nContent-Length: %d\r\n", body_len);
    for (;;) {
        int conn = accept(listener, NULL, NULL);
        if (conn < 0) continue;
        if (nodelay) {
            int one = 1;
            setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        while (read_request(conn)) {
            set_cork(conn, 1);
            if (write(conn, "HTTP/1.1 200 OK\r\n", 17) < 0 ||
                write(conn, headers, headers_len) < 0 || write(conn, "\r\n", 2) < 0 ||
                write(conn, body, body_len) < 0)
                break;
            set_cork(conn, 0);
        }
        close(conn);
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    cork = getenv("CORK") && atoi(getenv("CORK"));
    nodelay = getenv("NODELAY") && atoi(getenv("NODELAY"));
    int children = getenv("FORK") ? atoi(getenv("FORK")) : 0;
    if (children <= 0) {
        serve(open_listener());
        return 0;
    }
    /* Socket activation: the children share fd 3. Binding: each child binds its own. */
    int shared = getenv("LISTEN_FDS") ? open_listener() : -1;
    for (int i = 0; i < children; i++) {
        if (fork() == 0) {
            serve(shared >= 0 ? shared : open_listener());
            return 0;
        }
    }
    while (wait(NULL) > 0) {
    }
    return 0;
}
