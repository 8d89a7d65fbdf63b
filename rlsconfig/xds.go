package rlsconfig

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// ResourceError is a problem in a RateLimitConfig received over xDS, at a
// field of it (descriptors[0].rate_limit.unit). Msg is the same text the
// YAML loader gives for the same mistake: both go through one validation.
type ResourceError struct {
	Resource string // the resource's name, or its domain when it has none
	Path     string // the field, as a path from the resource
	Msg      string
}

func (e *ResourceError) Error() string {
	return fmt.Sprintf("RateLimitConfig %q: %s: %s", e.Resource, e.Path, e.Msg)
}

// FromXDS builds a Config from the RateLimitConfig resources of one xDS
// response, one domain each, as envoyproxy/ratelimit does under
// CONFIG_TYPE=GRPC_XDS_SOTW: every rule and every refusal of the YAML
// loader applies (the resources become the loader's own descriptors, and
// go through the same checks), and the same domain in two resources is
// an error. No resource gives a Config with no domains.
//
// The protocol has no field for Sluice's own rate_limit fields
// (algorithm, period, burst, on_failure), nor for share_threshold and
// value_to_metric; their defaults apply, as in the peer.
//
// The resources are taken in the order of their names (then of their
// bytes), not as they came: go-control-plane's snapshot cache sends them
// in a map's order, and the same configuration must have one digest on
// every sidecar and in every response.
func FromXDS(resources ...*rlspb.RateLimitConfig) (*Config, error) {
	type resource struct {
		name string
		rc   *rlspb.RateLimitConfig
		b    []byte // deterministic
	}
	rs := make([]resource, len(resources))
	marshal := proto.MarshalOptions{Deterministic: true}
	for i, rc := range resources {
		name := rc.GetName()
		if name == "" {
			name = rc.GetDomain()
		}
		b, err := marshal.Marshal(rc)
		if err != nil {
			return nil, fmt.Errorf("rlsconfig: RateLimitConfig %q: %w", name, err)
		}
		rs[i] = resource{name, rc, b}
	}
	slices.SortFunc(rs, func(a, b resource) int {
		return cmp.Or(strings.Compare(a.name, b.name), bytes.Compare(a.b, b.b))
	})
	c := &Config{domains: map[string]*domain{}}
	h := sha256.New()
	for _, r := range rs {
		name, rc, b := r.name, r.rc, r.b
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
		// Each field a check can name gets a "line" of its own, so that the
		// loader's Error points back at the field.
		pos := &positions{}
		pos.add(0, "", -1) // line 0: no field
		root := &yRoot{domain: rc.GetDomain(), domainLine: pos.add(0, "domain", -1), descriptors: pos.descriptors(rc.GetDescriptors(), 0)}
		if err := c.add(name, root); err != nil {
			var e *Error
			if errors.As(err, &e) && e.Line > 0 && e.Line < len(pos.fields) {
				return nil, &ResourceError{Resource: name, Path: pos.path(e.Line), Msg: e.Msg}
			}
			return nil, err
		}
		c.files = append(c.files, name)
	}
	c.digest = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// positions numbers the fields of one resource as the loader numbers a
// file's lines. A field's path is written only for an error: a generated
// configuration has tens of thousands of descriptors.
type positions struct{ fields []field }

// field is a field's name, its index when it is a list's element (-1
// otherwise), and the line of the field it is in.
type field struct {
	parent int
	name   string
	index  int
}

func (p *positions) add(parent int, name string, index int) int {
	p.fields = append(p.fields, field{parent, name, index})
	return len(p.fields) - 1
}

// path is the field at line, as descriptors[0].rate_limit.unit.
func (p *positions) path(line int) string {
	f := p.fields[line]
	seg := f.name
	if f.index >= 0 {
		seg += "[" + strconv.Itoa(f.index) + "]"
	}
	if f.parent == 0 {
		return seg
	}
	return p.path(f.parent) + "." + seg
}

// descriptors turns a resource's descriptors, in the field at line parent,
// into the loader's, as the peer's ConfigXdsProtoToYaml turns them into its
// YAML structs. A unit becomes its enum name (an unknown number its
// digits, refused as the peer refuses it).
func (p *positions) descriptors(ds []*rlspb.RateLimitDescriptor, parent int) []*yDescriptor {
	out := make([]*yDescriptor, 0, len(ds))
	for i, d := range ds {
		line := p.add(parent, "descriptors", i)
		yd := &yDescriptor{line: line, key: d.GetKey(), value: d.GetValue(),
			shadow: d.GetShadowMode(), quota: d.GetQuotaMode(), detailed: d.GetDetailedMetric()}
		if md := d.GetMetadata(); md != nil {
			yd.metadata = md.AsMap()
		}
		if rl := d.GetRateLimit(); rl != nil {
			yrl := &yRateLimit{line: p.add(line, "rate_limit", -1), requestsPerUnit: rl.GetRequestsPerUnit(),
				unit: rl.GetUnit().String(), unlimited: rl.GetUnlimited(), name: rl.GetName()}
			yrl.unitLine = p.add(yrl.line, "unit", -1)
			for j, r := range rl.GetReplaces() {
				yrl.replaces = append(yrl.replaces, yReplace{line: p.add(yrl.line, "replaces", j), name: r.GetName()})
			}
			yd.rateLimit = yrl
		}
		yd.descriptors = p.descriptors(d.GetDescriptors(), line)
		out = append(out, yd)
	}
	return out
}
