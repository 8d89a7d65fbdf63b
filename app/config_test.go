package app

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
	cfg := DefaultConfig()
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
