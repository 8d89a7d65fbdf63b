package engine

// Policy is a named Limit that clients use by name (RL.ALLOW policy key), so
// that limits are defined once, in one file, for every API.
type Policy struct {
	Name string
	// Limit is what the policy decides by, unless Limits is set.
	Limit Limit
	// Limits, when set, are several limits that must all admit a request
	// (multi.go): "10 a second and 1,000 a day". Read only: requests share
	// the slice.
	Limits []NamedLimit
	// Prefix is put before each client key, so that two policies counting
	// the same client never share state. Loaders default it to Name + ":".
	Prefix string
	// OnFailure is what decides when the shared store cannot answer;
	// FailDefault leaves it to the sidecar's default.
	OnFailure FailureMode
	// Shadow decides and counts as usual but always allows: a new limit can
	// be watched against real traffic before it is enforced.
	Shadow bool
	// Durable answers the policy's decisions only once a replica holds
	// their charges (durable.go), so that a failover does not forget them.
	Durable Durability
	// Concurrency, when its Limit is set, makes this a concurrency policy
	// (lease.go): leases are acquired and released under it, and Limit is
	// unused.
	Concurrency Concurrency
}

// Policies finds policies by name. Implementations are safe for concurrent
// use, and may change what they hold (a reloaded file) between calls.
type Policies interface {
	Lookup(name string) (Policy, bool)
}
