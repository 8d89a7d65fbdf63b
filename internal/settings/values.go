package settings

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
