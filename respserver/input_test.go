package respserver

import (
	"bytes"
	"strconv"
	"testing"
)

// A large argument's input buffer is made once, at the length its header
// announces, and charged to the budget at that capacity from the start:
// doubling up to it made every client sending the first 2 MiB of a 16 MB
// argument hold a 4 MiB array and leave 4 MiB of smaller ones behind.
func TestInputGrowsOnceToTheAnnouncedArgument(t *testing.T) {
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
	arrays := 0
	last := cap(c.in.buf)
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for range 32 { // 2 MiB
		send(chunk)
		if cap(c.in.buf) != last {
			arrays++
			last = cap(c.in.buf)
		}
	}
	if arrays != 1 || last < announced || last > announced+4*readSize {
		t.Errorf("2 MiB of a %d-byte argument took %d new arrays, the last of %d bytes; want one of the announced length", announced, arrays, last)
	}
	if held := c.inputBytes(); held < int64(cap(c.in.buf)) || held > int64(cap(c.in.buf)+64<<10) {
		t.Errorf("the budget holds %d bytes for the client; want its buffer's capacity %d and little more", held, cap(c.in.buf))
	}
}
