package respserver

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// The hot path's parts, each meant to allocate nothing.

func BenchmarkParse(b *testing.B) {
	c := offlineClient(fuzzServer(b))
	for _, args := range [][][]byte{
		bytesArgs("RL.GCRA", "user:1234", "20", "100", "1m", "1"),
		bytesArgs("CL.THROTTLE", "user:1234", "15", "30", "60", "1"),
		bytesArgs("RL.ALLOW", "api", "user:1234"), // the prefixed key goes into the connection's buffer
	} {
		b.Run(string(args[0]), func(b *testing.B) {
			cmd := lookup(args[0])
			b.ReportAllocs()
			for b.Loop() {
				req, _, msg := cmd.parse(cmd, args)
				if msg != "" {
					b.Fatal(msg)
				}
				if _, err := c.cur.batch.Add(req); err != nil {
					b.Fatal(err)
				}
				c.cur.batch.Clear() // as settle does
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	d := engine.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 1234567 * time.Microsecond, Delay: time.Second}
	for _, bc := range []struct {
		name  string
		shape shape
		proto int
	}{{"resp2", shapeRL, 2}, {"resp3", shapeRL, 3}, {"leaky-resp3", shapeLeaky, 3}, {"throttle", shapeThrottle, 2}} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 0, 256)
			b.ReportAllocs()
			for b.Loop() {
				buf = appendDecision(buf[:0], &d, bc.shape, bc.proto)
			}
		})
	}
}

// BenchmarkPipeline is a pipeline of 100 decisions, as a client sends its
// bytes, through the parser, the command layer, the
// service (which counts every decision, as in the binary) and the memory
// store, without the network: allocations are none, per pipeline or per
// decision.
func BenchmarkPipeline(b *testing.B) {
	var raw []byte
	for i := range 100 {
		raw = append(raw, encodeCommand(bytesArgs("RL.TOKEN", string(rune('a'+i%26)), "1000000", "1000000", "1s"))...)
	}
	c := offlineClient(fuzzServer(b))
	b.ReportAllocs()
	for b.Loop() {
		c.runPipeline(raw)
	}
}

// runPipeline feeds raw to c as a client sends it, settles it, and
// drops the replies.
func (c *client) runPipeline(raw []byte) {
	for data := raw; len(data) > 0; {
		n := copy(c.room(), data)
		data = data[n:]
		c.take(n)
	}
	c.settle()
	c.compact()
	c.out = c.out[:0]
}

// settle hands the queued decisions over and waits for them, as a
// connection's own goroutine does (transport.GoConn), until nothing is
// owed: the tests' way to run a client without a network.
func (c *client) settle() {
	for g := c.Lift(); g != nil; g = c.Lift() {
		c.s.cfg.Service.DecideWait(g.Batch())
		c.Landed(g, false)
	}
	c.count()
}

// serveRead runs what a read of n bytes completed, and waits for it all.
func (c *client) serveRead(n int) {
	c.Filled(n)
	c.settle()
}

// nullWatcher is a MONITOR client that takes its lines as they come.
type nullWatcher struct{}

func (nullWatcher) Wake()      {}
func (nullWatcher) Behind(int) {}

// BenchmarkPipelineMonitored is BenchmarkPipeline while someone runs
// MONITOR: each decision's line, with its explanation's fields, is what
// it adds; BenchmarkPipeline, with no one watching, pays none of it.
func BenchmarkPipelineMonitored(b *testing.B) {
	var raw []byte
	for i := range 100 {
		raw = append(raw, encodeCommand(bytesArgs("RL.TOKEN", string(rune('a'+i%26)), "1000000", "1000000", "1s"))...)
	}
	c := offlineClient(fuzzServer(b))
	tap := c.s.monitors.Add(nullWatcher{})
	var lines []byte
	b.ReportAllocs()
	for b.Loop() {
		c.runPipeline(raw)
		lines = c.s.monitors.Take(tap, lines[:0])
	}
}
