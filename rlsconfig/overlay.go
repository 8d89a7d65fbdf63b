package rlsconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/limityaml"
)

// An overlay gives rules of the rate limit service's configuration
// Sluice's algorithms and periods from a file of its own, for the
// configurations that cannot say them: Envoy Gateway's and Envoy AI
// Gateway's RateLimitConfig over xDS has a unit and a number of requests
// and nothing else, so every rule a gateway makes would be a fixed window
// of one unit. The gateway keeps owning the rules and their numbers; the
// overlay says how each is counted.
//
//	rules:
//	  - domain: ai-gateway-quota      # every rule of the domain
//	    algorithm: sliding_window
//	  - domain: default/eg/http       # the rule at this descriptor path
//	    descriptors:
//	      - key: httproute/default/api/rule/0/match/0/api_example_com
//	        value: httproute/default/api/rule/0/match/0/api_example_com
//	      - key: rule-0-match-0
//	        value: rule-0-match-0
//	    algorithm: gcra
//	    burst: 20
//	  - domain: shop                  # every rule whose rate_limit name is checkout
//	    name: checkout
//	    period: 10s
//
// A rule of the overlay selects rules of one domain by their descriptor
// path (each level's key, and value where the configuration gives one),
// by their rate_limit name, or, with neither, all of them; a rule of the
// configuration takes the overlay's rule that selects it by path, else by
// name, else the domain's. It may give the algorithm, the period (which,
// as in a file's rate_limit, replaces the unit: requests_per_unit is then
// per period), burst or capacity, precision, on_failure and
// refusal_takes_nothing. The limit's fields are read and checked as the
// policies file reads them (package limityaml); the rate stays the
// configuration's own.

// Overlay is a parsed overlay file. It is immutable and safe for
// concurrent use.
type Overlay struct {
	file   string
	rules  []*overlayRule
	digest string
}

// overlayRule is one entry of an overlay's rules.
type overlayRule struct {
	where  string // rules[i], for errors
	file   string
	source string // file:line
	key    *yaml.Node
	domain string
	path   []Entry // by descriptor path; nil otherwise
	name   string  // by rate_limit name; "" otherwise
	// fields are the limit's fields given, and limit what they say,
	// read onto a zero limit: laid on a rule, they meet its rate.
	fields       map[string]*yaml.Node
	limit        engine.Limit
	onFailure    engine.FailureMode
	takesNothing *bool
}

// overlayFields are the fields of an overlay's rule.
var overlayFields = []string{"domain", "descriptors", "name", "algorithm", "period", "burst", "capacity", "precision", "on_failure", "refusal_takes_nothing"}

// maxOverlayBytes bounds an overlay file, as maxFileBytes bounds the
// configuration's.
const maxOverlayBytes = 16 << 20

// File is the overlay's file name, as given to ParseOverlay.
func (o *Overlay) File() string { return o.file }

// Len is the number of the overlay's rules.
func (o *Overlay) Len() int { return len(o.rules) }

// Digest identifies the overlay's content.
func (o *Overlay) Digest() string { return o.digest }

// LoadOverlay reads and parses the overlay file at path.
func LoadOverlay(path string) (*Overlay, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rlsconfig: overlay: %w", err)
	}
	return ParseOverlay(path, data)
}

