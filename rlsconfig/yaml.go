package rlsconfig

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The peer reads its files with YAML 1.1 rules (gopkg.in/yaml.v2), where
// yes, on and 010 are a bool, a bool and the octal 8, and a mapping key or a
// value is refused or accepted according to the type those rules give it.
// yaml.v3's nodes give us lines; this file gives the nodes v2's types, so a
// file the peer refuses is refused here and a file it loads loads here.

// kind is what v2 decodes a scalar into when the target is interface{}.
type kind uint8

const (
	kNull kind = iota
	kBool
	kInt   // fits int64: v2's int
	kUint  // only fits uint64: v2's uint64
	kFloat // float64
	kStr
	kMap // not scalars: a mapping or a sequence node
	kSeq
)

// scalar is a resolved scalar: its v2 kind and Go value.
type scalar struct {
	kind kind
	v    any
}

var yaml11Words = map[string]any{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"true": true, "True": true, "TRUE": true,
	"on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false,
	"false": false, "False": false, "FALSE": false,
	"off": false, "Off": false, "OFF": false,
	"": nil, "~": nil, "null": nil, "Null": nil, "NULL": nil,
	".nan": math.NaN(), ".NaN": math.NaN(), ".NAN": math.NaN(),
	".inf": math.Inf(1), ".Inf": math.Inf(1), ".INF": math.Inf(1),
	"+.inf": math.Inf(1), "+.Inf": math.Inf(1), "+.INF": math.Inf(1),
	"-.inf": math.Inf(-1), "-.Inf": math.Inf(-1), "-.INF": math.Inf(-1),
}

var yaml11Float = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// resolvePlain gives an untagged, unquoted scalar its YAML 1.1 type, as v2
// does: the first byte hints at what the text may be.
func resolvePlain(in string) scalar {
	hint := byte('N')
	if in != "" {
		switch c := in[0]; {
		case c == '+' || c == '-':
			hint = 'S'
		case c >= '0' && c <= '9':
			hint = 'D'
		case strings.IndexByte("yYnNtTfFoO~", c) >= 0:
			hint = 'M'
		case c == '.':
			hint = '.'
		default:
			hint = 0
		}
	}
	if hint == 0 {
		return scalar{kStr, in}
	}
	if v, ok := yaml11Words[in]; ok {
		switch v := v.(type) {
		case nil:
			return scalar{kNull, nil}
		case bool:
			return scalar{kBool, v}
		default:
			return scalar{kFloat, v}
		}
	}
	switch hint {
	case '.':
		if f, err := strconv.ParseFloat(in, 64); err == nil {
			return scalar{kFloat, f}
		}
	case 'D', 'S':
		if looksLikeTimestamp(in) {
			// v2 hands a timestamp to interface{} as its text.
			return scalar{kStr, in}
		}
		plain := strings.ReplaceAll(in, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return scalar{kInt, i}
		}
		if u, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return scalar{kUint, u}
		}
		if yaml11Float.MatchString(plain) {
			if f, err := strconv.ParseFloat(plain, 64); err == nil {
				return scalar{kFloat, f}
			}
		}
		if rest, ok := strings.CutPrefix(plain, "0b"); ok {
			if i, err := strconv.ParseInt(rest, 2, 64); err == nil {
				return scalar{kInt, i}
			}
			if u, err := strconv.ParseUint(rest, 2, 64); err == nil {
				return scalar{kUint, u}
			}
		} else if rest, ok := strings.CutPrefix(plain, "-0b"); ok {
			if i, err := strconv.ParseInt("-"+rest, 2, 64); err == nil {
				return scalar{kInt, i}
			}
		}
	}
	return scalar{kStr, in}
}

var timestampLayouts = []string{
	"2006-1-2T15:4:5.999999999Z07:00",
	"2006-1-2t15:4:5.999999999Z07:00",
	"2006-1-2 15:4:5.999999999",
	"2006-1-2",
}

func looksLikeTimestamp(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i != 4 || i == len(s) || s[i] != '-' {
		return false
	}
	for _, l := range timestampLayouts {
		if _, err := time.Parse(l, s); err == nil {
			return true
		}
	}
	return false
}

