package redistest

import (
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of real servers on loopback.
type Cluster struct {
	Nodes []*Server // masters first, then replicas, in creation order
	tb    testing.TB
}

// StartCluster creates a cluster of masters masters with replicas replicas
// each, through `redis-cli --cluster create`, and waits until every node
// reports the cluster ok. Node timeouts are short (1s) so that a failover
// happens within seconds in tests.
func StartCluster(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	cli := lookCLI(tb)
	c := &Cluster{tb: tb}
	addrs := make([]string, 0, masters*(1+replicas))
	for range masters * (1 + replicas) {
		s := Start(tb, "cluster-enabled yes", "cluster-config-file nodes.conf",
			"cluster-node-timeout 1000", "cluster-replica-validity-factor 0")
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK()
	c.waitReplicasSynced()
	return c
}

// Addrs lists every node's address: what a cluster client is given.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// WaitOK waits until every live node says cluster_state:ok and all slots are
// served.
func (c *Cluster) WaitOK() {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, n := range c.Nodes {
			if !n.alive() {
				continue
			}
			info, err := n.Do("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: cluster not ok within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MasterOf returns the live node serving key's slot as master, waiting up
// to 30s for one (after a master is killed, until its replica takes over).
func (c *Cluster) MasterOf(key string) *Server {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, n := range c.Nodes {
			if !n.alive() {
				continue
			}
			role, err := n.Do("ROLE")
			if err != nil || !strings.HasPrefix(role, "master") {
				continue
			}
			// A master answers a key it serves; the others answer MOVED.
			if _, err := n.Do("TYPE", key); err == nil {
				return n
			}
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: no live master serves %q within 30s", key)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReplicasSynced waits until every replica is connected to its master,
// so that a killed master has a replica able to take over.
func (c *Cluster) waitReplicasSynced() {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		for {
			role, err := n.Do("ROLE")
			if err == nil && (strings.HasPrefix(role, "master") || strings.Contains(role, "\nconnected\n")) {
				break
			}
			if time.Now().After(deadline) {
				c.tb.Fatalf("redistest: replica %s not in sync within 30s: %q", n.Addr, role)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Sentinel is one master, one replica and three sentinels watching them,
// all on loopback, under the master name "mymaster".
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
	Name            string
}

// StartSentinel starts the master, its replica and three sentinels, with
// short timeouts so that a failover completes within seconds, and waits
// until the replica is in sync (so that it holds what the master writes
// from then on, and a test's WAIT is answered).
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	st := &Sentinel{Name: "mymaster"}
	// No delay before the first sync: Redis 7 waits 5s by default for
	// more replicas to share a diskless one.
	st.Master = Start(tb, "repl-diskless-sync-delay 0")
	st.Replica = Start(tb, "replicaof 127.0.0.1 "+strconv.Itoa(st.Master.Port), "replica-priority 100", "repl-diskless-sync-delay 0")
	for range 3 {
		st.Sentinels = append(st.Sentinels, startSentinel(tb, st.Master.Port))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		role, err := st.Replica.Do("ROLE")
		if err == nil && strings.Contains(role, "\nconnected\n") {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: the replica not in sync within 30s: %q, %v", role, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Wait until every sentinel knows the replica and the other
	// sentinels (their hello messages come every 2s). A sentinel that
	// knows no other counts no votes but its own: a failover in that
	// window is elected by fewer sentinels than the test means, and one
	// left out may later act on the master it last knew.
	for _, sen := range st.Sentinels {
		for {
			replicas, err1 := sen.Do("SENTINEL", "REPLICAS", st.Name)
			sentinels, err2 := sen.Do("SENTINEL", "SENTINELS", st.Name)
			known := 0
			for _, other := range st.Sentinels {
				if other != sen && strings.Contains(sentinels, "\n"+strconv.Itoa(other.Port)+"\n") {
					known++
				}
			}
			if err1 == nil && err2 == nil && strings.Contains(replicas, strconv.Itoa(st.Replica.Port)) &&
				strings.Contains(replicas, "slave") && known == len(st.Sentinels)-1 {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: sentinel %s did not see the replica and the %d other sentinels within 30s (replicas %q, %v; sentinels %q, %v)",
					sen.Addr, len(st.Sentinels)-1, replicas, err1, sentinels, err2)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return st
}

// Addrs lists the sentinels' addresses: what a failover client is given.
func (st *Sentinel) Addrs() []string {
	a := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		a[i] = s.Addr
	}
	return a
}

// CurrentMaster asks the first live sentinel which address is the master.
func (st *Sentinel) CurrentMaster() (string, error) {
	var lastErr error
	for _, s := range st.Sentinels {
		out, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", st.Name)
		if err != nil {
			lastErr = err
			continue
		}
		parts := strings.Split(out, "\n")
		if len(parts) == 2 {
			return parts[0] + ":" + parts[1], nil
		}
		lastErr = fmt.Errorf("redistest: unexpected reply %q", out)
	}
	return "", lastErr
}

func startSentinel(tb testing.TB, masterPort int) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server not found in PATH: install it (apt-get install -y redis-server redis-tools)")
	}
	s := &Server{Dir: tb.TempDir(), tb: tb, Port: FreePort(tb)}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	// A sentinel rewrites its configuration file, so it needs a real one.
	conf := filepath.Join(s.Dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n"+
		"sentinel monitor mymaster 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds mymaster 1000\n"+
		"sentinel failover-timeout mymaster 5000\n"+
		"sentinel parallel-syncs mymaster 1\n", s.Port, s.Dir, masterPort)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s.argv = []string{bin, conf, "--sentinel"}
	s.start()
	tb.Cleanup(s.Kill)
	return s
}

func lookCLI(tb testing.TB) string {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redistest: redis-cli not found in PATH: install it (apt-get install -y redis-tools)")
	}
	return cli
}

// StartClusterTLS creates a cluster of masters masters, no replicas,
// speaking only TLS on their client and bus ports (tls-cluster), with the
// files and client of StartTLS and the extra directives (say
// "tls-auth-clients yes"). The slots are split evenly and the nodes meet
// by CLUSTER MEET, with no redis-cli in between.
func StartClusterTLS(tb testing.TB, masters int, client *tls.Config, certFile, keyFile, caFile string, directives ...string) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb}
	d := append([]string{"cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 1000", "tls-cluster yes"}, directives...)
	for range masters {
		c.Nodes = append(c.Nodes, StartTLS(tb, client, certFile, keyFile, caFile, d...))
	}
	per := 16384 / masters
	for i, n := range c.Nodes {
		last := (i+1)*per - 1
		if i == masters-1 {
			last = 16383
		}
		if _, err := n.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(i*per), strconv.Itoa(last)); err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", n.Addr, err)
		}
		if i > 0 {
			if _, err := n.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)); err != nil {
				tb.Fatalf("redistest: CLUSTER MEET from %s: %v", n.Addr, err)
			}
		}
	}
	c.WaitOK()
	return c
}

// StartSentinelTLS starts a master and one sentinel watching it (quorum
// 1), both speaking only TLS, with the files and client of StartTLS and
// the extra directives (say "tls-auth-clients yes") given to both; the
// sentinel reaches the master over TLS (tls-replication) with the
// server's own certificate. Enough for a client's TLS through Sentinel;
// StartSentinel has the replica and quorum a failover needs.
func StartSentinelTLS(tb testing.TB, client *tls.Config, certFile, keyFile, caFile string, directives ...string) *Sentinel {
	tb.Helper()
	st := &Sentinel{Name: "mymaster"}
	st.Master = StartTLS(tb, client, certFile, keyFile, caFile, directives...)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server not found in PATH: install it (apt-get install -y redis-server redis-tools)")
	}
	s := &Server{Dir: tb.TempDir(), tb: tb, Port: FreePort(tb), tls: client}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	conf := filepath.Join(s.Dir, "sentinel.conf")
	body := fmt.Sprintf("port 0\ntls-port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n"+
		"tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-replication yes\n%s\n"+
		"sentinel monitor mymaster 127.0.0.1 %d 1\n", s.Port, s.Dir, certFile, keyFile, caFile,
		strings.Join(directives, "\n"), st.Master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s.argv = []string{bin, conf, "--sentinel"}
	s.start()
	tb.Cleanup(s.Kill)
	st.Sentinels = []*Server{s}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := st.CurrentMaster(); err == nil {
			return st
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: the TLS sentinel did not name the master within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
