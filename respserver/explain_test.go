package respserver

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/service"
)

// RL.EXPLAIN in a pipeline, with a store that reads state back: its
// answer comes in its place between the decisions around it (it runs off
// the event loop, and what follows it waits), shows the state the store
// held then, and took nothing.
func TestExplainHeldInPipeline(t *testing.T) {
	mem := memStore(t)
	svc, err := service.New(service.Config{Store: mem, Policies: testPolicies(t), StoreName: "memory", States: mem})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, Config{Service: svc})
	c := dialTest(t, addr)
	var pipe []byte
	for _, args := range [][]string{{"RL.ALLOW", "search", "u"}, {"RL.EXPLAIN", "RL.ALLOW", "search", "u"}, {"RL.ALLOW", "search", "u"},
		{"RL.EXPLAIN", "RL.ALLOW", "nosuch", "u"}, {"PING"}} {
		pipe = append(pipe, encodeCommand(bytesArgs(args...))...)
	}
	c.send(t, pipe)
	var replies []string
	for range 5 {
		r, err := c.reply(t)
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, r)
	}
	if !strings.HasPrefix(replies[0], "[1, 3, 2, ") || !strings.HasPrefix(replies[2], "[1, 3, 1, ") ||
		!strings.HasPrefix(replies[3], "-ERR invalid policy 'nosuch'") || replies[4] != "+PONG" {
		t.Fatalf("replies %q: want the decisions, the explanations and PING in order, the explanation taking nothing", replies)
	}
	doc, err := strconv.Unquote(replies[1]) // a bulk string, rendered quoted as redis-cli does
	if err != nil {
		t.Fatalf("RL.EXPLAIN replied %q: %v", replies[1], err)
	}
	var e service.Explanation
	if err := json.Unmarshal([]byte(doc), &e); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	daily := e.Limits[1].Held
	if daily == nil || daily.Key != "{search:u}:daily" || daily.Values["n"] != 1 || !strings.HasPrefix(daily.State, "used 1 of 3") {
		t.Errorf("daily held %+v; want the count of one the store holds after the first decision", daily)
	}
}
