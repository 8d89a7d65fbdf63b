package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzReadReply: no input makes the reply reader panic, and every command
// the pipe writes reads back as the array of strings it was built from.
func FuzzReadReply(f *testing.F) {
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
		r := bufio.NewReaderSize(bytes.NewReader(data), 64)
		for range 8 {
			if _, err := readReply(r); err != nil {
				break
			}
		}
		args := strings.Split(string(data), "\x00")
		cmd := appendCommand(nil, args[0], args[1:]...)
		got, err := readReply(bufio.NewReader(bytes.NewReader(cmd)))
		if err != nil {
			t.Fatalf("reading back %q: %v", cmd, err)
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

// The reader tells Redis's error replies from broken input: the first is
// a value the sender gets, the second fails the connection.
func TestReadReplyKinds(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    any
		invalid bool
	}{
		{in: ":-42\r\n", want: int64(-42)},
		{in: "$3\r\nabc\r\n", want: "abc"},
		{in: "$-1\r\n", want: nil},
		{in: "-READONLY You can't write\r\n", want: replyError("READONLY You can't write")},
		{in: "*2\r\n:1\r\n*1\r\n+x\r\n", want: []any{int64(1), []any{"x"}}},
		{in: "$3\r\nabcd\r\n", invalid: true},
		{in: ":1\n", invalid: true},
		{in: "*1\r\n", invalid: true},
		{in: strings.Repeat("*1\r\n", maxReplyDepth+1) + ":1\r\n", invalid: true},
	} {
		got, err := readReply(bufio.NewReader(strings.NewReader(c.in)))
		if c.invalid {
			if err == nil {
				t.Errorf("%q read as %#v; want an error", c.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q read as %#v, %v; want %#v", c.in, got, err, c.want)
		}
	}
	var rerr interface{ RedisError() }
	if !errors.As(error(replyError("ERR x")), &rerr) {
		t.Error("an error reply is not a redis.Error")
	}
}
