package resp

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseReply: no input makes the reply parser panic; every prefix of
// a reply is incomplete, never an error nor another reply, so that a
// reply read in pieces parses as one read whole; and every command
// AppendCommand writes parses back as the array of strings it was built from.
func FuzzParseReply(f *testing.F) {
	for _, seed := range []string{
		"*2\r\n:1\r\n$3\r\nabc\r\n",
		"-NOSCRIPT No matching script\r\n",
		"+OK\r\n",
		"$-1\r\n",
		"*-1\r\n",
		"*0\r\n",
		"$5\r\nab\r\n",
		"$999999999999\r\n",
		":12x\r\n",
		"*3\r\n:1\r\n",
		strings.Repeat("*1\r\n", 20) + ":1\r\n",
		"?\r\n",
		"\r\n",
		"+OK\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, n, err := ParseReply(data); err == nil {
			for k := range n {
				if v, _, err := ParseReply(data[:k]); err != ErrIncomplete {
					t.Fatalf("the first %d bytes of a %d-byte reply parse as %#v, %v; want incomplete", k, n, v, err)
				}
			}
		}
		args := strings.Split(string(data), "\x00")
		cmd := AppendCommand(nil, args[0], args[1:]...)
		got, n, err := ParseReply(cmd)
		if err != nil || n != len(cmd) {
			t.Fatalf("parsing back %q: %d bytes of %d, %v", cmd, n, len(cmd), err)
		}
		want := make([]any, len(args))
		for i, a := range args {
			want[i] = a
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read back %#v; want %#v", got, want)
		}
	})
}

// The parser tells Redis's error replies from broken input, and both from
// a reply not all read yet: the first is a value the sender gets, the
// second fails the connection, the third waits for more.
func TestParseReplyKinds(t *testing.T) {
	for _, c := range []struct {
		in         string
		want       any
		invalid    bool
		incomplete bool
	}{
		{in: ":-42\r\n", want: int64(-42)},
		{in: "$3\r\nabc\r\n", want: "abc"},
		{in: "$-1\r\n", want: nil},
		{in: "-READONLY You can't write\r\n", want: ReplyError("READONLY You can't write")},
		{in: "*2\r\n:1\r\n*1\r\n+x\r\n", want: []any{int64(1), []any{"x"}}},
		{in: "*2\r\n+\r\n-\r\n", want: []any{"", ReplyError("")}},
		{in: "$3\r\nabcd\r\n", invalid: true},
		{in: ":1\n", invalid: true},
		{in: "*1\r\n", incomplete: true},
		{in: "$3\r\nab", incomplete: true},
		{in: ":12", incomplete: true},
		{in: strings.Repeat("*1\r\n", maxReplyDepth+1) + ":1\r\n", invalid: true},
	} {
		got, n, err := ParseReply([]byte(c.in))
		switch {
		case c.incomplete:
			if err != ErrIncomplete {
				t.Errorf("%q parsed as %#v, %v; want incomplete", c.in, got, err)
			}
		case c.invalid:
			if err == nil || err == ErrIncomplete {
				t.Errorf("%q parsed as %#v, %v; want an error", c.in, got, err)
			}
		case err != nil || n != len(c.in) || !reflect.DeepEqual(got, c.want):
			t.Errorf("%q parsed as %#v (%d bytes), %v; want %#v", c.in, got, n, err, c.want)
		}
	}
	var rerr interface{ RedisError() }
	if !errors.As(error(ReplyError("ERR x")), &rerr) {
		t.Error("an error reply is not a redis.Error")
	}
}

// An array whose announced length its bytes cannot hold yet is not
// allocated: a corrupt or hostile length costs nothing until its
// elements come.
func TestParseReplyAllocatesNoUnfilledArray(t *testing.T) {
	in := []byte("*100000\r\n:1\r\n:2\r\n")
	allocs := testing.AllocsPerRun(10, func() {
		if _, _, err := ParseReply(in); err != ErrIncomplete {
			t.Fatalf("%q: %v; want incomplete", in, err)
		}
	})
	if allocs != 0 {
		t.Errorf("an array of 100,000 announced, 2 sent: %v allocations; want none", allocs)
	}
}
