package respserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/engine/memstore"
	"github.com/sluice-rl/sluice/service"
)

// testService is the service layer over store, as the binary builds it
// without an upstream: the stores of these tests hold their state in
// memory.
func testService(t testing.TB, store engine.Store, policies engine.Policies) *service.Service {
	t.Helper()
	svc, err := service.New(service.Config{Store: store, Policies: policies, StoreName: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func memStore(t testing.TB) *memstore.Store {
	t.Helper()
	m, err := memstore.New(memstore.Config{Now: newPinnedClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fakeStore records the batches it is given and can be told to fail or
// to block until released.
type fakeStore struct {
	inner   engine.Store
	mu      sync.Mutex
	batches []int // guarded by mu
	err     error // guarded by mu
	gate    chan struct{}
	entered chan struct{}
}

func (f *fakeStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	if f.entered != nil {
		// Told without waiting: a test waits for the first batch only,
		// and a server that sends more than it should must fail the
		// test, not hang it here.
		select {
		case f.entered <- struct{}{}:
		default:
		}
	}
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	f.batches = append(f.batches, len(reqs))
	err := f.err
	f.mu.Unlock()
	if err != nil {
		done(err)
		return
	}
	f.inner.Submit(reqs, res, deadline, done)
}

func (f *fakeStore) Reset(ctx context.Context, key string, limits ...engine.NamedLimit) error {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.inner.Reset(ctx, key, limits...)
}

func TestNewConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a Service: want an error")
	}
	if _, err := New(Config{Service: testService(t, memStore(t), nil), MaxConns: -1}); err == nil {
		t.Error("New with a negative limit: want an error")
	}
}

// A whole pipeline of decisions reaches the store as one batch (or as few
// as the reads that carried it), and the replies keep its order.
func TestPipelineIsOneBatch(t *testing.T) {
	fs := &fakeStore{inner: memStore(t)}
	_, addr := startServer(t, Config{Service: testService(t, fs, nil)})
	c := dialTest(t, addr)
	const n = 50
	var pipe []byte
	for i := range n {
		pipe = append(pipe, encodeCommand(bytesArgs("RL.FIXED", fmt.Sprint("k", i%5), "5", "1m"))...)
	}
	c.send(t, pipe)
	for i := range n {
		got, err := c.reply(t)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("[1, 5, %d, 0, 60000]", 4-i/5)
		if i >= 25 {
			want = "[0, 5, 0, 60000, 60000]"
		}
		if got != want {
			t.Fatalf("reply %d = %s, want %s", i, got, want)
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	sum, largest := 0, 0
	for _, b := range fs.batches {
		sum += b
		largest = max(largest, b)
	}
	if sum != n || largest < 2 {
		t.Errorf("batches %v: want %d requests in total, several in one batch", fs.batches, n)
	}
}

// 10,000 pipelined commands, every tenth of them an error, are all
// answered in order.
func TestTenThousandPipelined(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	c := dialTest(t, addr)
	const n = 10_000
	var pipe []byte
	for i := range n {
		if i%10 == 9 {
			pipe = append(pipe, encodeCommand(bytesArgs("RL.FIXED", "k", "x", "1m"))...)
		} else {
			pipe = append(pipe, encodeCommand(bytesArgs("RL.FIXED", "k", "5000", "1m"))...)
		}
	}
	done := make(chan struct{})
	go func() { // write while reading, as a real client would
		defer close(done)
		_, _ = c.nc.Write(pipe)
	}()
	allowed := 0
	for i := range n {
		got, err := c.reply(t)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		switch {
		case i%10 == 9:
			if got != "-ERR invalid limit 'x': must be an integer" {
				t.Fatalf("reply %d = %s, want the error", i, got)
			}
		case strings.HasPrefix(got, "[1, 5000, "):
			allowed++
		case !strings.HasPrefix(got, "[0, 5000, 0, "):
			t.Fatalf("reply %d = %s", i, got)
		}
	}
	<-done
	if allowed != 5000 {
		t.Errorf("allowed %d, want 5000", allowed)
	}
}

func TestStoreErrorIsAnErrReply(t *testing.T) {
	fs := &fakeStore{inner: memStore(t), err: errors.New("upstream: dial tcp 127.0.0.1:1: connection refused")}
	_, addr := startServer(t, Config{Service: testService(t, fs, nil)})
	c := dialTest(t, addr)
	c.send(t, append(encodeCommand(bytesArgs("RL.GCRA", "k", "1", "1", "1s")), encodeCommand(bytesArgs("RL.RESET", "k"))...))
	for _, want := range []string{
		"-ERR upstream: dial tcp 127.0.0.1:1: connection refused",
		"-ERR upstream: dial tcp 127.0.0.1:1: connection refused",
	} {
		if got, err := c.reply(t); err != nil || got != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	fs.mu.Lock()
	fs.err = nil
	fs.mu.Unlock()
	c.send(t, encodeCommand(bytesArgs("RL.GCRA", "k", "1", "1", "1s")))
	if got, err := c.reply(t); err != nil || got != "[1, 2, 1, 0, 1000]" {
		t.Fatalf("after recovery: %q, %v", got, err)
	}
}

// serveGated serves a store whose Decide waits for fs.gate, and which
// signals fs.entered when a batch reaches it. The test shuts it down.
func serveGated(t *testing.T) (*Server, net.Listener, *fakeStore, chan error) {
	t.Helper()
	fs := &fakeStore{inner: memStore(t), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	srv, ln, served := serveOn(t, Config{Service: testService(t, fs, nil)})
	return srv, ln, fs, served
}

// Shutdown answers a request already read before it closes the connection,
// and stops accepting new ones at once.
func TestShutdownDrains(t *testing.T) {
	srv, ln, fs, served := serveGated(t)
	busy := dialTest(t, ln.Addr().String())
	idle := dialTest(t, ln.Addr().String())
	idle.send(t, encodeCommand(bytesArgs("PING")))
	if got, _ := idle.reply(t); got != "+PONG" {
		t.Fatalf("PING = %q", got)
	}
	busy.send(t, encodeCommand(bytesArgs("RL.FIXED", "k", "1", "1m")))
	<-fs.entered // the request is read and inside the store

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	if _, err := idle.reply(t); err == nil {
		t.Error("the idle connection was not closed")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v before the request was answered", err)
	case <-time.After(50 * time.Millisecond):
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if n, _ := c.Read(make([]byte, 1)); n > 0 {
			t.Error("a new connection was served during Shutdown")
		}
		c.Close()
	}
	close(fs.gate)
	if got, err := busy.reply(t); err != nil || got != "[1, 1, 0, 0, 60000]" {
		t.Fatalf("the drained reply = %q, %v", got, err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := busy.reply(t); err == nil {
		t.Error("the busy connection stayed open after its reply")
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v, want ErrServerClosed", err)
	}
}

func TestShutdownGivesUpAtDeadline(t *testing.T) {
	srv, ln, fs, served := serveGated(t)
	c := dialTest(t, ln.Addr().String())
	c.send(t, encodeCommand(bytesArgs("RL.FIXED", "k", "1", "1m")))
	<-fs.entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded", err)
	}
	close(fs.gate)
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v, want ErrServerClosed", err)
	}
}

func TestServeAfterShutdown(t *testing.T) {
	srv, err := New(Config{Service: testService(t, memStore(t), nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := srv.Serve(ln); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Close = %v", err)
	}
}

// A client that sends more than MaxRequestBytes without completing a
// command is cut off, as early as a header shows it; the others carry on.
func TestRequestTooLarge(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil), MaxRequestBytes: 100 << 10})
	other := dialTest(t, addr)
	manyArgs := []byte("*121\r\n$4\r\nECHO\r\n")
	for range 120 {
		manyArgs = append(manyArgs, "$1024\r\n"+strings.Repeat("a", 1024)+"\r\n"...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"a bulk header past the limit", []byte("*2\r\n$4\r\nECHO\r\n$1048576\r\n"), "-ERR Protocol error: invalid bulk length"},
		{"a command past the limit", manyArgs, "-ERR Protocol error: request larger than the server's limit"},
		{"too many arguments", []byte("*4444444444444444444\r\n"), "-ERR Protocol error: invalid multibulk length"},
		{"too many arguments, with a plus", []byte("*+5000\r\n"), "-ERR Protocol error: invalid multibulk length"},
		{"an inline line past 64 KiB", bytes.Repeat([]byte("a"), 70<<10), "-ERR Protocol error: too big inline request"},
	} {
		c := dialTest(t, addr)
		go func() { _, _ = c.nc.Write(tc.in) }()
		got, err := c.reply(t)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
		if _, err := c.reply(t); err == nil {
			t.Errorf("%s: connection still open", tc.name)
		}
		other.send(t, encodeCommand(bytesArgs("PING")))
		if got, err := other.reply(t); err != nil || got != "+PONG" {
			t.Fatalf("%s: other connection: %q, %v", tc.name, got, err)
		}
	}
}

// Commands before a frame that breaks a limit are answered first.
func TestCommandsBeforeABadFrame(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	c := dialTest(t, addr)
	c.send(t, []byte("*1\r\n$4\r\nPING\r\n*99999999\r\n"))
	for _, want := range []string{"+PONG", "-ERR Protocol error: invalid multibulk length"} {
		if got, err := c.reply(t); err != nil || got != want {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	}
}

// The default limit admits a 1 MB argument, which then gets an ERR that
// names it.
func TestMegabyteArgument(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	c := dialTest(t, addr)
	go func() {
		_, _ = c.nc.Write(encodeCommand(bytesArgs("RL.FIXED", strings.Repeat("k", 1<<20), "10", "1s")))
	}()
	if got, err := c.reply(t); err != nil || got != "-ERR invalid key of 1048576 bytes: must be at most 1024 bytes" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestMaxConns(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil), MaxConns: 1})
	first := dialTest(t, addr)
	first.send(t, encodeCommand(bytesArgs("PING")))
	if got, _ := first.reply(t); got != "+PONG" {
		t.Fatalf("PING = %q", got)
	}
	second := dialTest(t, addr)
	if got, _ := second.reply(t); got != "-ERR max number of clients reached" {
		t.Errorf("second connection got %q", got)
	}
}

// A client that goes away mid-frame, or mid-pipeline, harms nobody.
func TestClientVanishes(t *testing.T) {
	srv, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	for _, raw := range []string{"*3\r\n$8\r\nRL.FIXED\r\n$1\r\nk", "*1\r\n", "\x00\x01\x02", strings.Repeat("*1\r\n$4\r\nPING\r\n", 1000)} {
		c := dialTest(t, addr)
		c.send(t, []byte(raw))
		c.nc.Close()
	}
	c := dialTest(t, addr)
	c.send(t, encodeCommand(bytesArgs("PING")))
	if got, err := c.reply(t); err != nil || got != "+PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	// The server notices each vanished client on its own goroutine or
	// loop: no event tells the test, so it waits on the count itself.
	waitFor(t, func() bool { return srv.Clients() == 1 }, "the vanished clients to be counted out")
}

// Many connections deciding on one key together admit exactly the limit.
func TestConcurrentConnections(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	const conns, each, limit = 8, 100, 500
	var wg sync.WaitGroup
	allowed := make(chan int, conns)
	errs := make(chan error, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			c := &testConn{nc: nc, rd: newReader(nc)}
			n := 0
			for range each {
				if _, err := nc.Write(encodeCommand(bytesArgs("RL.SLIDING", "shared", fmt.Sprint(limit), "1h"))); err != nil {
					errs <- err
					return
				}
				got, err := readRendered(c.rd)
				if err != nil {
					errs <- err
					return
				}
				if strings.HasPrefix(got, "[1,") {
					n++
				}
			}
			allowed <- n
		}()
	}
	wg.Wait()
	close(allowed)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for n := range allowed {
		total += n
	}
	if total != limit {
		t.Errorf("allowed %d, want %d", total, limit)
	}
}

// The tests of what a connection does run on the event loop (the default
// on Linux), and here again with each connection on a goroutine of its
// own, as on other systems.
func TestGoroutineTransport(t *testing.T) {
	testGoroutines = true
	defer func() { testGoroutines = false }()
	for _, test := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"Transcripts", TestTranscripts},
		{"PipelineIsOneBatch", TestPipelineIsOneBatch},
		{"TenThousandPipelined", TestTenThousandPipelined},
		{"StoreErrorIsAnErrReply", TestStoreErrorIsAnErrReply},
		{"ShutdownDrains", TestShutdownDrains},
		{"ShutdownGivesUpAtDeadline", TestShutdownGivesUpAtDeadline},
		{"RequestTooLarge", TestRequestTooLarge},
		{"CommandsBeforeABadFrame", TestCommandsBeforeABadFrame},
		{"MegabyteArgument", TestMegabyteArgument},
		{"MaxConns", TestMaxConns},
		{"ClientVanishes", TestClientVanishes},
		{"ConcurrentConnections", TestConcurrentConnections},
		{"SlowReader", TestSlowReader},
		{"HalfClose", TestHalfClose},
		{"TraceDecisions", TestTraceDecisions},
		{"ExplainHeldInPipeline", TestExplainHeldInPipeline},
		{"Monitor", TestMonitor},
		{"MonitorPipelineOrder", TestMonitorPipelineOrder},
		{"MonitorEnds", TestMonitorEnds},
		{"MonitorFallsBehind", TestMonitorFallsBehind},
		{"ClientKill", TestClientKill},
		{"ClientKillMonitor", TestClientKillMonitor},
	} {
		t.Run(test.name, test.run)
	}
}

// An event loop decides what several connections sent in one round as
// one batch: while a batch is at the store, what others send waits in
// their sockets, and the next round reads it all.
func TestLoopBatchesAcrossConnections(t *testing.T) {
	srv, ln, fs, served := serveGated(t)
	defer func() {
		srv.Close()
		<-served
	}()
	// A failure below must not leave the loop held in the store: the
	// Close above waits for it.
	var opened sync.Once
	release := func() { opened.Do(func() { close(fs.gate) }) }
	defer release()
	const others = 3
	first := dialTest(t, ln.Addr().String())
	conns := make([]*testConn, others)
	for i := range conns {
		// A PING answered is a connection the loop watches: once the
		// first batch holds the loop, a connection accepted then would
		// be welcomed only after it lands, perhaps a round late.
		conns[i] = dialTest(t, ln.Addr().String())
		conns[i].send(t, encodeCommand(bytesArgs("PING")))
		if got, err := conns[i].reply(t); err != nil || got != "+PONG" {
			t.Fatalf("PING = %q, %v", got, err)
		}
	}
	first.send(t, encodeCommand(bytesArgs("RL.FIXED", "first", "1", "1m")))
	<-fs.entered // the loop waits on this batch
	for i, c := range conns {
		// On loopback the bytes are in the server's socket once the
		// write returns.
		c.send(t, encodeCommand(bytesArgs("RL.FIXED", fmt.Sprint("k", i), "1", "1m")))
	}
	release()
	for _, c := range append(conns, first) {
		if got, err := c.reply(t); err != nil || got != "[1, 1, 0, 0, 60000]" {
			t.Fatalf("reply %q, %v", got, err)
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fmt.Sprint(fs.batches) != fmt.Sprint([]int{1, others}) {
		t.Errorf("batches %v; want [1 %d]: the three connections' requests in one", fs.batches, others)
	}
}

// A client that sends a long pipeline and reads the replies only later
// gets them all, in order: the server keeps what the socket cannot take
// and reads no more from that client until it is sent.
func TestSlowReader(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	c := dialTest(t, addr)
	const n = 4000
	payload := strings.Repeat("x", 2048) // 8 MB of replies: more than the sockets hold
	var pipe []byte
	for i := range n {
		pipe = append(pipe, encodeCommand(bytesArgs("ECHO", fmt.Sprint(i, payload)))...)
	}
	wrote := make(chan error, 1)
	go func() {
		_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := c.nc.Write(pipe)
		wrote <- err
	}()
	time.Sleep(200 * time.Millisecond) // the server fills the socket and waits
	for i := range n {
		got, err := c.reply(t)
		if want := fmt.Sprintf("%q", fmt.Sprint(i, payload)); err != nil || got != want {
			t.Fatalf("reply %d: %.20q, %v", i, got, err)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}

// A client that sends its commands and closes its side of the connection
// still gets every reply.
func TestHalfClose(t *testing.T) {
	_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil)})
	c := dialTest(t, addr)
	c.send(t, append(encodeCommand(bytesArgs("PING")), encodeCommand(bytesArgs("RL.FIXED", "k", "1", "1m"))...))
	if err := c.nc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+PONG", "[1, 1, 0, 0, 60000]"} {
		if got, err := c.reply(t); err != nil || got != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	if _, err := c.reply(t); !errors.Is(err, io.EOF) {
		t.Errorf("after the replies: %v; want the connection closed", err)
	}
}

func bytesArgs(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// A pipeline that mixes outcomes is counted decision by decision.
func TestPipelineCountsEachOutcome(t *testing.T) {
	srv := fuzzServer(t)
	c := offlineClient(srv)
	// Burst 0 at one an hour: a key's first request is allowed, the rest refused.
	for _, key := range []string{"a", "a", "a", "b", "b", "c"} {
		c.command(bytesArgs("RL.GCRA", key, "0", "1", "1h"))
	}
	c.settle()
	tot := srv.cfg.Service.Totals()
	if a, d := tot.Outcomes[service.Allowed], tot.Outcomes[service.Refused]; a != 3 || d != 3 {
		t.Errorf("service counted %d allowed, %d refused; want 3 and 3", a, d)
	}
	if n := srv.stats.commands.Load(); n != 6 {
		t.Errorf("stats: %d commands; want 6", n)
	}
}

// slowKeyStore holds every batch that has a key starting with "slow" until
// release is closed, and decides the others at once.
type slowKeyStore struct {
	engine.Store
	entered chan struct{}
	release chan struct{}
}

func (s *slowKeyStore) Submit(reqs []engine.Request, res []engine.Result, deadline time.Time, done func(error)) {
	for _, r := range reqs {
		if strings.HasPrefix(r.Key, "slow") {
			go func() { // held as a round trip at Redis is: Submit returns
				s.entered <- struct{}{}
				<-s.release
				s.Store.Submit(reqs, res, deadline, done)
			}()
			return
		}
	}
	s.Store.Submit(reqs, res, deadline, done)
}

// While one connection's decision is held at the store, the server goes
// on: other connections get their PINGs, errors and decisions, and the
// held connection's later commands are answered after it, in order.
func TestNothingWaitsBehindAHeldBatch(t *testing.T) {
	for _, loops := range []int{1, 0} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			slow := &slowKeyStore{Store: memStore(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
			b, err := chain.NewBatcher(chain.BatcherConfig{Store: slow, MaxInFlight: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Close)
			_, addr := startServer(t, Config{Service: testService(t, b, nil), Loops: testLoops(t, loops)})
			// A failure below must not leave the batch held: the
			// cleanups (Shutdown's drain, b.Close) wait for it to land.
			var released sync.Once
			release := func() { released.Do(func() { close(slow.release) }) }
			t.Cleanup(release)
			held, other := dialTest(t, addr), dialTest(t, addr)
			held.send(t, encodeCommand(bytesArgs("RL.FIXED", "slow", "5", "1m")))
			select {
			case <-slow.entered:
			case <-time.After(5 * time.Second):
				t.Fatal("the slow decision never reached the store")
			}
			// Pipelined behind the held decision: a decision, a command
			// that waits for it, and a reply that needs no store.
			held.send(t, encodeCommand(bytesArgs("RL.FIXED", "fast-held", "5", "1m")))
			held.send(t, encodeCommand(bytesArgs("RL.RESET", "fast-held")))
			held.send(t, encodeCommand(bytesArgs("PING")))
			for _, tc := range []struct{ cmd, want string }{
				{"PING", "+PONG"},
				{"NOSUCH", "-ERR unknown command 'NOSUCH', with args beginning with: "},
				{"RL.FIXED fast 5 1m", "[1, 5, 4, 0, 60000]"}, // a batch that lands before the held one
			} {
				other.send(t, encodeCommand(bytesArgs(strings.Fields(tc.cmd)...)))
				if got, err := other.reply(t); err != nil || got != tc.want {
					t.Fatalf("%s on another connection while one is held: %q, %v; want %q", tc.cmd, got, err, tc.want)
				}
			}
			_ = held.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if b, err := held.rd.Peek(1); err == nil {
				t.Fatalf("the held connection was answered (%q…) before its first decision landed", b)
			}
			release()
			held.rd = newReader(held.nc) // the timed-out reader keeps its error
			for _, want := range []string{"[1, 5, 4, 0, 60000]", "[1, 5, 4, 0, 60000]", "1", "+PONG"} {
				if got, err := held.reply(t); err != nil || got != want {
					t.Fatalf("held connection: %q, %v; want %q, in the order sent", got, err, want)
				}
			}
		})
	}
}

// Past the total input budget, the connection holding the most unfinished
// input is closed with an error, and the others go on. An argument's
// announced length is charged as soon as the argument starts, so the big
// client is closed before it has sent what it announced: its later
// writes may meet a closed connection.
func TestInputBudgetClosesTheLargest(t *testing.T) {
	for _, loops := range []int{1, 0} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			srv, addr := startServer(t, Config{Service: testService(t, memStore(t), nil), Loops: testLoops(t, loops), MaxInputMemory: 1 << 20})
			small, big := dialTest(t, addr), dialTest(t, addr)
			header := []byte("*2\r\n$4\r\nECHO\r\n$200000\r\n")
			small.send(t, append(header, bytes.Repeat([]byte("s"), 100<<10)...))
			big.send(t, []byte("*2\r\n$4\r\nECHO\r\n$4000000\r\n"))
			// The announced 4 MB is charged as its argument starts, past the
			// 1 MiB budget: the big client is closed whatever the small one
			// has been read of, and its later writes may find it closed.
			_, _ = big.nc.Write(bytes.Repeat([]byte("b"), 300<<10))
			_, _ = big.nc.Write(bytes.Repeat([]byte("b"), 900<<10))
			got, err := big.reply(t)
			if err != nil || !strings.HasPrefix(got, "-ERR closing the connection: the input all clients have sent") {
				t.Fatalf("the largest client got %q, %v; want the budget's error", got, err)
			}
			if _, err := big.reply(t); err == nil {
				t.Fatal("the largest client stayed open")
			}
			// The small one is untouched: it finishes its command.
			small.send(t, append(bytes.Repeat([]byte("s"), 200000-100<<10), "\r\n"...))
			if got, err := small.reply(t); err != nil || len(got) != 200000+2 {
				t.Fatalf("the small client's ECHO: %d bytes, %v", len(got), err)
			}
			if n := srv.stats.evicted.Load(); n != 1 {
				t.Errorf("%d clients evicted; want 1", n)
			}
		})
	}
}

// A command of more arguments than the frame keeps (RL.RESET of 5,000
// keys) is read to its end and refused with an error that says how to
// send it; the connection reads on, and its commands before and after
// run (issue 28: it was a protocol error and a disconnect).
func TestTooManyArgumentsKeepsTheConnection(t *testing.T) {
	for _, loops := range []int{1, 0} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			_, addr := startServer(t, Config{Service: testService(t, memStore(t), nil), Loops: testLoops(t, loops)})
			c := dialTest(t, addr)
			reset := []string{"RL.RESET"}
			for i := range 5000 {
				reset = append(reset, fmt.Sprintf("k%d", i))
			}
			var pipeline []byte
			pipeline = append(pipeline, encodeCommand(bytesArgs("RL.FIXED", "k1", "1", "1h"))...)
			pipeline = append(pipeline, encodeCommand(bytesArgs(reset...))...)
			pipeline = append(pipeline, encodeCommand(bytesArgs("RL.FIXED", "k1", "1", "1h", "PEEK"))...)
			pipeline = append(pipeline, encodeCommand(bytesArgs(reset[:DefaultMaxArgs]...))...)
			pipeline = append(pipeline, encodeCommand(bytesArgs("PING"))...)
			c.send(t, pipeline)
			for _, want := range []string{
				"[1, 1, 0, 0, 3600000]",
				"-ERR too many arguments for 'rl.reset' command: at most 4096, its name included; send them in several commands",
				"[0, 1, 0, 3600000, 3600000]", // the refused reset reset nothing
				"4095",
				"+PONG",
			} {
				if got, err := c.reply(t); err != nil || got != want {
					t.Fatalf("got %q, %v; want %q", got, err, want)
				}
			}
		})
	}
}
