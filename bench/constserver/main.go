// Command constserver is a redcon server that answers every command with
// the same five-integer decision, read from nothing: what a Go RESP server
// with a goroutine per connection reaches when it does no work at all,
// against which the benchmark measures Sluice's in-memory store.
package main

import (
	"flag"
	"log"
	"strings"

	"github.com/tidwall/redcon"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:6390", "address to listen on")
	flag.Parse()
	err := redcon.ListenAndServe(*addr,
		func(conn redcon.Conn, cmd redcon.Command) {
			switch strings.ToLower(string(cmd.Args[0])) {
			case "ping":
				conn.WriteString("PONG")
			case "config":
				conn.WriteArray(0) // redis-benchmark asks for its settings
			default:
				conn.WriteArray(5)
				conn.WriteInt(1)
				conn.WriteInt(100)
				conn.WriteInt(99)
				conn.WriteInt(0)
				conn.WriteInt(10)
			}
		},
		func(redcon.Conn) bool { return true },
		func(redcon.Conn, error) {},
	)
	if err != nil {
		log.Fatal(err)
	}
}
