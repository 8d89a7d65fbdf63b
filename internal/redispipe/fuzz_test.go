package redispipe

import (
	"reflect"
	"testing"

	"github.com/sluice-rl/sluice/internal/resp"
)

// FuzzReplies feeds any bytes Redis might send to a connection's reply
// reader in reads of every size a socket may hand over, and checks that
// the replies it cuts out are the ones the whole input holds, in order:
// a read that ends inside a reply never yields half of it, nor loses it.
func FuzzReplies(f *testing.F) {
	for _, seed := range []string{
		"+OK\r\n",
		"-ERR Function not found\r\n",
		":42\r\n$5\r\nhello\r\n",
		"*3\r\n:1765000000000000\r\n:0\r\n*2\r\n:1\r\n$-1\r\n",
		"*-1\r\n$0\r\n\r\n",
		"*2\r\n*1\r\n+x\r\n-NOSCRIPT No matching script\r\n",
		"$3\r\nab",   // cut inside a bulk string
		"*2\r\n:1\r", // cut inside a header
		"!bogus\r\n",
	} {
		f.Add([]byte(seed), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		want, wantErr := parseAll(data)
		n := max(int(chunk), 1)
		r := &replies{}
		var got []any
		var gotErr error
		for at := 0; at < len(data) && gotErr == nil; {
			end := min(at+n, len(data))
			room := r.room()
			if len(room) < end-at {
				t.Fatalf("room of %d bytes for a read of %d", len(room), end-at)
			}
			r.buf = r.buf[:len(r.buf)+copy(room, data[at:end])]
			at = end
			for {
				v, ok, err := r.take()
				if err != nil {
					gotErr = err
					break
				}
				if !ok {
					break
				}
				got = append(got, v)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("in reads of %d: replies %#v; whole, %#v", n, got, want)
		}
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("in reads of %d: error %v; whole, %v", n, gotErr, wantErr)
		}
	})
}

// parseAll cuts every whole reply out of data at once, and the error
// that stopped it, if any (an incomplete end is none).
func parseAll(data []byte) ([]any, error) {
	var out []any
	for len(data) > 0 {
		v, n, err := resp.ParseReply(data)
		if err == resp.ErrIncomplete {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, v)
		data = data[n:]
	}
	return out, nil
}