// ParseOverlay parses an overlay's content; file names it in errors, each
// an *Error at a line. Unknown fields are refused, as the policies file
// refuses them: a misspelt "burts" must not mean "no burst".
func ParseOverlay(file string, data []byte) (*Overlay, error) {
	fail := func(line int, format string, args ...any) error {
		return &Error{File: file, Line: max(line, 1), Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) > maxOverlayBytes {
		return nil, fail(1, "the overlay has %d bytes: at most %d are read", len(data), maxOverlayBytes)
	}
	sum := sha256.Sum256(data)
	o := &Overlay{file: file, digest: hex.EncodeToString(sum[:])}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		e := yamlError(file, err).(*Error)
		e.Msg = strings.TrimPrefix(e.Msg, "error loading config file: ")
		return nil, e
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fail(1, "empty overlay: expected a top-level key \"rules\"")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fail(root.Line, "expected a mapping with the key \"rules\"")
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value != "rules" {
			return nil, fail(k.Line, "unknown key %q: expected \"rules\"", k.Value)
		}
		if list != nil {
			return nil, fail(k.Line, "key \"rules\" given twice: the second would silently replace the first")
		}
		list = v
	}
	if list == nil {
		return nil, fail(root.Line, "missing the key \"rules\"")
	}
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		return o, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fail(list.Line, "\"rules\" must be a list of rules, each with a domain")
	}
	seen := map[string]string{} // what a rule selects → where
	for i, item := range list.Content {
		r, err := parseOverlayRule(file, fmt.Sprintf("rules[%d]", i), item)
		if err != nil {
			return nil, err
		}
		sel := r.selects()
		if prev, dup := seen[sel]; dup {
			return nil, fail(item.Line, "%s: selects what %s selects (%s): give each rule's fields once", r.where, prev, r.describe())
		}
		seen[sel] = r.where
		o.rules = append(o.rules, r)
	}
	return o, nil
}

func parseOverlayRule(file, where string, item *yaml.Node) (*overlayRule, error) {
	fail := func(line int, field, msg string) error {
		if field != "" {
			where += "." + field
		}
		return &Error{File: file, Line: max(line, 1), Msg: where + ": " + msg}
	}
	r := &overlayRule{where: where, file: file, source: file + ":" + strconv.Itoa(item.Line), key: item, fields: map[string]*yaml.Node{}}
	if item.Kind != yaml.MappingNode {
		return nil, fail(item.Line, "", "expected a mapping of fields ("+strings.Join(overlayFields, ", ")+")")
	}
	given := map[string]*yaml.Node{}
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		f := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			return nil, fail(k.Line, "", "a field's name must be a plain word")
		case f == "rate" || f == "limit" || f == "requests_per_unit" || f == "unit":
			return nil, fail(k.Line, f, "the rule's rate is the configuration's own (requests_per_unit, a gateway's requests): "+
				"an overlay changes how it is counted, with period replacing the unit")
		case !slices.Contains(overlayFields, f):
			return nil, fail(k.Line, f, "unknown field: expected one of "+strings.Join(overlayFields, ", "))
		case given[f] != nil:
			return nil, fail(k.Line, f, "given twice")
		case f != "descriptors" && v.Kind != yaml.ScalarNode:
			return nil, fail(v.Line, f, "expected a single value")
		}
		given[f] = v
	}
	d := given["domain"]
	if d == nil || d.Value == "" {
		return nil, fail(item.Line, "domain", "missing: the domain whose rules this one gives")
	}
	r.domain = d.Value
	if n := given["name"]; n != nil {
		if n.Value == "" {
			return nil, fail(n.Line, "name", "empty: give a rate_limit name, or leave name out")
		}
		if given["descriptors"] != nil {
			return nil, fail(n.Line, "name", "give descriptors or name, not both: each selects rules alone")
		}
		r.name = n.Value
	}
	if ds := given["descriptors"]; ds != nil {
		path, err := parseOverlayPath(ds, fail)
		if err != nil {
			return nil, err
		}
		r.path = path
	}
	changes := false
	for _, f := range limityaml.Names {
		if v := given[f]; v != nil {
			r.fields[f] = v
			changes = true
		}
	}
	var err error
	if r.limit, err = limityaml.Read(item, r.fields, engine.Limit{}, limityaml.Options{}, fail); err != nil {
		return nil, err
	}
	if v := given["on_failure"]; v != nil {
		m, err := engine.ParseFailureMode(v.Value)
		if err != nil {
			return nil, fail(v.Line, "on_failure", fmt.Sprintf("%q must be allow, deny or local", v.Value))
		}
		r.onFailure, changes = m, true
	}
	if v := given["refusal_takes_nothing"]; v != nil {
		b, err := strconv.ParseBool(v.Value)
		if err != nil || v.Tag != "!!bool" {
			return nil, fail(v.Line, "refusal_takes_nothing", fmt.Sprintf("%q must be true or false", v.Value))
		}
		r.takesNothing, changes = &b, true
	}
	if !changes {
		return nil, fail(item.Line, "", "gives nothing to change: give algorithm, period, burst, precision, on_failure or refusal_takes_nothing")
	}
	return r, nil
}

