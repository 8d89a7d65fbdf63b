package rlsconfig

import (
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// peerKeys are the keys envoyproxy/ratelimit accepts. Like the peer, the
// check is by name only, wherever the key stands: a known key in a place
// where it means nothing (unit on a descriptor) is accepted and ignored,
// which Sluice reports as a warning rather than an error so that every file
// the peer loads still loads.
var peerKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

// sluiceKeys are Sluice's own keys, accepted inside rate_limit only. A file
// that uses them is Sluice's alone: the peer refuses unknown keys.
var sluiceKeys = map[string]bool{"algorithm": true, "period": true, "burst": true, "on_failure": true, "refusal_takes_nothing": true}

// fieldsOf lists the keys that mean something in each kind of mapping.
var fieldsOf = map[string]map[string]bool{
	"root":       {"domain": true, "descriptors": true},
	"descriptor": {"key": true, "value": true, "rate_limit": true, "descriptors": true, "shadow_mode": true, "quota_mode": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true},
	"rate_limit": {"requests_per_unit": true, "unit": true, "unlimited": true, "name": true, "replaces": true, "algorithm": true, "period": true, "burst": true, "on_failure": true, "refusal_takes_nothing": true},
	"replaces":   {"name": true},
}

// yRoot, yDescriptor and yRateLimit are a file as written, with lines.
type yRoot struct {
	domain      string
	domainLine  int
	descriptors []*yDescriptor
}

type yDescriptor struct {
	line                                          int
	key, value                                    string
	rateLimit                                     *yRateLimit
	descriptors                                   []*yDescriptor
	shadow, quota, detailed, valueToMetric, share bool
	shareLine                                     int
	metadata                                      map[string]any
}

type yRateLimit struct {
	line            int
	requestsPerUnit uint32
	unit            string
	unitLine        int
	unlimited       bool
	name            string
	replaces        []yReplace
	// Sluice's own fields; a zero line means absent.
	algorithm, period, onFailure             string
	algorithmLine, periodLine, onFailureLine int
	burst                                    int64
	burstLine                                int
	refusalTakesNothing                      bool
}

type yReplace struct {
	line int
	name string
}

// decoder turns one file's nodes into a yRoot, refusing what the peer
// refuses: first the key check over the whole document (the peer's
// validateYamlKeys), then the typed decoding (the peer's yaml.Unmarshal
// into its structs).
type decoder struct {
	tree
	warnings []string
}

func (d *decoder) fail(line int, format string, args ...any) error {
	return &Error{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) warn(line int, format string, args ...any) {
	d.warnings = append(d.warnings, fmt.Sprintf("%s:%d: ", d.file, line)+fmt.Sprintf(format, args...))
}

// wrap turns a treeError into an Error of this file.
func (d *decoder) wrap(err error) error {
	if te, ok := err.(*treeError); ok {
		return d.fail(te.line, "error loading config file: %s", te.msg)
	}
	return err
}

func decodeFile(file string, data []byte) (*yRoot, []string, error) {
	d := &decoder{tree: tree{file: file, budget: maxNodes}}
	if err := checkSize(data); err != nil {
		return nil, nil, d.wrap(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, yamlError(file, err)
	}
	root := &yRoot{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return root, nil, nil // an empty file: the domain check refuses it
	}
	top, err := d.deref(doc.Content[0])
	if err != nil {
		return nil, nil, d.wrap(err)
	}
	if s, err := d.scalarOf(top); err != nil {
		return nil, nil, d.wrap(err)
	} else if s.kind == kNull {
		return root, nil, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, nil, d.fail(top.Line, "error loading config file: cannot unmarshal %s into a mapping: a file is a mapping with domain and descriptors", d.describe(top))
	}
	if err := d.checkKeys(top, "root"); err != nil {
		return nil, nil, d.wrap(err)
	}
	if err := d.decodeRoot(top, root); err != nil {
		return nil, nil, d.wrap(err)
	}
	return root, d.warnings, nil
}

// checkKeys is the peer's key check: every key is a string and a key it
// knows; every list holds mappings only; every other value is a string, an
// integer, a bool or null. metadata is not looked into.
func (d *decoder) checkKeys(m *yaml.Node, in string) error {
	if err := d.enter(m); err != nil {
		return err
	}
	defer d.leave()
	ps, err := d.pairs(m)
	if err != nil {
		return err
	}
	for _, p := range ps {
		k, err := d.scalarOf(p.k)
		if err != nil {
			return err
		}
		if k.kind == kMap || k.kind == kSeq {
			return d.fail(p.k.Line, "error loading config file: invalid map key: %s", d.describe(p.k))
		}
		if k.kind != kStr {
			return d.fail(p.k.Line, "config error, key is not of type string: %v", fmtValue(k.v))
		}
		name := k.v.(string)
		if !peerKeys[name] {
			if sluiceKeys[name] {
				if in != "rate_limit" {
					return d.fail(p.k.Line, "config error, unknown key '%s': Sluice's %s belongs inside rate_limit", name, name)
				}
			} else {
				return d.fail(p.k.Line, "config error, unknown key '%s'", name)
			}
		}
		if name == "metadata" {
			continue
		}
		v, err := d.deref(p.v)
		if err != nil {
			return err
		}
		switch v.Kind {
		case yaml.SequenceNode:
			for _, e := range v.Content {
				en, err := d.deref(e)
				if err != nil {
					return err
				}
				if en.Kind != yaml.MappingNode {
					gv, err := d.goValue(en, 0)
					if err != nil {
						return err
					}
					return d.fail(en.Line, "config error, yaml file contains list of type other than map: %v", fmtValue(gv))
				}
				if err := d.checkKeys(en, name); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			if err := d.checkKeys(v, name); err != nil {
				return err
			}
		default:
			s, err := d.scalarOf(v)
			if err != nil {
				return err
			}
			if s.kind == kFloat || s.kind == kUint {
				return d.fail(v.Line, "error checking config: %s of %s is not a string, an integer or a bool", v.Value, name)
			}
		}
	}
	return nil
}

// fmtValue prints a value as the peer's %v of a yaml.v2 value does.
func fmtValue(v any) string {
	if v == nil {
		return "<nil>"
	}
	return fmt.Sprint(v)
}

// describe names a node's type for an error, as v2 does (!!str `x`).
func (d *decoder) describe(n *yaml.Node) string {
	s, err := d.scalarOf(n)
	if err != nil {
		return "a value"
	}
	if s.kind == kMap || s.kind == kSeq {
		return tagOf(s)
	}
	return fmt.Sprintf("%s `%s`", tagOf(s), n.Value)
}

// fields walks a mapping's pairs in order, warning about keys that mean
// nothing there and about keys given twice (the last one wins, as in the
// peer), and calls set for each key that is a field of this kind.
func (d *decoder) fields(m *yaml.Node, kind string, set func(name string, k, v *yaml.Node) error) error {
	ps, err := d.pairs(m)
	if err != nil {
		return err
	}
	seen := map[string]int{}
	for _, p := range ps {
		k, err := d.deref(p.k)
		if err != nil {
			return err
		}
		name := k.Value
		if prev, dup := seen[name]; dup {
			d.warn(k.Line, "key '%s' is given twice (also on line %d); the last one wins, as in envoyproxy/ratelimit", name, prev)
		}
		seen[name] = k.Line
		if !fieldsOf[kind][name] {
			d.warn(k.Line, "key '%s' means nothing in a %s and is ignored, as envoyproxy/ratelimit ignores it", name, strings.ReplaceAll(kind, "_", " "))
			continue
		}
		if err := set(name, k, p.v); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) decodeRoot(m *yaml.Node, r *yRoot) error {
	return d.fields(m, "root", func(name string, k, v *yaml.Node) error {
		switch name {
		case "domain":
			r.domainLine = k.Line
			return d.str(v, &r.domain, "domain")
		default: // descriptors
			var err error
			r.descriptors, err = d.descriptorList(v)
			return err
		}
	})
}

func (d *decoder) descriptorList(v *yaml.Node) ([]*yDescriptor, error) {
	if err := d.enter(v); err != nil {
		return nil, err
	}
	defer d.leave()
	n, err := d.deref(v)
	if err != nil {
		return nil, err
	}
	if s, err := d.scalarOf(n); err != nil {
		return nil, err
	} else if s.kind == kNull {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.fail(n.Line, "error loading config file: cannot unmarshal %s into a list of descriptors", d.describe(n))
	}
	var out []*yDescriptor
	for _, e := range n.Content {
		en, err := d.deref(e)
		if err != nil {
			return nil, err
		}
		// checkKeys has made sure every element is a mapping.
		yd := &yDescriptor{line: en.Line}
		if err := d.decodeDescriptor(en, yd); err != nil {
			return nil, err
		}
		out = append(out, yd)
	}
	return out, nil
}

func (d *decoder) decodeDescriptor(m *yaml.Node, yd *yDescriptor) error {
	return d.fields(m, "descriptor", func(name string, k, v *yaml.Node) error {
		switch name {
		case "key":
			return d.str(v, &yd.key, name)
		case "value":
			return d.str(v, &yd.value, name)
		case "descriptors":
			var err error
			yd.descriptors, err = d.descriptorList(v)
			return err
		case "rate_limit":
			n, err := d.deref(v)
			if err != nil {
				return err
			}
			if s, err := d.scalarOf(n); err != nil {
				return err
			} else if s.kind == kNull {
				yd.rateLimit = nil // as v2 sets a pointer to nil
				return nil
			}
			if n.Kind != yaml.MappingNode {
				return d.fail(n.Line, "error loading config file: cannot unmarshal %s into a rate_limit", d.describe(n))
			}
			if yd.rateLimit == nil {
				yd.rateLimit = &yRateLimit{line: k.Line}
			}
			return d.decodeRateLimit(n, yd.rateLimit)
		case "shadow_mode":
			return d.boolean(v, &yd.shadow, name)
		case "quota_mode":
			return d.boolean(v, &yd.quota, name)
		case "detailed_metric":
			return d.boolean(v, &yd.detailed, name)
		case "value_to_metric":
			return d.boolean(v, &yd.valueToMetric, name)
		case "share_threshold":
			yd.shareLine = k.Line
			return d.boolean(v, &yd.share, name)
		default: // metadata
			n, err := d.deref(v)
			if err != nil {
				return err
			}
			if s, err := d.scalarOf(n); err != nil {
				return err
			} else if s.kind == kNull {
				yd.metadata = nil
				return nil
			}
			if n.Kind != yaml.MappingNode {
				return d.fail(n.Line, "error loading config file: cannot unmarshal %s into metadata, a mapping", d.describe(n))
			}
			gv, err := d.goValue(n, 0)
			if err != nil {
				return err
			}
			if yd.metadata == nil {
				yd.metadata = map[string]any{}
			}
			for k, v := range gv.(map[string]any) {
				yd.metadata[k] = v
			}
			return nil
		}
	})
}

func (d *decoder) decodeRateLimit(m *yaml.Node, rl *yRateLimit) error {
	return d.fields(m, "rate_limit", func(name string, k, v *yaml.Node) error {
		switch name {
		case "requests_per_unit":
			return d.uint32(v, &rl.requestsPerUnit, name)
		case "unit":
			rl.unitLine = k.Line
			return d.str(v, &rl.unit, name)
		case "unlimited":
			return d.boolean(v, &rl.unlimited, name)
		case "name":
			return d.str(v, &rl.name, name)
		case "replaces":
			n, err := d.deref(v)
			if err != nil {
				return err
			}
			if s, err := d.scalarOf(n); err != nil {
				return err
			} else if s.kind == kNull {
				rl.replaces = nil
				return nil
			}
			if n.Kind != yaml.SequenceNode {
				return d.fail(n.Line, "error loading config file: cannot unmarshal %s into a list of replaces", d.describe(n))
			}
			rl.replaces = nil
			for _, e := range n.Content {
				en, err := d.deref(e)
				if err != nil {
					return err
				}
				r := yReplace{line: en.Line}
				err = d.fields(en, "replaces", func(_ string, _, v *yaml.Node) error { return d.str(v, &r.name, "name") })
				if err != nil {
					return err
				}
				rl.replaces = append(rl.replaces, r)
			}
			return nil
		case "algorithm":
			rl.algorithmLine = k.Line
			return d.str(v, &rl.algorithm, name)
		case "period":
			rl.periodLine = k.Line
			return d.str(v, &rl.period, name)
		case "on_failure":
			rl.onFailureLine = k.Line
			return d.str(v, &rl.onFailure, name)
		case "refusal_takes_nothing":
			return d.boolean(v, &rl.refusalTakesNothing, name)
		default: // burst
			rl.burstLine = k.Line
			s, err := d.scalarOf(v)
			if err != nil {
				return err
			}
			if s.kind != kInt || s.v.(int64) < 0 {
				return d.fail(v.Line, "burst %q must be a whole number, 0 or more", v.Value)
			}
			rl.burst = s.v.(int64)
			return nil
		}
	})
}

// str decodes a string field as v2 does: any scalar gives its text, null
// gives "", a mapping or a list is refused.
func (d *decoder) str(v *yaml.Node, out *string, field string) error {
	n, err := d.deref(v)
	if err != nil {
		return err
	}
	s, err := d.scalarOf(n)
	if err != nil {
		return err
	}
	switch s.kind {
	case kNull:
		*out = ""
	case kMap, kSeq:
		return d.fail(n.Line, "error loading config file: cannot unmarshal %s into %s, a string", tagOf(s), field)
	default:
		*out = n.Value
	}
	return nil
}

// boolean decodes a bool field: YAML 1.1's true, yes, on … or null (false).
func (d *decoder) boolean(v *yaml.Node, out *bool, field string) error {
	n, err := d.deref(v)
	if err != nil {
		return err
	}
	s, err := d.scalarOf(n)
	if err != nil {
		return err
	}
	switch s.kind {
	case kNull:
		*out = false
	case kBool:
		*out = s.v.(bool)
	default:
		return d.fail(n.Line, "error loading config file: cannot unmarshal %s into %s, a bool", d.describe(n), field)
	}
	return nil
}

// uint32 decodes requests_per_unit: an integer from 0 to 4294967295, or
// null (0).
func (d *decoder) uint32(v *yaml.Node, out *uint32, field string) error {
	n, err := d.deref(v)
	if err != nil {
		return err
	}
	s, err := d.scalarOf(n)
	if err != nil {
		return err
	}
	switch {
	case s.kind == kNull:
		*out = 0
	case s.kind == kInt && s.v.(int64) >= 0 && s.v.(int64) <= math.MaxUint32:
		*out = uint32(s.v.(int64))
	default:
		return d.fail(n.Line, "error loading config file: cannot unmarshal %s into %s, a uint32", d.describe(n), field)
	}
	return nil
}
