// Package policy loads named rate-limit policies from a YAML file, so that
// limits are defined once, in one place, and clients ask for them by name
// (RL.ALLOW policy key). Periods are read by engine.ParsePeriod, as the
// commands read them.
//
// A bad file must stop start-up with an error that points at the fix, so
// every error names the file, the line, the policy and the field, and
// unknown fields are refused rather than ignored: a misspelt "burts" must
// not silently mean "no burst".
package policy

import (
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/limityaml"
)

// Set is an immutable set of policies, safe for concurrent use.
type Set struct {
	byName map[string]engine.Policy
	digest [sha256.Size]byte // of the file it was parsed from: what Watch compares
}

var _ engine.Policies = (*Set)(nil)

// Lookup implements engine.Policies.
func (s *Set) Lookup(name string) (engine.Policy, bool) {
	if s == nil {
		return engine.Policy{}, false
	}
	p, ok := s.byName[name]
	return p, ok
}

// Names lists the policies, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// logNames is how many names a log line lists: the start-up line of a
// file of 20,000 policies was one 150 KB line.
const logNames = 10

// LogNames lists the first policies, sorted, for a log line beside Len:
// all of them when they are few, else the first few and a last item
// saying how many more there are.
func (s *Set) LogNames() []string {
	names := s.Names()
	if len(names) <= logNames {
		return names
	}
	return append(names[:logNames:logNames], fmt.Sprintf("… %d more", len(names)-logNames))
}

// Len is the number of policies.
func (s *Set) Len() int { return len(s.byName) }

// Load reads and parses the policies file at path.
func Load(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	return parseRead(path, data, err)
}

// parseRead parses data read from path, or reports the error reading it
// met.
func parseRead(path string, data []byte, readErr error) (*Set, error) {
	if readErr != nil {
		return nil, fmt.Errorf("policies: %w", readErr)
	}
	return Parse(path, data)
}

// Error is a problem in a policies file, at a line.
type Error struct {
	File   string
	Line   int
	Policy string // empty for problems outside a policy
	Field  string // empty for problems with the policy as a whole
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	if e.Policy != "" {
		fmt.Fprintf(&b, "policy %q: ", e.Policy)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %s: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// fields a policy may have. rate and limit are one field under two names
// (limit reads better for the window algorithms), as are burst and
// capacity (capacity reads better for the buckets).
var fields = []string{"algorithm", "rate", "limit", "period", "burst", "capacity", "precision", "prefix", "on_failure", "shadow", "durable", "lease_ttl", "limits"}

// limitFields are the fields of a limit, at the top of a policy or as one
// of its limits.
var limitFields = limityaml.Names

// Parse parses a policies file's contents; file names it in errors.
//
//	policies:
//	  api:
//	    algorithm: gcra      # or sliding_window, sliding, token_bucket, token, …
//	    rate: 100            # or limit
//	    period: 1m           # 500ms, 1s, 1m, 1h, 1d, 1h30m
//	    burst: 20            # or capacity
//	    precision: 10        # sliding_window only: sub-windows per period; default 1
//	    prefix: "api:"       # default: the name and a colon
//	    on_failure: local    # allow, deny or local; default: the sidecar's
//	    shadow: true         # decide and count, but always allow; default false
//	    durable: true        # answer once a replica holds the charge (or disk); default false
//	  search:
//	    limits:              # several limits, all of which must admit (multi.go)
//	      - name: burst
//	        algorithm: gcra
//	        rate: 10
//	        period: 1s
//	        burst: 5
//	      - name: daily
//	        algorithm: fixed_window
//	        limit: 1000
//	        period: 1d
//	  uploads:
//	    algorithm: concurrency # at most limit leases held at once (concurrency.go)
//	    limit: 10
//	    lease_ttl: 30s
func Parse(file string, data []byte) (*Set, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(file, err)
	}
	set := &Set{byName: map[string]engine.Policy{}, digest: sha256.Sum256(data)}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &Error{File: file, Line: 1, Msg: "empty file: expected a top-level key \"policies\""}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Msg: "expected a mapping with the key \"policies\""}
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "policies" {
			return nil, &Error{File: file, Line: k.Line, Msg: fmt.Sprintf("unknown key %q: expected \"policies\"", k.Value)}
		}
		if list != nil { // YAML's decoder into a Node keeps both; the last would win
			return nil, &Error{File: file, Line: k.Line, Msg: "key \"policies\" given twice: the second would silently replace the first"}
		}
		list = v
	}
	if list == nil {
		return nil, &Error{File: file, Line: root.Line, Msg: "missing the key \"policies\""}
	}
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		return set, nil
	}
	if list.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: list.Line, Msg: "\"policies\" must map policy names to policies"}
	}
	// A prefix is where a policy's state lives: a policy's state key is its
	// prefix followed by the client's key, so two policies meet whenever one
	// prefix starts with the other ("t:" and "t:u:" both address t:u:9, as
	// key u:9 of the one and 9 of the other). An empty prefix would meet the
	// inline commands' keys.
	var claims []prefixOwner
	for i := 0; i+1 < len(list.Content); i += 2 {
		k, v := list.Content[i], list.Content[i+1]
		name := k.Value
		if !validName(name) {
			return nil, &Error{File: file, Line: k.Line, Policy: name,
				Msg: "a name must be 1 to 128 letters, digits or _ - . :"}
		}
		if _, dup := set.byName[name]; dup {
			return nil, &Error{File: file, Line: k.Line, Policy: name, Msg: "defined twice"}
		}
		p, err := parsePolicy(file, name, k, v)
		if err != nil {
			return nil, err
		}
		line := fieldLine(v, "prefix", k.Line)
		if p.Prefix == "" {
			return nil, &Error{File: file, Line: line, Policy: name, Field: "prefix",
				Msg: "must not be empty: the policy's keys would be the keys of inline commands (RL.GCRA key …)"}
		}
		claims = append(claims, prefixOwner{name: name, prefix: p.Prefix, line: line, order: len(claims)})
		set.byName[name] = p
	}
	if err := prefixesApart(file, claims); err != nil {
		return nil, err
	}
	return set, nil
}