// parseOverlayPath reads a descriptor path: a list of mappings of key and
// value, from the domain's first level down.
func parseOverlayPath(ds *yaml.Node, fail limityaml.Fail) ([]Entry, error) {
	if ds.Kind != yaml.SequenceNode || len(ds.Content) == 0 {
		return nil, fail(ds.Line, "descriptors", "expected a list of key and value, one per level, from the domain down")
	}
	path := make([]Entry, 0, len(ds.Content))
	for j, e := range ds.Content {
		at := fmt.Sprintf("descriptors[%d]", j)
		if e.Kind != yaml.MappingNode {
			return nil, fail(e.Line, at, "expected a mapping of key and value")
		}
		var en Entry
		got := map[string]bool{}
		for i := 0; i+1 < len(e.Content); i += 2 {
			k, v := e.Content[i], e.Content[i+1]
			switch {
			case k.Value != "key" && k.Value != "value":
				return nil, fail(k.Line, at+"."+k.Value, "unknown field: expected key or value")
			case got[k.Value]:
				return nil, fail(k.Line, at+"."+k.Value, "given twice")
			case v.Kind != yaml.ScalarNode:
				return nil, fail(v.Line, at+"."+k.Value, "expected a single value")
			}
			got[k.Value] = true
			if k.Value == "key" {
				en.Key = v.Value
			} else {
				en.Value = v.Value
			}
		}
		if en.Key == "" {
			return nil, fail(e.Line, at+".key", "missing: each level names its key")
		}
		path = append(path, en)
	}
	return path, nil
}

// selects is what the rule selects, as a comparable string.
func (r *overlayRule) selects() string {
	var b strings.Builder
	b.WriteString(strconv.Quote(r.domain))
	switch {
	case r.path != nil:
		for _, e := range r.path {
			b.WriteString("|" + strconv.Quote(e.Key) + "=" + strconv.Quote(e.Value))
		}
	case r.name != "":
		b.WriteString("#" + strconv.Quote(r.name))
	}
	return b.String()
}

// describe says what the rule selects, for messages.
func (r *overlayRule) describe() string {
	switch {
	case r.path != nil:
		parts := make([]string, len(r.path))
		for i, e := range r.path {
			parts[i] = e.Key
			if e.Value != "" {
				parts[i] += "_" + e.Value
			}
		}
		return "the rule " + r.domain + "." + strings.Join(parts, ".")
	case r.name != "":
		return fmt.Sprintf("the rules named %q in domain %s", r.name, r.domain)
	}
	return "every rule of domain " + r.domain
}

// OverlayResult is what laying an overlay on a configuration did.
type OverlayResult struct {
	// Rules counts the configuration's rules the overlay changed.
	Rules int
	// Unmatched lists the overlay's rules that selected no rule of the
	// configuration, each as file:line and what it selects: a domain or
	// path the gateway has not made (yet), or a typo.
	Unmatched []string
	// Refused lists, as *Error at the overlay's line, each rule the
	// overlay could not be laid on (a burst on a sliding window, a period
	// too short for the rule's rate): that rule stays as configured.
	Refused []error
}

