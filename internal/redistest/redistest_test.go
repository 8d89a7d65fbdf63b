package redistest

import "testing"

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
