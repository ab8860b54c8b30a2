/* The zoo: an accept-read-write loop in C that keeps SIGPIPE's default action, so writing to
 * a connection its client reset or closed ends the process. No error handling, no READY=1: it
 * serves the socket ck passes as fd 3. */
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
    for (;;) {
        int c = accept(3, NULL, NULL);
        read(c, request, sizeof request);
        write(c, answer, n);
        close(c);
    }
}
