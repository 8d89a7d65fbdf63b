package memstore

import "strconv"

// INFO's fields for the memory store, beside the counts they show, as
// name-value pairs in INFO's order (engine/chain/info.go does the same
// for the chain), so that the RESP door prints them without knowing the
// store.

// InfoMemory is INFO's Memory section: the states kept, how many may be,
// and how many live ones were evicted to stay within that (each one a
// count forgotten).
func (m *Store) InfoMemory() [][2]string {
	return [][2]string{{"memory_store_keys", strconv.Itoa(m.Len())}, {"memory_store_max_keys", strconv.Itoa(m.maxKeys)},
		{"memory_store_evictions", strconv.FormatUint(m.Evictions(), 10)}}
}

// InfoLeases is the memory store's part of INFO's Leases section: the
// leases it holds for concurrency policies decided locally.
func (m *Store) InfoLeases() [][2]string {
	return [][2]string{{"memory_store_leases", strconv.Itoa(m.Leases())}}
}
