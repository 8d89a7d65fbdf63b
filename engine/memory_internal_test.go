package engine

import (
	"testing"
	"time"
	"unsafe"
)

// Two keys whose 64-bit hashes collide must keep separate states. Real
// collisions are too rare to meet in a test, so force one.
func TestMemoryShardHashCollision(t *testing.T) {
	m, err := NewMemoryStore(MemoryConfig{MaxKeys: 64 * 8})
	if err != nil {
		t.Fatal(err)
	}
	s := &m.shards[0]
	a, b := stateKey{GCRA, "alpha"}, stateKey{GCRA, "beta"}
	const h = 42
	s.insert(a, h, 0).b = 1
	s.insert(b, h, 0).b = 2
	if i := s.lookup(a, h); i < 0 || s.slots[i].b != 1 {
		t.Fatalf("alpha: slot %d", i)
	}
	if i := s.lookup(b, h); i < 0 || s.slots[i].b != 2 {
		t.Fatalf("beta: slot %d", i)
	}
	s.remove(s.lookup(a, h)) // the index holder goes; beta must stay found
	if i := s.lookup(b, h); i < 0 || s.slots[i].b != 2 {
		t.Fatalf("beta after removing alpha: slot %d", i)
	}
	if i := s.lookup(a, h); i >= 0 {
		t.Fatalf("alpha found after removal at %d", i)
	}
	s.insert(a, h, 0).b = 3 // alpha comes back; beta still in collide
	if i := s.lookup(a, h); i < 0 || s.slots[i].b != 3 {
		t.Fatalf("alpha again: slot %d", i)
	}
	if i := s.lookup(b, h); i < 0 || s.slots[i].b != 2 {
		t.Fatalf("beta again: slot %d", i)
	}
}

// The key a store keeps must not alias the caller's buffer.
func TestMemoryCopiesKeys(t *testing.T) {
	m, err := NewMemoryStore(MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte("tenant-1")
	r := Request{Key: string(buf), Limit: Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Hour}, Cost: 1}
	r.Key = unsafeString(buf)
	m.decide(time.Now().UnixMicro(), &r)
	copy(buf, "XXXXXXXX") // the caller reuses its buffer
	s, h := m.locate(FixedWindow, "tenant-1")
	if i := s.lookup(stateKey{FixedWindow, "tenant-1"}, h); i < 0 {
		t.Fatal("state lost after the caller reused its buffer: the key was not copied")
	}
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// TestEntrySize: an entry is two cache lines, its key on the first and
// its state on the second (see memoryEntry); a field added must not
// spill it onto a third.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(memoryEntry{}); n != 128 {
		t.Errorf("memoryEntry is %d bytes; want 128", n)
	}
	if n := unsafe.Offsetof(memoryEntry{}.state); n != 64 {
		t.Errorf("the state starts at byte %d; want 64, the second cache line", n)
	}
}
