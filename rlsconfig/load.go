package rlsconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// Error is a problem in a configuration file, at a line. Msg is the peer's
// own text where the peer has one, so that a search for it finds its docs.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string { return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg }

// File is one configuration file: its name, used in errors, and contents.
type File struct {
	Name string
	Data []byte
}

// Config is a loaded set of domains. It is immutable and safe for
// concurrent use.
type Config struct {
	domains  map[string]*domain
	files    []string
	warnings []string
	digest   string
}

type domain struct {
	name string
	file string
	line int
	root *node
}

// node is one descriptor of the configuration, and the level of
// descriptors nested under it. Children are keyed as the peer keys them:
// the key alone, or key_value; wild lists the children whose composite
// key holds a '*', in file order.
type node struct {
	children map[string]*node
	wild     []wildcard
	rule     *rule
	// path is the peer's name for this descriptor: the domain and each
	// composite key on the way here, joined by dots.
	path          string
	share         bool
	pattern       string // the composite key, when share is set
	valueToMetric bool
}

type wildcard struct {
	key   string   // the composite key in children
	parts []string // key split at each '*'
}

// rule is a configured rate_limit.
type rule struct {
	limit           engine.Limit
	requestsPerUnit uint32
	unit            Unit
	unlimited       bool
	shadow          bool
	quota           bool
	detailed        bool
	name            string
	replaces        []string
	onFailure       engine.FailureMode
	takesNothing    bool // refusal_takes_nothing
	own             bool // names algorithm, period or burst: Sluice's keys always
	metadata        map[string]any
	file            string
	line            int
	source          string // file:line, made once: Lookup runs per request
}

// Domains lists the configured domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// HasDomain reports whether the domain is configured.
func (c *Config) HasDomain(name string) bool { return c != nil && c.domains[name] != nil }

// Files lists the files the configuration was loaded from, in load order.
func (c *Config) Files() []string { return append([]string(nil), c.files...) }

// Warnings lists what was accepted but means nothing, each with its file
// and line: a known key where it has no effect, a key given twice. The peer
// accepts these silently; Sluice loads them the same and says so.
func (c *Config) Warnings() []string { return append([]string(nil), c.warnings...) }

// Digest identifies the files' names and contents: two loads of the same
// files have the same digest.
func (c *Config) Digest() string { return c.digest }

// Load reads every *.yaml and *.yml file in dir (not in its
// subdirectories, and not those whose name starts with a dot, such as a
// Kubernetes ConfigMap's ..data), in name order. One domain per file; a
// domain in two files is an error. An empty directory gives a Config with
// no domains.
func Load(dir string) (*Config, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rlsconfig: %w", err)
	}
	var files []File
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		st, err := os.Stat(path) // follows a ConfigMap's symlinks
		if err != nil {
			return nil, fmt.Errorf("rlsconfig: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("rlsconfig: %w", err)
		}
		files = append(files, File{Name: path, Data: data})
	}
	return Parse(files...)
}

// Parse loads configuration files given as bytes, in order, with Load's
// rules.
func Parse(files ...File) (*Config, error) {
	c := &Config{domains: map[string]*domain{}}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
		root, warnings, err := decodeFile(f.Name, f.Data)
		if err != nil {
			return nil, err
		}
		if err := c.add(f.Name, root); err != nil {
			return nil, err
		}
		c.files = append(c.files, f.Name)
		c.warnings = append(c.warnings, warnings...)
	}
	c.digest = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

func (c *Config) add(file string, r *yRoot) error {
	line := max(r.domainLine, 1)
	if r.domain == "" {
		return &Error{File: file, Line: line, Msg: "config file cannot have empty domain"}
	}
	if prev := c.domains[r.domain]; prev != nil {
		return &Error{File: file, Line: line, Msg: fmt.Sprintf("duplicate domain '%s' in config file (first in %s:%d)", r.domain, prev.file, prev.line)}
	}
	d := &domain{name: r.domain, file: file, line: line, root: &node{children: map[string]*node{}, path: r.domain}}
	if err := d.root.load(file, r.domain+".", r.descriptors); err != nil {
		return err
	}
	c.domains[r.domain] = d
	return nil
}