// prefixOwner is the policy that claimed a prefix, and the line that gave
// it (the policy's own line when the prefix is its default).
type prefixOwner struct {
	name, prefix string
	line, order  int // order: its place in the file
}

// prefixesApart refuses two policies whose prefixes could produce the same
// state key: one prefix starting with the other. Sorted, a prefix that
// starts another also starts everything sorted between them, so comparing
// neighbours finds every meeting in O(n log n), which matters at tens of
// thousands of policies. Of the meetings found, the one blamed is the one
// whose later policy comes first in the file, as a reader would meet it.
func prefixesApart(file string, claims []prefixOwner) error {
	sorted := slices.Clone(claims)
	slices.SortFunc(sorted, func(a, b prefixOwner) int { return strings.Compare(a.prefix, b.prefix) })
	var blamed, other *prefixOwner
	for i := 0; i+1 < len(sorted); i++ {
		a, b := &sorted[i], &sorted[i+1]
		if !strings.HasPrefix(b.prefix, a.prefix) {
			continue
		}
		late, early := b, a
		if a.order > b.order {
			late, early = a, b
		}
		if blamed == nil || late.order < blamed.order {
			blamed, other = late, early
		}
	}
	if blamed == nil {
		return nil
	}
	msg := fmt.Sprintf("%q is also the prefix of policy %q (line %d): the two would share state", blamed.prefix, other.name, other.line)
	if blamed.prefix != other.prefix {
		short, long := other, blamed
		if len(short.prefix) > len(long.prefix) {
			short, long = long, short
		}
		rest := long.prefix[len(short.prefix):]
		msg = fmt.Sprintf("%q and %q, the prefix of policy %q (line %d), could address the same state: key %q of policy %q is key \"x\" of policy %q (%s); give one a prefix that does not start the other",
			blamed.prefix, other.prefix, other.name, other.line, rest+"x", short.name, long.name, long.prefix+"x")
	}
	return &Error{File: file, Line: blamed.line, Policy: blamed.name, Field: "prefix", Msg: msg}
}