// tree walks a document's nodes with a budget on what aliases expand to,
// so that a small file of nested aliases (a "billion laughs") cannot make
// the loader run away. The file's own nodes are not charged: they cost what
// the file's bytes cost, bounded by maxFileBytes, and a generated
// configuration of 100,000 descriptors has millions of them.
type tree struct {
	file   string
	budget int                // nodes that aliases may still expand to
	depth  int                // mappings being walked, one inside another
	sizes  map[*yaml.Node]int // nodes under an anchored node, memoized
}

// maxDepth bounds how deep mappings nest, merges included. An alias can
// name a mapping it stands in, so without it a few bytes recurse until
// the node budget runs out, a million frames deep.
const maxDepth = 100

// enter notes one more level of nesting; leave undoes it.
func (t *tree) enter(n *yaml.Node) error {
	t.depth++
	if t.depth > maxDepth {
		return &treeError{n.Line, "nested too deeply (an alias inside what it names?)"}
	}
	return nil
}

func (t *tree) leave() { t.depth-- }

// maxNodes bounds the nodes that the aliases of one file may expand to,
// each use of an alias charged with every node of what it names. A real
// configuration uses aliases to share a few rules, far below it.
const maxNodes = 1 << 20

// maxFileBytes bounds one file's size, aliases aside: 64 MiB, about
// 500,000 descriptors of a route value with a nested user key, 25 times
// the 20,000-descriptor configurations gateways generate.
const maxFileBytes = 64 << 20

// checkSize refuses a file above maxFileBytes before it is parsed.
func checkSize(data []byte) error {
	if len(data) > maxFileBytes {
		return &treeError{1, fmt.Sprintf("the file has %d bytes: at most %d (64 MiB) are read", len(data), maxFileBytes)}
	}
	return nil
}

type treeError struct {
	line int
	msg  string
}

