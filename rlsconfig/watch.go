package rlsconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/watch"
)

// WatchConfig configures a Watcher. Zero values are the documented
// defaults.
type WatchConfig struct {
	// Dir is the configuration directory, as for Load.
	Dir string
	// Logger receives a line per reload that changed the configuration and
	// per new failure. Nil means slog.Default().
	Logger *slog.Logger
	// OnReload, if set, is called after every reload attempt (the
	// directory's content changed, or Reload was called) with the
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
// when the directory's content changes (package watch: notifications, a
// poll where there are none, and a content digest), keeping the old one
// while a new one fails to load. It is safe for concurrent use: a request
// takes Current once and sees one configuration, old or new, never a mix.
type Watcher struct {
	cfg   WatchConfig
	log   *slog.Logger
	cur   atomic.Pointer[Config]
	watch *watch.Watcher
	// startedEmpty: the first load had no domain, so a reload to none
	// is what the operator set up, not a file emptied or truncated.
	startedEmpty bool
}

// ErrNoDomains is the reload refused because the directory holds no domain
// any more while the configuration in use has some: an emptied or
// truncated file would otherwise lift every limit at once. A Watcher that
// started with no domain accepts it.
var ErrNoDomains = errors.New("rlsconfig: the configuration holds no domain now; the one in use is kept")

// NewWatcher loads the directory once: a configuration that does not load
// is an error here, as at start-up nothing older can stand in for it.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("rlsconfig: no configuration directory")
	}
	cfg.Dir = filepath.Clean(cfg.Dir)
	w := &Watcher{cfg: cfg, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	c, err := Load(cfg.Dir)
	if err != nil {
		return nil, err
	}
	w.cur.Store(c)
	w.startedEmpty = len(c.domains) == 0
	for _, msg := range c.Warnings() {
		w.log.Warn("rls config: accepted but ignored", "detail", msg)
	}
	// No digest of the content in use: Run compares once its watches are
	// in place, so a change made between Load and Run is not missed.
	w.watch, err = watch.New(watch.Config{Path: cfg.Dir, Apply: w.apply, What: "rls config",
		Poll: cfg.Poll, Debounce: cfg.Debounce, Logger: w.log})
	return w, err
}

// Status is the directory's load record: when the configuration in use
// was loaded, and whether the directory holds one that failed to load.
func (w *Watcher) Status() watch.Status { return w.watch.Status() }

// Info is INFO's Rls section: the directory, its domains, and its loads
// (rls_config_*); a nil Watcher (no --rls-config) has no directory.
func (w *Watcher) Info() [][2]string {
	if w == nil {
		return [][2]string{{"rls_config_dir", ""}}
	}
	return append([][2]string{{"rls_config_dir", w.cfg.Dir}, {"rls_domains", strconv.Itoa(len(w.Current().Domains()))}},
		w.watch.Info("rls_config_")...)
}

// Current is the configuration in use.
func (w *Watcher) Current() *Config { return w.cur.Load() }

// Reload reads the directory now and, if it loads and differs from the
// configuration in use, makes it current. On failure the configuration in
// use stays, and the error is returned, logged and passed to OnReload.
func (w *Watcher) Reload() error { return w.watch.Reload() }

// Run watches the directory until ctx is done, then returns nil: its
// entries, which sees a file edited in place and a Kubernetes ConfigMap's
// atomic swap of its ..data symlink, and its parent, which sees the
// directory itself replaced by a symlink swap.
func (w *Watcher) Run(ctx context.Context) error { return w.watch.Run(ctx) }

// apply loads the directory and makes it current if it differs.
func (w *Watcher) apply() error {
	old := w.cur.Load()
	c, err := Load(w.cfg.Dir)
	if err == nil && len(c.domains) == 0 && len(old.domains) > 0 && !w.startedEmpty {
		err = fmt.Errorf("%w (%d domains: %s); restore the files, or restart Sluice to run without any", ErrNoDomains, len(old.domains), strings.Join(old.Domains(), ", "))
	}
	if err == nil && c.Digest() != old.Digest() {
		WarnRemoved(w.log, old, c)
		w.cur.Store(c)
		w.log.Info("rls config reloaded", "dir", w.cfg.Dir, "domains", c.Domains(), "files", len(c.Files()))
		for _, msg := range c.Warnings() {
			w.log.Warn("rls config: accepted but ignored", "detail", msg)
		}
	}
	if w.cfg.OnReload != nil {
		w.cfg.OnReload(w.cur.Load(), err)
	}
	return err
}
