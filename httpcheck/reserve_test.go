package httpcheck

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/service"
)

// reserveServer is a check over "llm", 100 units an hour as a fixed
// window, with at most maxOpen reservations open.
func reserveServer(t *testing.T, maxOpen int) *Server {
	return newServerAt(t, time.Unix(1_800_000_000, 0), Config{}, service.Config{MaxReservations: maxOpen, Policies: policies{
		"llm": {Name: "llm", Prefix: "llm:", Limit: engine.Limit{Algorithm: engine.FixedWindow, Rate: 100, Period: time.Hour}},
	}})
}

// TestReserveAndSettle: reserve=N takes N as a cost and answers the
// reservation's id in X-Sluice-Reservation; POST /v1/settle gives back
// what the work did not use, or charges what it used over (X-RateLimit-
// Over when that takes the budget over), once.
func TestReserveAndSettle(t *testing.T) {
	s := reserveServer(t, 3)
	w := get(s, "/v1/check?policy=llm&key=alice&reserve=40")
	id := w.Header().Get(HeaderReservation)
	if w.Code != http.StatusOK || len(id) != 16 || w.Header().Get("X-Ratelimit-Remaining") != "60" {
		t.Fatalf("reserve 40: %d %v", w.Code, w.Header())
	}
	w = get(s, "/v1/check", HeaderPolicy, "llm", HeaderKey, "alice", HeaderReserve, "70", HeaderReserveTTL, "1m")
	if w.Code != http.StatusTooManyRequests || w.Header().Get(HeaderReservation) != "" || w.Header().Get("X-Ratelimit-Remaining") != "60" {
		t.Fatalf("reserve 70 of 60: %d %v; want 429 with no id", w.Code, w.Header())
	}
	steps := []struct {
		name, method, target string
		h                    []string
		status               int
		remaining, over      string
		body                 string
	}{
		{"settle under", http.MethodPost, "/v1/settle?id=" + id + "&actual=10", nil, 200, "90", "", ""},
		{"settle twice", http.MethodPost, "/v1/settle?id=" + id + "&actual=10", nil, 404, "", "", "unknown or expired reservation"},
		{"a check sees it", http.MethodGet, "/v1/check?policy=llm&key=alice&cost=0", nil, 200, "90", "", ""},
		{"by GET", http.MethodGet, "/v1/settle?id=x&actual=1", nil, 405, "", "", "by POST"},
		{"missing actual", http.MethodPost, "/v1/settle?id=x", nil, 400, "", "", "missing actual"},
		{"unknown id", http.MethodPost, "/v1/settle", []string{HeaderReservation, "nosuch", HeaderActual, "3"}, 404, "", "", `"nosuch"`},
	}
	for _, st := range steps {
		w := do(s, st.method, st.target, st.h...)
		h := w.Header()
		if w.Code != st.status || (st.remaining != "" && h.Get("X-Ratelimit-Remaining") != st.remaining) ||
			h.Get("X-Ratelimit-Over") != st.over || !strings.Contains(w.Body.String(), st.body) {
			t.Errorf("%s: %d %v %q; want %d remaining %q over %q body %q", st.name, w.Code, h, w.Body, st.status, st.remaining, st.over, st.body)
		}
	}
	// Over: 10 spent, 80 reserved, 130 used: 140 spent of 100.
	id = get(s, "/v1/check?policy=llm&key=alice&reserve=80").Header().Get(HeaderReservation)
	w = post(s, "/v1/settle", HeaderReservation, id, HeaderActual, "130")
	if w.Code != http.StatusOK || w.Header().Get("X-Ratelimit-Over") != "40" || w.Header().Get("X-Ratelimit-Remaining") != "0" {
		t.Errorf("settle over: %d %v", w.Code, w.Header())
	}
	// Past --max-reservations: 503, nothing taken.
	s = reserveServer(t, 1)
	get(s, "/v1/check?policy=llm&key=bob&reserve=10")
	w = get(s, "/v1/check?policy=llm&key=bob&reserve=10")
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "too many reservations open") {
		t.Errorf("past the bound: %d %q", w.Code, w.Body)
	}
	if w := get(s, "/v1/check?policy=llm&key=bob&cost=0"); w.Header().Get("X-Ratelimit-Remaining") != "90" {
		t.Errorf("the refused reservation took something: %v", w.Header())
	}
}

