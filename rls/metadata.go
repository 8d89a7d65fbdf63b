package rls

import (
	"fmt"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/rlsconfig"
)

// dynamicMetadata is the response's dynamic_metadata as the peer builds
// it with RESPONSE_DYNAMIC_METADATA=true (its ratelimitToMetadata): the
// request's domain, each descriptor's entries as "key=value" with its
// limit override and hits_addend when it carries them, the request's
// hits_addend when not 0, and the metadata of the rules whose descriptors
// passed, merged in descriptor order (the first value of a key wins, and
// two mappings under one key are merged the same way, deeply).
//
// passed[i] says descriptor i was not over its limit (shadow mode's
// refusals, answered OK, pass). Unlike the peer, the merge copies: the
// peer merges into the first rule's own metadata, so that one call's
// merge shows in later calls' answers.
func dynamicMetadata(req *pb.RateLimitRequest, ms []rlsconfig.Match, passed []bool) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			// The peer writes protobuf's text form of the override.
			df["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := map[string]any{}
	for i := range ms {
		if passed[i] && ms[i].Found && !ms[i].Rule.Unlimited && ms[i].Rule.Metadata != nil {
			mergeFirst(merged, ms[i].Rule.Metadata)
		}
	}
	if len(merged) > 0 {
		if s, err := structpb.NewStruct(merged); err == nil {
			fields["metadata"] = structpb.NewStructValue(s)
		} else {
			// The peer refuses such metadata when it loads the file;
			// Sluice's loader takes what YAML can hold.
			fields["metadata"] = structpb.NewStringValue(fmt.Sprintf("unrepresentable metadata: %v", err))
		}
	}
	return &structpb.Struct{Fields: fields}
}

// mergeFirst adds src's keys that dst lacks, and merges mappings found
// under one key in both, copying so that src (a rule's metadata, shared by
// every call) is never written.
func mergeFirst(dst, src map[string]any) {
	for k, v := range src {
		have, ok := dst[k]
		if !ok {
			if m, isMap := v.(map[string]any); isMap {
				c := map[string]any{}
				mergeFirst(c, m)
				v = c
			}
			dst[k] = v
			continue
		}
		hm, ok1 := have.(map[string]any)
		sm, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			mergeFirst(hm, sm)
		}
	}
}
