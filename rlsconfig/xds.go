package rlsconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

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
func FromXDS(resources ...*rlspb.RateLimitConfig) (*Config, error) {
	c := &Config{domains: map[string]*domain{}}
	h := sha256.New()
	marshal := proto.MarshalOptions{Deterministic: true}
	for _, rc := range resources {
		name := rc.GetName()
		if name == "" {
			name = rc.GetDomain()
		}
		b, err := marshal.Marshal(rc)
		if err != nil {
			return nil, fmt.Errorf("rlsconfig: RateLimitConfig %q: %w", name, err)
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
		// Each field a check can name gets a "line" of its own, so that the
		// loader's Error points back at the field.
		pos := &positions{paths: []string{"", "domain"}}
		root := &yRoot{domain: rc.GetDomain(), domainLine: 1, descriptors: pos.descriptors(rc.GetDescriptors(), "descriptors")}
		if err := c.add(name, root); err != nil {
			var e *Error
			if errors.As(err, &e) && e.Line > 0 && e.Line < len(pos.paths) {
				return nil, &ResourceError{Resource: name, Path: pos.paths[e.Line], Msg: e.Msg}
			}
			return nil, err
		}
		c.files = append(c.files, name)
	}
	c.digest = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// positions numbers the fields of one resource as the loader numbers a
// file's lines: paths[line] is the field at that line.
type positions struct{ paths []string }

func (p *positions) at(path string) int {
	p.paths = append(p.paths, path)
	return len(p.paths) - 1
}

// descriptors turns a resource's descriptors into the loader's, as the
// peer's ConfigXdsProtoToYaml turns them into its YAML structs. A unit
// becomes its enum name (an unknown number its digits, refused as the
// peer refuses it).
func (p *positions) descriptors(ds []*rlspb.RateLimitDescriptor, path string) []*yDescriptor {
	out := make([]*yDescriptor, 0, len(ds))
	for i, d := range ds {
		dp := fmt.Sprintf("%s[%d]", path, i)
		yd := &yDescriptor{line: p.at(dp), key: d.GetKey(), value: d.GetValue(),
			shadow: d.GetShadowMode(), quota: d.GetQuotaMode(), detailed: d.GetDetailedMetric()}
		if md := d.GetMetadata(); md != nil {
			yd.metadata = md.AsMap()
		}
		if rl := d.GetRateLimit(); rl != nil {
			yrl := &yRateLimit{line: p.at(dp + ".rate_limit"), requestsPerUnit: rl.GetRequestsPerUnit(),
				unit: rl.GetUnit().String(), unlimited: rl.GetUnlimited(), name: rl.GetName()}
			yrl.unitLine = p.at(dp + ".rate_limit.unit")
			for j, r := range rl.GetReplaces() {
				yrl.replaces = append(yrl.replaces, yReplace{line: p.at(fmt.Sprintf("%s.rate_limit.replaces[%d]", dp, j)), name: r.GetName()})
			}
			yd.rateLimit = yrl
		}
		yd.descriptors = p.descriptors(d.GetDescriptors(), dp+".descriptors")
		out = append(out, yd)
	}
	return out
}
