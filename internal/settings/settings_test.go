package settings

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// JSON logs write durations as a person reads them, not as nanoseconds.
func TestLoggerWritesDurations(t *testing.T) {
	var buf bytes.Buffer
	cfg := Default()
	cfg.LogFormat = "json"
	cfg.NewLogger(&buf).Info("x", "upstream_timeout", 100*time.Millisecond, slog.Group("g", "d", 2*time.Second))
	var rec struct {
		Timeout string            `json:"upstream_timeout"`
		G       map[string]string `json:"g"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if rec.Timeout != "100ms" || rec.G["d"] != "2s" {
		t.Errorf("durations logged as %q and %q; want 100ms and 2s", rec.Timeout, rec.G["d"])
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"256mb": 256 << 20, "1gb": 1 << 30, "1k": 1000, "1KB": 1024, "500000": 500000, "2m": 2_000_000} {
		var b ByteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, bad := range []string{"", "mb", "-1mb", "1.5gb", "1tb", "99999999999999gb"} {
		var b ByteSize
		if err := b.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted: %d", bad, b)
		}
	}
	b := ByteSize(256 << 20)
	if b.String() != "256mb" {
		t.Errorf("String() = %q", b.String())
	}
}
