package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-rl/sluice/internal/testca"
)

// writeCerts writes to dir a CA (ca.pem) and a certificate it signs for
// 127.0.0.1 (redis.crt, redis.key): what the TLS row's Redis serves with,
// made as the tests make theirs (valid for an hour).
func writeCerts(dir string) {
	var f fatal
	ca := testca.New(f)
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o600); err != nil {
		fatalf("%v", err)
	}
	ca.Issue(f, "127.0.0.1").Write(f, filepath.Join(dir, "redis.crt"), filepath.Join(dir, "redis.key"))
}

// fatal is testca.TB for a command: a failure stops the bench.
type fatal struct{}

func (fatal) Helper()           {}
func (fatal) Fatal(args ...any) { fatalf("certificates: %s", fmt.Sprint(args...)) }
