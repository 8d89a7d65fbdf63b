// Package limityaml reads a limit's fields (algorithm, rate or limit,
// period, burst or capacity, precision) from a YAML mapping: one set of
// names, one reading of each value and one set of error texts for every
// file that gives a limit, the policies file (package policy) and the rate
// limit service's overlay (package rlsconfig). It is a leaf of its own so
// that both read limits alike while neither imports the other: the Envoy
// door, which reads rlsconfig, must not reach the policies' loader.
//
// Reading is in two steps. Read checks each field alone (a known
// algorithm, a whole number, a period in range) and puts what is given
// onto a base limit; Check then checks the whole limit (engine's Validate)
// and blames the field that is wrong, under the name the file gives it.
// Between the two, the caller may fill what the file left out: a policy
// gives every field, an overlay only those it changes on a rule.
package limityaml

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/engine"
)

// Names are the fields of a limit. rate and limit are one field under two
// names (limit reads better for the window algorithms), as are burst and
// capacity (capacity reads better for the buckets).
var Names = []string{"algorithm", "rate", "limit", "period", "burst", "capacity", "precision"}

// Fail makes the error of a problem at a line, in a field named as the
// file names it.
type Fail func(line int, field, msg string) error

// Options say what the file asks of a limit.
type Options struct {
	// Required: the algorithm, the rate and the period must be given, as
	// in a policy. Otherwise what is not given keeps the base's value.
	Required bool
	// OtherAlgorithms are algorithm names the file accepts besides the
	// six (a policy's concurrency), listed in the errors that list them.
	OtherAlgorithms []string
	// Absent is the text for a limit found wrong in a parameter the
	// mapping does not give (its value came from elsewhere). Nil: that
	// the field is missing.
	Absent func(pe *engine.ParamError) string
}

// Read reads the fields given (name → value node) onto base, each checked
// alone; key is the line blamed for a missing field. With o.Required, an
// algorithm, a rate and a period must be given.
func Read(key *yaml.Node, fields map[string]*yaml.Node, base engine.Limit, o Options, fail Fail) (engine.Limit, error) {
	l := base
	for _, pair := range [][2]string{{"rate", "limit"}, {"burst", "capacity"}} {
		if fields[pair[0]] != nil && fields[pair[1]] != nil {
			return l, fail(fields[pair[1]].Line, pair[1], "is another name for "+pair[0]+": give one of them")
		}
	}
	also := ""
	if len(o.OtherAlgorithms) > 0 {
		also = ", " + strings.Join(o.OtherAlgorithms, ", ")
	}
	alg := fields["algorithm"]
	if alg == nil && o.Required {
		return l, fail(key.Line, "algorithm", "missing: give one of fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket, gcra"+also)
	}
	if alg != nil {
		a, err := engine.ParseAlgorithm(alg.Value)
		if err != nil {
			return l, fail(alg.Line, "algorithm", reason(err)+also)
		}
		l.Algorithm = a
	}
	for _, f := range []string{"rate", "limit", "burst", "capacity", "precision"} {
		v := fields[f]
		if v == nil {
			continue
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(v.Value, "_", ""), 10, 64)
		if err != nil || v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!str") {
			return l, fail(v.Line, f, fmt.Sprintf("%q is not a whole number", v.Value))
		}
		switch f {
		case "rate", "limit":
			l.Rate = n
		case "precision":
			if n < 1 {
				return l, fail(v.Line, f, fmt.Sprintf("%d must be between 1 and %d", n, engine.MaxPrecision))
			}
			l.Precision = n
		default:
			l.Burst = n
		}
	}
	if o.Required && fields["rate"] == nil && fields["limit"] == nil {
		return l, fail(key.Line, "rate", "missing: how many units a period admits (rate, or limit)")
	}
	per := fields["period"]
	if per == nil && o.Required {
		return l, fail(key.Line, "period", "missing: give a duration such as 1s, 1m, 1h or 1d")
	}
	if per != nil {
		d, why := engine.ParsePeriod(per.Value)
		if why != "" {
			return l, fail(per.Line, "period", fmt.Sprintf("%q %s", per.Value, why))
		}
		l.Period = d
	}
	return l, nil
}

// Check validates the whole limit l and blames the field at fault, under
// the name the mapping gives it (burst for capacity when only burst is
// given); key is the line blamed for a field the mapping does not give.
func Check(key *yaml.Node, fields map[string]*yaml.Node, l engine.Limit, o Options, fail Fail) error {
	err := l.Validate()
	if err == nil {
		return nil
	}
	var pe *engine.ParamError
	if !errors.As(err, &pe) {
		return fail(key.Line, "", err.Error())
	}
	field := pe.Param
	if fields[field] == nil { // the engine's name for a field given under its other name
		if other := alias[field]; fields[other] != nil {
			field = other
		}
	}
	if fields[field] == nil {
		if o.Absent != nil {
			return fail(key.Line, field, o.Absent(pe))
		}
		return fail(key.Line, field, "missing: it "+pe.Reason)
	}
	return fail(fields[field].Line, field, pe.Value+" "+pe.Reason)
}

// alias pairs the two names of one field.
var alias = map[string]string{"rate": "limit", "limit": "rate", "burst": "capacity", "capacity": "burst"}

// reason is a ParamError's value and reason, or the error's text.
func reason(err error) string {
	var pe *engine.ParamError
	if errors.As(err, &pe) {
		return pe.Value + " " + pe.Reason
	}
	return err.Error()
}
