package httpcheck

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluice-rl/sluice/service"
)

// The explanation comes only to a caller that asks with the token, and
// explains the decision the check made: here the third check of a key
// under two limits, refused by the hourly one.
func TestExplain(t *testing.T) {
	const token = "s3cret"
	for _, tc := range []struct {
		name   string
		token  string   // the server's
		header []string // the check's
		want   bool
	}{
		{"asked with the token", token, []string{HeaderToken, token, HeaderExplain, token}, true},
		{"asked with the bearer token", token, []string{"Authorization", "Bearer " + token, HeaderExplain, token}, true},
		{"not asked", token, []string{HeaderToken, token}, false},
		{"asked without the token", token, []string{HeaderToken, token, HeaderExplain, "1"}, false},
		{"asked of a server without a token", "", []string{HeaderExplain, ""}, false},
		{"asked of a server without a token, with a value", "", []string{HeaderExplain, "1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.token)
			var w interface{ Result() *http.Response }
			for range 3 {
				w = get(s, "/v1/check?policy=two&key=k", tc.header...)
			}
			res := w.Result()
			if res.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d; want 429", res.StatusCode)
			}
			v := res.Header.Values(HeaderExplanation)
			if !tc.want {
				if len(v) != 0 {
					t.Errorf("explanation %q given; want none", v)
				}
				return
			}
			if len(v) != 1 {
				t.Fatalf("explanation headers %q; want one", v)
			}
			var e service.Explanation
			if err := json.Unmarshal([]byte(v[0]), &e); err != nil {
				t.Fatalf("explanation %q: %v", v[0], err)
			}
			if e.Door != "http" || e.Policy != "two" || e.Key != "k" || e.Allowed || e.Bound != "hourly" || len(e.Limits) != 2 ||
				e.Limits[1].State != "used 2 of 2, back to full in 3570000ms" || !e.Limits[0].Allowed {
				t.Errorf("explanation %s: want policy two's check of k refused by hourly, used 2 of 2", v[0])
			}
		})
	}
}
