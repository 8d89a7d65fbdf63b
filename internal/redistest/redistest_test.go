package redistest

import (
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Restart = %q, %v", got, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3, 1)
	m := c.MasterOf("{user}:k")
	if _, err := m.Do("SET", "{user}:k", "1"); err != nil {
		t.Fatalf("SET on the slot's master: %v", err)
	}
	m.Kill()
	c.WaitOK() // a replica takes over the slot
	if n := c.MasterOf("{user}:k"); n == m {
		t.Fatal("the killed master still serves the slot")
	}
}

func TestSentinel(t *testing.T) {
	st := StartSentinel(t)
	addr, err := st.CurrentMaster()
	if err != nil || addr != st.Master.Addr {
		t.Fatalf("CurrentMaster = %q, %v; want %s", addr, err, st.Master.Addr)
	}
	st.Master.Kill()
	for i := 0; ; i++ {
		if addr, _ := st.CurrentMaster(); addr == st.Replica.Addr {
			break
		}
		if i > 300 {
			t.Fatal("no failover to the replica within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
