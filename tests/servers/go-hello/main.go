// A plain Go net/http server for ck's tests, run under `ck run --adopt`: it binds
// 0.0.0.0:$PORT itself (ck's bind hook adds SO_REUSEPORT, ck adopts the socket), answers
// `slot=$CK_SLOT pid=PID`, and on SIGTERM or SIGINT stops gracefully with http.Server.Shutdown
// (the listener closes, requests in flight finish), as Go servers are written.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	slot := os.Getenv("CK_SLOT")
	body := fmt.Sprintf("slot=%s pid=%d\n", slot, os.Getpid())
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write([]byte(body))
	})
	// tcp4: ck's group is 0.0.0.0:PORT (":PORT" would be an IPv6 dual-stack socket).
	listener, err := net.Listen("tcp4", "0.0.0.0:"+os.Getenv("PORT"))
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{Handler: handler}
	done := make(chan struct{})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		_ = server.Shutdown(context.Background())
		close(done)
	}()
	if err := server.Serve(listener); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-done
}
