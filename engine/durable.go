package engine

import (
	"errors"
	"strconv"
	"strings"
)

// Durability says when a decision may be answered: as soon as the store
// has made it, or only once the charge that made it is held by a replica
// as well, so that a failover cannot forget it (the promoted replica
// admitting again what its master had admitted). Redis replicates
// asynchronously: a charge its master had not yet sent when it died is
// gone, and no limiter built on it bounds that, unless it waits.
//
// Only the Redis store gives it meaning (package upstream: WAIT or
// WAITAOF after the batch's call); the in-memory store has no replicas
// and ignores it, so that the conformance suite decides alike on both.
type Durability uint8

// The durabilities. The zero value answers at once, as Redis does.
const (
	DurableNone    Durability = iota // answered once the master holds the charge
	DurableReplica                   // and a replica holds it in memory (WAIT)
	DurableDisk                      // and a replica has written it to its append-only file (WAITAOF, Redis 7.2)
)

var durabilityNames = [...]string{DurableNone: "none", DurableReplica: "replica", DurableDisk: "disk"}

// Durabilities lists every durability, in declaration order.
var Durabilities = []Durability{DurableNone, DurableReplica, DurableDisk}

func (d Durability) String() string {
	if int(d) < len(durabilityNames) {
		return durabilityNames[d]
	}
	return "durability(" + strconv.Itoa(int(d)) + ")"
}

// ParseDurability reads none, replica or disk; false and true are none
// and replica, so that a policies file says `durable: true`.
func ParseDurability(s string) (Durability, error) {
	switch strings.ToLower(s) {
	case "false":
		return DurableNone, nil
	case "true":
		return DurableReplica, nil
	}
	for d, name := range durabilityNames {
		if strings.EqualFold(s, name) {
			return Durability(d), nil
		}
	}
	return 0, &ParamError{Param: "durable", Value: strconv.Quote(s), Reason: "must be true, false, replica, disk or none"}
}

// MarshalText writes the durability as ParseDurability reads it, so that
// a Durability is a flag (flag.TextVar).
func (d Durability) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what ParseDurability reads.
func (d *Durability) UnmarshalText(b []byte) error {
	v, err := ParseDurability(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ErrNotDurable fails a batch of durable requests whose charges the
// replicas did not acknowledge by the deadline (or could not: no replica,
// an error to WAIT). The charges may well be held by the master: the
// requests get their failure mode's answer, as a batch that timed out
// does, but a store that answers this is not failing, and a breaker does
// not count it.
var ErrNotDurable = errors.New("the replicas did not acknowledge the charge in time")
