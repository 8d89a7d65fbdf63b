package main

import (
	"fmt"
	"testing"
)

// TestAlsoNames: -also takes NAME=PATH, keeps the order given, and refuses a
// name already measured, since each name is a column, a key prefix in the
// one Redis, and "peer" the row the ratios divide by.
func TestAlsoNames(t *testing.T) {
	var v variants
	for _, s := range []string{"shared=/bin/a", "window=/bin/b", "grpcgo=/bin/a --grpc-transport grpc-go"} {
		if err := v.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	if got := fmt.Sprint(v); got != "[{shared /bin/a []} {window /bin/b []} {grpcgo /bin/a [--grpc-transport grpc-go]}]" {
		t.Fatalf("variants = %s", got)
	}
	for _, s := range []string{"shared=/bin/c", "peer=/bin/c", "sluice=/bin/c", "before=/bin/c", "=/bin/c", "name=", "/bin/c", "blank= "} {
		if err := v.Set(s); err == nil {
			t.Errorf("Set(%q) accepted", s)
		}
	}
}
