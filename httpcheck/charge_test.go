package httpcheck

import (
	"net/http"
	"strings"
	"testing"
)

// TestCharge: a cost known after the work (charge=N, or X-Sluice-Charge)
// is taken even over the limit and answered 200; X-Ratelimit-Over on its
// answer says how far over the budget it went, and the checks after it are
// refused, with remaining 0 and no X-Ratelimit-Over (only a charge says
// how far over: engine.Step).
func TestCharge(t *testing.T) {
	s := newServer(t, "")
	steps := []struct {
		target  string
		headers []string
		status  int
		left    string // X-Ratelimit-Remaining
		over    string // X-Ratelimit-Over, "" when absent
	}{
		{"/v1/check?policy=api&key=llm&cost=0", nil, http.StatusOK, "2", ""},
		{"/v1/check?policy=api&key=llm&charge=3", nil, http.StatusOK, "0", "1"},
		{"/v1/check?policy=api&key=llm&cost=0", nil, http.StatusTooManyRequests, "0", ""},
		{"/v1/check?policy=api&key=llm", nil, http.StatusTooManyRequests, "0", ""},
		{"/v1/check", []string{HeaderPolicy, "api", HeaderKey, "llm", HeaderCharge, "1"}, http.StatusOK, "0", "2"},
		// A debt is at most one limit (2 a minute): 2 over, however much more.
		{"/v1/check?policy=api&key=llm&charge=100", nil, http.StatusOK, "0", "2"},
		// One that fits is an admission like any other.
		{"/v1/check?policy=api&key=other&charge=1", nil, http.StatusOK, "1", ""},
		// Each limit of a multi-limit policy takes it: 3 fit the burst
		// limit, not the 2 an hour.
		{"/v1/check?policy=two&key=llm&charge=3", nil, http.StatusOK, "0", "1"},
		{"/v1/check?policy=two&key=llm", nil, http.StatusTooManyRequests, "0", ""},
	}
	for i, st := range steps {
		w := get(s, st.target, st.headers...)
		if w.Code != st.status || w.Header().Get("X-Ratelimit-Remaining") != st.left || w.Header().Get("X-Ratelimit-Over") != st.over {
			t.Errorf("step %d %s: %d remaining %q over %q; want %d, %q, %q (%s)", i, st.target, w.Code,
				w.Header().Get("X-Ratelimit-Remaining"), w.Header().Get("X-Ratelimit-Over"), st.status, st.left, st.over, w.Body)
		}
	}
	for _, c := range []struct{ target, want string }{
		{"/v1/check?policy=api&key=llm&cost=1&charge=1", "both a cost and a charge"},
		{"/v1/check?policy=api&key=llm&charge=-1", `invalid charge "-1"`},
	} {
		w := get(s, c.target)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: %d %q; want 400 with %q", c.target, w.Code, w.Body, c.want)
		}
	}
}
