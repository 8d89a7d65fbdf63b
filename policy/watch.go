package policy

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"time"
)

// WatchConfig configures Watch. Zero values mean the documented defaults.
type WatchConfig struct {
	// Path is the policies file.
	Path string
	// Every is how often the file is read and compared with the one in
	// use. Zero means only on Reload.
	Every time.Duration
	// Reload asks for a reload now, whatever the file holds (SIGHUP).
	Reload <-chan struct{}
	// Logger is told of every reload and every file that does not parse.
	// Nil means slog.Default().
	Logger *slog.Logger
}

// Watch reloads l from cfg.Path until ctx ends: on Reload, and whenever
// the file's content differs from the content the policies in use were
// parsed from (so a change made before Watch started is seen too). Content, not
// size and modification time: a replacement file with the same size and
// time (touch -r, then mv) is still noticed, and a Kubernetes ConfigMap
// update, which swaps a symlink in the file's directory, is read through
// the link. A file that no longer parses is logged and the policies in use
// are kept: a typo must not take limits away.
func (l *Live) Watch(ctx context.Context, cfg WatchConfig) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var refused [sha256.Size]byte // the broken content last logged: logged once, not every tick
	var tick <-chan time.Time
	if cfg.Every > 0 {
		t := time.NewTicker(cfg.Every)
		defer t.Stop()
		tick = t.C
	}
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-cfg.Reload:
			forced = true
		case <-tick:
		}
		data, err := os.ReadFile(cfg.Path)
		sum := sha256.Sum256(data)
		if err == nil && !forced && (sum == l.Current().digest || sum == refused) {
			continue
		}
		set, err := parseRead(cfg.Path, data, err)
		if err != nil {
			refused = sum
			log.Error("policies not reloaded: keeping the ones in use", "err", err)
			continue
		}
		l.Replace(set)
		log.Info("policies reloaded", "file", cfg.Path, "count", set.Len(), "names", set.Names())
	}
}