func (e *treeError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// deref follows aliases, charging the budget with what each one expands
// to.
func (t *tree) deref(n *yaml.Node) (*yaml.Node, error) {
	at := n.Line
	for i := 0; n.Kind == yaml.AliasNode; i++ {
		if n.Alias == nil || i > 100 {
			return nil, &treeError{n.Line, "an alias that leads nowhere"}
		}
		n = n.Alias
		t.budget -= t.size(n)
		if t.budget < 0 {
			return nil, &treeError{at, fmt.Sprintf("the file expands to too many nodes (aliases): its aliases stand for more than %d", maxNodes)}
		}
	}
	return n, nil
}

// size counts the nodes under n, n included, an alias as one node (its
// own use is charged when it is followed).
func (t *tree) size(n *yaml.Node) int {
	if c, ok := t.sizes[n]; ok {
		return c
	}
	c := 1
	for _, k := range n.Content {
		c += t.size(k)
	}
	if t.sizes == nil {
		t.sizes = map[*yaml.Node]int{}
	}
	t.sizes[n] = c
	return c
}

// scalarOf resolves a scalar node as v2 would for interface{}.
func (t *tree) scalarOf(n *yaml.Node) (scalar, error) {
	n, err := t.deref(n)
	if err != nil {
		return scalar{}, err
	}
	switch n.Kind {
	case yaml.MappingNode:
		return scalar{kind: kMap}, nil
	case yaml.SequenceNode, yaml.DocumentNode:
		return scalar{kind: kSeq}, nil
	}
	quoted := n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
	if n.Style&yaml.TaggedStyle != 0 {
		switch n.Tag {
		case "!!str", "!!binary":
			return scalar{kStr, n.Value}, nil
		case "!!null", "!!bool", "!!int", "!!float", "!!timestamp":
			s := resolvePlain(n.Value)
			if quoted {
				s = scalar{kStr, n.Value}
			}
			want := map[string]kind{"!!null": kNull, "!!bool": kBool, "!!int": kInt, "!!float": kFloat, "!!timestamp": kStr}[n.Tag]
			switch {
			case s.kind == want, want == kInt && s.kind == kUint, n.Tag == "!!timestamp" && looksLikeTimestamp(n.Value):
				return s, nil
			case want == kFloat && s.kind == kInt:
				return scalar{kFloat, float64(s.v.(int64))}, nil
			}
			return scalar{}, &treeError{n.Line, fmt.Sprintf("cannot decode %s `%s` as a %s", tagOf(s), n.Value, n.Tag)}
		}
		// Any other tag keeps its text.
		return scalar{kStr, n.Value}, nil
	}
	if quoted {
		return scalar{kStr, n.Value}, nil
	}
	return resolvePlain(n.Value), nil
}

func tagOf(s scalar) string {
	switch s.kind {
	case kNull:
		return "!!null"
	case kBool:
		return "!!bool"
	case kInt, kUint:
		return "!!int"
	case kFloat:
		return "!!float"
	case kMap:
		return "!!map"
	case kSeq:
		return "!!seq"
	}
	return "!!str"
}

// pair is one key and its value in a mapping, merges expanded.
type pair struct {
	k, v *yaml.Node
}

// pairs lists a mapping's entries as v2 sees them: a merge key (<<)
// contributes the entries of the mapping or mappings it names, and an
// explicit key wins over a merged one. Later duplicates are kept: the
// caller decides, as v2 does, that the last one wins.
func (t *tree) pairs(m *yaml.Node) ([]pair, error) {
	if err := t.enter(m); err != nil {
		return nil, err
	}
	defer t.leave()
	var own, merged []pair
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		kn, err := t.deref(k)
		if err != nil {
			return nil, err
		}
		if kn.Kind == yaml.ScalarNode && kn.Value == "<<" && kn.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 &&
			(kn.Tag == "!!merge" || kn.Tag == "") {
			vn, err := t.deref(v)
			if err != nil {
				return nil, err
			}
			var srcs []*yaml.Node
			switch vn.Kind {
			case yaml.MappingNode:
				srcs = []*yaml.Node{vn}
			case yaml.SequenceNode:
				for _, c := range vn.Content {
					sn, err := t.deref(c)
					if err != nil {
						return nil, err
					}
					if sn.Kind != yaml.MappingNode {
						return nil, &treeError{sn.Line, "map merge requires map or sequence of maps as the value"}
					}
					srcs = append(srcs, sn)
				}
			default:
				return nil, &treeError{vn.Line, "map merge requires map or sequence of maps as the value"}
			}
			for _, s := range srcs {
				sp, err := t.pairs(s)
				if err != nil {
					return nil, err
				}
				merged = append(merged, sp...)
			}
			continue
		}
		own = append(own, pair{k, v})
	}
	if len(merged) == 0 {
		return own, nil
	}
	// A merged key gives way to an explicit one, and to a merged one from
	// an earlier mapping; it is not a duplicate.
	taken := map[string]bool{}
	for _, p := range own {
		if kn, err := t.deref(p.k); err == nil && kn.Kind == yaml.ScalarNode {
			taken[kn.Value] = true
		}
	}
	var out []pair
	for _, p := range merged {
		kn, err := t.deref(p.k)
		if err != nil {
			return nil, err
		}
		if kn.Kind == yaml.ScalarNode {
			if taken[kn.Value] {
				continue
			}
			taken[kn.Value] = true
		}
		out = append(out, p)
	}
	return append(out, own...), nil
}

// goValue builds the value v2 would decode into interface{}, for metadata
// and for the %v in the peer's error texts.
func (t *tree) goValue(n *yaml.Node, depth int) (any, error) {
	if depth > 64 {
		return nil, &treeError{n.Line, "nested too deeply"}
	}
	n, err := t.deref(n)
	if err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.MappingNode:
		ps, err := t.pairs(n)
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, len(ps))
		for _, p := range ps {
			k, err := t.goValue(p.k, depth+1)
			if err != nil {
				return nil, err
			}
			if _, ok := k.(map[string]any); ok {
				return nil, &treeError{p.k.Line, "invalid map key: a mapping"}
			}
			if _, ok := k.([]any); ok {
				return nil, &treeError{p.k.Line, "invalid map key: a sequence"}
			}
			v, err := t.goValue(p.v, depth+1)
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := t.goValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	}
	s, err := t.scalarOf(n)
	if err != nil {
		return nil, err
	}
	return s.v, nil
}
