// A Go net/http server as a newcomer writes it, run under `ck run --adopt`: one
// http.ListenAndServe(":"+$PORT) (an IPv6 dual-stack socket; ck's bind hook adds SO_REUSEPORT,
// ck adopts it), answering `slot=$CK_SLOT pid=PID`, with no signal handling: SIGTERM kills it at
// once, with whatever it holds.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	body := fmt.Sprintf("slot=%s pid=%d\n", os.Getenv("CK_SLOT"), os.Getpid())
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	})
	log.Fatal(http.ListenAndServe(":"+os.Getenv("PORT"), nil))
}
