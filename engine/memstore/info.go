package memstore

import "strconv"

// INFO's fields for the memory store, beside the counts they show, as
// name-value pairs in INFO's order (engine/chain/info.go does the same
// for the chain), so that the RESP door prints them without knowing the
// store.

// InfoMemory is INFO's Memory section: the states kept, and how many may
// be.
func (m *Store) InfoMemory() [][2]string {
	return [][2]string{{"memory_store_keys", strconv.Itoa(m.Len())}, {"memory_store_max_keys", strconv.Itoa(m.maxKeys)}}
}

// InfoLeases is the memory store's part of INFO's Leases section: the
// leases it holds for concurrency policies decided locally.
func (m *Store) InfoLeases() [][2]string {
	return [][2]string{{"memory_store_leases", strconv.Itoa(m.Leases())}}
}
