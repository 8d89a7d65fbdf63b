package resp

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/tidwall/redcon"
)

// This file is the client's side of the protocol, for the upstream's
// pipelined connection to Redis: the commands it writes and the replies
// it reads back.

// AppendCommand appends a RESP command of bulk strings.
func AppendCommand(buf []byte, name string, args ...string) []byte {
	buf = redcon.AppendArray(buf, 1+len(args))
	buf = redcon.AppendBulkString(buf, name)
	for _, a := range args {
		buf = redcon.AppendBulkString(buf, a)
	}
	return buf
}

// AppendBulkInt appends n as a bulk string, without the allocation
// redcon.AppendBulkInt makes for its digits.
func AppendBulkInt(buf []byte, n int64) []byte {
	var d [20]byte
	return redcon.AppendBulk(buf, strconv.AppendInt(d[:0], n, 10))
}

// ReplyError is an error reply of Redis's. It is a redis.Error (go-redis's
// interface: RedisError), so that go-redis's redis.HasErrorPrefix reads it
// as it reads its own.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// RedisError marks e as a reply of Redis's, not a failure to reach it.
func (ReplyError) RedisError() {}

// maxReplyDepth bounds the nesting of arrays in a reply; the batch
// script's reply is one flat array.
const maxReplyDepth = 8

// maxReplyLen bounds a bulk string's or an array's length in a reply, so
// that a corrupt length cannot ask for gigabytes.
const maxReplyLen = 512 << 20

// maxReplyLine bounds a reply's line (a simple string, an error, a
// length).
const maxReplyLine = 64 << 10

// ErrIncomplete: the bytes so far are the start of a reply.
var ErrIncomplete = errors.New("incomplete reply")

// ParseReply parses one RESP2 reply at the start of b: an int64, a string
// (simple or bulk), nil (a null), a []any, or a ReplyError; n is its
// length in b. It returns ErrIncomplete when b is the start of one, and
// another error when b cannot start one.
func ParseReply(b []byte) (v any, n int, err error) { return parseReply(b, 0) }

func parseReply(b []byte, depth int) (v any, n int, err error) {
	end := bytes.IndexByte(b, '\n')
	if end < 0 {
		if len(b) > maxReplyLine {
			return nil, 0, errors.New("reply line too long")
		}
		return nil, 0, ErrIncomplete
	}
	if end < 1 || b[end-1] != '\r' {
		return nil, 0, errors.New("reply line not ended by CRLF")
	}
	if end == 1 {
		return nil, 0, errors.New("empty reply line")
	}
	body, n := b[1:end-1], end+1
	switch b[0] {
	case '+':
		return string(body), n, nil
	case '-':
		return ReplyError(body), n, nil
	case ':':
		i, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("bad integer reply %q", body)
		}
		return i, n, nil
	case '$':
		size, err := replyLen(body)
		if err != nil || size < 0 {
			return nil, n, err
		}
		if len(b) < n+size+2 {
			return nil, 0, ErrIncomplete
		}
		if b[n+size] != '\r' || b[n+size+1] != '\n' {
			return nil, 0, errors.New("bulk string reply not ended by CRLF")
		}
		return string(b[n : n+size]), n + size + 2, nil
	case '*':
		size, err := replyLen(body)
		if err != nil || size < 0 {
			return nil, n, err
		}
		if depth >= maxReplyDepth {
			return nil, 0, errors.New("reply nested too deep")
		}
		// Each element takes at least 3 bytes ("+\r\n"): an array that
		// cannot be whole yet is not allocated.
		if len(b)-n < 3*size {
			return nil, 0, ErrIncomplete
		}
		a := make([]any, size)
		for i := range a {
			v, m, err := parseReply(b[n:], depth+1)
			if err != nil {
				return nil, 0, err
			}
			a[i] = v
			n += m
		}
		return a, n, nil
	}
	return nil, 0, fmt.Errorf("unknown reply type %q", b[0])
}

// replyLen reads a bulk string's or an array's length: -1 is a null.
func replyLen(b []byte) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < -1 || n > maxReplyLen {
		return 0, fmt.Errorf("bad reply length %q", b)
	}
	return n, nil
}
