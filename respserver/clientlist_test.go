package respserver

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// killSeeds are CLIENT KILL's arguments after KILL, one line each: every
// filter, valid and not, and the forms Redis tells apart by count.
var killSeeds = []string{
	"127.0.0.1:6379", "ID 1", "ID 0", "ID -1", "ID x", "ID 9223372036854775808", "ADDR 127.0.0.1:1", "LADDR 127.0.0.1:6380",
	"TYPE normal", "TYPE NORMAL", "TYPE master", "TYPE replica", "TYPE slave", "TYPE pubsub", "TYPE bogus",
	"USER default", "USER alice", "SKIPME yes", "SKIPME no", "SKIPME maybe", "MAXAGE 1", "MAXAGE 0", "MAXAGE -5",
	"MAXAGE 9223372036854775807", "ID 1 TYPE", "ID 1 TYPE normal SKIPME no ADDR a LADDR b USER default MAXAGE 10",
	"BOGUS 1", "ID", "a b c", "\xff \x00",
}

// FuzzClientKill checks CLIENT KILL's arguments: anything gets +OK, a
// count or one ERR line; the old form is exactly one argument; a filter
// accepted is pairs of option and value; and the command as a client
// sends it gets the reply the filter's parse says.
func FuzzClientKill(f *testing.F) {
	for _, s := range killSeeds {
		f.Add([]byte(s))
	}
	srv := fuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		args := bytesArgs("CLIENT", "KILL")
		for _, a := range bytes.Split(data, []byte(" ")) {
			if len(a) > 0 {
				args = append(args, bytes.Clone(a))
			}
		}
		filter, msg := parseKillFilter(args)
		switch {
		case msg != "" && (!strings.HasPrefix(msg, "ERR ") || strings.ContainsAny(msg, "\r\n")):
			t.Fatalf("%q: error %q is not one ERR line", args, msg)
		case len(args) == 3 && (msg != "" || !filter.oldForm || filter.skipMe):
			t.Fatalf("%q: one argument is the old form, which may kill the caller: %+v, %q", args, filter, msg)
		case msg == "" && len(args) > 3 && (filter.oldForm || len(args)%2 != 0):
			t.Fatalf("%q: accepted as %+v", args, filter)
		case msg == "" && filter.maxAge < 0:
			t.Fatalf("%q: negative MAXAGE %v", args, filter.maxAge)
		}
		// The fuzz server has no connection registered: nothing matches.
		want := "0"
		switch {
		case msg != "":
			want = "-" + msg
		case filter.oldForm:
			want = "-ERR No such client"
		}
		if got := run(t, offlineClient(srv), [][][]byte{args}); len(got) != 1 || got[0] != want {
			t.Fatalf("%q: replies %q, want %q", args, got, want)
		}
	})
}

// Each filter selects what its name says, and only that.
func TestKillFilterMatches(t *testing.T) {
	srv := fuzzServer(t)
	now := time.Now()
	self, other := newClient(srv, "10.0.0.1:1"), newClient(srv, "10.0.0.2:2")
	self.laddr, other.laddr = "127.0.0.1:6380", "127.0.0.1:6381"
	other.created = now.Add(-time.Hour)
	for _, tc := range []struct {
		filter     string
		self, othr bool
	}{
		{"10.0.0.2:2", false, true},
		{"10.0.0.1:1", true, false}, // the old form may name the caller
		{"ADDR 10.0.0.1:1", false, false},
		{"ADDR 10.0.0.1:1 SKIPME no", true, false},
		{"LADDR 127.0.0.1:6381", false, true},
		{"TYPE normal", false, true},
		{"TYPE normal SKIPME NO", true, true},
		{"TYPE pubsub SKIPME no", false, false},
		{"TYPE master SKIPME no", false, false},
		{"USER default SKIPME no", true, true},
		{"MAXAGE 60 SKIPME no", false, true},
		{"MAXAGE 7200 SKIPME no", false, false},
		{"ID 2 SKIPME no", false, true},
		{"ID 2 ADDR 10.0.0.1:1 SKIPME no", false, false},
	} {
		f, msg := parseKillFilter(append(bytesArgs("CLIENT", "KILL"), bytesArgs(strings.Fields(tc.filter)...)...))
		if msg != "" {
			t.Errorf("%s: %s", tc.filter, msg)
			continue
		}
		if got := f.matches(self, self, now); got != tc.self {
			t.Errorf("%s: matches the caller = %v", tc.filter, got)
		}
		if got := f.matches(other, self, now); got != tc.othr {
			t.Errorf("%s: matches the other = %v", tc.filter, got)
		}
	}
}
