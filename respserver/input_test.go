package respserver

import (
	"bytes"
	"strconv"
	"testing"
)

// A large argument's input buffer grows with what arrives, doubling, and
// the budget is charged the argument's announced length from its header
// on: a 16 MB array made at once for every client that sends the start of
// a 16 MB argument had the event loop pay for them all under the memory
// limit (see grow).
func TestInputGrowsWithWhatArrives(t *testing.T) {
	srv, err := New(Config{Service: testService(t, memStore(t), nil)})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(srv, "test")
	const announced = 16_000_000
	send := func(b []byte) {
		for len(b) > 0 {
			n := copy(c.room(), b)
			c.take(n)
			b = b[n:]
		}
	}
	send([]byte("*3\r\n$7\r\nRL.GCRA\r\n$1\r\nk\r\n$" + strconv.Itoa(announced) + "\r\n"))
	if held := c.inputBytes(); held < announced {
		t.Fatalf("the budget holds %d bytes for the client once its argument's header is read; want the announced %d", held, announced)
	}
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for range 32 { // 2 MiB
		send(chunk)
	}
	if got := cap(c.in.buf); got > 2*(2<<20)+readSize {
		t.Errorf("2 MiB of a %d-byte argument sit in an array of %d bytes; want at most twice what arrived", announced, got)
	}
	if held := c.inputBytes(); held < announced || held > announced+64<<10 {
		t.Errorf("the budget holds %d bytes for the client; want the announced %d and little more", held, announced)
	}
}
