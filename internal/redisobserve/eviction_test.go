package redisobserve_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/redisobserve"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// ReadMemory reads each master's maxmemory-policy, from CONFIG GET or,
// where CONFIG is refused (an ACL user without it, a managed Redis that
// renamed it), from INFO memory; a policy that can evict Sluice's keys is
// one warning that names the fix, said again only when it changes.
func TestReadMemoryPolicy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		directives []string
		user       bool // reach Redis as an ACL user denied CONFIG
		policy     string
		from       string
	}{
		{"CONFIG GET", []string{"maxmemory 64mb", "maxmemory-policy allkeys-lru"}, false, "allkeys-lru", "config"},
		{"an ACL user without CONFIG", []string{"maxmemory-policy volatile-ttl", "user sluice on >pw ~* &* +@all -config"}, true, "volatile-ttl", "info"},
		{"CONFIG renamed away", []string{"maxmemory-policy allkeys-random", `rename-command CONFIG ""`}, false, "allkeys-random", "info"},
		{"noeviction", nil, false, "noeviction", "config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.directives...)
			opt := &redis.Options{Addr: srv.Addr}
			if tc.user {
				opt.Username, opt.Password = "sluice", "pw"
			}
			client := redis.NewClient(opt)
			defer client.Close()
			log := new(redistest.LogBuffer)
			o := newObserver(t, client, log)
			for range 2 {
				if err := o.ReadMemory(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			m := o.Memory()
			if len(m.Nodes) != 1 || m.Nodes[0].Policy != tc.policy || m.Nodes[0].From != tc.from {
				t.Fatalf("Memory %+v; want policy %s read from %s", m, tc.policy, tc.from)
			}
			warnings := strings.Count(log.String(), "may evict Sluice's keys")
			if evicts := redisobserve.Evicts(tc.policy); evicts != (warnings == 1) || evicts != (len(m.Evicting()) == 1) {
				t.Fatalf("log %q, evicting %v; want one warning and the master listed exactly when %s evicts", log.String(), m.Evicting(), tc.policy)
			}
			if warnings == 1 && !strings.Contains(log.String(), "noeviction") {
				t.Errorf("log %q: the warning does not name the fix", log.String())
			}
		})
	}
}

// Under maxmemory and allkeys-lru, filled until Redis evicts: the
// evictions Redis counts are the Observer's EvictedKeys, and a warning.
func TestReadMemoryEvictions(t *testing.T) {
	srv := redistest.Start(t, "maxmemory 2mb", "maxmemory-policy allkeys-lru")
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	log := new(redistest.LogBuffer)
	o := newObserver(t, client, log)
	ctx := context.Background()
	if err := o.ReadMemory(ctx); err != nil {
		t.Fatal(err)
	}
	if o.Memory().EvictedKeys != 0 {
		t.Fatalf("before filling: %+v", o.Memory())
	}
	evicted := fillUntilEvicted(t, srv)
	if err := o.ReadMemory(ctx); err != nil {
		t.Fatal(err)
	}
	if got := o.Memory().EvictedKeys; got < evicted {
		t.Errorf("EvictedKeys %d; Redis evicted at least %d since the first read", got, evicted)
	}
	if !strings.Contains(log.String(), "evicted keys") {
		t.Errorf("log %q; want a warning that Redis evicted keys", log.String())
	}
	if !strings.Contains(strings.Join(infoValues(o.Info()), " "), "upstream_eviction_possible=1") {
		t.Errorf("INFO %v; want upstream_eviction_possible:1", o.Info())
	}
}

// fillUntilEvicted writes to srv until its evicted_keys grows, and
// returns it.
func fillUntilEvicted(t *testing.T, srv *redistest.Server) uint64 {
	t.Helper()
	var evicted uint64
	writes := 0
	srv.FillUntil(t, func(c *redis.Client, _ error) bool {
		if writes++; writes%50 != 0 {
			return false
		}
		for line := range strings.Lines(c.Info(context.Background(), "stats").Val()) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "evicted_keys:"); ok {
				evicted, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		return evicted > 0
	})
	return evicted
}

func infoValues(fields [][2]string) []string {
	var out []string
	for _, f := range fields {
		out = append(out, f[0]+"="+f[1])
	}
	return out
}

// On Cluster every master is read: one that evicts among three that do
// not is named, alone.
func TestReadMemoryCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	nodes := c.Nodes
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	if _, err := nodes[1].Do("CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
		t.Fatal(err)
	}
	log := new(redistest.LogBuffer)
	o := newObserver(t, cc, log)
	if err := o.ReadMemory(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := o.Memory()
	ev := m.Evicting()
	if len(m.Nodes) != 3 || len(ev) != 1 || ev[0].Addr != nodes[1].Addr {
		t.Fatalf("Memory %+v; want 3 masters read and %s alone evicting", m, nodes[1].Addr)
	}
	if !strings.Contains(log.String(), nodes[1].Addr+"=volatile-lru") || strings.Contains(log.String(), nodes[0].Addr+"=") {
		t.Errorf("log %q; want the evicting master named, and only it", log.String())
	}
	if got := strings.Join(m.Policies(), ","); got != "noeviction,volatile-lru" {
		t.Errorf("Policies %s", got)
	}
}

// newObserver is an Observer of client that logs to log.
func newObserver(t *testing.T, client redis.UniversalClient, log *redistest.LogBuffer) *redisobserve.Observer {
	t.Helper()
	o, err := redisobserve.New(redisobserve.Config{Client: client, Log: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return o
}