// fieldLine is the line of field in the mapping node, or def when the
// field is not there.
func fieldLine(node *yaml.Node, field string, def int) int {
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == field {
			return node.Content[i+1].Line
		}
	}
	return def
}

func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		ok := r == '_' || r == '-' || r == '.' || r == ':' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}

func parsePolicy(file, name string, key, node *yaml.Node) (engine.Policy, error) {
	fail := func(line int, field, msg string) error {
		return &Error{File: file, Line: line, Policy: name, Field: field, Msg: msg}
	}
	p := engine.Policy{Name: name, Prefix: name + ":"}
	if node.Kind != yaml.MappingNode {
		return p, fail(node.Line, "", "expected a mapping of fields ("+strings.Join(fields, ", ")+")")
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		f := k.Value
		known := false
		for _, want := range fields {
			known = known || f == want
		}
		if !known {
			return p, fail(k.Line, f, "unknown field: expected one of "+strings.Join(fields, ", "))
		}
		if _, dup := seen[f]; dup {
			return p, fail(k.Line, f, "given twice")
		}
		seen[f] = v
		if v.Kind != yaml.ScalarNode && f != "limits" {
			return p, fail(v.Line, f, "expected a single value")
		}
	}
	if a := seen["algorithm"]; a != nil && isConcurrency(a.Value) {
		return parseConcurrency(p, key, seen, fail)
	}
	if v := seen["lease_ttl"]; v != nil {
		return p, fail(v.Line, "lease_ttl", "only a concurrency policy (algorithm: concurrency) takes a lease_ttl")
	}
	if v := seen["limits"]; v != nil {
		for _, f := range limitFields {
			if w := seen[f]; w != nil {
				return p, fail(w.Line, f, "a policy with limits gives "+f+" inside each limit, not beside them")
			}
		}
		ls, err := parseLimits(v, fail)
		if err != nil {
			return p, err
		}
		p.Limits = ls
	} else {
		l, err := parseLimit(key, seen, fail)
		if err != nil {
			return p, err
		}
		p.Limit = l
	}
	if err := sharedFields(&p, seen, fail); err != nil {
		return p, err
	}
	if v := seen["durable"]; v != nil {
		d, err := engine.ParseDurability(v.Value)
		if err != nil {
			return p, fail(v.Line, "durable", fmt.Sprintf("%q must be true, false, replica or disk", v.Value))
		}
		p.Durable = d
	}
	if v := seen["shadow"]; v != nil {
		switch v.Value {
		case "true":
			p.Shadow = true
		case "false":
		default:
			return p, fail(v.Line, "shadow", fmt.Sprintf("%q must be true or false", v.Value))
		}
	}
	return p, nil
}

// parseLimit reads a limit's fields from seen (a policy's, or one of its
// limits'); key is the line to blame for a missing field. Every file that
// gives a limit reads it so (package limityaml).
func parseLimit(key *yaml.Node, seen map[string]*yaml.Node, fail func(line int, field, msg string) error) (engine.Limit, error) {
	o := limityaml.Options{Required: true, OtherAlgorithms: []string{"concurrency"}}
	l, err := limityaml.Read(key, seen, engine.Limit{}, o, fail)
	if err != nil {
		return l, err
	}
	return l, limityaml.Check(key, seen, l, o, fail)
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
	return &Error{File: file, Line: line, Msg: msg}
}

// sharedFields reads the fields every kind of policy takes: prefix and
// on_failure.
func sharedFields(p *engine.Policy, seen map[string]*yaml.Node, fail func(line int, field, msg string) error) error {
	if v := seen["prefix"]; v != nil {
		p.Prefix = v.Value
	}
	if v := seen["on_failure"]; v != nil {
		m, err := engine.ParseFailureMode(v.Value)
		if err != nil {
			return fail(v.Line, "on_failure", fmt.Sprintf("%q must be allow, deny or local", v.Value))
		}
		p.OnFailure = m
	}
	return nil
}
