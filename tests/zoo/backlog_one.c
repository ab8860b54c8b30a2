/* The zoo: a C server that calls listen(fd, 1) on the socket ck passes as fd 3 (a backlog of
 * 1, copied from an old example), then answers one connection at a time (SIGPIPE ignored, as
 * the example said). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(void) {
    char body[64], answer[160], request[4096];
    snprintf(body, sizeof body, "slot=%s pid=%d\n",
             getenv("CK_SLOT") ? getenv("CK_SLOT") : "-", (int)getpid());
    int n = snprintf(answer, sizeof answer,
                     "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    signal(SIGPIPE, SIG_IGN);
    listen(3, 1);
    for (;;) {
        int c = accept(3, NULL, NULL);
        read(c, request, sizeof request);
        write(c, answer, n);
        close(c);
    }
}
