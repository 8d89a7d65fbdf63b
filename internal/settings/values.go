package settings

import "errors"

// offAddr is an address flag that "off" switches off: its value is then
// empty, which is also accepted (the spelling before "off").
type offAddr string

func (a *offAddr) Set(s string) error {
	if s == "off" {
		s = ""
	}
	*a = offAddr(s)
	return nil
}

func (a *offAddr) String() string {
	if a == nil || *a == "" {
		return "off"
	}
	return string(*a)
}

// Get makes offAddr a flag.Getter, as the flag package's own values are.
func (a *offAddr) Get() any { return string(*a) }

// LocalShare is what the local failure mode enforces in each sidecar while
// the upstream cannot answer (--local-share): this sidecar's share of
// each limit, 1/N of the N live sidecars the upstream last counted (the
// zero value and the default), or the whole limit, which N sidecars admit
// N times over.
type LocalShare uint8

// The shares.
const (
	ShareFleet LocalShare = iota
	ShareWhole
)

var shareNames = [...]string{ShareFleet: "fleet", ShareWhole: "whole"}

func (s LocalShare) String() string {
	if int(s) < len(shareNames) {
		return shareNames[s]
	}
	return "share(?)"
}

// MarshalText writes the share as UnmarshalText reads it (a flag).
func (s LocalShare) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads fleet or whole.
func (s *LocalShare) UnmarshalText(b []byte) error {
	for i, n := range shareNames {
		if string(b) == n {
			*s = LocalShare(i)
			return nil
		}
	}
	return errors.New("must be fleet or whole")
}