func TestParseReserve(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    string
		h    http.Header
		want Check
		err  string
	}{
		{name: "query", q: "policy=llm&key=k&reserve=40",
			want: Check{Policy: "llm", Key: "k", Cost: 40, Reserve: true, DenyStatus: 429}},
		{name: "query with a TTL", q: "policy=llm&key=k&reserve=40&reserve_ttl=90s",
			want: Check{Policy: "llm", Key: "k", Cost: 40, Reserve: true, ReserveTTL: 90 * time.Second, DenyStatus: 429}},
		{name: "headers", h: hdr(HeaderPolicy, "llm", HeaderKey, "k", HeaderReserve, "5", HeaderReserveTTL, "1m"),
			want: Check{Policy: "llm", Key: "k", Cost: 5, Reserve: true, ReserveTTL: time.Minute, DenyStatus: 429}},
		{name: "with a cost", q: "policy=llm&key=k&reserve=4&cost=1", err: "a reservation with a cost or a charge"},
		{name: "with a charge", h: hdr(HeaderPolicy, "llm", HeaderKey, "k", HeaderReserve, "5", HeaderCharge, "1"), err: "a reservation with a cost or a charge"},
		{name: "TTL alone", q: "policy=llm&key=k&reserve_ttl=1m", err: "a reserve_ttl without a reservation"},
		{name: "bad estimate", q: "policy=llm&key=k&reserve=-1", err: `invalid reserve "-1"`},
		{name: "TTL without a unit", q: "policy=llm&key=k&reserve=1&reserve_ttl=60", err: `invalid reserve_ttl "60": needs a unit`},
		{name: "reserve header twice", h: http.Header{HeaderReserve: {"1", "2"}, HeaderPolicy: {"p"}, HeaderKey: {"k"}}, err: "given more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(Path, tc.q, tc.h, "")
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("%+v, %v; want an error with %q", c, err, tc.err)
			case tc.err == "" && (err != nil || c != tc.want):
				t.Errorf("%+v, %v; want %+v", c, err, tc.want)
			}
		})
	}
}

func TestParseSettle(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    string
		h    http.Header
		want Settle
		err  string
	}{
		{name: "query", q: "id=abc&actual=12", want: Settle{ID: "abc", Actual: 12}},
		{name: "headers", h: hdr(HeaderReservation, "abc", HeaderActual, "0"), want: Settle{ID: "abc", Actual: 0}},
		{name: "query wins, headers ignored", q: "id=abc&actual=1", h: hdr(HeaderReservation, "x", HeaderActual, "9"), want: Settle{ID: "abc", Actual: 1}},
		{name: "missing id", q: "actual=1", err: "missing id"},
		{name: "missing actual", h: hdr(HeaderReservation, "abc"), err: "missing actual"},
		{name: "negative", q: "id=a&actual=-3", err: `invalid actual "-3"`},
		{name: "unknown parameter", q: "id=a&actual=1&cost=2", err: `unknown parameter "cost"`},
		{name: "twice", q: "id=a&id=b&actual=1", err: "parameter id given more than once"},
		{name: "id too long", q: "id=" + strings.Repeat("a", 129) + "&actual=1", err: "invalid id of 129 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseSettle(tc.q, tc.h)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("%+v, %v; want an error with %q", st, err, tc.err)
			case tc.err == "" && (err != nil || st != tc.want):
				t.Errorf("%+v, %v; want %+v", st, err, tc.want)
			}
		})
	}
}

// FuzzParseSettle: a settle is read or refused in one line, never with an
// empty id or a negative cost.
func FuzzParseSettle(f *testing.F) {
	f.Add("id=abc&actual=12", "", "")
	f.Add("", "abc", "3")
	f.Add("id=%zz", "", "")
	f.Add("actual=1&id=", "x", "-1")
	f.Fuzz(func(t *testing.T, q, id, actual string) {
		h := http.Header{}
		h.Set(HeaderReservation, id)
		h.Set(HeaderActual, actual)
		st, err := ParseSettle(q, h)
		if err != nil {
			if _, ok := err.(*BadRequest); !ok {
				t.Fatalf("error %T", err)
			}
			if strings.Contains(err.Error(), "\n") && !strings.Contains(q+id+actual, "\n") {
				t.Fatalf("a reason of more than one line: %q", err)
			}
			return
		}
		if st.ID == "" || len(st.ID) > maxReservationID || st.Actual < 0 {
			t.Fatalf("accepted %+v", st)
		}
	})
}
