// A Go net/http server run under ck. It binds :$PORT itself, as Go servers do; with --adopt,
// ck adds SO_REUSEPORT to that bind (so every worker binds the same port) and steers new
// connections to the workers' sockets:
//
//	(cd examples/go && go build -o hello .)
//	ck run --port 8080 -w 2 --adopt -- examples/go/hello
//
// GET / answers which worker served it (slot=S pid=P), GET /healthz answers ok.
//
// What it adds to a bare http.ListenAndServe(":"+port, nil), which also runs under ck as is:
// on SIGTERM it answers each keep-alive connection's next request with "Connection: close" for
// half a second, then calls Shutdown (the listener closes, connections still idle close,
// requests in flight finish). Without it, SIGTERM kills the server with its idle keep-alive
// connections open, and a client that sends its next request on one at that instant sees the
// connection close under it.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// idleGrace is how long a stopping server keeps answering with "Connection: close" before it
// closes the connections that are still idle.
const idleGrace = 500 * time.Millisecond

func main() {
	port := os.Getenv("PORT") // ck sets it with --adopt: the first --port
	if port == "" {
		port = "8080"
	}
	slot := os.Getenv("CK_SLOT")

	var stopping atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "slot=%s pid=%d\n", slot, os.Getpid())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	// Once stopping, every answer closes its connection: the client opens a new one, which ck
	// sends to a worker that is not stopping.
	closing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopping.Load() {
			w.Header().Set("Connection", "close")
		}
		mux.ServeHTTP(w, r)
	})
	server := &http.Server{Addr: ":" + port, Handler: closing}

	stopped := make(chan struct{})
	go func() {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		<-ctx.Done()
		stopping.Store(true)
		time.Sleep(idleGrace)
		if err := server.Shutdown(context.Background()); err != nil {
			log.Print(err)
		}
		close(stopped)
	}()

	if err := server.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-stopped
}