// WithOverlay is c with the overlay laid on it: a new Config, c unchanged.
// Only the domains the overlay names are copied; a rule it selects
// becomes the rule with the overlay's fields, counted in Sluice's keys
// (Rule.Own), named in Source with the overlay's line. Nil o is c.
func (c *Config) WithOverlay(o *Overlay) (*Config, OverlayResult) {
	var res OverlayResult
	if c == nil || o == nil || len(o.rules) == 0 {
		return c, res
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s", c.digest, o.digest)
	out := &Config{domains: maps.Clone(c.domains), files: c.files, warnings: c.warnings, digest: hex.EncodeToString(h.Sum(nil))}
	matched := make(map[*overlayRule]bool, len(o.rules))
	byDomain := map[string][]*overlayRule{}
	for _, r := range o.rules {
		byDomain[r.domain] = append(byDomain[r.domain], r)
	}
	for name, rs := range byDomain {
		d := c.domains[name]
		if d == nil {
			continue
		}
		l := &layer{paths: map[*node]*overlayRule{}, names: map[string]*overlayRule{}, matched: matched, res: &res}
		for _, r := range rs {
			switch {
			case r.path != nil:
				if n := d.root.at(r.path); n != nil && n.rule != nil {
					l.paths[n] = r
				}
			case r.name != "":
				l.names[r.name] = r
			default:
				l.whole = r
			}
		}
		nd := *d
		nd.root = l.copy(d.root)
		out.domains[name] = &nd
	}
	for _, r := range o.rules {
		if !matched[r] {
			res.Unmatched = append(res.Unmatched, r.source+": "+r.describe())
		}
	}
	return out, res
}

// layer lays one domain's overlay rules on its tree.
type layer struct {
	paths   map[*node]*overlayRule
	names   map[string]*overlayRule
	whole   *overlayRule
	matched map[*overlayRule]bool
	res     *OverlayResult
}

// copy copies the tree under n, each rule the overlay selects replaced.
func (l *layer) copy(n *node) *node {
	c := *n
	c.children = make(map[string]*node, len(n.children))
	for k, ch := range n.children {
		c.children[k] = l.copy(ch)
	}
	if n.rule == nil {
		return &c
	}
	r := l.paths[n]
	if r == nil && n.rule.name != "" {
		r = l.names[n.rule.name]
	}
	if r == nil {
		r = l.whole
		if r != nil && n.rule.unlimited {
			l.matched[r] = true // nothing is counted: the domain's rule leaves it be
			return &c
		}
	}
	if r == nil {
		return &c
	}
	l.matched[r] = true
	nr, err := r.layOn(n)
	if err != nil {
		l.res.Refused = append(l.res.Refused, err)
		return &c
	}
	c.rule = nr
	l.res.Rules++
	return &c
}

// at is the node at a descriptor path under n, or nil.
func (n *node) at(path []Entry) *node {
	for _, e := range path {
		composite := e.Key
		if e.Value != "" {
			composite += "_" + e.Value
		}
		if n = n.children[composite]; n == nil {
			return nil
		}
	}
	return n
}

// layOn is the rule of n with r's fields: the algorithm, period, burst and
// precision given replace the rule's, a new algorithm without a burst
// takes the burst a file's rate_limit would give it, and the whole is
// checked as a policy's limit is.
func (r *overlayRule) layOn(n *node) (*rule, error) {
	old := n.rule
	fail := func(line int, field, msg string) error {
		where := r.where
		if field != "" {
			where += "." + field
		}
		return &Error{File: r.file, Line: max(line, 1),
			Msg: fmt.Sprintf("%s: on rule %s (%s): %s", where, n.path, old.source, msg)}
	}
	if old.unlimited {
		return nil, fail(r.key.Line, "", "the rule is unlimited: nothing is counted to give an algorithm to")
	}
	nr := *old
	l := old.limit
	if r.fields["algorithm"] != nil && r.limit.Algorithm != l.Algorithm {
		l.Algorithm = r.limit.Algorithm
		l.Burst, l.Precision = defaultBurst(l), 0
	}
	if r.fields["period"] != nil {
		l.Period = r.limit.Period
		nr.unit = unitCovering(l.Period)
	}
	if r.fields["burst"] != nil || r.fields["capacity"] != nil {
		l.Burst = r.limit.Burst
	}
	if r.fields["precision"] != nil {
		l.Precision = r.limit.Precision
	}
	if r.onFailure != engine.FailDefault {
		nr.onFailure = r.onFailure
	}
	if r.takesNothing != nil {
		nr.takesNothing = *r.takesNothing
	}
	nr.limit, nr.own = l, true
	nr.source = old.source + " with " + r.source
	if l.Rate == 0 {
		return &nr, nil // refuses everything without asking the store, as a file's rule of 0
	}
	o := limityaml.Options{Absent: func(pe *engine.ParamError) string {
		return fmt.Sprintf("the rule's %s %s %s", pe.Param, pe.Value, pe.Reason)
	}}
	if err := limityaml.Check(r.key, r.fields, l, o, fail); err != nil {
		return nil, err
	}
	return &nr, nil
}
