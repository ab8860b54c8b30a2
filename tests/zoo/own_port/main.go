// The zoo: a Go server that binds its own port (os.Args[1]) with http.ListenAndServe and never
// looks at the socket ck passes as fd 3, as a server written before ck was.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "slot=%s pid=%d\n", os.Getenv("CK_SLOT"), os.Getpid())
	})
	http.ListenAndServe("127.0.0.1:"+os.Args[1], nil)
}
