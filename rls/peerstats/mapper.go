package peerstats

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// mapping is one rule of a statsd exporter mapping file: a statsd name
// pattern (glob, each '*' one dot-free field; or a regular expression,
// unanchored, as the exporter matches it), the Prometheus name and the
// labels it gives, and what the exporter makes of the value.
type mapping struct {
	Match           string            `yaml:"match"`
	MatchType       string            `yaml:"match_type,omitempty"`
	Name            string            `yaml:"name"`
	TimerType       string            `yaml:"timer_type,omitempty"`
	MatchMetricType string            `yaml:"match_metric_type,omitempty"`
	Scale           *float64          `yaml:"scale,omitempty"`
	Labels          map[string]string `yaml:"labels,omitempty"`

	re *regexp.Regexp // for match_type regex
}

// The peer's statistics, as its statsd names end.
var ruleStats = []string{"near_limit", "over_limit", "total_hits", "within_limit", "shadow_mode"}

// defaultMappings is what envoyproxy/ratelimit's built-in mapper
// (src/stats/prom/default_mapper.yaml) does: each rule's five counters
// named with the domain and the first descriptor entry (key1) by a glob
// for a one-entry rule, and with the first two (key1, key2) by a regular
// expression for a deeper one, the rest of the path dropped so that the
// number of series stays that of the configuration's first two levels;
// then the call errors, the gRPC server's requests and response time
// (milliseconds, scaled to seconds), and the configuration loads.
func defaultMappings() []mapping {
	var out []mapping
	for _, st := range ruleStats {
		out = append(out, mapping{Match: "ratelimit.service.rate_limit.*.*." + st, Name: "ratelimit_service_rate_limit_" + st,
			TimerType: "histogram", Labels: map[string]string{"domain": "$1", "key1": "$2"}})
	}
	for _, st := range ruleStats {
		out = append(out, mapping{Match: `ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.` + st, MatchType: "regex",
			Name: "ratelimit_service_rate_limit_" + st, TimerType: "histogram", Labels: map[string]string{"domain": "$1", "key1": "$2", "key2": "$3"}})
	}
	milli := 0.001
	return append(out,
		mapping{Match: "ratelimit.service.call.should_rate_limit.*", Name: "ratelimit_service_should_rate_limit_error", MatchMetricType: "counter", Labels: map[string]string{"err_type": "$1"}},
		mapping{Match: "ratelimit_server.*.total_requests", Name: "ratelimit_service_total_requests", MatchMetricType: "counter", Labels: map[string]string{"grpc_method": "$1"}},
		mapping{Match: "ratelimit_server.*.response_time", Name: "ratelimit_service_response_time_seconds", TimerType: "histogram", Scale: &milli, Labels: map[string]string{"grpc_method": "$1"}},
		mapping{Match: "ratelimit.service.config_load_success", Name: "ratelimit_service_config_load_success", MatchMetricType: "counter"},
		mapping{Match: "ratelimit.service.config_load_error", Name: "ratelimit_service_config_load_error", MatchMetricType: "counter"},
	)
}

// Mapper is the peer's default mapper, or a mapping file that renames its
// metrics (ParseMapper). The zero value is not usable; DefaultMapper is.
type Mapper struct {
	ms []mapping
}

// DefaultMapper is the peer's built-in mapper.
func DefaultMapper() *Mapper {
	m := &Mapper{ms: defaultMappings()}
	m.compile()
	return m
}

func (m *Mapper) compile() {
	for i := range m.ms {
		if m.ms[i].MatchType == "regex" {
			m.ms[i].re = regexp.MustCompile(m.ms[i].Match)
		}
	}
}

// responseTimeScale is what a response time in milliseconds is multiplied
// by: 0.001 with the default (seconds), 1 in a mapper without the scale,
// such as Envoy Gateway's.
func (m *Mapper) responseTimeScale() float64 {
	for _, mp := range m.ms {
		if strings.HasSuffix(mp.Match, ".response_time") && mp.Scale != nil {
			return *mp.Scale
		}
	}
	return 1
}

