package rlsconfig

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchConfig configures a Watcher. Zero values are the documented
// defaults.
type WatchConfig struct {
	// Dir is the configuration directory, as for Load.
	Dir string
	// Logger receives a line per reload that changed the configuration and
	// per new failure. Nil means slog.Default().
	Logger *slog.Logger
	// OnReload, if set, is called after every reload attempt with the
	// configuration now in use (the old one when the attempt failed or
	// nothing changed) and the attempt's error. It is called from Run's
	// goroutine, or from Reload's caller.
	OnReload func(cur *Config, err error)
	// Debounce is how long Run waits after the last change in the
	// directory before it reads it, so that a file written in several steps
	// is read once, whole. Zero means 100ms.
	Debounce time.Duration
	// Poll, if positive, also re-reads the directory that often, for file
	// systems that report no changes (NFS, some FUSE mounts). Run polls
	// every 2s by itself when the system's file notification is not
	// available. Zero means no polling.
	Poll time.Duration
}

// Watcher holds the current configuration of a directory and replaces it
// when the directory changes, keeping the old one while a new one fails to
// load. It is safe for concurrent use: a request takes Current once and
// sees one configuration, old or new, never a mix.
type Watcher struct {
	cfg WatchConfig
	log *slog.Logger
	cur atomic.Pointer[Config]

	mu      sync.Mutex // serialises reloads
	lastErr string     // guarded by mu: the last failure logged, so a failure repeated by polling is logged once
}

// NewWatcher loads the directory once: a configuration that does not load
// is an error here, as at start-up nothing older can stand in for it.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("rlsconfig: no configuration directory")
	}
	cfg.Dir = filepath.Clean(cfg.Dir)
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	w := &Watcher{cfg: cfg, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	c, err := Load(cfg.Dir)
	if err != nil {
		return nil, err
	}
	w.cur.Store(c)
	for _, msg := range c.Warnings() {
		w.log.Warn("rls config: accepted but ignored", "detail", msg)
	}
	return w, nil
}

// Current is the configuration in use.
func (w *Watcher) Current() *Config { return w.cur.Load() }

// Reload reads the directory now and, if it loads and differs from the
// configuration in use, makes it current. On failure the configuration in
// use stays, and the error is returned, logged and passed to OnReload.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.cur.Load()
	c, err := Load(w.cfg.Dir)
	switch {
	case err != nil:
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			w.log.Error("rls config reload failed; keeping the configuration in use", "dir", w.cfg.Dir, "err", err)
		}
	case c.Digest() != old.Digest():
		w.lastErr = ""
		w.cur.Store(c)
		w.log.Info("rls config reloaded", "dir", w.cfg.Dir, "domains", c.Domains(), "files", len(c.Files()))
		for _, msg := range c.Warnings() {
			w.log.Warn("rls config: accepted but ignored", "detail", msg)
		}
	default:
		w.lastErr = ""
	}
	if w.cfg.OnReload != nil {
		w.cfg.OnReload(w.cur.Load(), err)
	}
	return err
}

// Run watches the directory until ctx is done, then returns nil. It
// watches the directory's entries, which sees a file edited in place and a
// Kubernetes ConfigMap's atomic swap of its ..data symlink, and the
// directory's parent, which sees the directory itself replaced by a
// symlink swap. Once the watches are in place it reloads, so a change made
// between NewWatcher and Run is not missed.
func (w *Watcher) Run(ctx context.Context) error {
	dir := w.cfg.Dir
	poll := w.cfg.Poll
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		defer fw.Close()
		err = fw.Add(dir)
	}
	if err != nil {
		w.log.Warn("rls config: cannot watch the directory; polling it instead", "dir", dir, "err", err)
		if poll <= 0 {
			poll = 2 * time.Second
		}
	} else {
		// Best effort: without it only the directory's own symlink swap
		// goes unseen.
		_ = fw.Add(filepath.Dir(dir))
		events, errs = fw.Events, fw.Errors
	}
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()

	_ = w.Reload()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch {
			case ev.Name == dir:
				// The directory itself was replaced: watch what it is now.
				_ = fw.Remove(dir)
				if err := fw.Add(dir); err != nil {
					w.log.Warn("rls config: cannot watch the directory", "dir", dir, "err", err)
				}
			case filepath.Dir(ev.Name) != dir:
				continue // a sibling of the directory
			}
			debounce.Reset(w.cfg.Debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Typically an overflowed event queue: read the directory anew.
			w.log.Warn("rls config: watch error", "dir", dir, "err", err)
			debounce.Reset(w.cfg.Debounce)
		case <-debounce.C:
			_ = w.Reload()
		case <-tick:
			_ = w.Reload()
		}
	}
}
