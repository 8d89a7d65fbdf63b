package upstream

import "time"

// SetFunctionsRetry sets how long after a refused FUNCTION LOAD the store
// tries again, for the test of a user granted FUNCTION later; it returns
// what puts the default back.
func SetFunctionsRetry(d time.Duration) (restore func()) {
	was := functionsRetry
	functionsRetry = d
	return func() { functionsRetry = was }
}
