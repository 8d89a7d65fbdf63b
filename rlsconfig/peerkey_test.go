package rlsconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// TestPeerKeys: the peer's key for each kind of rule, written out by hand
// from envoyproxy/ratelimit's GenerateCacheKey (src/limiter/cache_key.go):
// prefix, domain, each entry's key and value (its share_threshold pattern
// when counted under one), each with '_' after it, and the window start
// now/unit*unit in Unix seconds.
func TestPeerKeys(t *testing.T) {
	c := loadExamples(t)
	// 2026-12-01 20:41:07 UTC, a Tuesday.
	now := time.Unix(1796244067, 123_000_000)
	pk := &PeerKeys{Prefix: "rl_", Jitter: 300 * time.Second}
	for _, tc := range []struct {
		name    string
		domain  string
		entries []Entry
		want    string // "": Sluice's own key
		period  time.Duration
	}{
		{"second", "shop", e("client_ip", "192.0.2.1"), "rl_shop_client_ip_192.0.2.1_1796244067", time.Second},
		{"minute, exact value", "media", e("path", "/img/logo.png"), "rl_media_path_/img/logo.png_1796244060", time.Minute},
		{"hour, nested", "shop", e("region", "eu", "zone", "eu-1"), "rl_shop_region_eu_zone_eu-1_1796241600", time.Hour},
		{"day", "shop", e("plan", "free", "customer", "c1"), "rl_shop_plan_free_customer_c1_1796169600", 24 * time.Hour},
		// Weeks from the epoch, a Thursday, as the peer divides.
		{"week", "shop", e("partner", "acme"), "rl_shop_partner_acme_1795651200", 7 * 24 * time.Hour},
		{"share_threshold: the pattern for the value", "media", e("bucket", "exports/a.csv"), "rl_media_bucket_exports/*_1796241600", time.Hour},
		{"share_threshold at a placeholder level", "media", e("tenant", "t-1", "action", "read"), "rl_media_tenant_t-*_action_read_1796244060", time.Minute},
		{"Sluice's own fields keep Sluice's key", "sluice", e("upload", "u"), "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := c.Lookup(tc.domain, tc.entries)
			if !ok {
				t.Fatal("no rule")
			}
			buf := []byte("before|")
			got, l, peer := pk.Append(buf, tc.domain, tc.entries, &r, now)
			if tc.want == "" {
				if peer || string(got) != "before|" || l != r.Limit {
					t.Fatalf("Append = %q, %+v, %v; want Sluice's key and limit", got, l, peer)
				}
				return
			}
			if !peer || string(got) != "before|"+tc.want {
				t.Fatalf("Append = %q, %v; want %q", got, peer, "before|"+tc.want)
			}
			want := engine.Limit{Algorithm: engine.PeerWindow, Rate: r.Limit.Rate, Period: tc.period, Jitter: pk.Jitter}
			if l != want {
				t.Fatalf("limit %+v; want %+v", l, want)
			}
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("a limit Envoy sent", func(t *testing.T) {
		r, ok, err := c.Override("shop", e("k", "v"), 7, UnitMinute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		got, _, peer := pk.Append(nil, "shop", e("k", "v"), &r, now)
		if !peer || string(got) != "rl_shop_k_v_1796244060" {
			t.Fatalf("Append = %q, %v", got, peer)
		}
	})
	t.Run("too long for a key: Sluice's, which shortens it", func(t *testing.T) {
		entries := e("client_ip", strings.Repeat("x", engine.MaxKeyLen))
		r, _ := c.Lookup("shop", entries)
		got, l, peer := pk.Append([]byte("a"), "shop", entries, &r, now)
		if peer || string(got) != "a" || l != r.Limit {
			t.Fatalf("Append = %.20q…, %v", got, peer)
		}
	})
	t.Run("jitter in whole seconds", func(t *testing.T) {
		if err := (&PeerKeys{Jitter: 1500 * time.Millisecond}).Validate(); err == nil || !strings.Contains(err.Error(), "jitter") {
			t.Fatalf("Validate = %v; want the jitter refused", err)
		}
		if err := pk.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}
