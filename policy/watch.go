package policy

import (
	"log/slog"
	"time"

	"github.com/sluice-rl/sluice/internal/watch"
)

// WatchConfig configures Watcher. Zero values mean the documented defaults.
type WatchConfig struct {
	// Path is the policies file.
	Path string
	// Poll, if positive, also compares the file this often, where the file
	// system sends no notifications. Zero: notifications and Reload only.
	Poll time.Duration
	// Debounce is how long to wait after a notification before reading,
	// so that a file written in steps is read whole. Zero means 100ms.
	Debounce time.Duration
	// Logger is told of every reload and every file that does not parse.
	// Nil means slog.Default().
	Logger *slog.Logger
	// OnReload, if set, is called after a reload put new policies in use
	// (not at start, nor for a file that does not parse): the sidecar
	// drops the grants taken under the old ones.
	OnReload func()
}

// Watcher keeps l in step with cfg.Path: its Run reloads the file whenever
// its content differs from the content the policies in use were parsed
// from (so a change made before Run starts is seen too), its Reload
// whatever the file holds (SIGHUP). Content, not size and modification
// time: a replacement with the same size and time (touch -r, then mv) is
// still noticed, and a Kubernetes ConfigMap update, which swaps a symlink
// in the file's directory, is read through the link. A file that no
// longer parses is logged and the policies in use are kept: a typo must
// not take limits away. Package watch is the shape it shares with the rate
// limit service's configuration.
func (l *Live) Watcher(cfg WatchConfig) (*watch.Watcher, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return watch.New(watch.Config{
		Path: cfg.Path, What: "policies", Poll: cfg.Poll, Debounce: cfg.Debounce, Logger: log,
		Applied: l.Current().digest,
		Apply: func() error {
			set, err := Load(cfg.Path)
			if err != nil {
				return err
			}
			l.Replace(set)
			log.Info("policies reloaded", "file", cfg.Path, "count", set.Len(), "names", set.LogNames())
			if cfg.OnReload != nil {
				cfg.OnReload()
			}
			return nil
		},
	})
}