// load adds a list of descriptors under n, checking them in the peer's
// order: the key, a duplicate, the rate limit, replaces, share_threshold.
func (n *node) load(file, parentPath string, ds []*yDescriptor) error {
	fail := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	for _, yd := range ds {
		if yd.key == "" {
			return fail(yd.line, "descriptor has empty key")
		}
		composite := yd.key
		if yd.value != "" {
			composite += "_" + yd.value
		}
		path := parentPath + composite
		if _, dup := n.children[composite]; dup {
			return fail(yd.line, "duplicate descriptor composite key '%s'", path)
		}
		var r *rule
		if yd.rateLimit != nil {
			var err error
			if r, err = newRule(file, yd); err != nil {
				return err
			}
		}
		wild := strings.Contains(composite, "*")
		if yd.share && !wild {
			return fail(yd.shareLine, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", composite)
		}
		child := &node{children: map[string]*node{}, rule: r, path: path, share: yd.share, valueToMetric: yd.valueToMetric}
		if yd.share {
			child.pattern = composite
		}
		if wild {
			n.wild = append(n.wild, wildcard{key: composite, parts: strings.Split(composite, "*")})
		}
		if err := child.load(file, path+".", yd.descriptors); err != nil {
			return err
		}
		n.children[composite] = child
	}
	return nil
}

// newRule checks a rate_limit block and builds its rule.
func newRule(file string, yd *yDescriptor) (*rule, error) {
	rl := yd.rateLimit
	fail := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: max(line, rl.line), Msg: fmt.Sprintf(format, args...)}
	}
	r := &rule{
		requestsPerUnit: rl.requestsPerUnit, unlimited: rl.unlimited, shadow: yd.shadow, quota: yd.quota,
		detailed: yd.detailed, name: rl.name, metadata: yd.metadata, file: file, line: rl.line,
		source: file + ":" + strconv.Itoa(rl.line),
	}
	unit, validUnit := ParseUnit(rl.unit)
	if rl.unlimited {
		if validUnit {
			return nil, fail(rl.unitLine, "should not specify rate limit unit when unlimited")
		}
		for _, f := range []struct {
			name string
			line int
		}{{"period", rl.periodLine}, {"algorithm", rl.algorithmLine}, {"burst", rl.burstLine}} {
			if f.line != 0 {
				return nil, fail(f.line, "should not specify rate limit %s when unlimited", f.name)
			}
		}
	} else {
		switch {
		case rl.periodLine != 0 && rl.unitLine != 0:
			return nil, fail(rl.periodLine, "give unit or Sluice's period, not both")
		case rl.periodLine != 0:
			d, why := engine.ParsePeriod(rl.period)
			if why != "" {
				return nil, fail(rl.periodLine, "invalid period '%s': %s", rl.period, why)
			}
			r.limit.Period = d
			unit = unitCovering(d)
		case !validUnit:
			return nil, fail(rl.unitLine, "invalid rate limit unit '%s'", rl.unit)
		default:
			r.limit.Period = unit.Duration()
		}
		r.unit = unit
	}
	r.replaces = make([]string, 0, len(rl.replaces))
	for _, rep := range rl.replaces {
		if rep.name == "" {
			return nil, fail(rep.line, "should not have an empty replaces entry")
		}
		if rep.name == rl.name {
			return nil, fail(rep.line, "replaces should not contain name of same descriptor")
		}
		r.replaces = append(r.replaces, rep.name)
	}
	r.limit.Algorithm = engine.FixedWindow
	if rl.algorithmLine != 0 {
		a, err := engine.ParseAlgorithm(rl.algorithm)
		if err != nil {
			return nil, fail(rl.algorithmLine, "%v", err)
		}
		r.limit.Algorithm = a
	}
	if rl.onFailureLine != 0 {
		m, err := engine.ParseFailureMode(rl.onFailure)
		if err != nil {
			return nil, fail(rl.onFailureLine, "%v", err)
		}
		r.onFailure = m
	}
	r.takesNothing = rl.refusalTakesNothing
	r.own = rl.algorithmLine != 0 || rl.periodLine != 0 || rl.burstLine != 0
	if r.unlimited {
		r.limit = engine.Limit{}
		return r, nil
	}
	r.limit.Rate = int64(rl.requestsPerUnit)
	r.limit.Burst = defaultBurst(r.limit)
	if rl.burstLine != 0 {
		r.limit.Burst = rl.burst
	}
	if r.limit.Rate == 0 {
		// 0 refuses everything; the store is never asked, so the other
		// parameters are not checked against it.
		return r, nil
	}
	if err := r.limit.Validate(); err != nil {
		line := rl.line
		var pe *engine.ParamError
		if errors.As(err, &pe) {
			switch pe.Param {
			case "burst", "capacity":
				line = max(rl.burstLine, rl.line)
			case "period":
				line = max(rl.periodLine, rl.unitLine, rl.line)
			case "limit", "rate":
				line = rl.line
			}
		}
		return nil, fail(line, "%v", err)
	}
	return r, nil
}

// defaultBurst is the burst of a rule that names none: a bucket as deep as
// one unit's requests, and GCRA admitting as many at once (Burst+1); the
// window algorithms take none.
func defaultBurst(l engine.Limit) int64 {
	switch {
	case l.Algorithm == engine.TokenBucket || l.Algorithm == engine.LeakyBucket:
		return l.Rate
	case l.Algorithm == engine.GCRA && l.Rate > 0:
		return l.Rate - 1
	}
	return 0
}

// yamlError turns the YAML library's "yaml: line N: …" into file:N: ….
func yamlError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ":"); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return &Error{File: file, Line: line, Msg: "error loading config file: " + msg}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// appendPeriod writes a period compactly to b, for a state key: whole
// seconds as "60s", anything finer in Go's notation. It makes no string of
// its own for the common whole seconds: it runs once per request.
func appendPeriod(b *strings.Builder, d time.Duration) {
	if d%time.Second != 0 {
		b.WriteString(d.String())
		return
	}
	var buf [20]byte
	b.Write(strconv.AppendInt(buf[:0], int64(d/time.Second), 10))
	b.WriteByte('s')
}
