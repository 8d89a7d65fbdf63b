package tests

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/redisurl"
	"github.com/sluice-rl/sluice/internal/testca"
)

// mTLS toward Redis: a redis-server (alone, behind a sentinel, and as a
// Redis Cluster) that requires
// client certificates (tls-auth-clients yes), and Sluice presenting the
// pair of --upstream-tls-cert and --upstream-tls-key, read again when the
// files change (a cert-manager rotation), so that new connections present
// the new pair without a restart. The rotation is told from Redis's side:
// first a certificate of a CA Redis does not trust (refused), then one of
// its own CA (accepted), then another of its own (accepted still, after
// every connection was killed and made again).
func TestUpstreamClientCertRotation(t *testing.T) {
	for _, kind := range []string{"one Redis", "Sentinel", "Cluster"} {
		t.Run(kind, func(t *testing.T) { clientCertRotation(t, kind) })
	}
}

func clientCertRotation(t *testing.T, kind string) {
	dir := t.TempDir()
	ca, stranger := testca.New(t), testca.New(t)
	path := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(path("ca.pem"), ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ca.Issue(t, "127.0.0.1").Write(t, path("redis.crt"), path("redis.key"))
	own := ca.Issue(t, "sluice")
	tlsClient := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{own.TLS}}
	// nodes hold the keys; url reaches them.
	var nodes []*redistest.Server
	var url string
	files := []string{path("redis.crt"), path("redis.key"), path("ca.pem")}
	switch kind {
	case "Cluster":
		c := redistest.StartClusterTLS(t, 3, tlsClient, files[0], files[1], files[2], "tls-auth-clients yes")
		nodes, url = c.Nodes, "rediss+cluster://"+strings.Join(c.Addrs(), ",")
	case "Sentinel":
		st := redistest.StartSentinelTLS(t, tlsClient, files[0], files[1], files[2], "tls-auth-clients yes")
		nodes, url = []*redistest.Server{st.Master}, "rediss+sentinel://"+st.Sentinels[0].Addr+"/"+st.Name
	default:
		r := redistest.StartTLS(t, tlsClient, files[0], files[1], files[2], "tls-auth-clients yes")
		nodes, url = []*redistest.Server{r}, "rediss://"+r.Addr
	}
	// exists says whether key is on a node: on Cluster, on the master of
	// its slot.
	exists := func(key string) bool {
		for _, n := range nodes {
			if got, err := n.Do("EXISTS", key); err == nil && got == "1" {
				return true
			}
		}
		return false
	}

	stranger.Issue(t, "sluice").Write(t, path("client.crt"), path("client.key"))
	s := startSluice(t, "--upstream", url, "--upstream-tls-ca", path("ca.pem"),
		"--upstream-tls-cert", path("client.crt"), "--upstream-tls-key", path("client.key"), "--upstream-timeout", decidingTimeout)
	rdb := client(t, s)
	ctx := ctxT(t)
	state := func() string { return rdb.Info(ctx, "upstream").Val() }
	if !strings.Contains(state(), "upstream_state:down") {
		t.Fatalf("with a certificate Redis does not trust:\n%s", state())
	}

	own.Write(t, path("client.crt"), path("client.key"))
	waitUntil(t, 10*time.Second, "the upstream up with the rotated pair", func() bool { return strings.Contains(state(), "upstream_state:up") })
	decided := func(key string) func() bool {
		return func() bool {
			v, err := rdb.Do(ctx, "RL.TOKEN", key, 10, 1, "1h").Result()
			if err != nil {
				return false
			}
			d, _ := ints(v)
			return d[0] == 1 && exists(redisurl.DefaultPrefix+"{"+key+"}:token")
		}
	}
	waitUntil(t, 10*time.Second, "a decision by Redis after the first rotation", decided("mtls"))

	ca.Issue(t, "sluice").Write(t, path("client.crt"), path("client.key"))
	for _, n := range nodes {
		if _, err := n.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "a decision by Redis after the second rotation", decided("mtls2"))

	// Without a certificate Redis refuses every connection.
	s2 := startSluice(t, "--upstream", url, "--upstream-tls-ca", path("ca.pem"))
	r2 := redis.NewClient(&redis.Options{Addr: s2.Addr, Protocol: 2})
	defer r2.Close()
	if info := r2.Info(ctx, "upstream").Val(); !strings.Contains(info, "upstream_state:down") {
		t.Errorf("without a client certificate:\n%s", info)
	}
}
