package rlsopts_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/rlsopts"
)

// TestFlags reads each choice as a flag, as the settings table does, and
// writes it back as read.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		arg, want, err string
	}{
		{"grpc-go", "grpc-go", ""}, {"own", "own", ""}, {"fast", "", "must be own or grpc-go"},
		{"peer", "peer", ""}, {"both", "both", ""}, {"all", "", "must be off, peer, draft or both"},
	} {
		var tr rlsopts.Transport
		var h rlsopts.Headers
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.TextVar(&tr, "transport", rlsopts.TransportOwn, "")
		fs.TextVar(&h, "headers", rlsopts.HeadersOff, "")
		name := "transport"
		if tc.want == "peer" || tc.want == "both" || tc.arg == "all" {
			name = "headers"
		}
		err := fs.Parse([]string{"--" + name, tc.arg})
		got := tr.String()
		if name == "headers" {
			got = h.String()
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.arg, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.arg, got, err, tc.want)
		}
	}
	if got := rlsopts.Headers(9).String(); got != "headers(?)" {
		t.Errorf("Headers(9) = %q", got)
	}
}
