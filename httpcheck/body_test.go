package httpcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/engine/chain"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/upstream"
)

// Issue 28: a 403 asked for by deny_status carried a "Too Many Requests"
// body. The title is the status's own.
func TestRefusalBodyTitleIsTheStatus(t *testing.T) {
	s := newServer(t, "")
	get(s, "/v1/check?policy=api&key=k")
	get(s, "/v1/check?policy=api&key=k")
	for _, tc := range []struct{ status, title string }{{"403", "Forbidden"}, {"401", "Unauthorized"}, {"429", "Too Many Requests"}} {
		w := get(s, "/v1/check?policy=api&key=k&deny_status="+tc.status)
		want := `{"type":"about:blank","title":"` + tc.title + `","status":` + tc.status + `,"detail":"rate limit exceeded; retry after 30 s","retry_after":30}` + "\n"
		if fmt.Sprint(w.Code) != tc.status || w.Body.String() != want {
			t.Errorf("deny_status=%s: %d %s; want %s", tc.status, w.Code, w.Body, want)
		}
	}
}

// Issue 28: during an outage a policy that fails closed was answered
// "rate limit exceeded", which no client could have avoided by pacing
// itself. The body says what happened. The store is a real upstream
// whose Redis address refuses connections.
func TestRefusalBodyDuringAnOutage(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprint("127.0.0.1:", redistest.FreePort(t)), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = client.Close() })
	up, err := upstream.New(upstream.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := chain.New(chain.Config{Store: up, Default: engine.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: guard, Policies: policies{
		"api": {Name: "api", Prefix: "api:", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 2, Period: time.Minute}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	w := get(s, "/v1/check?policy=api&key=k")
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"detail":"the rate limit store cannot be reached and this policy refuses while it cannot (on_failure: deny); retry after `) {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}
