package peerstats

import (
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestHit: the peer's base limiter's arithmetic, row by row (limit 10,
// NEAR_LIMIT_RATIO 0.8: near from the 9th hit).
func TestHit(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Hit
		want string
	}{
		{"within, below near", Hit{Limit: 10, Hits: 1, After: 5}, "total 1 within 1"},
		{"within, crossing near", Hit{Limit: 10, Hits: 3, After: 10}, "total 3 near 2 within 3"},
		{"within, all near", Hit{Limit: 10, Hits: 1, After: 9}, "total 1 near 1 within 1"},
		{"crossing the limit", Hit{Limit: 10, Hits: 4, After: 11}, "total 4 near 2 over 1"},
		{"already over", Hit{Limit: 10, Hits: 2, After: 14}, "total 2 over 2"},
		{"shadow, crossing", Hit{Limit: 10, Hits: 4, After: 12, Shadow: true}, "total 4 near 2 over 2 shadow 2"},
		{"a remembered refusal", Hit{Limit: 10, Hits: 3, Cached: true}, "total 3 over 3"},
		{"limit 0", Hit{Limit: 0, Hits: 1, After: 1}, "total 1 over 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			s.Hit("dom.key_v", tc.h)
			if got := summary(t, s); got != tc.want {
				t.Fatalf("%s; want %s", got, tc.want)
			}
		})
	}
}

func summary(t *testing.T, s *Stats) string {
	t.Helper()
	var out []string
	for _, st := range []struct{ short, name string }{{"total", "total_hits"}, {"near", "near_limit"}, {"over", "over_limit"}, {"within", "within_limit"}, {"shadow", "shadow_mode"}} {
		for _, c := range s.counts {
			if c.s.name == "ratelimit_service_rate_limit_"+st.name && c.n.Load() > 0 {
				out = append(out, st.short+" "+strconv.FormatUint(c.n.Load(), 10))
			}
		}
	}
	return strings.Join(out, " ")
}

// TestMapperLabels: key1 alone for one level, key1 and key2 for deeper
// rules, the rest dropped, and addresses kept in one field.
func TestMapperLabels(t *testing.T) {
	m := DefaultMapper()
	for _, tc := range []struct{ key, want string }{
		{"gw.user", `ratelimit_service_rate_limit_total_hits{domain="gw",key1="user"}`},
		{"gw.route_a.method_GET.user", `ratelimit_service_rate_limit_total_hits{domain="gw",key1="route_a",key2="method_GET"}`},
		{"gw.ip_10.0.0.1", `ratelimit_service_rate_limit_total_hits{domain="gw",key1="ip_10_0_0_1"}`},
		{"gw.a:b|c", `ratelimit_service_rate_limit_total_hits{domain="gw",key1="a_b_c"}`},
	} {
		se, ok := m.match("ratelimit.service.rate_limit." + sanitize(tc.key) + ".total_hits")
		if !ok {
			t.Fatalf("%s: not mapped", tc.key)
		}
		var ls []string
		for i, n := range se.names {
			ls = append(ls, n+`="`+se.values[i]+`"`)
		}
		if got := se.name + "{" + strings.Join(ls, ",") + "}"; got != tc.want {
			t.Errorf("%s: %s; want %s", tc.key, got, tc.want)
		}
	}
}

// TestParseMapper: Envoy Gateway's file (the default without the
// response time's scale) and a rename are honoured; anything else is
// refused naming the mapping.
func TestParseMapper(t *testing.T) {
	var b strings.Builder
	b.WriteString("mappings:\n")
	for _, m := range defaultMappings() {
		out, err := yaml.Marshal([]mapping{m})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(out)
	}
	def := b.String()
	eg := strings.Replace(def, "  scale: 0.001\n", "", 1)
	for _, tc := range []struct{ name, file, err string }{
		{"the default", def, ""},
		{"Envoy Gateway's: milliseconds", eg, ""},
		{"renamed", strings.Replace(def, "name: ratelimit_service_total_requests", "name: rl_requests", 1), ""},
		{"a label changed", strings.Replace(def, "err_type: $1", "kind: $1", 1), "mapping 11 (ratelimit.service.call.should_rate_limit.*) has labels"},
		{"an unknown field", def + "defaults:\n  ttl: 1m\n", "field defaults not found"},
		{"a mapping less", strings.SplitAfterN(def, "- match:", 2)[0] + " x\n  name: y\n", "1 mappings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMapper([]byte(tc.file))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v (mapper %v); want one containing %q", err, m, tc.err)
			}
		})
	}
	m, _ := ParseMapper([]byte(eg))
	if m.responseTimeScale() != 1 {
		t.Errorf("Envoy Gateway's mapper: response time scale %v, want 1 (milliseconds)", m.responseTimeScale())
	}
	if DefaultMapper().responseTimeScale() != 0.001 {
		t.Error("the default mapper does not report seconds")
	}
}
