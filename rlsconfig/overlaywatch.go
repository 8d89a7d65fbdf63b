package rlsconfig

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/watch"
)

// OverlayWatchConfig configures an OverlayWatcher. Zero values are the
// documented defaults.
type OverlayWatchConfig struct {
	// Path is the overlay file (a ConfigMap's key, mounted as a file).
	Path string
	// Base is the configuration the overlay is laid on, from files (a
	// Watcher's Current) or from xDS (a Client's Current). It is called
	// on every Current, and must be cheap: the overlaid configuration is
	// remade only when what it returns changes.
	Base func() *Config
	// Logger receives a line per reload and per refusal, and per rule of
	// the overlay that a new configuration leaves unmatched or refuses.
	// Nil means slog.Default().
	Logger *slog.Logger
	// Poll and Debounce are as for WatchConfig.
	Poll, Debounce time.Duration
}

// OverlayWatcher holds an overlay file and lays it on a configuration
// that changes by itself: it watches the file as the policies are watched
// (package watch), keeps the overlay in use while a new content fails to
// parse or cannot be laid on the configuration in use, and remakes the
// overlaid configuration whenever the overlay or the base changes. It is
// safe for concurrent use; a request takes Current once and sees one
// configuration.
type OverlayWatcher struct {
	cfg   OverlayWatchConfig
	log   *slog.Logger
	ov    atomic.Pointer[Overlay]
	cur   atomic.Pointer[laid]
	mu    sync.Mutex // serialises laying, so that a change is laid and logged once
	watch *watch.Watcher
}

// laid is an overlay laid on a base, and what that did.
type laid struct {
	base *Config
	ov   *Overlay
	out  *Config
	res  OverlayResult
}

// ErrOverlayRefused is an overlay that parses but cannot be laid on the
// configuration in use: a rule it selects would be invalid with its
// fields. The overlay in use is kept.
var ErrOverlayRefused = errors.New("rlsconfig: the overlay cannot be laid on the configuration in use")

// NewOverlayWatcher reads the overlay once and lays it on the base in
// use: an overlay that does not parse or cannot be laid is an error here,
// as at start-up nothing older can stand in for it.
func NewOverlayWatcher(cfg OverlayWatchConfig) (*OverlayWatcher, error) {
	if cfg.Path == "" || cfg.Base == nil {
		return nil, errors.New("rlsconfig: an overlay needs a file and a configuration to lay it on")
	}
	w := &OverlayWatcher{cfg: cfg, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	data, err := os.ReadFile(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("rlsconfig: overlay: %w", err)
	}
	o, err := ParseOverlay(cfg.Path, data)
	if err != nil {
		return nil, err
	}
	if err := w.use(o); err != nil {
		return nil, err
	}
	w.watch, err = watch.New(watch.Config{Path: cfg.Path, Apply: w.apply, Applied: sha256.Sum256(data),
		What: "rls overlay", Poll: cfg.Poll, Debounce: cfg.Debounce, Logger: w.log})
	return w, err
}

// Current is the base in use with the overlay in use laid on it.
func (w *OverlayWatcher) Current() *Config { return w.laid().out }

// Overlay is the overlay in use.
func (w *OverlayWatcher) Overlay() *Overlay { return w.ov.Load() }

// Result is what laying the overlay in use on the base in use did.
func (w *OverlayWatcher) Result() OverlayResult { return w.laid().res }

// laid is the overlay laid on the current base, made again when either
// changed since the last time.
func (w *OverlayWatcher) laid() *laid {
	base, o := w.cfg.Base(), w.ov.Load()
	if l := w.cur.Load(); l != nil && l.base == base && l.ov == o {
		return l
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.layLocked(base, o)
}

// layLocked lays o on base, unless that is done.
func (w *OverlayWatcher) layLocked(base *Config, o *Overlay) *laid {
	if l := w.cur.Load(); l != nil && l.base == base && l.ov == o {
		return l
	}
	out, res := base.WithOverlay(o)
	return w.store(&laid{base: base, ov: o, out: out, res: res})
}

// store makes l current, and says what it left unmatched or refused:
// once per change of the overlay or of the base.
func (w *OverlayWatcher) store(l *laid) *laid {
	w.cur.Store(l)
	for _, err := range l.res.Refused {
		w.log.Error("rls overlay: a rule keeps its configured algorithm", "err", err)
	}
	if len(l.res.Unmatched) > 0 {
		w.log.Warn("rls overlay: rules that select no rule of the configuration in use", "rules", l.res.Unmatched)
	}
	return l
}

// use lays o on the base in use and makes it the overlay in use, unless
// a rule of the base refuses it.
func (w *OverlayWatcher) use(o *Overlay) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	base := w.cfg.Base()
	out, res := base.WithOverlay(o)
	if len(res.Refused) > 0 {
		return fmt.Errorf("%w: %w", ErrOverlayRefused, errors.Join(res.Refused...))
	}
	w.ov.Store(o)
	w.store(&laid{base: base, ov: o, out: out, res: res})
	w.log.Info("rls overlay in use", "file", w.cfg.Path, "rules", o.Len(), "rules_changed", res.Rules)
	return nil
}

// apply reads the file and puts it in use if it differs.
func (w *OverlayWatcher) apply() error {
	o, err := LoadOverlay(w.cfg.Path)
	if err != nil {
		return err
	}
	if o.Digest() == w.ov.Load().Digest() {
		return nil
	}
	return w.use(o)
}

// Reload reads the file now (SIGHUP); on failure the overlay in use
// stays, and the error is returned and logged.
func (w *OverlayWatcher) Reload() error { return w.watch.Reload() }

// Run watches the file until ctx is done, then returns nil.
func (w *OverlayWatcher) Run(ctx context.Context) error { return w.watch.Run(ctx) }

// Status is the file's load record.
func (w *OverlayWatcher) Status() watch.Status { return w.watch.Status() }

// Info is INFO's fields for the overlay, named rls_overlay_*: its file,
// how many rules it has, how many rules of the configuration in use it
// changed, how many of its rules select none and how many rules refuse
// it, then the file's load record.
func (w *OverlayWatcher) Info() [][2]string {
	l := w.laid()
	return append([][2]string{{"rls_overlay_file", w.cfg.Path}, {"rls_overlay_rules", strconv.Itoa(l.ov.Len())},
		{"rls_overlay_rules_changed", strconv.Itoa(l.res.Rules)}, {"rls_overlay_unmatched", strconv.Itoa(len(l.res.Unmatched))},
		{"rls_overlay_refused", strconv.Itoa(len(l.res.Refused))}}, w.watch.Info("rls_overlay_")...)
}
