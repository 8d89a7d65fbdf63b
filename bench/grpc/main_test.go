package main

import "testing"

// TestAlsoNames: -also takes NAME=PATH, keeps the order given, and refuses a
// name already measured, since each name is a column, a key prefix in the
// one Redis, and "peer" the row the ratios divide by.
func TestAlsoNames(t *testing.T) {
	var v variants
	for _, s := range []string{"shared=/bin/a", "window=/bin/b"} {
		if err := v.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	if len(v) != 2 || v[0] != (variant{"shared", "/bin/a"}) || v[1] != (variant{"window", "/bin/b"}) {
		t.Fatalf("variants = %v", v)
	}
	for _, s := range []string{"shared=/bin/c", "peer=/bin/c", "sluice=/bin/c", "before=/bin/c", "=/bin/c", "name=", "/bin/c"} {
		if err := v.Set(s); err == nil {
			t.Errorf("Set(%q) accepted", s)
		}
	}
}