// ParseMapper reads a statsd exporter mapping file (the peer's
// PROMETHEUS_MAPPER_YAML). Sluice does not run a statsd exporter: it
// honours a file that maps what the default maps, the same way, under
// other names, and with or without the response time's scale to seconds
// (Envoy Gateway's file is the default without it). Any other difference
// is an error naming the first mapping that differs and how.
func ParseMapper(data []byte) (*Mapper, error) {
	var f struct {
		Mappings []mapping `yaml:"mappings"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("peerstats: mapper: %w (Sluice honours a mapper that renames the peer's default metrics, nothing else)", err)
	}
	def := defaultMappings()
	if len(f.Mappings) != len(def) {
		return nil, fmt.Errorf("peerstats: mapper: %d mappings; the peer's default mapper has %d, and Sluice honours one that only renames its metrics", len(f.Mappings), len(def))
	}
	for i, got := range f.Mappings {
		want := def[i]
		diff := ""
		switch {
		case got.Match != want.Match:
			diff = fmt.Sprintf("match %q, where the default has %q", got.Match, want.Match)
		case got.MatchType != want.MatchType && !(got.MatchType == "glob" && want.MatchType == ""):
			diff = fmt.Sprintf("match_type %q", got.MatchType)
		case got.MatchMetricType != want.MatchMetricType:
			diff = fmt.Sprintf("match_metric_type %q", got.MatchMetricType)
		case got.TimerType != want.TimerType && !(want.TimerType == "" && got.TimerType == "histogram"):
			diff = fmt.Sprintf("timer_type %q", got.TimerType)
		case !mapsEqual(got.Labels, want.Labels):
			diff = fmt.Sprintf("labels %v, where the default has %v", got.Labels, want.Labels)
		case got.Scale != nil && (want.Scale == nil || *got.Scale != *want.Scale):
			diff = fmt.Sprintf("scale %v", *got.Scale)
		case got.Name == "" || strings.Contains(got.Name, "$"):
			diff = fmt.Sprintf("name %q (a fixed metric name is needed)", got.Name)
		}
		if diff != "" {
			return nil, fmt.Errorf("peerstats: mapper: mapping %d (%s) has %s: Sluice honours a mapper that only renames the peer's default metrics", i+1, want.Match, diff)
		}
	}
	m := &Mapper{ms: f.Mappings}
	m.compile()
	return m, nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// series is one Prometheus series: the name and the labels' names and
// values, names sorted.
type series struct {
	name   string
	names  []string
	values []string
}

// match maps a statsd name as the exporter does: the glob mappings first
// (a glob matches the whole name, field by field), then the regular
// expressions in file order; false when nothing maps it (the exporter
// then exports it under its escaped statsd name, which Sluice does not).
func (m *Mapper) match(statsd string) (series, bool) {
	fields := strings.Split(statsd, ".")
	for _, mp := range m.ms {
		if mp.re != nil {
			continue
		}
		pat := strings.Split(mp.Match, ".")
		if len(pat) != len(fields) {
			continue
		}
		var caps []string
		ok := true
		for i, p := range pat {
			switch {
			case p == "*":
				caps = append(caps, fields[i])
			case p != fields[i]:
				ok = false
			}
		}
		if ok {
			return mp.series(func(v string) string { return expandGlob(v, caps) }), true
		}
	}
	for _, mp := range m.ms {
		if mp.re == nil {
			continue
		}
		idx := mp.re.FindStringSubmatchIndex(statsd)
		if idx == nil {
			continue
		}
		return mp.series(func(v string) string { return string(mp.re.ExpandString(nil, v, statsd, idx)) }), true
	}
	return series{}, false
}

func (mp *mapping) series(expand func(string) string) series {
	s := series{name: mp.Name}
	for _, k := range slices.Sorted(maps.Keys(mp.Labels)) {
		s.names = append(s.names, k)
		s.values = append(s.values, expand(mp.Labels[k]))
	}
	return s
}

// expandGlob replaces $1 … $9 with the glob's captures.
func expandGlob(v string, caps []string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '$' && i+1 < len(v) && v[i+1] >= '1' && v[i+1] <= '9' {
			if n := int(v[i+1] - '1'); n < len(caps) {
				b.WriteString(caps[n])
			}
			i++
			continue
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// DefaultYAML is the default mapper as a mapping file, a start for one
// that renames; without seconds, the response time's scale is left out,
// as Envoy Gateway's file leaves it (milliseconds).
func DefaultYAML(seconds bool) []byte {
	ms := defaultMappings()
	if !seconds {
		for i := range ms {
			ms[i].Scale = nil
		}
	}
	out, err := yaml.Marshal(struct {
		Mappings []mapping `yaml:"mappings"`
	}{ms})
	if err != nil {
		panic("peerstats: the default mapper does not marshal: " + err.Error()) // a programming error
	}
	return out
}
